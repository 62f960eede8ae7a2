package lazyfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestMain lets the test binary be the durachk that is killed with its mount.
func TestMain(m *testing.M) {
	if dir := os.Getenv("LAZYFS_TEST_MOUNT_AND_WAIT"); dir != "" {
		if _, err := Mount(filepath.Join(dir, "mnt"), filepath.Join(dir, "back"), Options{}); err != nil {
			os.Exit(2)
		}
		os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644)
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestCleanupMounts: a mount whose process was killed with SIGKILL is detached
// by CleanupMounts; a live one is left alone.
func TestCleanupMounts(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	base := t.TempDir()
	live := mountForTest(t, Options{})
	dir := filepath.Join(base, "killed")
	if err := os.MkdirAll(filepath.Join(dir, "mnt"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LAZYFS_TEST_MOUNT_AND_WAIT="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			break
		}
		if i > 100 {
			cmd.Process.Kill()
			t.Fatal("the child did not mount")
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	mnt := filepath.Join(dir, "mnt")
	if ms, _ := Mounts(); !slices.Contains(ms, mnt) {
		t.Fatalf("the killed process's mount is not listed: %v", ms)
	}
	done, err := CleanupMounts(filepath.Dir(base))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(done, []string{"lazyfs mount " + mnt}) {
		t.Errorf("CleanupMounts did %v, want the killed mount detached", done)
	}
	ms, _ := Mounts()
	if slices.Contains(ms, mnt) {
		t.Errorf("the killed mount is still there")
	}
	if !slices.Contains(ms, live.Mountpoint()) {
		t.Errorf("the live mount was detached")
	}
}
