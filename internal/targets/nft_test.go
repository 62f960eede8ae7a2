package targets

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// durachk cleanup decides whether a run is live from the stores it is told
// of; a run on another store (or an existing cluster's script) looked dead
// to it, and its partition was deleted mid-run. A table whose owner holds its
// lock is never deleted; once the owner is gone, it is.
func TestCleanupNFTSparesATableWhoseOwnerLives(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("nft needs root")
	}
	if err := CanPartitionKernel(); err != nil {
		t.Skip(err)
	}
	id := "nftlocktest"
	tb := newNFTTable(id)
	if err := tb.cut([]string{"127.0.250.11"}, []string{"127.0.250.12"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tb.remove() })
	exists := func() bool {
		out, err := exec.Command("nft", "list", "tables").Output()
		if err != nil {
			t.Fatal(err)
		}
		return slices.Contains(strings.Split(string(out), "\n"), "table inet "+tb.name)
	}
	// What a cleanup on another store sees of this run (other runs' tables
	// are none of this test's business).
	dead := func(x string) bool { return x != id }
	removed, err := CleanupNFT(dead)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(removed, "nftables table inet "+tb.name) || !exists() {
		t.Fatalf("cleanup deleted a table whose owner holds its lock (removed %v)", removed)
	}
	// The owner dies: the kernel drops its lock, the file stays.
	tb.mu.Lock()
	_ = tb.lock.f.Close()
	tb.lock.f = nil
	tb.mu.Unlock()
	removed, err = CleanupNFT(dead)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(removed, "nftables table inet "+tb.name) || exists() {
		t.Errorf("cleanup kept the table of a dead owner (removed %v)", removed)
	}
	if _, err := os.Stat(nftLockPath(tb.name)); err == nil {
		t.Errorf("cleanup left the lock file %s", nftLockPath(tb.name))
	}
	tb.mu.Lock()
	tb.created = false
	tb.mu.Unlock()
}
