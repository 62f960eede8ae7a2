package contracts

import (
	"strings"
	"testing"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/pipeline"
)

func TestUnfinishedJobIsUnknownWhileTheBrokerHoldsUnnamedMessages(t *testing.T) {
	meta := `{"tenant":"acme","doc":"d","v":1,"max":3,"hash":"h"}`
	ops := []history.Op{
		{T: 1, Process: "producer", Type: history.Invoke, F: history.Enqueue, Job: "j1", Key: "acme:d:v1", Value: meta},
		{T: 2, Process: "producer", Type: history.OK, F: history.Enqueue, Job: "j1", Key: "acme:d:v1"},
	}
	tests := []struct {
		name    string
		unnamed int
		want    string // property, or "unknown"
	}{
		{"broker holds unnamed messages", 1, "unknown"},
		{"broker empty", 0, string(PropLost)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs, _, undecided := Check(ops, Final{Store: pipeline.State{}, Broker: adapters.Inventory{Unnamed: tt.unnamed}}, CheckOptions{})
			got := "none"
			switch {
			case len(vs) > 0:
				got = string(vs[0].Property)
			case len(undecided) > 0 && strings.Contains(undecided[0], "cannot name"):
				got = "unknown"
			}
			if got != tt.want {
				t.Fatalf("got %s (violations %v, undecided %v), want %s", got, vs, undecided, tt.want)
			}
		})
	}
}
