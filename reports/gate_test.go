package reports

import (
	"encoding/xml"
	"strings"
	"testing"

	"github.com/durachk/durachk/contracts"
)

// TestJUnitJudgesAsTheGate: with a baseline (Document.Gate) each testcase is
// what the gate made of its result — an expected non-pass skipped with the
// verdict and reason in its message, a difference (regression, improvement,
// unlisted violation or unknown) a failure of type baseline, an expected
// result the run did not produce an error of type not_measured — so that the
// file has a failure or an error exactly when the gate has a difference.
func TestJUnitJudgesAsTheGate(t *testing.T) {
	type want struct{ kind, msg string } // kind: pass, skipped, failure, error
	tests := []struct {
		name     string
		expected Baseline
		cases    map[string]want // by target/contract
	}{
		{"every verdict expected", Baseline{
			"mem":       {"lease.redelivery": contracts.Pass, "durability.ack": contracts.Pass},
			"redis/aof": {"lease.redelivery": contracts.Unknown, "durability.ack": contracts.Violated, "order.fifo": contracts.Skipped}},
			map[string]want{
				"redis/aof/durability.ack":   {"skipped", "expected by the baseline: violation: lost ×1"},
				"redis/aof/lease.redelivery": {"skipped", "expected by the baseline: unknown: the run hit its time limit"},
				"redis/aof/order.fifo":       {"skipped", "expected by the baseline: skipped: the target does not claim FIFO"},
				"mem/lease.redelivery":       {"pass", ""},
			}},
		{"differences", Baseline{
			"mem":       {"lease.redelivery": contracts.Violated, "durability.ack": contracts.Pass, "order.fifo": contracts.Pass},
			"redis/aof": {"order.fifo": contracts.Pass}},
			map[string]want{
				"mem/lease.redelivery":       {"failure", "baseline: mem: lease.redelivery violation → pass (improvement"},
				"redis/aof/durability.ack":   {"failure", "baseline: redis/aof: durability.ack (not in baseline) → violation: lost ×1"},
				"redis/aof/lease.redelivery": {"failure", "baseline: redis/aof: lease.redelivery (not in baseline) → unknown"},
				"redis/aof/order.fifo":       {"failure", "baseline: redis/aof: order.fifo pass → skipped"},
				"mem/order.fifo":             {"error", "baseline: mem: order.fifo pass → (not measured)"},
				"mem/durability.ack":         {"pass", ""},
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := synthDoc()
			d.Gate = &Gate{Baseline: "expected.json", Expected: tc.expected}
			var s junitSuites
			if err := xml.Unmarshal(render(t, d, "junit"), &s); err != nil {
				t.Fatal(err)
			}
			diffs := d.GateDifferences()
			if red := s.Failures+s.Errors > 0; red != (len(diffs) > 0) {
				t.Errorf("junit: %d failures, %d errors; the gate has %d differences", s.Failures, s.Errors, len(diffs))
			}
			seen := map[string]bool{}
			for _, su := range s.Suites {
				for _, c := range su.Cases {
					key := strings.TrimPrefix(c.Classname, "durachk.") + "/" + c.Name
					seen[key] = true
					w, ok := tc.cases[key]
					if !ok {
						continue
					}
					kind, msg := "pass", ""
					switch {
					case c.Failure != nil:
						kind, msg = "failure", c.Failure.Message
						if c.Failure.Type != "baseline" {
							t.Errorf("%s: failure of type %q, want baseline", key, c.Failure.Type)
						}
					case c.Error != nil:
						kind, msg = "error", c.Error.Message
					case c.Skipped != nil:
						kind, msg = "skipped", c.Skipped.Message
					}
					if kind != w.kind || !strings.HasPrefix(msg, w.msg) {
						t.Errorf("%s: %s %q, want %s %q…", key, kind, msg, w.kind, w.msg)
					}
					if key == "redis/aof/durability.ack" && !strings.Contains(c.SystemOut+bodyOf(c), "job-001") {
						t.Errorf("%s: the witness is not in the testcase", key)
					}
				}
			}
			for key := range tc.cases {
				if !seen[key] {
					t.Errorf("no testcase %s", key)
				}
			}
		})
	}
	// Without a gate, as before: the violation fails.
	var s junitSuites
	if err := xml.Unmarshal(render(t, synthDoc(), "junit"), &s); err != nil || s.Failures != 1 {
		t.Errorf("without a baseline: %d failures (%v), want the violation's", s.Failures, err)
	}
}

func bodyOf(c junitCase) string {
	if c.Failure != nil {
		return c.Failure.Body
	}
	return ""
}

// TestGateIsValidated: a result.json whose gate expects a verdict that is
// not one of the four, or names no contract id, is refused.
func TestGateIsValidated(t *testing.T) {
	for _, bl := range []Baseline{{"mem": {"lease.redelivery": "passed"}}, {"mem": {"Not An Id": contracts.Pass}}} {
		d := synthDoc()
		d.Gate = &Gate{Baseline: "b.json", Expected: bl}
		if err := d.Validate(); err == nil {
			t.Errorf("gate %v: valid", bl)
		}
	}
}

// TestBaselineGatesSabotagedResults: a result with a sabotage (a --plan
// negative control) is compared and taken into a baseline like any other.
func TestBaselineGatesSabotagedResults(t *testing.T) {
	d := synthDoc()
	r := d.Results[0]
	r.Contract, r.Verdict, r.Sabotage = "plan/neg", contracts.Violated, "one-extra-attempt"
	d.Add(r)
	diffs := Baseline{"mem": {"lease.redelivery": contracts.Pass}}.Compare(d)
	found := false
	for _, diff := range diffs {
		found = found || diff.Contract == "plan/neg" && diff.Got == contracts.Violated
	}
	if !found {
		t.Errorf("the sabotaged plan's violation is not a difference: %v", diffs)
	}
	if BaselineOf(d)["mem"]["plan/neg"] != contracts.Violated {
		t.Errorf("BaselineOf leaves out the sabotaged plan: %v", BaselineOf(d))
	}
}
