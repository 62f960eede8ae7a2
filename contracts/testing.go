package contracts

import (
	"context"
	"testing"
)

// Test runs the catalogue (or the contracts named) against the target that
// factory builds, one subtest per contract, from go test:
//
//	func TestMyBroker(t *testing.T) { contracts.Test(t, func(t *testing.T) contracts.Target { return myTarget(t) }) }
//
// A violation or an unknown verdict fails the subtest with its witness; a
// contract the target cannot run is skipped with the reason. The factory is
// called once per contract, so each gets a fresh namespace.
func Test(t *testing.T, factory func(t *testing.T) Target, ids ...string) {
	t.Helper()
	TestWith(t, factory, Options{Seed: 1}, ids...)
}

// TestWith is Test with explicit options.
func TestWith(t *testing.T, factory func(t *testing.T) Target, opts Options, ids ...string) {
	t.Helper()
	cs, err := Select(ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		t.Run(c.ID, func(t *testing.T) {
			r, err := Evaluate(context.Background(), factory(t), c, opts)
			if err != nil {
				t.Fatalf("run failed: %v", err)
			}
			switch r.Verdict {
			case Skipped:
				t.Skip(r.Reason)
			case Violated, Unknown:
				t.Errorf("%s on %s: %s: %s", c.ID, r.Target, r.Verdict, r.Reason)
				for _, v := range r.Violations {
					t.Logf("%s: %s", v.Property, v.Message)
					for _, w := range v.Witness {
						t.Logf("    %s", w)
					}
				}
			}
		})
	}
}
