package mem_test

import (
	"testing"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/adapters/mem"
	"github.com/durachk/durachk/adapters/queuetest"
)

// TestConformance holds the reference broker to the port's conformance suite on
// the wall clock, with no deviation declared: the catalogue's expectations are
// the reference semantics.
func TestConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T, o queuetest.Options) adapters.Queue {
		q := mem.New(mem.Options{DeliveryLimit: o.DeliveryLimit, FIFO: o.FIFO})
		t.Cleanup(func() { _ = q.Close() })
		return q
	}, queuetest.Features{Parallel: true})
}
