package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/reports"
)

// realKinds are the real target kinds and the variable naming each one's
// broker (what .ci/run exports; SQS: the emulator).
var realKinds = []struct{ kind, env string }{
	{"postgres", "DURACHK_PG_URL"},
	{"redis", "DURACHK_REDIS_URL"},
	{"rabbitmq", "DURACHK_AMQP_URL"},
	{"nats", "DURACHK_NATS_URL"},
	{"sqs", "DURACHK_SQS_URL"},
}

// A run on each real target kind — a contract that passes, and the
// outbox.atomic plan with its dual-write sabotage, which leaves results
// without their events when a worker dies between the two writes — judged
// again offline from its --out alone gives the run's verdicts, and the
// violations with their witnesses. It seeks across seeds (at most 3) until
// the plan's run is a violation, so that a witness is judged again on every
// kind; every run it makes, whatever its verdicts, must judge again to them.
func TestRejudgeRealTargets(t *testing.T) {
	for _, k := range realKinds {
		t.Run(k.kind, func(t *testing.T) {
			url := os.Getenv(k.env)
			if url == "" {
				t.Skipf("%s is not set; .ci/run sets it", k.env)
			}
			bin := durachkBinary(t)
			dir := t.TempDir()
			plan := filepath.Join(dir, "dual-write.yaml")
			var pb bytes.Buffer
			if err := Plan(PlanOptions{Contract: "outbox.atomic", Seed: 1, Jobs: 12, Output: plan}, &pb); err != nil {
				t.Fatal(err)
			}
			f, _ := os.OpenFile(plan, os.O_APPEND|os.O_WRONLY, 0)
			f.WriteString("sabotage: dual-write\n")
			f.Close()
			for seed := 1; seed <= 3; seed++ {
				out := filepath.Join(dir, fmt.Sprint("out-", seed))
				cmd := exec.Command(bin, "run", "--target", url, "--contract", "tenant.isolation", "--plan", plan, "--seed", fmt.Sprint(seed),
					"--format", "json", "--out", out)
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				if err := cmd.Run(); exitCode(err) == ExitConfig || exitCode(err) < 0 {
					t.Fatalf("run (seed %d): %v\n%s%s", seed, err, stdout.String(), stderr.String())
				}
				doc, err := reports.ReadJSON(filepath.Join(out, "result.json"))
				if err != nil {
					t.Fatal(err)
				}
				check := exec.Command(bin, "check", "--result", filepath.Join(out, "result.json"), "--format", "json")
				var cout, cerr bytes.Buffer
				check.Stdout, check.Stderr = &cout, &cerr
				cerr2 := check.Run()
				var rjs []reports.Rejudgement
				if err := json.Unmarshal(cout.Bytes(), &rjs); err != nil {
					t.Fatalf("check --result (seed %d): exit %d, %v\n%s%s", seed, exitCode(cerr2), err, cout.String(), cerr.String())
				}
				violated := false
				for _, rj := range rjs {
					if rj.Run.Verdict == contracts.Skipped {
						continue
					}
					if rj.Differs != "" || rj.Again.Verdict != rj.Run.Verdict || rj.Again.Reason == "" && rj.Run.Verdict != contracts.Pass {
						t.Errorf("%s %s (seed %d): the run said %s (%s), judged again %s (%s): %s", k.kind, rj.Contract, rj.Seed,
							rj.Run.Verdict, rj.Run.Reason, rj.Again.Verdict, rj.Again.Reason, rj.Differs)
					}
					if rj.File == "" {
						t.Errorf("%s %s (seed %d): not judged again: no final-state file (verdict %s: %s)", k.kind, rj.Contract, rj.Seed, rj.Run.Verdict, rj.Run.Reason)
					}
					if rj.Run.Verdict == contracts.Violated && len(rj.Again.Violations) > 0 && len(rj.Again.Violations[0].Witness) > 0 {
						violated = true
					}
				}
				if want := countNotSkipped(doc); len(rjs) < want {
					t.Errorf("%d verdicts judged again, want %d", len(rjs), want)
				}
				if code, want := exitCode(cerr2), exitOfDoc(doc); code != want {
					t.Errorf("check --result (seed %d): exit %d, the run's verdicts give %d\n%s", seed, code, want, cerr.String())
				}
				t.Logf("%s seed %d: %s", k.kind, seed, verdicts(doc))
				if violated {
					return
				}
			}
			t.Errorf("%s: the dual-write plan gave no violation in 3 seeds: no witness was judged again", k.kind)
		})
	}
}

func countNotSkipped(d *reports.Document) int {
	n := 0
	for _, r := range d.Results {
		if r.Verdict != contracts.Skipped {
			n++
		}
	}
	return n
}

// exitOfDoc is the exit code of a run's verdicts: 1 on a violation, else 2 on
// an unknown, else 0.
func exitOfDoc(d *reports.Document) int {
	code := ExitPass
	for _, r := range d.Results {
		switch r.Verdict {
		case contracts.Violated:
			return ExitViolation
		case contracts.Unknown:
			code = ExitUnknown
		}
	}
	return code
}

func verdicts(d *reports.Document) string {
	var parts []string
	for _, r := range d.Results {
		parts = append(parts, fmt.Sprintf("%s %s (%s)", r.Contract, r.Verdict, reports.Clip(r.Reason)))
	}
	return strings.Join(parts, "; ")
}
