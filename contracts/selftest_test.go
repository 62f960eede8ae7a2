package contracts

import (
	"context"
	"fmt"
	"reflect"
	"testing"
)

// Every sabotage is a negative control: a checker that lets one pass is a defect.
func TestSelfTestSabotagesAreCaught(t *testing.T) {
	for _, c := range Catalogue {
		if len(c.Sabotages) == 0 {
			t.Errorf("%s has no sabotage: its checker cannot be shown to fail", c.ID)
		}
		for _, s := range c.Sabotages {
			t.Run(c.ID+"/"+s.Name, func(t *testing.T) {
				t.Parallel()
				if notOnMem(t, c) {
					return // caught on real clusters and recorded histories: cluster_test.go
				}
				for seed := uint64(1); seed <= 5; seed++ {
					r, err := EvaluateSabotage(context.Background(), MemTarget{}, c, s, Options{Seed: seed})
					if err != nil {
						t.Fatalf("seed %d: %v", seed, err)
					}
					if r.Verdict != Violated {
						t.Errorf("sabotage %q of %s was NOT caught on seed %d: verdict %s (%s)", s.Name, c.ID, seed, r.Verdict, r.Reason)
						continue
					}
					if r.Sabotage != s.Name {
						t.Errorf("seed %d: result names sabotage %q, want %q", seed, r.Sabotage, s.Name)
					}
					witnessed := false
					for _, v := range r.Violations {
						witnessed = witnessed || len(v.Witness) > 0
					}
					if !witnessed {
						t.Errorf("sabotage %q of %s on seed %d: %d violations, none with a witness", s.Name, c.ID, seed, len(r.Violations))
					}
				}
			})
		}
	}
}

// The reference pipeline passes every contract and every seed scenario.
func TestSelfTestReferencePasses(t *testing.T) {
	seeds := uint64(20)
	if testing.Short() {
		seeds = 3
	}
	all := append(append([]*Contract(nil), Catalogue...), SeedScenarios...)
	for _, c := range all {
		t.Run(c.ID, func(t *testing.T) {
			t.Parallel()
			if notOnMem(t, c) {
				return
			}
			for seed := uint64(1); seed <= seeds; seed++ {
				r, err := Evaluate(context.Background(), MemTarget{}, c, Options{Seed: seed})
				if err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				if r.Verdict != Pass {
					t.Errorf("reference pipeline on %s, seed %d: %s: %s", c.ID, seed, r.Verdict, r.Reason)
					for _, v := range r.Violations[:min(3, len(r.Violations))] {
						for _, w := range v.Witness {
							t.Logf("    %s", w)
						}
					}
				}
			}
		})
	}
}

func withoutWall(rs []Result) []Result {
	out := make([]Result, len(rs))
	for i, r := range rs {
		r.Wall = 0
		out[i] = r
	}
	return out
}

func evaluateAll(t *testing.T, seed uint64, sabotaged bool) []Result {
	t.Helper()
	var rs []Result
	for _, c := range append(append([]*Contract(nil), Catalogue...), SeedScenarios...) {
		if !sabotaged {
			r, err := Evaluate(context.Background(), MemTarget{}, c, Options{Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
			continue
		}
		for _, s := range c.Sabotages {
			r, err := EvaluateSabotage(context.Background(), MemTarget{}, c, s, Options{Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
		}
	}
	return withoutWall(rs)
}

// One seed, one result: two runs with seed 7 are identical but for Wall.
func TestDeterminism(t *testing.T) {
	a, b := evaluateAll(t, 7, false), evaluateAll(t, 7, false)
	if len(a) != len(Catalogue)+len(SeedScenarios) {
		t.Fatalf("%d results", len(a))
	}
	for i := range a {
		if !reflect.DeepEqual(a[i], b[i]) {
			t.Errorf("%s: two runs with seed 7 differ:\n%s", a[i].Contract, diffResults(a[i], b[i]))
		}
	}
}

func diffResults(a, b Result) string {
	switch {
	case a.Verdict != b.Verdict:
		return fmt.Sprintf("verdict %s vs %s", a.Verdict, b.Verdict)
	case a.HistoryLen != b.HistoryLen:
		return fmt.Sprintf("history length %d vs %d", a.HistoryLen, b.HistoryLen)
	case !reflect.DeepEqual(a.Stats, b.Stats):
		return fmt.Sprintf("stats\n%+v\n%+v", a.Stats, b.Stats)
	case !reflect.DeepEqual(a.Violations, b.Violations):
		s := fmt.Sprintf("violations (%d vs %d):", len(a.Violations), len(b.Violations))
		for i := range min(len(a.Violations), len(b.Violations)) {
			if !reflect.DeepEqual(a.Violations[i], b.Violations[i]) {
				s += fmt.Sprintf("\n  #%d: %s %s %q\n   vs %s %s %q", i, a.Violations[i].Property, a.Violations[i].Job, a.Violations[i].Message,
					b.Violations[i].Property, b.Violations[i].Job, b.Violations[i].Message)
			}
		}
		return s
	case a.Reason != b.Reason:
		return fmt.Sprintf("reason %q vs %q", a.Reason, b.Reason)
	}
	return fmt.Sprintf("%+v\n%+v", a, b)
}

// A different seed gives a different run (the seed is used at all).
func TestSeedMatters(t *testing.T) {
	c, err := Lookup("lease.redelivery")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := Evaluate(context.Background(), MemTarget{}, c, Options{Seed: 7})
	b, _ := Evaluate(context.Background(), MemTarget{}, c, Options{Seed: 8})
	a.Wall, b.Wall = 0, 0
	a.Seed, b.Seed = 0, 0
	if reflect.DeepEqual(a, b) {
		t.Fatal("seeds 7 and 8 gave identical results")
	}
}
