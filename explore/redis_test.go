package explore_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/explore"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/internal/targets"
)

// TestMain lets the runner re-execute this test binary as its child processes.
func TestMain(m *testing.M) {
	runner.ServeChildIfAsked()
	os.Exit(m.Run())
}

// On the local Redis with stream.maxlen=10, explore finds the jobs XADD
// trimmed before anyone finished them, and shrinks the plan. The Redis
// adapter names every entry the stream lost (it keeps the run's entry
// index), so the checker reports them as moved_by_broker ("the broker
// moved the job on its own (trimmed: MAXLEN 10)"); a job gone without
// that record would be lost. Either is the finding; which one is asserted
// by the property the shrunk plan must raise again. Each try is bounded to
// about a minute: rounds of 120 jobs until one trims (up to 6: whether Redis
// trims depends on the backlog, and two rounds missed about one run in
// eight), crash and kill faults only (no private broker), a shrink of at
// most 8 candidates and 40 s, each failing in 3 of 3 runs (the real-target
// default), and a replay of 3 runs, whose rate the test does not assert (it
// is the finding's to state). Whether Redis trims a job before it is done
// is timing: with MAXLEN 50 the finding's own plan raised it in fewer than
// 3 of 3 runs on a loaded machine (twice in three seeds beside other tests),
// so the shrink kept it as found; with 10 it raised it about 90 times a run
// beside two busy loops. Should a plan still not reproduce, the test
// explores the next seed: it asserts that a plan that reproduces shrinks,
// not what one seed gives.
func TestExploreRedisMaxlen(t *testing.T) {
	raw := os.Getenv("DURACHK_REDIS_URL")
	if raw == "" {
		t.Skip("DURACHK_REDIS_URL is not set: e.g. DURACHK_REDIS_URL=redis://127.0.0.1:6379/0")
	}
	if testing.Short() {
		t.Skip("runs real processes for about 45 s")
	}
	sep := "?"
	if strings.Contains(raw, "?") {
		sep = "&"
	}
	spec, err := targets.Parse(raw + sep + "stream.maxlen=10")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), runnertest.Loaded(6*time.Minute))
	defer cancel()
	target, err := runner.New(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	want := []contracts.Property{contracts.PropLost, contracts.PropMovedByBroker}
	notAgain := "the plan did not raise "
	for seed := uint64(1); seed <= 3; seed++ {
		// The shrink's budget stretches with the load: each candidate is three
		// runs, and beside two busy loops the first took 88 s, past a fixed
		// 40 s budget, so the shrink ended with the plan it began with. At most
		// 100 s, so that a seed fits the package's 10-minute test timeout.
		budget := min(runnertest.Loaded(40*time.Second), 100*time.Second)
		sum, err := explore.Run(ctx, target, explore.Options{Seed: seed, Rounds: 6, Jobs: 120, Want: want,
			Kinds: []faults.Kind{faults.CrashAt, faults.Kill}, Shrink: explore.ShrinkOptions{Tries: 8, Time: budget, Replay: 3}})
		if err != nil {
			t.Fatal(err)
		}
		if sum.Finding == nil {
			t.Fatalf("seed %d: nothing trimmed found in %d rounds: violations %v", seed, sum.Rounds, sum.Violations)
		}
		sh := sum.Shrunk
		if sh == nil {
			t.Fatalf("seed %d: not shrunk", seed)
		}
		if strings.HasPrefix(sh.Stopped, notAgain) {
			t.Logf("seed %d: %s; the next seed", seed, sh.Stopped)
			continue
		}
		if sh.Result.Verdict != contracts.Violated {
			t.Fatalf("seed %d: the shrunk plan's run: %s %s", seed, sh.Result.Verdict, sh.Result.Reason)
		}
		jobs, faults := sh.Plan.Size()
		if jobs >= sh.FromJobs && faults >= sh.FromFaults {
			t.Errorf("seed %d: shrunk plan no smaller: %d jobs, %d faults from %d, %d (%s)", seed, jobs, faults, sh.FromJobs, sh.FromFaults, sh.Stopped)
		}
		if !raises(sh.Result, sum.Finding.Property) {
			t.Errorf("seed %d: the shrunk plan's run: %s %s; want %s", seed, sh.Result.Verdict, sh.Result.Reason, sum.Finding.Property)
		}
		if rp := sh.Replay; sh.K != 3 || sh.N != 3 || rp.Runs != 3 || rp.Deterministic || rp.Reproduced+rp.NotAtRisk+rp.Other != rp.Runs ||
			!strings.HasPrefix(rp.String(), fmt.Sprintf("reproduces %d of 3 on redis ", rp.Reproduced)) {
			t.Errorf("seed %d: candidates %d of %d, replay %+v (%s)", seed, sh.K, sh.N, rp, rp)
		}
		t.Logf("seed %d: round %d raised %s (%s); shrunk from %d jobs, %d faults to %d, %d in %d candidates (%s); %s", seed, sum.Finding.Round,
			sum.Finding.Property, sum.Finding.Result.Reason, sh.FromJobs, sh.FromFaults, jobs, faults, sh.Candidates, sh.Wall.Round(time.Second), sh.Replay)
		return
	}
	t.Fatalf("in 3 seeds no finding's plan raised its property again in 3 of 3 runs")
}
