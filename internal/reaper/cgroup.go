package reaper

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNoCgroup says that this machine or account gives durachk no cgroup v2 of
// its own; callers fall back to process groups.
var ErrNoCgroup = errors.New("no writable cgroup v2")

var (
	rootOnce sync.Once
	rootDir  string
	rootErr  error
)

// cgroupRoot is the cgroup v2 directory that durachk's run cgroups go into:
// the cgroup of this process in the unified hierarchy (/sys/fs/cgroup on a
// pure v2 system, /sys/fs/cgroup/unified on a hybrid one). DURACHK_NO_CGROUP=1
// turns cgroups off (the process-group fallback, tested on its own).
func cgroupRoot() (string, error) {
	rootOnce.Do(func() {
		if os.Getenv("DURACHK_NO_CGROUP") != "" {
			rootErr = fmt.Errorf("%w: DURACHK_NO_CGROUP is set", ErrNoCgroup)
			return
		}
		mount, err := cgroup2Mount()
		if err != nil {
			rootErr = err
			return
		}
		own, err := ownCgroup()
		if err != nil {
			rootErr = err
			return
		}
		dir := filepath.Join(mount, own)
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
			rootErr = fmt.Errorf("%w: %v", ErrNoCgroup, err)
			return
		}
		rootDir = dir
	})
	return rootDir, rootErr
}

func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoCgroup, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint opts ... - fstype source superopts
		left, right, ok := strings.Cut(sc.Text(), " - ")
		if !ok || !strings.HasPrefix(right, "cgroup2 ") {
			continue
		}
		fields := strings.Fields(left)
		if len(fields) >= 5 && fields[3] == "/" {
			return fields[4], nil
		}
	}
	return "", fmt.Errorf("%w: no cgroup2 mount", ErrNoCgroup)
}

func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoCgroup, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: this process has no cgroup v2", ErrNoCgroup)
}

// RunCgroupName is the name of a run's cgroup under the root.
func RunCgroupName(runID string) string { return "durachk-" + runID }

// NewCgroup creates (or reuses) the cgroup parent/name, or the run cgroup of
// runID under the root when parent is "". It returns its directory, or an
// error wrapping ErrNoCgroup when cgroups cannot be used here.
func NewCgroup(runID, name string) (string, error) {
	root, err := cgroupRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, RunCgroupName(runID))
	if name != "" {
		dir = filepath.Join(dir, name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoCgroup, err)
	}
	return dir, nil
}

// RunCgroup returns the directory of runID's cgroup if it exists.
func RunCgroup(runID string) (string, bool) {
	root, err := cgroupRoot()
	if err != nil {
		return "", false
	}
	dir := filepath.Join(root, RunCgroupName(runID))
	_, err = os.Stat(dir)
	return dir, err == nil
}

// OpenCgroup opens a cgroup directory for SysProcAttr.CgroupFD.
func OpenCgroup(dir string) (*os.File, error) {
	return os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY, 0)
}

// AddProcess moves pid into the cgroup dir (for a process started without
// CLONE_INTO_CGROUP).
func AddProcess(dir string, pid int) error {
	return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
}

// Populated reports whether any process is left in dir or below it.
func Populated(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false
	}
	return strings.Contains(string(b), "populated 1")
}

// KillCgroup SIGKILLs every process in dir and below it and waits (up to
// wait) until none is left. It uses cgroup.kill (Linux 5.14) and falls back
// to killing the pids it lists until it is empty.
func KillCgroup(dir string, wait time.Duration) error {
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	deadline := time.Now().Add(wait)
	for {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil {
			killListed(dir)
		}
		if !Populated(dir) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still has processes after SIGKILL", dir)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func killListed(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return nil
	})
}

// RemoveCgroup kills what is left in dir and removes it with its children.
func RemoveCgroup(dir string) error {
	if err := KillCgroup(dir, 10*time.Second); err != nil {
		return err
	}
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- { // children first
		if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

// Freeze stops (on) or thaws every process of the cgroup dir (cgroup.freeze).
func Freeze(dir string, on bool) error {
	v := "0"
	if on {
		v = "1"
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte(v), 0); err != nil {
		return err
	}
	want := "frozen " + v
	for i := 0; i < 500; i++ {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err != nil || strings.Contains(string(b), want) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("cgroup %s: %s not reached", dir, want)
}

// runCgroups lists the run cgroups under the root: run id → directory.
func runCgroups() map[string]string {
	root, err := cgroupRoot()
	if err != nil {
		return nil
	}
	ents, _ := os.ReadDir(root)
	out := map[string]string{}
	for _, e := range ents {
		if id, ok := strings.CutPrefix(e.Name(), "durachk-"); ok && e.IsDir() && runIDRE.MatchString(id) {
			out[id] = filepath.Join(root, e.Name())
		}
	}
	return out
}
