package contracts

import (
	"context"
	"testing"
)

// Seed scenarios that carry a negative control must catch it, as contracts do.
func TestScenarioSabotagesAreCaught(t *testing.T) {
	for _, c := range SeedScenarios {
		for _, s := range c.Sabotages {
			for seed := uint64(1); seed <= 5; seed++ {
				r, err := EvaluateSabotage(context.Background(), MemTarget{}, c, s, Options{Seed: seed})
				if err != nil {
					t.Fatal(err)
				}
				if r.Verdict != Violated || len(r.Violations) == 0 || len(r.Violations[0].Witness) == 0 {
					t.Errorf("%s/%s seed %d not caught: %s: %s", c.ID, s.Name, seed, r.Verdict, r.Reason)
				}
			}
		}
	}
}
