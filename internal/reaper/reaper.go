// Package reaper makes sure that nothing durachk starts outlives it, also when
// durachk itself is killed with SIGKILL and cannot tear anything down.
//
// Three layers, each enough on its own for the common case:
//
//  1. Every process durachk starts is its direct child with a parent-death
//     signal (SIGKILL) and, for a broker, the real server binary rather than a
//     wrapper script, so that the kernel kills it when durachk dies; a broker's
//     helpers (Postgres backends, erl_child_setup, inet_gethost) exit when
//     their server does.
//  2. A watchdog: the first run of a durachk process starts `durachk watchdog`
//     (Start) in a session of its own, holding the read end of a pipe whose
//     write end only durachk holds. Runs tell it (Watch) their cgroups,
//     process groups and directories; when the pipe closes — durachk exited or
//     was killed — it SIGKILLs every cgroup and process group still registered,
//     waits for them to be empty and removes the directories (Serve).
//  3. A cgroup v2 per run (NewCgroup: durachk-<runid> under durachk's own
//     cgroup, one child cgroup per process or node), where the machine lets
//     durachk create one (root, or a delegated subtree): killing it
//     (cgroup.kill) takes every process of the run, also those that left
//     their process group (daemons that setsid). Without cgroups (DURACHK_NO_CGROUP=1
//     forces that) the watchdog kills process groups instead.
//
// Sweep is the fourth line for `durachk cleanup`: it finds what a run killed
// together with its watchdog left (its temporary directory, cgroup and
// processes, found by the directory) and removes it unless the run is live:
// a live run holds the lock of its directory (LockDir).
package reaper

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Kinds of things the watchdog ends.
const (
	KindCgroup = "cgroup" // a cgroup directory: cgroup.kill, then rmdir
	KindPgid   = "pgid"   // a process group: kill(-pgid, SIGKILL)
	KindDir    = "dir"    // a directory: removed once the processes are gone
	KindNFT    = "nft"    // an nftables table of the inet family named durachk_*: deleted
)

var wd struct {
	mu      sync.Mutex
	started bool
	w       *os.File
	err     error
}

// Start starts this process's watchdog, `bin watchdog`, unless it runs
// already. bin must serve the hidden watchdog command (durachk, or a test
// binary that calls runner.ServeChildIfAsked). DURACHK_NO_WATCHDOG=1 turns it
// off (tests of the other layers).
func Start(bin string) error {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if wd.started {
		return wd.err
	}
	wd.started = true
	if os.Getenv("DURACHK_NO_WATCHDOG") != "" {
		wd.err = fmt.Errorf("watchdog: DURACHK_NO_WATCHDOG is set")
		return wd.err
	}
	r, w, err := os.Pipe()
	if err != nil {
		wd.err = fmt.Errorf("watchdog: %w", err)
		return wd.err
	}
	cmd := exec.Command(bin, "watchdog")
	cmd.Stdin = r
	cmd.Dir = "/"
	// A session of its own: a terminal's Ctrl-C or a kill of durachk's process
	// group does not reach it, and it never holds a terminal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		wd.err = fmt.Errorf("watchdog: %w", err)
		return wd.err
	}
	r.Close()
	go func() { _ = cmd.Wait() }() // reap it should it ever exit first
	wd.w = w
	return nil
}

// Running reports whether this process has a watchdog.
func Running() bool {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	return wd.w != nil
}

// Watch registers a cgroup, process group or directory with the watchdog (a
// no-op without one).
func Watch(kind, v string) { send("+" + kind + " " + v) }

// Forget unregisters what Watch registered, once it is gone or handed back.
func Forget(kind, v string) { send("-" + kind + " " + v) }

func send(line string) {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if wd.w == nil || strings.ContainsAny(line[1:], "\n") {
		return
	}
	if _, err := io.WriteString(wd.w, line+"\n"); err != nil {
		wd.w.Close()
		wd.w = nil // the watchdog is gone; layers 1 and 3 remain
	}
}

// Watchdog is the main of `durachk watchdog`: Serve on stdin, deaf to the
// terminal's signals.
func Watchdog() error {
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE)
	return Serve(os.Stdin)
}

// Serve is the watchdog: it reads registrations from in until EOF (its parent
// is gone), then kills and removes everything still registered.
func Serve(in io.Reader) error {
	set := map[string]map[string]bool{KindCgroup: {}, KindPgid: {}, KindDir: {}, KindNFT: {}}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if len(line) < 2 {
			continue
		}
		kind, v, ok := strings.Cut(line[1:], " ")
		if !ok || set[kind] == nil {
			continue
		}
		if line[0] == '+' {
			set[kind][v] = true
		} else {
			delete(set[kind], v)
		}
	}
	err := Reap(keys(set[KindCgroup]), keys(set[KindPgid]), keys(set[KindDir]))
	return errors.Join(err, deleteNFT(keys(set[KindNFT])))
}

// deleteNFT deletes the nftables tables (a cluster's partitions between its
// nodes); names that are not durachk's are left alone.
func deleteNFT(tables []string) error {
	var errs []error
	for _, t := range tables {
		if !strings.HasPrefix(t, "durachk_") || strings.ContainsAny(t, " ;{}") {
			continue
		}
		if out, err := exec.Command("nft", "delete", "table", "inet", t).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("nft delete table inet %s: %v: %s", t, err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Reap SIGKILLs the cgroups and process groups, waits until they are empty,
// removes the cgroups and then the directories.
func Reap(cgroups, pgids, dirs []string) error {
	var errs []string
	for _, p := range pgids {
		if n, err := strconv.Atoi(p); err == nil && n > 1 {
			_ = syscall.Kill(-n, syscall.SIGKILL)
		}
	}
	for _, c := range cgroups {
		if err := RemoveCgroup(c); err != nil {
			errs = append(errs, err.Error())
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range pgids {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 1 {
			continue
		}
		for syscall.Kill(-n, 0) == nil && time.Now().Before(deadline) {
			_ = syscall.Kill(-n, syscall.SIGKILL)
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, d := range dirs {
		DetachMounts(d)
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("watchdog: %s", strings.Join(errs, "; "))
	}
	return nil
}
