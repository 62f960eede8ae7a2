package contracts

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// seededTarget is the embedded target with chosen seeds broken: a seed in
// sabotage runs the contract's first sabotage (a violation), one in bare runs
// without the plan's faults (the claim is not exercised), one in down fails
// as an unreachable broker does.
type seededTarget struct {
	MemTarget
	sabotage, bare, down map[uint64]bool
}

func (s seededTarget) Execute(ctx context.Context, run Run) (Execution, error) {
	if s.down[run.Seed] {
		return Execution{}, fmt.Errorf("%w: connection refused", ErrUnavailable)
	}
	if s.sabotage[run.Seed] {
		c, _ := Lookup(run.Contract)
		run.Sabotage = &c.Sabotages[0]
	}
	if s.bare[run.Seed] {
		run.Scenario.Plan.Faults = nil
	}
	ex, err := s.MemTarget.Execute(ctx, run)
	ex.RunID = fmt.Sprintf("run%d", run.Seed)
	return ex, err
}

func seeds(xs ...uint64) map[uint64]bool {
	m := map[uint64]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return m
}

func TestTrials(t *testing.T) {
	c, err := Lookup("fencing.zombie")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		target     seededTarget
		trials     int
		want       Verdict
		wantSeed   uint64     // the seed whose run the result shows
		wantTrials [][]uint64 // seeds tried per trial (one seed: the trial's); nil: no trial list
		wantReason string     // a part of the reason
	}{
		{name: "one run", want: Pass, wantSeed: 1},
		{name: "five passing trials", trials: 5, want: Pass, wantSeed: 5, wantTrials: [][]uint64{{1}, {2}, {3}, {4}, {5}}},
		{name: "a violation in one of five", target: seededTarget{sabotage: seeds(4)}, trials: 5, want: Violated, wantSeed: 4,
			wantTrials: [][]uint64{{1}, {2}, {3}, {4}, {5}}, wantReason: "violation in 1 of 5 trials (seed 4): stale_commit_accepted"},
		{name: "violations in two: the first is shown", target: seededTarget{sabotage: seeds(2, 3)}, trials: 3, want: Violated, wantSeed: 2,
			wantTrials: [][]uint64{{1}, {2}, {3}}, wantReason: "violation in 2 of 3 trials (seed 2, 3)"},
		{name: "a violation wins over an unknown", target: seededTarget{sabotage: seeds(3), bare: seeds(1, 2, 4, 5, 6)}, trials: 2, want: Violated, wantSeed: 3,
			wantTrials: [][]uint64{{1, 3}, {2, 4, 6}}, wantReason: "violation in 1 of 2 trials (seed 3)"},
		{name: "a run that did not exercise the claim tries the next seed", target: seededTarget{bare: seeds(1)}, want: Pass, wantSeed: 2,
			wantTrials: [][]uint64{{1, 2}}, wantReason: "passed on seed 2; seed 1 did not exercise the claim (the run did not exercise the claim: stale commits attempted and rejected 0, need 1)"},
		{name: "three seeds that do not exercise it: unknown", target: seededTarget{bare: seeds(1, 2, 3, 4)}, want: Unknown, wantSeed: 3,
			wantTrials: [][]uint64{{1, 2, 3}}, wantReason: "need 1 on each of 3 seeds (1, 2, 3)"},
		{name: "a trial's next seed is one no other trial takes", target: seededTarget{bare: seeds(2)}, trials: 3, want: Pass, wantSeed: 3,
			wantTrials: [][]uint64{{1}, {2, 5}, {3}}},
		{name: "an unreachable broker is unknown, not an error", target: seededTarget{down: seeds(2)}, trials: 3, want: Unknown, wantSeed: 2,
			wantTrials: [][]uint64{{1}, {2}, {3}}, wantReason: "unknown in 1 of 3 trials (seed 2): target unavailable: connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Evaluate(context.Background(), tt.target, c, Options{Seed: 1, Trials: tt.trials})
			if err != nil {
				t.Fatal(err)
			}
			if r.Verdict != tt.want || r.Seed != tt.wantSeed {
				t.Errorf("verdict %s, seed %d (%s); want %s, seed %d", r.Verdict, r.Seed, r.Reason, tt.want, tt.wantSeed)
			}
			if !strings.Contains(r.Reason, tt.wantReason) {
				t.Errorf("reason %q lacks %q", r.Reason, tt.wantReason)
			}
			var got [][]uint64
			for _, tr := range r.Trials {
				tried := tr.SeedsTried
				if tried == nil {
					tried = []uint64{tr.Seed}
				}
				if tried[len(tried)-1] != tr.Seed {
					t.Errorf("trial with seeds %v says seed %d, want the last", tried, tr.Seed)
				}
				if (tr.Verdict == Violated) != (len(tr.Violations) > 0) {
					t.Errorf("trial seed %d: %s with %d violations", tr.Seed, tr.Verdict, len(tr.Violations))
				}
				got = append(got, tried)
			}
			if !slices.EqualFunc(got, tt.wantTrials, slices.Equal) {
				t.Errorf("trials tried seeds %v, want %v", got, tt.wantTrials)
			}
			if r.Verdict == Violated && len(r.Violations) == 0 {
				t.Errorf("a violation without its violations")
			}
			var runs int
			for _, tr := range got {
				runs += len(tr)
			}
			if runs == 0 {
				runs = 1
			}
			if len(r.RunIDs) != runs-len(tt.target.down) && len(tt.target.down) == 0 {
				t.Errorf("run ids %v: want one per run (%d)", r.RunIDs, runs)
			}
		})
	}
}

// TestTrialsStopAtAnError: an error of the harness (not an unreachable
// broker) ends the evaluation with that error.
func TestTrialsStopAtAnError(t *testing.T) {
	c, _ := Lookup("lease.redelivery")
	boom := errors.New("boom")
	_, err := Evaluate(context.Background(), failing{err: boom}, c, Options{Seed: 1, Trials: 3})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
}

type failing struct {
	MemTarget
	err error
}

func (f failing) Execute(context.Context, Run) (Execution, error) { return Execution{}, f.err }

// TestTrialsConcurrent: trials run concurrently (EvaluateTrial) and combined
// (Aggregate) give what Evaluate gives running them one after the other.
func TestTrialsConcurrent(t *testing.T) {
	c, _ := Lookup("fencing.zombie")
	tg := seededTarget{sabotage: seeds(3), bare: seeds(2)}
	opts := Options{Seed: 1, Trials: 4}
	want, err := Evaluate(context.Background(), tg, c, opts)
	if err != nil {
		t.Fatal(err)
	}
	runs := make([]Result, opts.Trials)
	errs := make(chan error, opts.Trials)
	for k := range runs {
		go func() {
			var err error
			runs[k], err = EvaluateTrial(context.Background(), tg, c, opts, k)
			errs <- err
		}()
	}
	for range runs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	got := Aggregate(runs)
	got.Wall, want.Wall = 0, 0
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("concurrent trials:\n%+v\nwant\n%+v", got, want)
	}
	if got.Verdict != Violated || len(got.Trials) != 4 || got.Trials[1].SeedsTried[1] != 6 {
		t.Errorf("verdict %s, trials %+v: want a violation (seed 3) and trial 2 retried on seed 6", got.Verdict, got.Trials)
	}
}
