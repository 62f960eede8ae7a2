package cli

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/durachk/durachk/contracts"
)

// TestTrialSetKeepsWhatTheResultNeeds: trials arriving in any order give
// the result contracts.Aggregate gives of all of them kept whole, while at
// most three (the first violating, the first unknown, the last) keep their
// details and recordings.
func TestTrialSetKeepsWhatTheResultNeeds(t *testing.T) {
	for _, tc := range []struct {
		name     string
		verdicts string // one letter a trial: p(ass), v(iolated), u(nknown)
	}{
		{"all pass", "pppppppp"},
		{"one violation", "pppvpppp"},
		{"violations and unknowns", "puvpuvpp"},
		{"unknown first", "upppppuv"},
		{"one trial", "v"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var whole []contracts.Result
			for i, v := range tc.verdicts {
				r := contracts.Result{Contract: "c", Target: "mem", Seed: uint64(i + 1), Verdict: map[rune]contracts.Verdict{'p': contracts.Pass, 'v': contracts.Violated, 'u': contracts.Unknown}[v],
					Reason: fmt.Sprintf("reason %d", i), HistoryLen: 100 + i}
				r.Trials = []contracts.Trial{{Seed: r.Seed, Verdict: r.Verdict, Reason: r.Reason}}
				whole = append(whole, r)
			}
			want := contracts.Aggregate(whole)
			for seed := uint64(1); seed <= 5; seed++ {
				var s trialSet
				for _, k := range rand.New(rand.NewPCG(seed, 0)).Perm(len(whole)) {
					s.add(k, whole[k], &recorder{})
				}
				if len(s.recs) > 3 {
					t.Errorf("order %d: %d trials kept whole, want at most 3", seed, len(s.recs))
				}
				var runs []contracts.Result
				for k := range len(whole) {
					runs = append(runs, s.runs[k])
				}
				got := contracts.Aggregate(runs)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("order %d: %+v, want %+v", seed, got, want)
				}
			}
		})
	}
}
