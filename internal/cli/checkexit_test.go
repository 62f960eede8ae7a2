package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/durachk/durachk/reports"
)

// editJSON rewrites the JSON file at path through edit.
func editJSON(t *testing.T, path string, edit func(m map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCheckResultExitCodes: check --result exits 1 on any violation (judged
// again, or the run's own where nothing was recorded to judge it from, as an
// exploration's), whatever comes after it; else 2 on an unknown, on a
// partial run and on a result that ran with nothing recorded to judge it
// from; else 0. It exited 0 on an interrupted run, on an exploration that
// found a violation and on results without evidence, and 2 on a violation
// followed by an unknown.
func TestCheckResultExitCodes(t *testing.T) {
	dir := t.TempDir()
	// run runs o on the embedded target into dir/name; interrupt: cancelled
	// (as by SIGINT) once the first result is in.
	run := func(name string, o RunOptions, interrupt bool) string {
		t.Helper()
		o.Seed, o.Out, o.Parallel = 1, filepath.Join(dir, name), 1
		if o.Plans == nil {
			o.Contracts = []string{"lease.redelivery", "retry.bounded"}
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if interrupt {
			o.placed = func(int) { cancel() }
		}
		var out, errb bytes.Buffer
		_ = Run(ctx, o, &out, &errb)
		return filepath.Join(o.Out, "result.json")
	}
	complete := run("complete", RunOptions{}, false)
	interrupted := run("interrupted", RunOptions{}, true)
	if d, err := reports.ReadJSON(interrupted); err != nil || !d.Interrupted || len(d.Results) != 1 || d.Results[0].Verdict != "pass" {
		t.Fatalf("the interrupted run: %+v (%v), want one pass and interrupted", d, err)
	}
	noEvidence := run("no-evidence", RunOptions{}, false)
	editJSON(t, noEvidence, func(m map[string]any) {
		for _, ev := range m["evidence"].(map[string]any) {
			delete(ev.(map[string]any), "final") // as a result.json of a durachk that kept no final state
		}
	})

	explored := filepath.Join(dir, "explore")
	var eout, eerr bytes.Buffer
	if err := Explore(context.Background(), ExploreOptions{Target: "mem", Seed: 1, Rounds: 3, Sabotage: "one-extra-attempt", NoShrink: true, Out: explored},
		&eout, &eerr); Code(err) != ExitViolation {
		t.Fatalf("explore with a sabotage: exit %d (%v)\n%s", Code(err), err, eerr.String())
	}

	// An unknown judged again, after a violation nothing was recorded for.
	p := sabotagedPlan(t, dir, "u", false)
	b, _ := os.ReadFile(p)
	os.WriteFile(p, bytes.Replace(b, []byte("\nworkers: "), []byte("\nat_risk:\n  - what: lease_renewals_tried\n    min: 1000\nworkers: "), 1), 0o644)
	mixed := run("mixed", RunOptions{Plans: []string{p}}, false)
	editJSON(t, mixed, func(m map[string]any) {
		rs := m["results"].([]any)
		if len(rs) != 1 || rs[0].(map[string]any)["verdict"] != "unknown" {
			t.Fatalf("the plan's run: %v, want one unknown", rs)
		}
		v := map[string]any{"contract": "explore", "target": "mem", "verdict": "violation", "reason": "round 1 raised attempts_over_budget", "seed": 1}
		m["results"] = []any{v, rs[0]}
		m["summary"] = map[string]any{"violation": 1, "unknown": 1}
		m["planned_results"] = 2
		w := m["wall"].(map[string]any)
		w["results"] = append([]any{map[string]any{"target": "mem", "contract": "explore", "ms": 1}}, w["results"].([]any)...)
	})

	for _, tc := range []struct {
		name, path string
		want       int
	}{
		{"complete, every verdict a pass", complete, ExitPass},
		{"interrupted after a pass", interrupted, ExitUnknown},
		{"results without evidence", noEvidence, ExitUnknown},
		{"an exploration that found a violation", filepath.Join(explored, "result.json"), ExitViolation},
		{"a violation, then an unknown", mixed, ExitViolation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if text, code := checkResult(t, tc.path, ""); code != tc.want {
				t.Errorf("check --result: exit %d, want %d\n%s", code, tc.want, text)
			}
			if _, code := checkResult(t, tc.path, "json"); code != tc.want {
				t.Errorf("check --result --format json: exit %d, want %d", code, tc.want)
			}
		})
	}
}
