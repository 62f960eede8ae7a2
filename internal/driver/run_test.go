package driver_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

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
	t.Logf("%s seed %d: %s (%s) faults %v", id, seed, r.Verdict, r.Reason, r.Stats.Faults)
	for _, v := range r.Violations {
		t.Logf("  %s %s: %s", v.Property, v.Job, v.Message)
	}
	return r
}

func TestSmoke(t *testing.T) {
	tg := ownTarget(t, "")
	t.Logf("caps %+v measured on %s", tg.Capabilities(), tg.MeasuredOn())
	evaluate(t, tg, "lease.redelivery", 1)
}
