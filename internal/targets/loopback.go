package targets

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// A private cluster's /24 in 127/8 is the run's own while it lives: nftables
// rules name its addresses, so two concurrent runs on one block would cut each
// other's nodes (seen: one run's partition of n1 split another run's cluster).
// The claim is an flock on a file per block, shared by every durachk on the
// machine whatever its TMPDIR; the kernel drops it when the holder dies, so a
// SIGKILLed run never keeps a block.

// blockLockDir holds the lock files: /run/lock when there is one (one per
// machine), else the temporary directory.
func blockLockDir() string {
	if st, err := os.Stat("/run/lock"); err == nil && st.IsDir() {
		return "/run/lock"
	}
	return os.TempDir()
}

// claims remembers the block each run id got in this process, also after its
// release: a test that looks for a run's leftovers needs the address it used.
var claims sync.Map // run id → block

// ClaimedBlock is the block a cluster of runID got in this process, or the
// block it prefers (LoopbackBlock) when it has not started one here.
func ClaimedBlock(runID string) string {
	if b, ok := claims.Load(runID); ok {
		return b.(string)
	}
	return LoopbackBlock(runID)
}

// blockClaim holds one block until release.
type blockClaim struct {
	block string
	f     *os.File
}

// claimLoopbackBlock takes the run's preferred block (LoopbackBlock) or, when
// another live run holds it, the next free one.
func claimLoopbackBlock(runID string) (*blockClaim, error) {
	first, _ := strconv.Atoi(LoopbackBlock(runID)[len("127.0."):])
	dir := blockLockDir()
	for i := 0; i < 250; i++ {
		block := "127.0." + strconv.Itoa(2+(first-2+i)%250)
		f, err := lockBlockFile(filepath.Join(dir, "durachk-loopback-"+block+".lock"))
		if err != nil {
			return nil, fmt.Errorf("claim a loopback block: %w", err)
		}
		if f == nil {
			continue // a live run holds it
		}
		claims.Store(runID, block)
		return &blockClaim{block: block, f: f}, nil
	}
	return nil, fmt.Errorf("claim a loopback block: all 250 blocks of 127.0.2-251.x are held by live runs")
}

// lockBlockFile returns the locked file, or nil when another process holds it.
func lockBlockFile(path string) (*os.File, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if err == syscall.EWOULDBLOCK {
				return nil, nil
			}
			return nil, err
		}
		// The holder before us may have removed the file between our open and
		// our lock: a lock on an unlinked file claims nothing.
		var a, b syscall.Stat_t
		if syscall.Fstat(int(f.Fd()), &a) == nil && syscall.Stat(path, &b) == nil && a.Ino == b.Ino && a.Dev == b.Dev {
			return f, nil
		}
		f.Close()
	}
}

// release removes the lock file (under the lock) and drops the claim.
func (c *blockClaim) release() {
	if c == nil || c.f == nil {
		return
	}
	_ = os.Remove(c.f.Name())
	_ = c.f.Close()
	c.f = nil
}

// CleanupBlockLocks removes the lock files of blocks no live run holds (a
// SIGKILLed run leaves its file; its lock died with it).
func CleanupBlockLocks() ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(blockLockDir(), "durachk-loopback-127.0.*.lock"))
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, p := range paths {
		f, err := lockBlockFile(p)
		if err != nil || f == nil {
			continue // held by a live run, or gone meanwhile
		}
		(&blockClaim{f: f}).release()
		removed = append(removed, "loopback block lock "+p)
	}
	return removed, nil
}
