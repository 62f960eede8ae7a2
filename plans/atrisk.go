package plans

import (
	"fmt"
	"slices"
	"strings"

	"github.com/durachk/durachk/contracts"
)

// Risk is what a plan's claim needs at risk in a run: at least Min of the
// measure named What. A run of the plan that put less at risk proved
// nothing about the claim: it is unknown with the reason, never a pass.
type Risk struct {
	What string `yaml:"what" json:"what"`
	Min  int    `yaml:"min" json:"min"`
}

// Measure counts one thing a run can put at risk, from the checker's stats.
type Measure struct {
	// Name is what a plan's at_risk calls it.
	Name string
	// Text says what it counts, as a reason reads it.
	Text string
	// Count reads it from the stats of a run.
	Count func(contracts.Stats) int
	// For are the properties whose violation needs it: a plan shrunk from a
	// finding of one of them carries it (see RisksFor).
	For []contracts.Property
}

// Measures is the registry of what a plan can require at risk (docs/plans.md
// lists it). A new one is a row here, counted from a field of checker.Stats:
// the cluster contracts' counters (the pinned client's operations during a
// partition, the acknowledged enqueues the killed primary held) plug in as
// rows naming the properties they explain.
var Measures = []Measure{
	{Name: "acked_unfinished_at_broker_fault",
		Text:  "jobs the broker had acknowledged and that were unfinished when it was killed or lost power",
		Count: func(s contracts.Stats) int { return s.AtRisk },
		For:   []contracts.Property{contracts.PropLost}},
	// Of those, the ones a live worker could not finish by itself: a replay of
	// a shrunk power loss whose one job was leased just before the cut passed
	// with the measure above met.
	{Name: "acked_queued_at_broker_fault",
		Text:  "jobs the broker had acknowledged, unfinished and held by no live worker (only the broker had them), when it was killed or lost power",
		Count: func(s contracts.Stats) int { return s.QueuedAtBrokerFault },
		For:   []contracts.Property{contracts.PropLost}},
	// In the broker's terms: of those at a power cut, the ones its
	// configuration may not have synced yet (younger than its flush
	// interval, as the run's history notes it).
	{Name: "acked_in_flush_window_at_power_loss",
		Text:  "jobs the broker had acknowledged and that were unfinished at a power cut, acknowledged less than its configuration's flush interval before it",
		Count: func(s contracts.Stats) int { return s.AckedInFlushWindow },
		For:   []contracts.Property{contracts.PropLost}},
	{Name: "lease_renewals_tried",
		Text:  "lease renewals a live holder asked for (a job held long enough that the broker could hand it to another worker)",
		Count: func(s contracts.Stats) int { return s.RenewalsTried },
		For:   []contracts.Property{contracts.PropPreempted}},
	{Name: "redeliveries_after_fault",
		Text:  "jobs delivered again after their holder was killed, crashed or paused",
		Count: func(s contracts.Stats) int { return s.Redeliveries["fault"] },
		For: []contracts.Property{contracts.PropDuplicateEffect, contracts.PropDuplicateApply, contracts.PropMultipleTerminal,
			contracts.PropStaleCommit, contracts.PropStaleAck}},
	{Name: "ambiguous_outcomes",
		Text:  "commits and acks whose reply was lost (outcome unknown)",
		Count: func(s contracts.Stats) int { return s.Ambiguous },
		For: []contracts.Property{contracts.PropFailedButApplied, contracts.PropAmbiguousResolved, contracts.PropCommitLost,
			contracts.PropDuplicateEffect, contracts.PropMultipleTerminal}},
}

// LookupMeasure finds a measure of the registry by name.
func LookupMeasure(name string) (Measure, bool) {
	i := slices.IndexFunc(Measures, func(m Measure) bool { return m.Name == name })
	if i < 0 {
		return Measure{}, false
	}
	return Measures[i], true
}

// MeasureNames lists the registry's names, in its order.
func MeasureNames() []string {
	out := make([]string, len(Measures))
	for i, m := range Measures {
		out[i] = m.Name
	}
	return out
}

// NotAtRisk starts the reason of a run that put less at risk than its plan
// needs.
const NotAtRisk = "the run put too little at risk: "

// RisksFor is what a plan whose run raised prop needs at risk: every measure
// of the registry that explains prop and that the run (its stats st) had at
// risk, at least one each. A measure the run had none of is no condition of
// its violation and is left out.
func RisksFor(prop contracts.Property, st contracts.Stats) []Risk {
	var out []Risk
	for _, m := range Measures {
		if slices.Contains(m.For, prop) && m.Count(st) >= 1 {
			out = append(out, Risk{What: m.Name, Min: 1})
		}
	}
	return out
}

// Unmet says what a run with stats st did not put at risk of rs, or "".
func Unmet(rs []Risk, st contracts.Stats) string {
	for _, r := range rs {
		m, ok := LookupMeasure(r.What)
		if !ok {
			return NotAtRisk + fmt.Sprintf("%q is not a measure", r.What) // Parse refuses it
		}
		if n := m.Count(st); n < r.Min {
			return NotAtRisk + fmt.Sprintf("%s %d, need %d (at_risk %s)", m.Text, n, r.Min, r.What)
		}
	}
	return ""
}

// validRisks checks a plan's at_risk: known measures, each once, min ≥ 1.
func validRisks(rs []Risk) error {
	seen := map[string]bool{}
	for i, r := range rs {
		if _, ok := LookupMeasure(r.What); !ok {
			return fmt.Errorf("at_risk[%d]: what %q: want one of %s", i, clip(r.What), strings.Join(MeasureNames(), ", "))
		}
		if r.Min < 1 || r.Min > 1_000_000 {
			return fmt.Errorf("at_risk[%d] (%s): min %d: want 1 to 1000000", i, r.What, r.Min)
		}
		if seen[r.What] {
			return fmt.Errorf("at_risk[%d]: %s given twice", i, r.What)
		}
		seen[r.What] = true
	}
	return nil
}
