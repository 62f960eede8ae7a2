package contracts

import (
	"context"
	"testing"
)

func TestQuickCatalogue(t *testing.T) {
	for _, c := range Catalogue {
		r, err := Evaluate(context.Background(), MemTarget{}, c, Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%-22s %-9s %s | hist=%d stats=%+v", c.ID, r.Verdict, r.Reason, r.HistoryLen, r.Stats.Faults)
		for _, s := range c.Sabotages {
			r, err := EvaluateSabotage(context.Background(), MemTarget{}, c, s, Options{Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("   sabotage %-20s %-9s %s", s.Name, r.Verdict, r.Reason)
		}
	}
}

func TestQuickScenarios(t *testing.T) {
	for _, c := range SeedScenarios {
		for seed := uint64(1); seed <= 20; seed++ {
			r, err := Evaluate(context.Background(), MemTarget{}, c, Options{Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			if r.Verdict != Pass || seed == 1 {
				t.Logf("%d %-32s %-9s %s | hist=%d acc=%d applied=%d dead=%d dropped=%d", seed, c.ID, r.Verdict, r.Reason, r.HistoryLen, r.Stats.Accepted, r.Stats.Applied, r.Stats.DeadLettered, r.Stats.DroppedRepeats)
			}
		}
	}
}
