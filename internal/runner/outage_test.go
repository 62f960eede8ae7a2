package runner

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rq "github.com/durachk/durachk/adapters/redis"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/internal/targets"
)

// testRedis is a redis-server the test starts on a port of its own, as a
// direct child: the test pauses (SIGSTOP), resumes, kills and restarts it.
type testRedis struct {
	t    *testing.T
	port int
	cmd  *exec.Cmd
}

func startTestRedis(t *testing.T, port int) *testRedis {
	t.Helper()
	server, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed")
	}
	if port == 0 {
		if port, err = targets.FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	r := &testRedis{t: t, port: port}
	r.cmd = exec.Command(server, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.kill)
	deadline := time.Now().Add(10 * time.Second)
	for rq.Ready(context.Background(), r.addr()) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %d did not answer", port)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return r
}

func (r *testRedis) addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

func (r *testRedis) signal(s syscall.Signal) {
	if err := r.cmd.Process.Signal(s); err != nil {
		r.t.Errorf("signal %v to redis-server: %v", s, err)
	}
}

func (r *testRedis) kill() {
	if r.cmd.ProcessState == nil {
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
	}
}

// capture keeps the execution a target hands back.
type capture struct {
	*Target
	ex contracts.Execution
}

func (c *capture) Execute(ctx context.Context, run contracts.Run) (contracts.Execution, error) {
	ex, err := c.Target.Execute(ctx, run)
	c.ex = ex
	return ex, err
}

func redisTarget(t *testing.T, r *testRedis) *Target {
	t.Helper()
	if os.Getenv("DURACHK_PG_URL") == "" {
		t.Skip("DURACHK_PG_URL is not set: the effect store is the local Postgres")
	}
	spec, err := targets.Parse("redis://" + r.addr() + "/0")
	if err != nil {
		t.Fatal(err)
	}
	tg, err := New(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	tg.Log = testLog{t}
	return tg
}

// testLog writes the runner's progress lines to the test's log.
type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Logf("%s %s", time.Now().Format("15:04:05.000"), strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// outageRun evaluates lease.heartbeat (slow jobs: seconds of work) and does
// fault to the broker once the run has gone on for a while; it returns the
// result, the execution and how long after the fault the evaluation ended.
func outageRun(t *testing.T, tg *Target, seed uint64, fault func()) (contracts.Result, contracts.Execution, time.Duration) {
	t.Helper()
	c, _ := contracts.Lookup("lease.heartbeat")
	started := make(chan struct{})
	var once sync.Once // a run that did not exercise its claim starts another
	tg.OnRun = func(string, string) { once.Do(func() { close(started) }) }
	var at time.Time
	go func() {
		<-started
		time.Sleep(1500 * time.Millisecond)
		at = time.Now()
		t.Logf("%s fault", at.Format("15:04:05.000"))
		fault()
	}()
	cp := &capture{Target: tg}
	r, err := contracts.Evaluate(context.Background(), cp, c, contracts.Options{Seed: seed})
	if err != nil {
		t.Fatalf("a broker outage is a verdict (unknown), not an error: %v", err)
	}
	tg.OnRun = nil
	return r, cp.ex, time.Since(at)
}

func checkOutage(t *testing.T, r contracts.Result, ex contracts.Execution, took time.Duration) {
	t.Helper()
	if r.Verdict != contracts.Unknown || !strings.Contains(r.Reason, "broker unavailable for ") || !strings.Contains(r.Reason, " from ") {
		t.Errorf("verdict %s: %s; want unknown: broker unavailable for … from …", r.Verdict, r.Reason)
	}
	// The contract's own limit is 32 s: the outage ends it within seconds
	// (stretched on a busy machine: the bound guards against waiting out the
	// limit).
	if took > runnertest.Loaded(16*time.Second) {
		t.Errorf("the run ended %s after the broker stopped answering", took.Round(time.Second))
	}
	if ex.Unavailable == "" || ex.RunID == "" {
		t.Errorf("execution: unavailable %q, run id %q", ex.Unavailable, ex.RunID)
	}
	n := 0
	for _, op := range ex.Ops {
		if op.F == history.Fault && op.Value == "broker_unavailable" && op.Process == "controller" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d broker_unavailable records in the history, want one (the outage's window)", n)
	}
}

// TestBrokerPausedMidRun: a broker paused (SIGSTOP) mid-run ends the run as
// unknown within seconds, with the outage in the history as a window; once it
// answers again, the next run passes.
func TestBrokerPausedMidRun(t *testing.T) {
	t.Parallel()
	red := startTestRedis(t, 0)
	tg := redisTarget(t, red)
	resumed := make(chan struct{})
	r, ex, took := outageRun(t, tg, 1, func() {
		red.signal(syscall.SIGSTOP)
		// Resumed while the run tears down: its namespace goes with it.
		time.AfterFunc(8*time.Second, func() {
			red.signal(syscall.SIGCONT)
			close(resumed)
		})
	})
	t.Logf("paused: %s, %s after the pause: %s", r.Verdict, took.Round(100*time.Millisecond), r.Reason)
	checkOutage(t, r, ex, took)
	<-resumed
	c, _ := contracts.Lookup("tenant.isolation")
	runnertest.SeekPasses(t, "tenant.isolation after the broker resumed", 1, func(seed uint64) contracts.Result {
		r, err := contracts.Evaluate(context.Background(), tg, c, contracts.Options{Seed: seed})
		if err != nil {
			t.Fatalf("after the broker resumed: %v", err)
		}
		return r
	})
}

// TestBrokerKilledMidRun: a broker killed mid-run ends the run as unknown;
// while it stays down, the next run is unknown at once (not an error); once
// it is back, runs pass again. Its negative control: the same contract with
// the broker left alone passes.
func TestBrokerKilledMidRun(t *testing.T) {
	t.Parallel()
	red := startTestRedis(t, 0)
	tg := redisTarget(t, red)
	r, ex, took := outageRun(t, tg, 1, func() { red.signal(syscall.SIGKILL) })
	t.Logf("killed: %s, %s after the kill: %s", r.Verdict, took.Round(100*time.Millisecond), r.Reason)
	checkOutage(t, r, ex, took)
	_ = red.cmd.Wait()

	c, _ := contracts.Lookup("tenant.isolation")
	begin := time.Now()
	r2, err := contracts.Evaluate(context.Background(), tg, c, contracts.Options{Seed: 1})
	if err != nil || r2.Verdict != contracts.Unknown || !strings.Contains(r2.Reason, contracts.ErrUnavailable.Error()) {
		t.Errorf("with the broker down: %v %s %q, want unknown: target unavailable", err, r2.Verdict, r2.Reason)
	}
	t.Logf("down: %s after %s: %s", r2.Verdict, time.Since(begin).Round(100*time.Millisecond), r2.Reason)
	if d := time.Since(begin); d > runnertest.Loaded(25*time.Second) {
		t.Errorf("a run against a broker that is down took %s", d.Round(time.Second))
	}

	startTestRedis(t, red.port)
	runnertest.SeekPasses(t, "negative control, the broker left alone", 1, func(seed uint64) contracts.Result {
		r, _, _ := outageRun(t, tg, seed, func() {})
		return r
	})
}
