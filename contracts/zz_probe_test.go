package contracts

import (
	"context"
	"fmt"
	"sort"
	"testing"
)

func TestZZProbe(t *testing.T) {
	all := append(append([]*Contract(nil), Catalogue...), SeedScenarios...)
	for _, c := range all {
		for _, s := range c.Sabotages {
			agg := map[string]int{}
			miss := 0
			for seed := uint64(1); seed <= 10; seed++ {
				r, _ := EvaluateSabotage(context.Background(), MemTarget{}, c, s, Options{Seed: seed})
				for p := range r.Stats.Violations {
					agg[p]++
				}
				if ok, why := Caught(r, s); !ok {
					miss++
					t.Logf("  seed %d MISS %s", seed, why)
				}
			}
			var ks []string
			for k, v := range agg {
				ks = append(ks, fmt.Sprintf("%s:%d", k, v))
			}
			sort.Strings(ks)
			t.Logf("%s/%s miss=%d %v", c.ID, s.Name, miss, ks)
		}
		agg := map[string]int{}
		for seed := uint64(1); seed <= 10; seed++ {
			r, _ := Evaluate(context.Background(), MemTarget{}, c, Options{Seed: seed})
			agg[string(r.Verdict)]++
			if r.Verdict != Pass {
				t.Logf("  REF seed %d %s %s", seed, r.Verdict, r.Reason)
			}
		}
		t.Logf("REF %s %v", c.ID, agg)
	}
}
