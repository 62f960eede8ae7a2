package lazyfs

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Mounts lists the mount points of every lazyfs mount this process can see.
func Mounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source super
		fields := strings.Fields(sc.Text())
		for i, fl := range fields {
			if fl == "-" && i >= 5 && i+2 < len(fields) && fields[i+2] == FSName {
				out = append(out, unescapeMount(fields[4]))
			}
		}
	}
	return out, sc.Err()
}

// unescapeMount reads the octal escapes (\040 for a space) of mountinfo.
func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// CleanupMounts detaches the lazyfs mounts under dir whose server is gone (its
// durachk was killed: the kernel answers ENOTCONN) and returns what it
// detached. A mount whose server still answers belongs to a live run and is
// left alone.
func CleanupMounts(dir string) ([]string, error) {
	mounts, err := Mounts()
	if err != nil {
		return nil, err
	}
	var done []string
	var errs []error
	for _, mp := range mounts {
		if rel, err := filepath.Rel(dir, mp); err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		if !dead(mp) {
			continue
		}
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("lazyfs: detach %s: %w", mp, err))
			continue
		}
		done = append(done, "lazyfs mount "+mp)
	}
	return done, errors.Join(errs...)
}

// dead reports whether the server of the mount at mp is gone. A server that
// does not answer within a second (stopped, not dead) counts as alive.
func dead(mp string) bool {
	res := make(chan error, 1)
	go func() {
		// statfs always asks the server; a stat may be answered from the cache
		var st syscall.Statfs_t
		res <- syscall.Statfs(mp, &st)
	}()
	select {
	case err := <-res:
		return errors.Is(err, syscall.ENOTCONN)
	case <-time.After(time.Second):
		return false
	}
}
