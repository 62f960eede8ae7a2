package plans_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/plans"
)

// powerCut is one job and a power cut of the broker, with what the claim
// needs at risk; %s is the job's fields, the cut's time and the at_risk.
func powerCut(job, at, risk string) string {
	return `format: durachk.plan/v1
seed: 3
workers: 1
jobs:
  - id: a
` + job + `faults:
  - kind: power_loss
    at: ` + at + `
    for: 1s
` + risk
}

const needsAcked = "at_risk:\n  - what: acked_unfinished_at_broker_fault\n    min: 1\n"

const needsQueued = "at_risk:\n  - what: acked_queued_at_broker_fault\n    min: 1\n"

// A run of a plan that put nothing at risk is unknown with the reason, never
// a pass: the power cut comes after the only job finished. The same plan
// without at_risk reads pass; with the job still running at the cut it
// passes on the reference pipeline and is a violation when the broker's
// disk ignores fsync (at_risk hides no violation).
func TestAtRiskUnmetIsUnknown(t *testing.T) {
	slow := "    slow: 2s\n"
	cases := []struct {
		name     string
		plan     string
		sabotage string
		verdict  contracts.Verdict
		reason   string // a part of the reason
	}{
		{"nothing at risk at the cut", powerCut("", "10s", needsAcked), "", contracts.Unknown,
			plans.NotAtRisk + "jobs the broker had acknowledged and that were unfinished when it was killed or lost power 0, need 1 (at_risk acked_unfinished_at_broker_fault)"},
		{"the same without at_risk", powerCut("", "10s", ""), "", contracts.Pass, ""},
		{"at risk at the cut", powerCut(slow, "500ms", needsAcked), "", contracts.Pass, ""},
		{"at risk and lost", powerCut(slow, "500ms", needsAcked), "fsync-ignored", contracts.Violated, "lost"},
		{"more at risk than the run had", powerCut(slow, "500ms", strings.Replace(needsAcked, "min: 1", "min: 2", 1)), "",
			contracts.Unknown, "lost power 1, need 2"},
		// The job is at risk but its live worker holds it: the broker was not
		// the only one to have it.
		{"held by a live worker at the cut", powerCut(slow, "500ms", needsQueued), "", contracts.Unknown,
			plans.NotAtRisk + "jobs the broker had acknowledged, unfinished and held by no live worker (only the broker had them), when it was killed or lost power 0, need 1 (at_risk acked_queued_at_broker_fault)"},
		// The one worker holds a, b waits in the broker.
		{"queued at the cut", powerCut(slow+"  - id: b\n    at: 100ms\n", "500ms", needsQueued), "", contracts.Pass, ""},
		{"queued at the cut and lost", powerCut(slow+"  - id: b\n    at: 100ms\n", "500ms", needsQueued), "fsync-ignored", contracts.Violated, "lost"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := plans.Parse([]byte(tc.plan), "x.yaml")
			if err != nil {
				t.Fatal(err)
			}
			c, err := p.AsContract("plan/x")
			if err != nil {
				t.Fatal(err)
			}
			opts := contracts.Options{Seed: p.Seed, Tries: 1}
			var r contracts.Result
			if tc.sabotage != "" {
				s, err := plans.LookupSabotage(tc.sabotage)
				if err != nil {
					t.Fatal(err)
				}
				r, err = contracts.EvaluateSabotage(context.Background(), contracts.MemTarget{}, c, *s, opts)
				if err != nil {
					t.Fatal(err)
				}
			} else if r, err = contracts.Evaluate(context.Background(), contracts.MemTarget{}, c, opts); err != nil {
				t.Fatal(err)
			}
			if r.Verdict != tc.verdict || !strings.Contains(r.Reason, tc.reason) {
				t.Errorf("%s (%s), want %s with %q; at risk %d", r.Verdict, r.Reason, tc.verdict, tc.reason, r.Stats.AtRisk)
			}
		})
	}
}

