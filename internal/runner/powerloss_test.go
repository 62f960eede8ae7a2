package runner

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/internal/lazyfs"
	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/internal/targets"
	"github.com/durachk/durachk/plans"
)

// powerLossTarget is a target whose private broker can lose power here, or a
// skip saying why not.
func powerLossTarget(t *testing.T, raw string) *Target {
	t.Helper()
	if os.Getenv("DURACHK_PG_URL") == "" {
		t.Skip("DURACHK_PG_URL is not set: no effect store")
	}
	if err := lazyfs.Available(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	spec, err := targets.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := targets.CanKillBroker(spec); err != nil {
		t.Skipf("skipped: %v", err)
	}
	tg, err := New(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if !tg.Capabilities().PowerLoss {
		t.Fatalf("power loss not declared: %v", tg.Capabilities().Notes)
	}
	return tg
}

// mountsOf lists the mounts below dir.
func mountsOf(dir string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], dir) {
			out = append(out, f[4])
		}
	}
	return out
}

// TestPowerLossTellsFsyncPoliciesApart is the bar on real brokers:
// Redis with appendfsync always and Postgres with synchronous_commit on keep
// every acknowledged job through a power loss; Redis with appendfsync no loses
// them, and the witness shows the acknowledgement and the power cut after it.
// Nothing of a run is left, the lazy file system included.
func TestPowerLossTellsFsyncPoliciesApart(t *testing.T) {
	t.Parallel() // brokers of its own, on ports of their own
	tests := []struct {
		name, url string
		want      contracts.Verdict
	}{
		// The AOF on, stated: the shared server runs appendonly no, which the
		// private instance would take.
		{"redis appendfsync always", "redis://127.0.0.1:6379/0?private-instance.appendonly=yes&private-instance.appendfsync=always", contracts.Pass},
		{"redis appendfsync no", "redis://127.0.0.1:6379/0?private-instance.appendonly=yes&private-instance.appendfsync=no", contracts.Violated},
		{"postgres synchronous_commit on", os.Getenv("DURACHK_PG_URL"), contracts.Pass},
	}
	c, err := contracts.Lookup("durability.power-loss")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tg := powerLossTarget(t, tt.url)
			var runID, dir string
			tg.OnRun = func(id, d string) { runID, dir = id, d }
			run := func(seed uint64) contracts.Result {
				began := time.Now()
				r, err := contracts.Evaluate(context.Background(), tg, c, contracts.Options{Seed: seed})
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s, seed %d, in %s: %s %s", tt.name, r.Seed, time.Since(began).Round(100*time.Millisecond), r.Verdict, r.Reason)
				if r.Verdict != contracts.Unknown && r.Stats.Faults["power_loss"] != 1 {
					t.Errorf("power losses %d, want 1", r.Stats.Faults["power_loss"])
				}
				if left := append(leftovers(t, runID, dir), mountsOf(dir)...); len(left) > 0 {
					t.Errorf("left behind: %v", left)
				}
				return r
			}
			// The class, sought across seeds: which acknowledged jobs are
			// unfinished at the cut depends on the run.
			if tt.want == contracts.Pass {
				runnertest.SeekPasses(t, tt.name, 1, run)
				return
			}
			r := runnertest.SeekViolation(t, tt.name, contracts.PropLost, run)
			v := r.Violations[0]
			if v.Property != contracts.PropLost {
				t.Errorf("first violation %s, want lost", v.Property)
			}
			var acked, cut bool
			for _, op := range v.Witness {
				acked = acked || (op.F == history.Enqueue && op.Type == history.OK)
				cut = cut || (op.F == history.Fault && op.Value == "power_loss")
			}
			if !acked || !cut {
				t.Errorf("the witness lacks the acknowledgement (%v) or the power cut (%v): %+v", acked, cut, v.Witness)
			}
		})
	}
}

