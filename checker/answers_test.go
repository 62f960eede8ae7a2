package checker

import (
	"slices"
	"strings"
	"testing"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/history"
)

// The merge of two answers, in either order, for every pair: false wins,
// then unknown, and not_checked counts as true. `durachk check` exits with
// the merged verdict (internal/cli's TestCheckExitFollowsTheMerge).
func TestMergeEveryPair(t *testing.T) {
	all := []Validity{Valid, Invalid, Unknown, NotChecked}
	for _, a := range all {
		for _, b := range all {
			want := Valid
			switch {
			case a == Invalid || b == Invalid:
				want = Invalid
			case a == Unknown || b == Unknown:
				want = Unknown
			}
			if got := mergeAnswers(a, b); got != want {
				t.Errorf("merge(%s, %s) = %s, want %s", a, b, got, want)
			}
			// Through Finish's path: two properties' answers in a result.
			as := map[Property]Answer{Lost: {Valid: a}, CircuitOnHealthy: {Valid: b}}
			if got := merge(as); got != want {
				t.Errorf("merge of lost %s and %s %s = %s, want %s", a, CircuitOnHealthy, b, got, want)
			}
			as = map[Property]Answer{Lost: {Valid: b}, CircuitOnHealthy: {Valid: a}}
			if got := merge(as); got != want {
				t.Errorf("merge of lost %s and %s %s = %s, want %s", b, CircuitOnHealthy, a, got, want)
			}
		}
	}
	if got := mergeAnswers(); got != Valid {
		t.Errorf("merge of no answers = %s, want %s", got, Valid)
	}
}

// Each property's answer when it cannot be decided or is not claimed, and the
// merged verdict of a whole result.
func TestAnswers(t *testing.T) {
	clean := newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", keyA, 1).apply("a", keyA, "applied")
	healthyOpen := newHist().rec(history.Op{Process: "relay", Type: history.Info, F: history.Circuit, Value: "open"})
	queued := func() *hist {
		return newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).enqueue("b", keyB, meta("acme", "doc-b", 3)).finish("w1", "a", keyA, 1).apply("a", keyA, "applied")
	}
	stillQueued := committed("a", keyA, "acme")
	stillQueued.Broker.Queued = []string{"b"}
	lostBeside := newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).enqueue("b", keyB, meta("acme", "doc-b", 3))
	type answer struct {
		p      Property
		valid  Validity
		reason string
	}
	for _, tt := range []struct {
		name  string
		ops   *hist
		final Final
		opts  Options
		want  []answer
		valid Validity
	}{
		{"every property holds; unclaimed ones are not checked", clean, committed("a", keyA, "acme"), Options{RelayRan: true},
			[]answer{{Lost, Valid, ""}, {OrderInversion, NotChecked, "does not claim FIFO"}, {StaleAck, NotChecked, "fenced acks"},
				{Preempted, Valid, ""}, {EventNotApplied, Valid, ""}}, Valid},
		{"claimed, they are checked", clean, committed("a", keyA, "acme"), Options{RelayRan: true, FIFO: true, FencedAck: true},
			[]answer{{OrderInversion, Valid, ""}, {StaleAck, Valid, ""}}, Valid},
		{"approximate leases, no relay", clean, committed("a", keyA, "acme"), Options{ApproximateLeases: true},
			[]answer{{Preempted, NotChecked, "approximate"}, {EventNotApplied, NotChecked, "no relay ran"}}, Valid},
		{"no final state: what rests on it is unknown", clean, Final{}, Options{HistoryOnly: true},
			[]answer{{Lost, Unknown, "no final state"}, {CommitLost, Unknown, "no final state"}, {DuplicateEffect, Valid, ""}}, Unknown},
		{"no final state and a violation: false beats unknown", healthyOpen, Final{}, Options{HistoryOnly: true},
			[]answer{{CircuitOnHealthy, Invalid, ""}, {Lost, Unknown, "no final state"}}, Invalid},
		{"a job still in the broker: lost and moved_by_broker unknown", queued(), stillQueued, Options{RelayRan: true},
			[]answer{{Lost, Unknown, "still in the broker"}, {MovedByBroker, Unknown, "still in the broker"}, {DuplicateEffect, Valid, ""}}, Unknown},
		{"a job still in the broker and a violation: false", queued().rec(history.Op{Process: "relay", Type: history.Info, F: history.Circuit, Value: "open"}), stillQueued, Options{RelayRan: true},
			[]answer{{CircuitOnHealthy, Invalid, ""}, {Lost, Unknown, "still in the broker"}}, Invalid},
		{"a lost job beside one still queued: lost is false", lostBeside, Final{Drained: true, Broker: adapters.Inventory{Queued: []string{"b"}}}, Options{},
			[]answer{{Lost, Invalid, ""}, {MovedByBroker, Unknown, "still in the broker"}}, Invalid},
		{"an event not applied in a run that did not drain: unknown, not false", newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", keyA, 1),
			func() Final { f := committed("a", keyA, "acme"); f.Drained = false; f.Store.Applied = nil; return f }(), Options{RelayRan: true},
			[]answer{{EventNotApplied, Unknown, "did not drain"}}, Unknown},
		{"a run that did not drain: event_not_applied unknown", clean, func() Final { f := committed("a", keyA, "acme"); f.Drained = false; return f }(), Options{RelayRan: true},
			[]answer{{EventNotApplied, Unknown, "did not drain"}, {Lost, Valid, ""}}, Unknown},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := Check(tt.ops.ops, tt.final, tt.opts)
			for _, w := range tt.want {
				a := r.Properties[w.p]
				if a.Valid != w.valid || !strings.Contains(a.Reason, w.reason) || (w.valid == Invalid) != (a.Count > 0) {
					t.Errorf("%s: %+v, want %s (%q)", w.p, a, w.valid, w.reason)
				}
			}
			if r.Valid != tt.valid {
				t.Errorf("result %s, want %s (violations %v, undecided %v)", r.Valid, tt.valid, properties(r.Violations), r.Undecided)
			}
		})
	}
}

// A witness proves only its own property: relabelled as another property,
// ReplayWitness refuses it, naming what it raises. Every hand-written
// violation, as every property it does not raise.
func TestReplayWitnessRejectsAnotherProperty(t *testing.T) {
	tried := 0
	for _, tt := range cases() {
		if tt.want == "" {
			continue
		}
		for _, v := range Check(tt.ops.ops, tt.final, tt.opts).Violations {
			raised := properties(Check(v.Witness, FinalFromFacts(v.Facts), tt.opts).Violations)
			for _, s := range Properties {
				if slices.Contains(raised, s.Name) {
					continue
				}
				w := v
				w.Property = s.Name
				err := ReplayWitness(w, tt.opts)
				tried++
				if err == nil {
					t.Errorf("%s: the witness of %s (raising %v) accepted as proof of %s", tt.name, v.Property, raised, s.Name)
					continue
				}
				if !strings.Contains(err.Error(), "not "+string(s.Name)) || (len(raised) > 0 && !strings.Contains(err.Error(), string(raised[0]))) {
					t.Errorf("%s: %v: want it to name %v and %s", tt.name, err, raised, s.Name)
				}
			}
		}
	}
	if tried == 0 {
		t.Fatal("no witness replayed")
	}
	// A witness that raises nothing proves nothing.
	if err := ReplayWitness(Violation{Property: Lost, Witness: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", keyA, 1).ops,
		Facts: []Fact{resultFact(committed("a", keyA, "acme").Store.Results[0])}}, Options{}); err == nil {
		t.Error("a witness that raises nothing was accepted as proof of lost")
	}
}
