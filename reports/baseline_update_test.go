package reports

import (
	"path/filepath"
	"testing"

	"github.com/durachk/durachk/contracts"
)

func TestBaselineUpdated(t *testing.T) {
	bl := Baseline{"mem": {"lease.redelivery": contracts.Violated, "durability.ack": contracts.Pass}}
	got := bl.Updated([]Difference{
		{Target: "mem", Contract: "lease.redelivery", Expected: contracts.Violated, Got: contracts.Pass}, // an improvement
		{Target: "mem", Contract: "durability.ack", Expected: contracts.Pass},                            // not measured: kept
		{Target: "redis", Contract: "order.fifo", Got: contracts.Unknown},                                // unlisted: added
	})
	want := Baseline{"mem": {"lease.redelivery": contracts.Pass, "durability.ack": contracts.Pass}, "redis": {"order.fifo": contracts.Unknown}}
	if !sameJSON(got, want) {
		t.Errorf("Updated = %v, want %v", got, want)
	}
	if bl["mem"]["lease.redelivery"] != contracts.Violated {
		t.Error("Updated changed the baseline it was called on")
	}
	p := filepath.Join(t.TempDir(), "b.json")
	if err := got.Write(p); err != nil {
		t.Fatal(err)
	}
	back, err := ReadBaseline(p)
	if err != nil || !sameJSON(back, want) || IsResultBaseline(p) {
		t.Errorf("written and read back: %v (%v)", back, err)
	}
}
