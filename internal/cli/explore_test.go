package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/explore"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/internal/targets"
	"github.com/durachk/durachk/plans"
	"github.com/durachk/durachk/reports"
)

// A finding states its reproduction rate in the text it prints, result.json
// (evidence replay, and the reasons), report.html, summary.md and the text
// report; on the embedded target it says the rate is a deterministic one.
// The shrunk plan carries no at_risk here: outbox_orphan has no measure.
func TestExploreStatesReproductionRate(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := Explore(context.Background(), ExploreOptions{Target: "mem", Seed: 1, Rounds: 20, Jobs: 100, Sabotage: "dual-write",
		Properties: []string{"outbox_orphan"}, Shrink: explore.ShrinkOptions{Replay: 4}, Out: dir}, &stdout, &stderr)
	if Code(err) != ExitViolation {
		t.Fatalf("exit %d (%v), want 1:\n%s", Code(err), err, stderr.String())
	}
	const rate = "reproduces 4 of 4 on mem"
	const det = "(a deterministic target: every run of one seed is the same)"
	if !strings.Contains(stdout.String(), "  "+rate) || !strings.Contains(stdout.String(), det) {
		t.Errorf("stdout lacks the rate:\n%s", stdout.String())
	}
	doc, err := reports.ReadJSON(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	ev := doc.EvidenceFor("mem", "explore/shrunk")
	if rp := ev.Replay; rp == nil || rp.Runs != 4 || rp.Reproduced != 4 || !rp.Deterministic || rp.Property != "outbox_orphan" || !strings.HasPrefix(rp.Text, rate) {
		t.Errorf("evidence replay %+v", ev.Replay)
	}
	for _, r := range doc.Results {
		if !strings.Contains(r.Reason, rate) {
			t.Errorf("%s: reason lacks the rate: %s", r.Contract, r.Reason)
		}
	}
	for file, want := range map[string]string{"report.html": "<b>Reproduction:</b> " + rate, "summary.md": "**Reproduction:** " + rate} {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %q", file, want)
		}
	}
	var text bytes.Buffer
	if err := Report(filepath.Join(dir, "result.json"), "text", "", &text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "explore/shrunk: violation: "+rate) {
		t.Errorf("the text report lacks the rate:\n%s", text.String())
	}
	// A replay whose counts do not add up is refused.
	doc.Evidence[reports.Key("mem", "explore/shrunk")].Replay.Other = 1
	if err := doc.Validate(); err == nil || !strings.Contains(err.Error(), "replay of 4 runs") {
		t.Errorf("validate: %v", err)
	}
}

// `durachk run --plan F --trials N` states the rate of the trials: the
// shrunk plan of the dual write replayed over ten successive seeds (the
// seed picks which replies are lost) reads "violation in k of 10 trials",
// k the trials result.json records as violations.
func TestRunPlanTrialsRate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "shrunk.yaml")
	plan := `format: durachk.plan/v1
seed: 1000006
workers: 1
sabotage: dual-write
jobs:
  - id: j0000
    tenant: acme
    doc: doc-0000
  - id: j0001
    tenant: globex
    doc: doc-0000
faults:
  - kind: reply_loss
    link: store
    for: 70ms
    rate: 0.36
`
	if err := os.WriteFile(path, []byte(plan), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	stdout, _, err := runCLI(t, RunOptions{Plans: []string{path}, Trials: 10, Out: out})
	doc, rerr := reports.ReadJSON(filepath.Join(out, "result.json"))
	if rerr != nil {
		t.Fatal(rerr)
	}
	r := doc.Results[0]
	k := 0
	for i, tr := range r.Trials {
		if tr.Seed != 1000006+uint64(i) {
			t.Errorf("trial %d seed %d, want %d", i, tr.Seed, 1000006+i)
		}
		if tr.Verdict == contracts.Violated {
			k++
		}
	}
	if len(r.Trials) != 10 || k == 0 || Code(err) != ExitViolation {
		t.Fatalf("%d trials, %d violations, exit %d; want 10 trials, some violations, exit 1", len(r.Trials), k, Code(err))
	}
	note := fmt.Sprintf("violation in %d of 10 trials", k)
	// The table names the property and count, and the trials' rate.
	cell := fmt.Sprintf(`outbox_orphan ×\d+ \(%d of 10 trials\)`, k)
	if !regexp.MustCompile(`(?m)^mem +plan/shrunk +`+cell+` `).MatchString(stdout) || !strings.Contains(r.Reason, note+" (seed ") {
		t.Errorf("table or reason lacks %q:\n%s\nreason: %s", note, stdout, r.Reason)
	}
}

