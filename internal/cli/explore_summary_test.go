package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/explore"
	"github.com/durachk/durachk/plans"
)

// The summary: a round that raised preempted ×86 and
// healthy_dead_lettered ×9, the latter reported first by the checker. The
// line names preempted with its own count and message, and the other
// property after it with its count, never with preempted's name.
func TestExploreSummaryRightPerProperty(t *testing.T) {
	r := contracts.Result{Verdict: contracts.Violated,
		Reason: "healthy_dead_lettered ×9, preempted ×86: dead-lettered (max_attempts_exceeded) although it never failed",
		Violations: []contracts.Violation{
			{Property: contracts.PropHealthyDead, Job: "j1", Message: "dead-lettered (max_attempts_exceeded) although it never failed"},
			{Property: contracts.PropPreempted, Job: "j2", Message: "w2 leased j2 while w1 still held it"},
		},
		Stats: contracts.Stats{Violations: map[string]int{"healthy_dead_lettered": 9, "preempted": 86}}}
	s := &explore.Summary{Rounds: 3, Verdicts: map[contracts.Verdict]int{contracts.Violated: 1},
		Finding: &explore.Finding{Round: 2, Plan: &plans.Plan{Seed: 1000002}, Result: r, Property: contracts.PropPreempted}}
	var b bytes.Buffer
	printExplore(&b, ExploreOptions{Out: "ex"}, s, nil)
	line := ""
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, "violation:") {
			line = l
		}
	}
	want := "violation: round 2 (seed 1000002) raised preempted ×86: w2 leased j2 while w1 still held it; also healthy_dead_lettered ×9"
	if line != want {
		t.Errorf("summary line\n  %s\nwant\n  %s", line, want)
	}
	if got := raisedText(contracts.PropHealthyDead, r); got != "healthy_dead_lettered ×9: dead-lettered (max_attempts_exceeded) although it never failed; also preempted ×86" {
		t.Errorf("raised healthy_dead_lettered: %s", got)
	}
	one := contracts.Result{Violations: r.Violations[1:], Stats: contracts.Stats{Violations: map[string]int{"preempted": 2}}}
	if got := raisedText(contracts.PropPreempted, one); got != "preempted ×2: w2 leased j2 while w1 still held it" {
		t.Errorf("one property: %s", got)
	}
}
