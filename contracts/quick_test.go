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
