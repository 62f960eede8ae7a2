package reaper

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func randID(t *testing.T) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b)
}

// sleeper starts `sh -c 'sleep 60' ARG` (ARG lands in its command line) in
// dir, in a process group of its own, and reaps it when it dies.
// dead waits up to d for it to die.
func sleeper(t *testing.T, dir, arg string) (pid int, dead func(d time.Duration) bool) {
	t.Helper()
	cmd := exec.Command("sh", "-c", "sleep 60; :", arg) // ; : keeps sh (and arg) alive
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); <-done })
	return cmd.Process.Pid, func(d time.Duration) bool {
		select {
		case <-done:
			return true
		case <-time.After(d):
			return false
		}
	}
}

func mkRunDir(t *testing.T, tmp, id string) string {
	t.Helper()
	d := filepath.Join(tmp, DirPattern(id)+"1")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

// Sweep removes a dead run's directory and the processes that name it, and
// leaves alone: a run whose directory lock is held, a run the store says is
// live, a young directory without a lock, a non-broker process that merely
// sits in a dead run's directory, and anything not named like a run.
func TestSweep(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dead, locked, storeLive, young, old := randID(t), randID(t), randID(t), randID(t), randID(t)
	deadDir := mkRunDir(t, tmp, dead)
	if release, err := LockDir(deadDir); err != nil {
		t.Fatal(err)
	} else {
		release() // a run that ended without its teardown
	}
	_, deadGone := sleeper(t, tmp, deadDir+"/pgdata")
	bystander, bystanderGone := sleeper(t, deadDir, "not-a-broker")

	lockedDir := mkRunDir(t, tmp, locked)
	release, err := LockDir(lockedDir)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	_, lockedGone := sleeper(t, tmp, lockedDir)

	storeDir := mkRunDir(t, tmp, storeLive)
	youngRunDir := mkRunDir(t, tmp, young)
	oldDir := mkRunDir(t, tmp, old)
	past := time.Now().Add(-2 * youngDir)
	if err := os.Chtimes(oldDir, past, past); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(tmp, "durachk-bin-123")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}

	// Every run this test did not make is live to it: a sweep in a test must
	// never touch the machine's real runs.
	ours := map[string]bool{dead: true, locked: true, storeLive: true, young: true, old: true}
	removed, err := Sweep(func(id string) bool { return id == storeLive || !ours[id] })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("removed: %v", removed)
	if !deadGone(5 * time.Second) {
		t.Error("the dead run's process survived")
	}
	if bystanderGone(300 * time.Millisecond) {
		t.Error("a non-broker process in the dead run's directory was killed")
	}
	_ = bystander
	for _, d := range []string{deadDir, oldDir} {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s is left", d)
		}
		if !slices.Contains(removed, "temporary directory "+d) {
			t.Errorf("no line for %s in %v", d, removed)
		}
	}
	if !slices.ContainsFunc(removed, func(l string) bool { return strings.HasPrefix(l, "process ") && strings.HasSuffix(l, "of run "+dead) }) {
		t.Errorf("no line for the dead run's process in %v", removed)
	}
	for _, d := range []string{lockedDir, storeDir, youngRunDir, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
	if lockedGone(300 * time.Millisecond) {
		t.Error("the live run's process was killed")
	}
}

// The watchdog kills what is registered when its input closes, removes the
// registered directories and cgroups, and spares what was forgotten.
func TestWatchdog(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "run")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	r, w := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- Serve(r) }()
	pid, gone := sleeper(t, tmp, "registered")
	kept, keptGone := sleeper(t, tmp, "forgotten")
	lines := []string{"+pgid " + strconv.Itoa(pid), "+pgid " + strconv.Itoa(kept), "+dir " + dir, "-pgid " + strconv.Itoa(kept)}
	cg, err := NewCgroup(randID(t), "p")
	var inCg func(time.Duration) bool
	if err == nil {
		cgPid, cgGone := sleeper(t, tmp, "in-cgroup")
		if err := AddProcess(cg, cgPid); err != nil {
			t.Fatal(err)
		}
		inCg = cgGone
		lines = append(lines, "+cgroup "+cg)
	} else {
		t.Logf("no cgroup here: %v", err)
	}
	for _, l := range lines {
		if _, err := io.WriteString(w, l+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	w.Close() // the parent is gone
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if !gone(5 * time.Second) {
		t.Error("a registered process group survived")
	}
	if keptGone(300 * time.Millisecond) {
		t.Error("a forgotten process group was killed")
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("the registered directory is left")
	}
	if inCg != nil {
		if !inCg(5 * time.Second) {
			t.Error("a process of the registered cgroup survived")
		}
		if _, err := os.Stat(cg); err == nil {
			t.Errorf("cgroup %s is left", cg)
		}
		_ = syscall.Rmdir(filepath.Dir(cg))
	}
}

func TestRunDirIn(t *testing.T) {
	tmp := t.TempDir()
	d := filepath.Join(tmp, DirPattern("abcd")+"12")
	if err := os.MkdirAll(filepath.Join(d, "rabbit"), 0o700); err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]string{
		d + "/rabbit":                          d,
		d:                                      d,
		`"` + d + `/rabbit/mnesia"`:            d,
		filepath.Join(tmp, "durachk-abcd-12x"): "",
		filepath.Join(tmp, "durachk-abce-12"):  "",
		"relative/durachk-abcd-12":             "",
	} {
		if got := runDirIn(s, "abcd"); got != want {
			t.Errorf("runDirIn(%q) = %q, want %q", s, got, want)
		}
	}
}

func TestNamesDir(t *testing.T) {
	dir := "/tmp/durachk-abcd-12"
	for cmdline, want := range map[string]bool{
		"postgres\x00-D\x00/tmp/durachk-abcd-12/pgdata\x00":                    true,
		"sh\x00/tmp/durachk-abcd-12\x00":                                       true,
		"sh\x00/tmp/durachk-abcd-123/x\x00":                                    false,
		"beam.smp\x00-mnesia\x00dir\x00\"/tmp/durachk-abcd-12/rabbit/mnesia\"": true,
		"sleep\x0060\x00": false,
	} {
		if got := namesDir([]byte(cmdline), dir); got != want {
			t.Errorf("namesDir(%q) = %v, want %v", cmdline, got, want)
		}
	}
}