// A plan run that puts less at risk than its at_risk needs is unknown with
// the reason (exit 2), on every seed it tries; the trials' note counts the
// unknown ones beside a violation.
func TestRunPlanNotAtRisk(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "late-cut.yaml")
	plan := `format: durachk.plan/v1
seed: 5
workers: 1
at_risk:
  - what: acked_unfinished_at_broker_fault
    min: 1
jobs:
  - id: a
faults:
  - kind: power_loss
    at: 10s
    for: 1s
`
	if err := os.WriteFile(path, []byte(plan), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	_, _, err := runCLI(t, RunOptions{Plans: []string{path}, Out: out})
	if Code(err) != ExitUnknown {
		t.Fatalf("exit %d (%v), want 2", Code(err), err)
	}
	doc, err := reports.ReadJSON(filepath.Join(out, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	r := doc.Results[0]
	if r.Verdict != contracts.Unknown || !strings.Contains(r.Reason, plans.NotAtRisk) || len(r.Trials) != 1 || len(r.Trials[0].SeedsTried) != contracts.DefaultTries {
		t.Errorf("%s (%s), trials %+v; want unknown, too little at risk on each of %d seeds", r.Verdict, r.Reason, r.Trials, contracts.DefaultTries)
	}
	mixed := contracts.Result{Verdict: contracts.Violated, Trials: []contracts.Trial{
		{Verdict: contracts.Violated}, {Verdict: contracts.Unknown}, {Verdict: contracts.Pass}, {Verdict: contracts.Violated}}}
	if n := reports.TrialsNote(mixed); n != "violation in 2 of 4 trials, unknown in 1" {
		t.Errorf("note %q", n)
	}
}

// The fault kinds a target's kind supports and this machine cannot apply:
// Redis's broker faults where redis-server is not on PATH (a private
// instance cannot start); none where a broker's faults need no private
// instance of durachk's (control commands) or on the embedded target.
func TestLackingFaultKinds(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	why := map[faults.Kind]string{faults.BrokerCrash: "cannot kill", faults.PowerLoss: "cannot cut", faults.NodeKill: "not replicated"}
	spec, err := targets.Parse("redis://127.0.0.1:6379/0")
	if err != nil {
		t.Fatal(err)
	}
	lack := lacking(&target{parsed: spec}, why)
	if len(lack) != 2 || !strings.Contains(lack[faults.BrokerCrash], "redis-server not found") || lack[faults.PowerLoss] != lack[faults.BrokerCrash] {
		t.Errorf("redis without redis-server: lacking %v, want broker_crash and power_loss for the missing binary", lack)
	}
	if got := lackList(lack); got != "broker_crash, power_loss" {
		t.Errorf("lackList %q", got)
	}
	ctl, err := targets.Parse("redis://127.0.0.1:6379/0?control.kill=true&control.start=true")
	if err != nil {
		t.Fatal(err)
	}
	if lack := lacking(&target{parsed: ctl}, why); len(lack) != 0 {
		t.Errorf("redis under control commands: lacking %v, want none", lack)
	}
	if lack := lacking(&target{}, why); len(lack) != 0 {
		t.Errorf("the embedded target: lacking %v, want none", lack)
	}
}