// A plan of a catalogue contract keeps the contract's exercise check, first:
// durability.power-loss's plan without its power cut is unknown for the
// contract's reason, not for the plan's at_risk.
func TestAtRiskAfterContractExercise(t *testing.T) {
	c, err := contracts.Lookup("durability.power-loss")
	if err != nil {
		t.Fatal(err)
	}
	p, err := plans.FromContract(c, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	p.Faults = nil
	p.AtRisk = []plans.Risk{{What: "acked_unfinished_at_broker_fault", Min: 1}}
	pc, err := p.AsContract("plan/x")
	if err != nil {
		t.Fatal(err)
	}
	r, err := contracts.Evaluate(context.Background(), contracts.MemTarget{}, pc, contracts.Options{Seed: 1, Tries: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != contracts.Unknown || !strings.Contains(r.Reason, "power losses 0, need 1") {
		t.Errorf("%s (%s), want unknown for the contract's own exercise check", r.Verdict, r.Reason)
	}
}

func TestAtRiskParse(t *testing.T) {
	for _, tc := range []struct{ name, risk, want string }{
		{"unknown measure", "at_risk:\n  - what: luck\n    min: 1\n", `at_risk[0]: what "luck": want one of acked_unfinished_at_broker_fault`},
		{"min 0", "at_risk:\n  - what: lease_renewals_tried\n    min: 0\n", "at_risk[0] (lease_renewals_tried): min 0: want 1 to 1000000"},
		{"no min", "at_risk:\n  - what: lease_renewals_tried\n", "min 0"},
		{"twice", "at_risk:\n  - what: lease_renewals_tried\n    min: 1\n  - what: lease_renewals_tried\n    min: 2\n", "at_risk[1]: lease_renewals_tried given twice"},
		{"unknown field", "at_risk:\n  - what: lease_renewals_tried\n    min: 1\n    max: 2\n", "field max not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := plans.Parse([]byte(minimal+tc.risk), "x.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %v, want one line naming %q", err, tc.want)
			}
		})
	}
	p, err := plans.Parse([]byte(minimal+needsAcked), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := p.Marshal(false)
	if !strings.Contains(string(b), "at_risk:\n  - what: acked_unfinished_at_broker_fault\n    min: 1\n") {
		t.Errorf("written back:\n%s", b)
	}
}

// RisksFor takes, of the measures that explain the property, those the
// violating run had; every measure of the registry counts something.
func TestRisksFor(t *testing.T) {
	st := contracts.Stats{AtRisk: 3, RenewalsTried: 0, Redeliveries: map[string]int{"fault": 2}}
	if got := plans.RisksFor(contracts.PropLost, st); !slices.Equal(got, []plans.Risk{{What: "acked_unfinished_at_broker_fault", Min: 1}}) {
		t.Errorf("lost: %v", got)
	}
	st.QueuedAtBrokerFault = 1
	if got := plans.RisksFor(contracts.PropLost, st); !slices.Equal(got, []plans.Risk{{What: "acked_unfinished_at_broker_fault", Min: 1},
		{What: "acked_queued_at_broker_fault", Min: 1}}) {
		t.Errorf("lost, a job queued at the fault: %v", got)
	}
	if got := plans.RisksFor(contracts.PropPreempted, st); len(got) != 0 {
		t.Errorf("preempted without renewals: %v, want none", got)
	}
	if got := plans.RisksFor(contracts.PropDuplicateEffect, st); !slices.Equal(got, []plans.Risk{{What: "redeliveries_after_fault", Min: 1}}) {
		t.Errorf("duplicate_effect: %v", got)
	}
	for _, m := range plans.Measures {
		if m.Name == "" || m.Text == "" || m.Count == nil || len(m.For) == 0 {
			t.Errorf("measure %+v incomplete", m.Name)
		}
	}
}

// docs/plans.md lists every measure of the registry.
func TestMeasuresDocumented(t *testing.T) {
	b, err := os.ReadFile("../docs/plans.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range plans.Measures {
		if !strings.Contains(string(b), "| `"+m.Name+"` |") {
			t.Errorf("docs/plans.md does not list the measure %s", m.Name)
		}
	}
}

// lease_renewals_tried counts the renewals a holder asked for: a job slower
// than a third of its lease puts its lease at risk, a quick one does not,
// and its plan's run is unknown.
func TestAtRiskLeaseRenewals(t *testing.T) {
	for _, tc := range []struct {
		job     string
		verdict contracts.Verdict
	}{{"    slow: 5s\n", contracts.Pass}, {"", contracts.Unknown}} {
		plan := "format: durachk.plan/v1\nseed: 1\nworkers: 2\nat_risk:\n  - what: lease_renewals_tried\n    min: 1\njobs:\n  - id: a\n" + tc.job
		p, err := plans.Parse([]byte(plan), "x.yaml")
		if err != nil {
			t.Fatal(err)
		}
		c, _ := p.AsContract("plan/x")
		r, err := contracts.Evaluate(context.Background(), contracts.MemTarget{}, c, contracts.Options{Seed: 1, Tries: 1})
		if err != nil {
			t.Fatal(err)
		}
		if r.Verdict != tc.verdict || tc.verdict == contracts.Pass && r.Stats.RenewalsTried < 1 {
			t.Errorf("job %q: %s (%s), renewals tried %d; want %s", tc.job, r.Verdict, r.Reason, r.Stats.RenewalsTried, tc.verdict)
		}
	}
}
