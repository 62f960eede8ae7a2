package kafka_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/internal/targets"
)

// TestPrivateOnlyTarget: kafka:// names no broker of the user's, so the probe
// and every run start a private kfake of their own; the results name it
// (kfake <version> (emulator)), a contract without broker faults passes on
// it, and nothing of a run is left (store schemas, run directory, the kfake
// process). The control: a kafka URL the user gave that nobody serves is a
// bad target, never quietly a private broker.
func TestPrivateOnlyTarget(t *testing.T) {
	if os.Getenv("DURACHK_PG_URL") == "" {
		t.Skip("DURACHK_PG_URL not set: the effect store")
	}
	ctx, cancel := context.WithTimeout(context.Background(), runnertest.Loaded(2*time.Minute))
	defer cancel()
	spec, err := targets.Parse("kafka://?session.timeout.ms=1000")
	if err != nil {
		t.Fatal(err)
	}
	target, err := runner.New(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if on := target.MeasuredOn(); !strings.HasPrefix(on, "kfake ") || !strings.Contains(on, "(emulator)") {
		t.Errorf("measured on %q, want kfake <version> (emulator)", on)
	}
	if notes := strings.Join(target.Capabilities().Notes, "\n"); !strings.Contains(notes, "every contract runs on a private kafka broker") {
		t.Errorf("the capabilities do not say the runs are on a private broker: %s", notes)
	}
	var mu sync.Mutex
	runs := map[string]string{}
	target.OnRun = func(id, dir string) { mu.Lock(); runs[id] = dir; mu.Unlock() }
	c, err := contracts.Lookup("idempotency.conflict")
	if err != nil {
		t.Fatal(err)
	}
	runnertest.SeekPasses(t, "idempotency.conflict on kafka://", 1, func(seed uint64) contracts.Result {
		r, err := contracts.Evaluate(ctx, target, c, contracts.Options{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		return r
	})
	if len(runs) == 0 {
		t.Fatal("no run reported its id")
	}
	for id, dir := range runs {
		if left := runnertest.Leftovers(t, id, dir); len(left) > 0 {
			t.Errorf("run %s left %v", id, left)
		}
	}

	// The control: a broker the user named and nobody serves.
	spec, err = targets.Parse("kafka://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	if targets.PrivateOnly(spec) {
		t.Error("a URL with a host counts as private only")
	}
	nctx, ncancel := context.WithTimeout(ctx, runnertest.Loaded(30*time.Second))
	defer ncancel()
	if _, err := runner.New(nctx, spec); !errors.Is(err, targets.ErrBadTarget) {
		t.Errorf("runner.New on an unserved kafka URL = %v, want ErrBadTarget", err)
	}
}

// TestShareDeliveryLimitBelowBudget: a share group whose broker archives a
// record after fewer deliveries than the pipeline's retry budget takes the
// poison jobs from the pipeline: retry.bounded is a violation of
// moved_by_broker naming the broker's archival. The control: with Kafka's
// default limit (5, above the budget of 3) the pipeline dead-letters them
// itself and the contract passes.
func TestShareDeliveryLimitBelowBudget(t *testing.T) {
	if os.Getenv("DURACHK_PG_URL") == "" {
		t.Skip("DURACHK_PG_URL not set: the effect store")
	}
	c, err := contracts.Lookup("retry.bounded")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, url string
		violated  bool
	}{
		{"limit 2 below the budget", "kafka://?group.type=share&group.share.record.lock.duration.ms=2000&group.share.delivery.count.limit=2", true},
		{"limit 5 above the budget (control)", "kafka://?group.type=share&group.share.record.lock.duration.ms=2000", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), runnertest.Loaded(2*time.Minute))
			defer cancel()
			spec, err := targets.Parse(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			target, err := runner.New(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			run := func(seed uint64) contracts.Result {
				r, err := contracts.Evaluate(ctx, target, c, contracts.Options{Seed: seed})
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			if !tc.violated {
				runnertest.SeekPasses(t, tc.name, 1, run)
				return
			}
			r := runnertest.SeekViolation(t, tc.name, contracts.PropMovedByBroker, run)
			named := false
			for _, v := range r.Violations {
				if v.Property == contracts.PropMovedByBroker && strings.Contains(v.Message, "group.share.delivery.count.limit=2") {
					named = true
				}
			}
			if !named {
				t.Errorf("no moved_by_broker violation names the broker's archival: %+v", r.Violations)
			}
		})
	}
}
