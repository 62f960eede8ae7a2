package driver_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	rq "github.com/durachk/durachk/adapters/redis"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/internal/targets"
)

// ownWorker is the example worker of a team's own, built once for the
// package's tests.
var ownWorker string

func TestMain(m *testing.M) {
	runner.ServeChildIfAsked()
	dir, err := os.MkdirTemp("", "durachk-own-worker-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	ownWorker = filepath.Join(dir, "own-worker-go")
	build := exec.Command("go", "build", "-o", ownWorker, "github.com/durachk/durachk/examples/own-worker-go")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build of the example worker:", err)
		os.RemoveAll(dir)
		os.Exit(3)
	}
	code := m.Run()
	os.RemoveAll(dir)
	runnertest.RemoveBinary()
	os.Exit(code)
}

// ownTarget is the shared Postgres with the example worker, its knobs and
// sabotage as given (knob=value pairs).
func ownTarget(t *testing.T, knobs string) *runner.Target {
	t.Helper()
	url := os.Getenv("DURACHK_PG_URL")
	if url == "" {
		t.Skip("DURACHK_PG_URL is not set: no Postgres to run the worker on")
	}
	spec, err := targets.Parse(url + "&worker.command=" + ownWorker + knobs)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := runner.New(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// evaluate runs contract id on tg with seed, checking that the run left
// nothing behind.
func evaluate(t *testing.T, tg *runner.Target, id string, seed uint64) contracts.Result {
	t.Helper()
	var runID, dir string
	tg.OnRun = func(i, d string) { runID, dir = i, d }
	c, err := contracts.Lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	r, err := contracts.Evaluate(context.Background(), tg, c, contracts.Options{Seed: seed, Jobs: 12})
	if err != nil {
		t.Fatal(err)
	}
	if left := runnertest.Leftovers(t, runID, dir); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	if tg.Spec.Kind == "redis" {
		// The worker's namespace on Redis: its keys (a job library's queue).
		ns := targets.WorkerNamespace(targets.Spec{RunID: runID}) + ":"
		if left, err := rq.KeysWithPrefix(context.Background(), tg.Spec.URL, ns); err != nil || len(left) > 0 {
			t.Errorf("left behind in Redis under %s: %v (%v)", ns, left, err)
		}
	}
	t.Logf("%s seed %d: %s (%s) faults %v", id, seed, r.Verdict, r.Reason, r.Stats.Faults)
	for _, v := range r.Violations {
		t.Logf("  %s %s: %s", v.Property, v.Job, v.Message)
	}
	return r
}

// The example worker passes the contracts it can express: a pass on some
// seed for each, and no violation on any seed tried (the whole catalogue:
// -catalogue).
func TestOwnWorkerPasses(t *testing.T) {
	tg := ownTarget(t, "")
	ids := []string{"lease.redelivery", "outbox.atomic", "retry.bounded", "cancel.terminal"}
	if *catalogue {
		ids = nil
		for _, c := range contracts.Catalogue {
			ids = append(ids, c.ID)
		}
	}
	for _, id := range ids {
		t.Run(id, func(t *testing.T) {
			c, _ := contracts.Lookup(id)
			if why := c.Needs; why != nil && why(tg.Capabilities()) != "" {
				t.Skipf("%s: %s", id, why(tg.Capabilities()))
			}
			runnertest.SeekPasses(t, "own worker × "+id, 1, func(seed uint64) contracts.Result { return evaluate(t, tg, id, seed) })
		})
	}
}

var catalogue = flag.Bool("catalogue", false, "run the whole catalogue on the example worker (minutes)")

// A worker sabotaged to complete its job before the effect loses the jobs
// of the workers killed in between; one that ignores its token completes a
// job after its lock passed to another worker.
func TestSabotagedOwnWorker(t *testing.T) {
	for _, tc := range []struct {
		sabotage, contract string
		raises             contracts.Property
	}{
		{"ack-before-effect", "lease.redelivery", contracts.PropLost},
		{"ignore-token", "fencing.zombie", contracts.PropStaleAck},
	} {
		t.Run(tc.sabotage, func(t *testing.T) {
			tg := ownTarget(t, "&worker.sabotage="+tc.sabotage)
			r := runnertest.SeekViolation(t, "own worker sabotaged "+tc.sabotage, tc.raises, func(seed uint64) contracts.Result {
				return evaluate(t, tg, tc.contract, seed)
			})
			if !runnertest.Witnessed(r, tc.raises) {
				t.Errorf("%s: no witnessed %s", tc.sabotage, tc.raises)
			}
		})
	}
}

func TestSmoke(t *testing.T) {
	tg := ownTarget(t, "")
	t.Logf("caps %+v measured on %s", tg.Capabilities(), tg.MeasuredOn())
	evaluate(t, tg, "lease.redelivery", 1)
}
