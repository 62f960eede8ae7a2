package contracts

import (
	"context"
	"os"
	"testing"

	"github.com/durachk/durachk/checker"
)

func TestZZShow(t *testing.T) {
	c, _ := LookupScenario("replies-lost-30pct")
	r, _ := Evaluate(context.Background(), MemTarget{}, c, Options{Seed: 1})
	for _, v := range r.Violations[:1] {
		checker.WriteText(os.Stdout, v, "")
	}
}
