package contracts

import (
	"context"
	"testing"
)

func TestSeedsSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("sweep")
	}
	bad := map[string]int{}
	for seed := uint64(1); seed <= 60; seed++ {
		for _, c := range Catalogue {
			r, _ := Evaluate(context.Background(), MemTarget{}, c, Options{Seed: seed})
			if r.Verdict != Pass {
				bad[c.ID]++
				if bad[c.ID] <= 2 {
					t.Logf("seed %d %s %s %s", seed, c.ID, r.Verdict, r.Reason)
					for _, v := range r.Violations[:min(1, len(r.Violations))] {
						for _, w := range v.Witness {
							t.Logf("     %s", w)
						}
					}
				}
			}
			for _, s := range c.Sabotages {
				r, _ := EvaluateSabotage(context.Background(), MemTarget{}, c, s, Options{Seed: seed})
				if r.Verdict != Violated {
					bad[c.ID+"/"+s.Name]++
					if bad[c.ID+"/"+s.Name] <= 2 {
						t.Logf("seed %d sabotage %s %s %s", seed, s.Name, r.Verdict, r.Reason)
					}
				}
			}
		}
	}
	t.Log(bad)
}
