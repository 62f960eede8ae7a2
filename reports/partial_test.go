package reports

import (
	"testing"

	"github.com/durachk/durachk/contracts"
)

// The note of a contract's trials counts the trials of each verdict and,
// when a trial set seeds aside (its run did not exercise the claim or put
// too little at risk, and it tried the next seed), every run: ten violating
// trials that took eighteen runs are not a rate of ten in ten runs.
func TestTrialsNote(t *testing.T) {
	v, u, p := contracts.Violated, contracts.Unknown, contracts.Pass
	trials := func(ts ...contracts.Trial) contracts.Result {
		r := contracts.Result{Trials: ts}
		for _, want := range []contracts.Verdict{v, u, p} {
			for _, tr := range ts {
				if tr.Verdict == want && r.Verdict == "" {
					r.Verdict = want
				}
			}
		}
		return r
	}
	for _, c := range []struct {
		r    contracts.Result
		want string
	}{
		{trials(contracts.Trial{Verdict: v}), ""},
		{trials(contracts.Trial{Verdict: v, SeedsTried: []uint64{1, 3}}), ""},
		{trials(contracts.Trial{Verdict: v}, contracts.Trial{Verdict: p}), "violation in 1 of 2 trials"},
		{trials(contracts.Trial{Verdict: v}, contracts.Trial{Verdict: u}, contracts.Trial{Verdict: p}, contracts.Trial{Verdict: v}),
			"violation in 2 of 4 trials, unknown in 1"},
		{trials(contracts.Trial{Verdict: v, SeedsTried: []uint64{1, 3, 5}}, contracts.Trial{Verdict: v}, contracts.Trial{Verdict: v, SeedsTried: []uint64{3, 5}}),
			"violation in 3 of 3 trials (6 runs: 3 seeds did not exercise the claim)"},
		{trials(contracts.Trial{Verdict: v}, contracts.Trial{Verdict: u, SeedsTried: []uint64{2, 4, 6}}),
			"violation in 1 of 2 trials, unknown in 1 (4 runs: 2 seeds did not exercise the claim)"},
		{trials(contracts.Trial{Verdict: p, SeedsTried: []uint64{1, 3}}, contracts.Trial{Verdict: p}),
			"pass in 2 of 2 trials (3 runs: 1 seed did not exercise the claim)"},
		{trials(contracts.Trial{Verdict: p}, contracts.Trial{Verdict: p}), "pass in 2 of 2 trials"},
	} {
		if got := TrialsNote(c.r); got != c.want {
			t.Errorf("%+v: %q, want %q", c.r.Trials, got, c.want)
		}
	}
}
