package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters/pg/pgdb"
	"github.com/durachk/durachk/internal/cli"
	"github.com/durachk/durachk/internal/targets"
	"github.com/durachk/durachk/reports"
)

// signalLimit is the promise (README): SIGINT or SIGTERM ends durachk within
// 2 s at every stage.
const signalLimit = 2 * time.Second

// signalTolerance is what the stage test allows beyond signalLimit, beside
// two busy loops of its own on a 2-core machine: the test's own measurement
// (the signal sent, the exit reaped) in the scheduler's queue.
const signalTolerance = 250 * time.Millisecond

// busyLoops starts n busy loops (yes > /dev/null) for the rest of the test.
func busyLoops(t *testing.T, n int) {
	t.Helper()
	for range n {
		y := exec.Command("yes")
		if err := y.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = y.Process.Kill(); _ = y.Wait() })
	}
}

// stageRun is durachk started for one stage of TestSIGINTAtEveryStage.
type stageRun struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	out   bytes.Buffer
	lines chan string
}

func startStage(t *testing.T, args ...string) *stageRun {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := &stageRun{cmd: exec.Command(self, args...), lines: make(chan string, 1024)}
	s.cmd.Env = append(os.Environ(), "DURACHK_MAIN_TEST=1")
	pipe, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stdout = &lockedWriter{s}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.cmd.Process.Kill() })
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			s.mu.Lock()
			s.out.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
			select {
			case s.lines <- sc.Text():
			default:
			}
		}
		close(s.lines)
	}()
	return s
}

type lockedWriter struct{ s *stageRun }

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.s.out.Write(b)
}

func (s *stageRun) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// waitLine waits for a stderr line with prefix.
func (s *stageRun) waitLine(t *testing.T, prefix string, limit time.Duration) {
	t.Helper()
	deadline := time.After(limit)
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				t.Fatalf("durachk ended before %q:\n%s", prefix, s.output())
			}
			if strings.HasPrefix(l, prefix) {
				return
			}
		case <-deadline:
			t.Fatalf("no line %q within %s:\n%s", prefix, limit, s.output())
		}
	}
}

// interrupt sends SIGINT and returns how long durachk took to exit, and its
// exit code (-1: ended by the signal itself).
func (s *stageRun) interrupt(t *testing.T) (time.Duration, int) {
	t.Helper()
	sent := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		_ = s.cmd.Process.Kill()
		t.Fatalf("still running 60 s after SIGINT:\n%s", s.output())
	}
	took := time.Since(sent)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return took, 0
	case errors.As(err, &ee):
		return took, ee.ExitCode()
	}
	t.Fatal(err)
	return 0, 0
}

