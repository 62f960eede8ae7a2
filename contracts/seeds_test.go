package contracts

import (
	"context"
	"testing"
)

// Across many seeds the reference pipeline passes every contract and seed
// scenario, and every sabotage is caught by the properties it declares.
func TestSeedsSweep(t *testing.T) {
	seeds := uint64(40)
	if testing.Short() {
		seeds = 8
	}
	cs := append(append([]*Contract(nil), Catalogue...), SeedScenarios...)
	for _, c := range cs {
		t.Run(c.ID, func(t *testing.T) {
			t.Parallel()
			if notOnMem(t, c) {
				return // a replicated topology's contract: cluster_test.go
			}
			bad := 0
			for seed := uint64(1); seed <= seeds; seed++ {
				r, err := Evaluate(context.Background(), MemTarget{}, c, Options{Seed: seed})
				if err != nil {
					t.Fatal(err)
				}
				if r.Verdict != Pass {
					bad++
					if bad <= 3 {
						t.Errorf("reference, seed %d: %s: %s", seed, r.Verdict, r.Reason)
					}
				}
				for _, s := range c.Sabotages {
					r, err := EvaluateSabotage(context.Background(), MemTarget{}, c, s, Options{Seed: seed})
					if err != nil {
						t.Fatal(err)
					}
					if ok, why := Caught(r, s); !ok {
						t.Errorf("sabotage %s, seed %d: %s", s.Name, seed, why)
					}
				}
			}
		})
	}
}