// TestPowerLossRunCancelled: a run cancelled after its broker started on the
// lazy file system (SIGINT in the CLI) unmounts it and leaves nothing.
func TestPowerLossRunCancelled(t *testing.T) {
	tg := powerLossTarget(t, "redis://127.0.0.1:6379/0?private-instance.appendonly=yes&private-instance.appendfsync=always")
	var runID, dir string
	started := make(chan string, 1)
	tg.OnRun = func(id, d string) { runID, dir = id, d; started <- d }
	c, _ := contracts.Lookup("durability.power-loss")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // cancel once the broker is up on the mount
		d := <-started
		for ctx.Err() == nil {
			if len(mountsOf(d)) > 0 {
				time.Sleep(300 * time.Millisecond)
				cancel()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	_, err := contracts.Evaluate(ctx, tg, c, contracts.Options{Seed: 1})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Evaluate after cancel: %v, want the context's error", err)
	}
	if left := append(leftovers(t, runID, dir), mountsOf(dir)...); len(left) > 0 {
		t.Errorf("left behind after cancel: %v", left)
	}
}

// A broker kill or a power cut anchored to an acknowledgement (the plan's
// kill_after_ack) waits for one from its planned time: planned at 0, before
// the producer's first send, each fires a few milliseconds after the first
// acknowledgement, the history says so, and the acknowledged jobs are lost
// (a broker without a log loses them to a kill, one that never syncs to a
// power cut). Before, each fired at 0, with nothing acknowledged: unknown on
// every seed.
func TestBrokerFaultsFireAfterAnAcknowledgement(t *testing.T) {
	t.Parallel() // brokers of its own, on ports of their own
	for _, tt := range []struct {
		name, url, contract, fault string
	}{
		{"power cut, appendfsync no", "redis://127.0.0.1:6379/0?private-instance.appendfsync=no", "durability.power-loss", "power_loss"},
		{"broker kill, appendonly no", "redis://127.0.0.1:6379/0?private-instance.appendonly=no", "durability.ack", "broker_crash"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tg := powerLossTarget(t, tt.url)
			p, err := plans.Parse([]byte(`format: durachk.plan/v1
contract: `+tt.contract+`
seed: 1
workers: 1
kill_after_ack: 100ms
jobs:
  - id: j
    count: 6
    every: 300ms
    at: 2s
    slow: 2s
faults:
  - kind: `+tt.fault+`
    for: 2s
`), "anchored.yaml")
			if err != nil {
				t.Fatal(err)
			}
			c, err := p.AsContract("plan/anchored")
			if err != nil {
				t.Fatal(err)
			}
			var runID, dir string
			tg.OnRun = func(id, d string) { runID, dir = id, d }
			rec := &recordedTarget{Target: tg}
			r := runnertest.SeekViolation(t, tt.name, contracts.PropLost, func(seed uint64) contracts.Result {
				r, err := contracts.Evaluate(context.Background(), rec, c, contracts.Options{Seed: seed, Tries: 1})
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s, seed %d: %s (%s); the newest acknowledgement %d ms before the fault", tt.name, r.Seed, r.Verdict, r.Reason, r.Stats.NewestAckBeforeBrokerFaultMs)
				if left := append(leftovers(t, runID, dir), mountsOf(dir)...); len(left) > 0 {
					t.Errorf("left behind: %v", left)
				}
				return r
			})
			if ms := r.Stats.NewestAckBeforeBrokerFaultMs; ms < 1 || ms > 100 {
				t.Errorf("the newest acknowledgement %d ms before the fault, want 1 to 100", ms)
			}
			// The history says what the fault waited for, and how long
			// after the newest acknowledgement it fired.
			var note string
			for _, op := range rec.ops {
				if op.F == history.Node && strings.HasPrefix(op.Value, tt.fault+" held back ") {
					note = op.Value
				}
			}
			if !strings.Contains(note, "after an enqueue acknowledged less than 100ms before: it fires ") {
				t.Errorf("the history's note of the wait: %q", note)
			}
		})
	}
}

// recordedTarget keeps the history of the last run it executed.
type recordedTarget struct {
	*Target
	ops []history.Op
}

func (r *recordedTarget) Execute(ctx context.Context, run contracts.Run) (contracts.Execution, error) {
	ex, err := r.Target.Execute(ctx, run)
	r.ops = ex.Ops
	return ex, err
}