// descendant waits until a descendant of pid whose command name is comm
// runs, and returns its pid.
func descendant(t *testing.T, pid int, comm string, limit time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		parents := map[int]int{}
		names := map[int]string{}
		procs, _ := os.ReadDir("/proc")
		for _, p := range procs {
			n, err := strconv.Atoi(p.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n))
			if err != nil {
				continue
			}
			open, close := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
			if open < 0 || close < open || close+2 >= len(b) {
				continue
			}
			fs := strings.Fields(string(b[close+2:]))
			if len(fs) > 1 {
				parents[n], _ = strconv.Atoi(fs[1])
				names[n] = string(b[open+1 : close])
			}
		}
		for n, name := range names {
			if name != comm {
				continue
			}
			for p := parents[n]; p > 1; p = parents[p] {
				if p == pid {
					return n
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %s under durachk within %s", comm, limit)
	return 0
}

// gone waits up to 5 s for process pid to end (a helper VM of a node may
// halt by itself a moment after durachk), saying how long it took. A zombie
// is gone: dead, its parent killed with it, waiting for init to reap it
// (here up to 1.4 s).
func gone(t *testing.T, pid int) {
	t.Helper()
	began := time.Now()
	for time.Since(began) < 5*time.Second && alive(pid) {
		time.Sleep(20 * time.Millisecond)
	}
	if d := time.Since(began); d > 100*time.Millisecond {
		t.Logf("process %d ended %s after durachk", pid, d.Round(10*time.Millisecond))
	}
}

// skipUnlessPrivate skips t unless target's broker can run as a private
// instance here (its server is installed).
func skipUnlessPrivate(t *testing.T, target string) {
	t.Helper()
	spec, err := targets.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	if err := targets.CanKillBroker(spec); err != nil {
		t.Skip(err)
	}
}

// alive reports whether process pid runs (a zombie does not).
func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil && procState(pid) != 'Z'
}

// TestSIGINTAtEveryStage: SIGINT ends durachk within 2 s at every stage of a
// run — parsing, reaching its targets (a broker that does not answer),
// starting a private broker of every kind (installing it: MariaDB's took
// 2.6–3.6 s, its bootstrap server holding the installer's output) or cluster,
// running on a real broker, running the embedded target's virtual-clock runs
// (a thousand trials), writing its reports, and durachk atlas running a
// profile — with what it has: exit 2 (interrupted) and result.json marked
// interrupted once the run has begun. Beside two busy loops of its own: the
// promise holds on a loaded machine (signalTolerance).
func TestSIGINTAtEveryStage(t *testing.T) {
	pg, redis, amqp := os.Getenv("DURACHK_PG_URL"), os.Getenv("DURACHK_REDIS_URL"), os.Getenv("DURACHK_AMQP_URL")
	busyLoops(t, 2)
	check := func(t *testing.T, s *stageRun, took time.Duration, code int, want ...int) {
		t.Helper()
		t.Logf("exit %d, %s after SIGINT", code, took.Round(time.Millisecond))
		ok := false
		for _, w := range want {
			ok = ok || code == w
		}
		if !ok {
			t.Errorf("exit %d, want one of %v\n%s", code, want, s.output())
		}
		if took > signalLimit+signalTolerance {
			t.Errorf("durachk ended %s after SIGINT, want within %s (+%s)\n%s", took.Round(time.Millisecond), signalLimit, signalTolerance, s.output())
		}
	}
	interrupted := func(t *testing.T, dir string) *reports.Document {
		t.Helper()
		doc, err := reports.ReadJSON(filepath.Join(dir, "result.json"))
		if err != nil {
			t.Fatal(err)
		}
		if !doc.Interrupted || doc.Complete {
			t.Errorf("result.json: interrupted %v, complete %v; want an interrupted run", doc.Interrupted, doc.Complete)
		}
		return doc
	}

	t.Run("parsing", func(t *testing.T) {
		// At once: the signal lands before or while the flags are read.
		s := startStage(t, "run", "--out", t.TempDir())
		took, code := s.interrupt(t)
		check(t, s, took, code, -1, cli.ExitUnknown, cli.ExitPass)
	})

	t.Run("reaching a broker that does not answer", func(t *testing.T) {
		if pg == "" {
			t.Skip("DURACHK_PG_URL is not set (the local Postgres)")
		}
		server, err := exec.LookPath("redis-server")
		if err != nil {
			t.Skip("redis-server is not installed")
		}
		port, err := targets.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		red := exec.Command(server, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
		if err := red.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = red.Process.Signal(syscall.SIGCONT); _ = red.Process.Kill(); _ = red.Wait() }()
		time.Sleep(300 * time.Millisecond)
		// Paused: it accepts connections and answers nothing.
		if err := red.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		target := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
		s := startStage(t, "run", "--target", target, "--out", t.TempDir())
		time.Sleep(time.Second)
		took, code := s.interrupt(t)
		// The run keeps its registry in the store for durachk cleanup, since it
		// could not clean the paused broker; this test throws the broker away,
		// and the registry with it (CI left one per run).
		defer dropRegistriesOf(t, pg, target)
		check(t, s, took, code, cli.ExitUnknown)
		if !strings.Contains(s.output(), "interrupted") {
			t.Errorf("no line says the run was interrupted:\n%s", s.output())
		}
	})

	// Each kind's private broker, the signal landing as the process named
	// starts: RabbitMQ's node boots for seconds; MariaDB's and Postgres's
	// installers run a bootstrap server of their own.
	for _, pb := range []struct{ kind, env, comm string }{
		{"amqp", "DURACHK_AMQP_URL", "beam.smp"},
		{"mysql", "DURACHK_MYSQL_URL", "mariadbd"},
		{"postgres", "DURACHK_PG_URL", "initdb"},
		{"redis", "DURACHK_REDIS_URL", "redis-server"},
		{"nats", "DURACHK_NATS_URL", ""},
	} {
		t.Run("starting a private "+pb.kind+" broker", func(t *testing.T) {
			target := os.Getenv(pb.env)
			if pg == "" || target == "" {
				t.Skipf("DURACHK_PG_URL or %s is not set", pb.env)
			}
			skipUnlessPrivate(t, target)
			dir := t.TempDir()
			s := startStage(t, "run", "--target", target, "--contract", "durability.ack", "--out", dir)
			// The run's first line comes once its targets are reached: their
			// settings read, and each local broker binary asked its version
			// (redis-server --version, mariadbd --version), which a search
			// for the process by name would take for the private broker.
			s.waitLine(t, "durachk: run ", time.Minute)
			var pid int
			if pb.comm != "" {
				pid = descendant(t, s.cmd.Process.Pid, pb.comm, time.Minute)
			}
			// NATS's private server is durachk itself (nats-server): it
			// starts in milliseconds, so the signal lands as the run begins.
			took, code := s.interrupt(t)
			check(t, s, took, code, cli.ExitUnknown)
			interrupted(t, dir)
			if pid != 0 {
				if gone(t, pid); alive(pid) {
					t.Errorf("the private broker's %s (pid %d) outlived durachk", pb.comm, pid)
				}
			}
		})
	}

	t.Run("starting a private cluster", func(t *testing.T) {
		if pg == "" || amqp == "" {
			t.Skip("DURACHK_PG_URL or DURACHK_AMQP_URL is not set")
		}
		target := amqp + "?queue-arguments.x-queue-type=quorum&private-cluster.nodes=3"
		if strings.Contains(amqp, "?") {
			target = amqp + "&queue-arguments.x-queue-type=quorum&private-cluster.nodes=3"
		}
		skipUnlessPrivate(t, target)
		dir := t.TempDir()
		s := startStage(t, "run", "--target", target, "--contract", "durability.failover", "--out", dir)
		// The seed node boots first, the others once it runs: seconds.
		beam := descendant(t, s.cmd.Process.Pid, "beam.smp", time.Minute)
		time.Sleep(time.Second)
		took, code := s.interrupt(t)
		check(t, s, took, code, cli.ExitUnknown)
		interrupted(t, dir)
		gone(t, beam)
		if alive(beam) {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", beam))
			cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", beam))
			stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", beam))
			t.Errorf("a node of the private cluster (pid %d) outlived durachk: %s\n%s\n%s", beam, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}), cg, stat)
		}
	})

	t.Run("running on a real broker", func(t *testing.T) {
		if pg == "" || redis == "" {
			t.Skip("DURACHK_PG_URL or DURACHK_REDIS_URL is not set")
		}
		dir := t.TempDir()
		// Slow jobs: seconds of work, workers running when the signal lands.
		s := startStage(t, "run", "--target", redis, "--contract", "lease.heartbeat", "--out", dir)
		s.waitLine(t, "durachk: run ", time.Minute)
		descendant(t, s.cmd.Process.Pid, filepath.Base(s.cmd.Path), time.Minute)
		time.Sleep(time.Second)
		took, code := s.interrupt(t)
		check(t, s, took, code, cli.ExitUnknown)
		interrupted(t, dir)
	})

	t.Run("running the embedded target", func(t *testing.T) {
		dir := t.TempDir()
		s := startStage(t, "run", "--trials", "1000", "--contract", "cancel.terminal", "--out", dir)
		s.waitLine(t, "durachk: run ", time.Minute)
		time.Sleep(time.Second)
		took, code := s.interrupt(t)
		check(t, s, took, code, cli.ExitUnknown)
		doc := interrupted(t, dir)
		// What ran is kept: the trials the contract had.
		if len(doc.Results) != 1 || len(doc.Results[0].Trials) < 2 || !strings.Contains(doc.Results[0].Reason, "of 1000 trials") {
			t.Errorf("%d results; want cancel.terminal with the trials it had, its reason saying so", len(doc.Results))
		}
	})

	t.Run("atlas", func(t *testing.T) {
		dir := t.TempDir()
		profiles := filepath.Join(t.TempDir(), "profiles.yaml")
		body := "format: durachk.atlas/v1\ncontracts: [cancel.terminal]\nprofiles:\n" +
			"  - {name: first, broker: mem, choose: x, target: {url: mem}}\n  - {name: second, broker: mem, choose: x, target: {url: mem}}\n"
		if err := os.WriteFile(profiles, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		s := startStage(t, "atlas", "-c", profiles, "--trials", "1000", "--out", dir)
		s.waitLine(t, "durachk: atlas: profile 1 of 2", time.Minute)
		time.Sleep(time.Second)
		took, code := s.interrupt(t)
		check(t, s, took, code, cli.ExitUnknown)
		interrupted(t, filepath.Join(dir, "first"))
		if _, err := os.Stat(filepath.Join(dir, "second")); err == nil {
			t.Error("the atlas went on to its second profile after SIGINT")
		}
	})

	t.Run("atlas starting a private broker", func(t *testing.T) {
		target := os.Getenv("DURACHK_MYSQL_URL")
		if pg == "" || target == "" {
			t.Skip("DURACHK_PG_URL or DURACHK_MYSQL_URL is not set")
		}
		skipUnlessPrivate(t, target)
		dir := t.TempDir()
		profiles := filepath.Join(t.TempDir(), "profiles.yaml")
		body := "format: durachk.atlas/v1\ncontracts: [durability.ack]\nprofiles:\n" +
			"  - {name: mariadb, broker: mariadb, choose: x, target: {url: \"" + target + "\"}}\n"
		if err := os.WriteFile(profiles, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		s := startStage(t, "atlas", "-c", profiles, "--out", dir)
		pid := descendant(t, s.cmd.Process.Pid, "mariadbd", time.Minute)
		took, code := s.interrupt(t)
		check(t, s, took, code, cli.ExitUnknown)
		if gone(t, pid); alive(pid) {
			t.Errorf("the private MariaDB (pid %d) outlived durachk atlas", pid)
		}
	})

	t.Run("writing", func(t *testing.T) {
		// The signal lands once the last result is in, as the reports are
		// written: they are written whole, and the run is complete.
		dir := t.TempDir()
		s := startStage(t, "run", "--trials", "100", "--out", dir)
		s.waitLine(t, "durachk: [19/19]", 5*time.Minute)
		took, code := s.interrupt(t)
		check(t, s, took, code, cli.ExitPass, cli.ExitUnknown)
		if _, err := reports.ReadJSON(filepath.Join(dir, "result.json")); err != nil {
			t.Error(err)
		}
	})
}

// dropRegistriesOf drops the effect-store schemas of the runs registered for
// the target at url, whose broker a test stopped for good.
func dropRegistriesOf(t *testing.T, storeURL, url string) {
	t.Helper()
	spec, err := targets.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	ep := targets.Endpoint(spec)
	ctx := context.Background()
	db, err := pgdb.Open(ctx, storeURL, pgdb.Options{MaxConns: 1})
	if err != nil {
		t.Errorf("drop the runs' registries: %v", err)
		return
	}
	defer db.Close()
	rows, err := db.Pool.Query(ctx, `SELECT nspname FROM pg_namespace WHERE nspname LIKE 'durachk\_%'`)
	if err != nil {
		t.Errorf("drop the runs' registries: %v", err)
		return
	}
	var schemas []string
	for rows.Next() {
		var n string
		if rows.Scan(&n) == nil {
			schemas = append(schemas, n)
		}
	}
	rows.Close()
	for _, n := range schemas {
		var got string
		if db.Pool.QueryRow(ctx, `SELECT endpoint FROM `+pgdb.Ident(n, "durachk_run")+` LIMIT 1`).Scan(&got) != nil || got != ep {
			continue
		}
		if err := db.DropSchema(ctx, n); err != nil {
			t.Errorf("drop the registry %s: %v", n, err)
		}
	}
}
