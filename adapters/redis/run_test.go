package redis_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/internal/targets"
)

// TestMain lets the runner re-execute this test binary as its child processes.
func TestMain(m *testing.M) {
	runner.ServeChildIfAsked()
	os.Exit(m.Run())
}

// A run of retry.bounded through real processes on a stream capped by
// stream.maxlen: the producer outruns the workers, XADD trims jobs nobody has
// finished, and the final inventory names them (trimmed, reason MAXLEN 4);
// none of them was acked or dead-lettered by the pipeline (unless the
// producer enqueued it twice: Moved lists messages, and another copy may have
// been finished).
func TestTrimmingInARun(t *testing.T) {
	raw := os.Getenv("DURACHK_REDIS_URL")
	if raw == "" {
		t.Skip("DURACHK_REDIS_URL is not set: e.g. DURACHK_REDIS_URL=redis://127.0.0.1:6379/0")
	}
	if testing.Short() {
		t.Skip("contract runs with real processes take seconds each")
	}
	c, err := contracts.Lookup("retry.bounded")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), runnertest.Loaded(2*time.Minute))
	defer cancel()
	sep := "?"
	if strings.Contains(raw, "?") {
		sep = "&"
	}
	spec, err := targets.Parse(raw + sep + "stream.maxlen=4")
	if err != nil {
		t.Fatal(err)
	}
	target, err := runner.New(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	// Whether the producer outruns the workers far enough depends on the run:
	// seek a seed where XADD trimmed (every run's trims are checked).
	for seed := uint64(1); seed <= runnertest.MaxSeeds; seed++ {
		ex, err := target.Execute(ctx, contracts.Run{Contract: c.ID, Scenario: c.Scenario(seed, contracts.DefaultJobs), Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		finished, enqueues := map[string]bool{}, map[string]int{}
		for _, op := range ex.Ops {
			if (op.F == history.Ack || op.F == history.DeadLetter) && op.Type == history.OK {
				finished[op.Job] = true
			}
			if op.F == history.Enqueue && op.Type == history.Invoke {
				enqueues[op.Job]++
			}
		}
		inv := ex.Final.Broker
		for _, m := range inv.Moved {
			if m.Action != adapters.ActionTrimmed || m.Reason != "MAXLEN 4" || m.Job == "" {
				t.Errorf("moved %+v, want a named job trimmed by MAXLEN 4", m)
			}
			if finished[m.Job] && enqueues[m.Job] == 1 { // a second copy may have been finished
				t.Errorf("%s was acked or dead-lettered by the pipeline, yet listed as trimmed", m.Job)
			}
			if slices.Contains(inv.Queued, m.Job) || slices.Contains(inv.InFlight, m.Job) {
				t.Errorf("%s is listed as trimmed and as still in the stream", m.Job)
			}
		}
		if len(inv.Moved) > 0 {
			t.Logf("seed %d: %d jobs trimmed, e.g. %+v", seed, len(inv.Moved), inv.Moved[0])
			return
		}
		t.Logf("seed %d: nothing trimmed; the next seed", seed)
	}
	t.Fatalf("nothing trimmed in %d seeds", runnertest.MaxSeeds)
}
