package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/reports"
)

// --update-baseline: a run that improved on its baseline fails the gate
// until the baseline expects the new verdict; with the flag, the file is
// rewritten to expect it (and the run exits 0), after which the gate passes
// without it. A regression is taken the same way when asked. The flag needs
// a baseline file, and never rewrites a result.json.
func TestUpdateBaseline(t *testing.T) {
	dir := t.TempDir()
	cfg := writeTestFile(t, dir, "durachk.yaml", "seed: 1\ntargets:\n  - name: jobs\n    url: mem\n")
	cfgDL := writeTestFile(t, dir, "durachk-dl.yaml", "seed: 1\ntargets:\n  - name: jobs\n    url: mem\n    delivery_limit: 1\n")
	expected := writeTestFile(t, dir, "expected.json", `{"jobs": {"retry.bounded": "violation", "dlq.reprocess": "pass"}}`)
	o := RunOptions{Config: cfg, Contracts: []string{"retry.bounded", "dlq.reprocess"}, Baseline: expected}

	out, _, err := runCLI(t, o)
	if Code(err) != ExitViolation || !strings.Contains(out, "jobs: retry.bounded violation → pass (improvement") {
		t.Fatalf("an improvement: exit %d\n%s", Code(err), out)
	}
	o.UpdateBaseline = true
	out, _, err = runCLI(t, o)
	if err != nil || !strings.Contains(out, "baseline: updated "+expected) {
		t.Fatalf("--update-baseline: exit %d (%v)\n%s", Code(err), err, out)
	}
	bl, err := reports.ReadBaseline(expected)
	if err != nil || bl["jobs"]["retry.bounded"] != contracts.Pass || bl["jobs"]["dlq.reprocess"] != contracts.Pass || len(bl["jobs"]) != 2 {
		t.Fatalf("the updated baseline: %v (%v), want both pass", bl, err)
	}
	o.UpdateBaseline = false
	if out, _, err := runCLI(t, o); err != nil || !strings.Contains(out, "baseline: every verdict as expected") {
		t.Fatalf("after the update: exit %d\n%s", Code(err), out)
	}

	// A regression, taken when asked.
	o.Config, o.UpdateBaseline = cfgDL, true
	out, _, err = runCLI(t, o)
	if err != nil || !strings.Contains(out, "regression") {
		t.Fatalf("--update-baseline over a regression: exit %d\n%s", Code(err), out)
	}
	if bl, _ := reports.ReadBaseline(expected); bl["jobs"]["retry.bounded"] == contracts.Pass {
		t.Errorf("the baseline still expects pass after a regression was taken: %v", bl)
	}

	// Refused before anything runs.
	o.Config = cfg
	o.Baseline = ""
	if _, _, err := runCLI(t, o); Code(err) != ExitConfig {
		t.Errorf("--update-baseline without --baseline: exit %d, want 3", Code(err))
	}
	prev := filepath.Join(dir, "prev")
	if _, _, err := runCLI(t, RunOptions{Config: cfg, Contracts: []string{"retry.bounded"}, Out: prev}); err != nil {
		t.Fatal(err)
	}
	res := filepath.Join(prev, "result.json")
	before, _ := os.ReadFile(res)
	o.Baseline = res
	o.Contracts = []string{"retry.bounded"}
	if _, _, err := runCLI(t, o); Code(err) != ExitConfig {
		t.Errorf("--update-baseline of a result.json: exit %d, want 3", Code(err))
	}
	if after, _ := os.ReadFile(res); string(after) != string(before) {
		t.Error("the result.json given as the baseline was rewritten")
	}
}
