package pg_test

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

// A run of retry.bounded through real processes with delivery_limit=1: the
// queue dead-letters the poison jobs itself on their second lease, before the
// pipeline's own bound, and the final inventory lists them (reason
// delivery_limit, one delivery), never a job the pipeline dead-lettered.
func TestDeliveryLimitInARun(t *testing.T) {
	raw := os.Getenv("DURACHK_PG_URL")
	if raw == "" {
		t.Skip("DURACHK_PG_URL is not set: e.g. DURACHK_PG_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
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
	spec, err := targets.Parse(raw + sep + "delivery_limit=1")
	if err != nil {
		t.Fatal(err)
	}
	target, err := runner.New(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	// Whether a poison job reaches its second lease before the run drains
	// depends on the run: seek a seed where the queue moved one (every run's
	// moves are checked).
	for seed := uint64(1); seed <= runnertest.MaxSeeds; seed++ {
		ex, err := target.Execute(ctx, contracts.Run{Contract: c.ID, Scenario: c.Scenario(seed, contracts.DefaultJobs), Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		byPipeline := map[string]bool{}
		for _, op := range ex.Ops {
			if op.F == history.DeadLetter && op.Type == history.OK {
				byPipeline[op.Job] = true
			}
		}
		inv := ex.Final.Broker
		for _, m := range inv.Moved {
			if m.Action != adapters.ActionDeadLettered || m.Reason != "delivery_limit" || m.Deliveries != 1 || m.At.IsZero() || !slices.Contains(inv.DeadLettered, m.Job) {
				t.Errorf("moved %+v, want dead_lettered, delivery_limit after 1 delivery, a time, in the dead table", m)
			}
			if byPipeline[m.Job] {
				t.Errorf("%s was dead-lettered by the pipeline, yet listed as moved by the queue", m.Job)
			}
		}
		if len(inv.Moved) > 0 {
			t.Logf("seed %d: %d dead letters, %d moved by the queue, e.g. %+v", seed, len(inv.DeadLettered), len(inv.Moved), inv.Moved[0])
			return
		}
		t.Logf("seed %d: nothing moved by the queue; the next seed", seed)
	}
	t.Fatalf("nothing moved by the queue in %d seeds", runnertest.MaxSeeds)
}
