package lazyfs

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/internal/reaper"
)

// mounts lists the mount points of the lazyfs mounts this process sees.
func mounts(t *testing.T) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source super
		fields := strings.Fields(sc.Text())
		for i, fl := range fields {
			if fl == "-" && i >= 5 && i+2 < len(fields) && fields[i+2] == FSName {
				out = append(out, fields[4])
			}
		}
	}
	return out
}

// TestMain lets the test binary be the durachk that is killed with its mount.
func TestMain(m *testing.M) {
	ServeIfAsked()
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

// TestKilledMount: the mount of a process killed with SIGKILL is left behind
// dead; reaper.DetachMounts (the watchdog's and durachk cleanup's) detaches it,
// and only it, so that its directory can be removed.
func TestKilledMount(t *testing.T) {
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
	if ms := mounts(t); !slices.Contains(ms, mnt) {
		t.Fatalf("the killed process's mount is not listed: %v", ms)
	}
	if err := os.RemoveAll(dir); err == nil {
		t.Fatal("a directory holding a dead mount was removed")
	}
	if done := reaper.DetachMounts(dir); !slices.Equal(done, []string{mnt}) {
		t.Errorf("DetachMounts did %v, want the killed mount detached", done)
	}
	ms := mounts(t)
	if slices.Contains(ms, mnt) {
		t.Errorf("the killed mount is still there")
	}
	if !slices.Contains(ms, live.Mountpoint()) {
		t.Errorf("the live mount was detached")
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Errorf("after the detach: %v", err)
	}
}

// TestSurvivor: a process that holds only a working directory on the mount
// (RabbitMQ's epmd) does not stop a power loss: it keeps the old, detached
// mount, which refuses every change, and the loss names it.
func TestSurvivor(t *testing.T) {
	f := mountForTest(t, Options{})
	must(t, os.Mkdir(filepath.Join(f.Mountpoint(), "home"), 0o755))
	must(t, f.Sync())
	// cd after the exec: a child of the process serving the mount must not
	// touch it before it execs (remote.go).
	cmd := exec.Command("sh", "-c", `cd "$1" && exec sleep 30`, "sh", filepath.Join(f.Mountpoint(), "home"))
	must(t, cmd.Start())
	for i := 0; i < 100; i++ { // until the shell is in the mount
		if cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", cmd.Process.Pid)); strings.HasSuffix(cwd, "/home") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	must(t, os.WriteFile(filepath.Join(f.Mountpoint(), "lost"), []byte("x"), 0o644))
	loss, err := f.PowerLoss()
	must(t, err)
	if len(loss.Survivors) != 1 || !strings.Contains(loss.Survivors[0], fmt.Sprintf("(pid %d, working directory)", cmd.Process.Pid)) {
		t.Errorf("survivors %v, want the sleep", loss.Survivors)
	}
	if _, err := os.Stat(filepath.Join(f.Mountpoint(), "lost")); !os.IsNotExist(err) {
		t.Errorf("the unsynced file after the loss: %v", err)
	}
	// The survivor's working directory is on the old mount: nothing changes there.
	old := fmt.Sprintf("/proc/%d/cwd/x", cmd.Process.Pid)
	if err := os.WriteFile(old, []byte("x"), 0o644); err == nil {
		t.Error("a write through the detached mount was accepted")
	}
	must(t, os.WriteFile(filepath.Join(f.Mountpoint(), "home", "new"), []byte("y"), 0o644))
}

// TestChildrenDoNotHoldTheConnection: a process started after the mount (the
// broker) must not inherit /dev/fuse, or one waiting on the mount when durachk
// dies would wait forever.
func TestChildrenDoNotHoldTheConnection(t *testing.T) {
	mountForTest(t, Options{})
	cmd := exec.Command("sleep", "30")
	must(t, cmd.Start())
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", cmd.Process.Pid))
	must(t, err)
	for _, e := range fds {
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", cmd.Process.Pid, e.Name())); l == "/dev/fuse" {
			t.Errorf("the child holds /dev/fuse as fd %s", e.Name())
		}
	}
}

// TestRemote drives a lazy file system served by a child process, as durachk
// does, and starts a child with its working directory on the mount: served
// in-process, that fork may hang durachk (remote.go).
func TestRemote(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	must(t, os.Mkdir(mnt, 0o755))
	r, err := StartRemote(os.Args[0], mnt, filepath.Join(dir, "back"), Options{Journal: true})
	must(t, err)
	defer func() {
		if err := r.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		if ms := mounts(t); slices.Contains(ms, mnt) {
			t.Errorf("still mounted after Unmount")
		}
	}()
	must(t, os.WriteFile(filepath.Join(mnt, "kept"), []byte("a"), 0o644))
	must(t, r.Sync())
	if quiet, err := r.Quiesce(50*time.Millisecond, time.Second); err != nil || !quiet {
		t.Errorf("Quiesce: %v %v", quiet, err)
	}
	for i := 0; i < 20; i++ {
		cmd := exec.Command("true")
		cmd.Dir = mnt
		done := make(chan error, 1)
		go func() { done <- cmd.Run() }()
		select {
		case err := <-done:
			must(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("a child started in the mount hung")
		}
	}
	must(t, os.WriteFile(filepath.Join(mnt, "lost"), []byte("b"), 0o644))
	loss, err := r.PowerLoss()
	must(t, err)
	if !slices.Equal(loss.Created, []string{"lost"}) {
		t.Errorf("loss %+v, want lost dropped", loss)
	}
	if got := tree(t, mnt); !maps.Equal(got, map[string]string{"kept": "file:a"}) {
		t.Errorf("after the power loss: %v", brief(got))
	}
}
