// Package selftest_test runs every sabotage of the catalogue on real
// processes against the local Postgres, through internal/runner. Its own
// package so that go test runs it beside internal/runner's other tests.
package selftest_test

import (
	"context"
	"os"
	"testing"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/internal/targets"
)

// TestMain lets the test binary play `durachk worker`: the runner re-executes
// its own binary for every child process.
func TestMain(m *testing.M) {
	runner.ServeChildIfAsked()
	os.Exit(m.Run())
}

func pgTarget(t *testing.T) *runner.Target {
	t.Helper()
	url := os.Getenv("DURACHK_PG_URL")
	if url == "" {
		t.Skip("DURACHK_PG_URL is not set: no Postgres to run real processes against")
	}
	spec, err := targets.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := runner.New(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// Every sabotage that the postgres target can run is caught on real
// processes, by the properties it declares: each is sought across seeds (a
// run that did not exercise its claim is tried with the next seed, as
// selftest does; one that exercised it and was not caught, too: whether a
// sabotage's damage shows depends on the run, its class must show within
// runnertest.MaxSeeds seeds).
func TestSelftestOnPostgres(t *testing.T) {
	t.Parallel() // namespaces of its own, beside the other tests
	if testing.Short() {
		t.Skip("short")
	}
	tg := pgTarget(t)
	cs, err := contracts.SelfTestContracts(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		// Each contract's sabotages in a namespace of their own: they run
		// beside the other contracts' (go test -parallel).
		t.Run(c.ID, func(t *testing.T) {
			t.Parallel()
			for _, s := range c.Sabotages {
				t.Run(s.Name, func(t *testing.T) {
					one := *c
					one.Sabotages = []contracts.Sabotage{s}
					var sr contracts.SabotageResult
					_, ok := runnertest.Seek(t, 1, func(seed uint64) contracts.Result {
						rs, err := contracts.SelfTest(context.Background(), tg, []*contracts.Contract{&one}, contracts.Options{Seed: seed})
						if err != nil {
							t.Fatal(err)
						}
						sr = rs[0]
						return sr.Result
					}, func(contracts.Result) bool { return sr.Caught || sr.Skipped() })
					if sr.Skipped() {
						t.Skip(sr.Result.Reason)
					}
					if !ok {
						t.Fatalf("sabotage %s not caught on postgres in %d seeds: %s (%s)", s.Name, runnertest.MaxSeeds, sr.Why, sr.Result.Reason)
					}
				})
			}
		})
	}
}
