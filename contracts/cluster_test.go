package contracts

import (
	"context"
	"testing"
)

// notOnMem reports whether c needs a replicated topology, which the embedded
// target is not; it then checks that c is skipped there with its reason.
func notOnMem(t *testing.T, c *Contract) bool {
	t.Helper()
	if c.Needs == nil || c.Needs(MemTarget{}.Capabilities()) == "" {
		return false
	}
	r, err := Evaluate(context.Background(), MemTarget{}, c, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != Skipped || r.Reason == "" {
		t.Errorf("%s on the embedded target: %s (%s), want skipped with the reason", c.ID, r.Verdict, r.Reason)
	}
	return true
}
