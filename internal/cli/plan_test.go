package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/durachk/durachk/reports"
)

// A plan that names a sabotage replays it: the dual write of outbox.atomic,
// written out, raises outbox_orphan from the file; without it the plan passes.
func TestPlanWithSabotage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dual.yaml")
	if err := Plan(PlanOptions{Contract: "outbox.atomic", Seed: 3, Output: path}, nil); err != nil {
		t.Fatal(err)
	}
	clean, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		sabotage, want string
	}{{"", "pass"}, {"dual-write", "violation"}} {
		text := string(clean)
		if tc.sabotage != "" {
			text += "sabotage: " + tc.sabotage + "\n"
		}
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "out-"+tc.want)
		_, _, _ = runCLI(t, RunOptions{Plans: []string{path}, Seed: 1, Out: out})
		doc, err := reports.ReadJSON(filepath.Join(out, "result.json"))
		if err != nil {
			t.Fatal(err)
		}
		r := doc.Results[0]
		if string(r.Verdict) != tc.want || tc.want == "violation" && (len(r.Violations) == 0 || r.Violations[0].Property != "outbox_orphan") {
			t.Errorf("sabotage %q: %s %+v, want %s (outbox_orphan)", tc.sabotage, r.Verdict, r.Violations, tc.want)
		}
	}
}

// `durachk plan` writes a contract out; `durachk run --plan` runs it as
// plan/<file name> with the plan's seed and says how to rerun it.
func TestPlanWrittenOutAndRun(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "zombie.yaml")
	if err := Plan(PlanOptions{Contract: "fencing.zombie", Seed: 3, Output: path}, nil); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	if err := Plan(PlanOptions{Scenario: "poison-job", Seed: 2, Jobs: 14}, &stdout); err != nil {
		t.Fatal(err)
	}
	if s := stdout.String(); !strings.HasPrefix(s, "format: durachk.plan/v1\n") || !strings.Contains(s, "kind: poison") || !strings.Contains(s, "seed: 2") {
		t.Errorf("plan on stdout:\n%s", s)
	}
	out := filepath.Join(dir, "out")
	_, _, err := runCLI(t, RunOptions{Plans: []string{path}, Seed: 1, Trials: 2, Out: out})
	if err != nil {
		t.Fatalf("run --plan: %v", err)
	}
	doc, err := reports.ReadJSON(filepath.Join(out, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Results) != 1 {
		t.Fatalf("%d results, want the plan's only", len(doc.Results))
	}
	r := doc.Results[0]
	if r.Contract != "plan/zombie" || r.Verdict != "pass" || len(r.Trials) != 2 || r.Trials[0].Seed != 3 || r.Trials[1].Seed != 4 {
		t.Errorf("result %s %s trials %+v; want plan/zombie pass with the plan's seed 3, then 4", r.Contract, r.Verdict, r.Trials)
	}
	if doc.Seed != 3 {
		t.Errorf("document seed %d, want the plan's", doc.Seed)
	}
	ev := doc.EvidenceFor("mem", "plan/zombie")
	if !strings.Contains(ev.Reproduce, "--plan "+path) {
		t.Errorf("reproduce %q does not name the plan", ev.Reproduce)
	}
	if _, err := os.Stat(filepath.Join(out, "report.html")); err != nil {
		t.Error(err)
	}
}
