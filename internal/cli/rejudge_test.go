package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/durachk/durachk/reports"
)

var updateRecorded = flag.Bool("update-recorded", false, "record testdata/rejudge-mem again (a run of the embedded target)")

// powerLossPlan writes the plan of durability.power-loss with the broker
// keeping messages in memory only (its negative control): a violation.
func powerLossPlan(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "power-loss-volatile.yaml")
	var out bytes.Buffer
	if err := Plan(PlanOptions{Contract: "durability.power-loss", Seed: 1, Jobs: 12, Output: p}, &out); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("sabotage: no-persistence\n")
	f.Close()
	return p
}

// checkResult runs durachk check --result on path.
func checkResult(t *testing.T, path string, format string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	err := Check(CheckOptions{Result: path, Format: format}, &out)
	return out.String(), Code(err)
}

// Every verdict of a run on the embedded target — a violation and a pass,
// each of three trials, a seed scenario — judged again from --out alone is
// the run's; the exit code is the run's; a final state changed after the run
// is caught (exit 1, naming what differs).
func TestCheckResultReproducesTheRun(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	_, _, err := runCLI(t, RunOptions{Seed: 1, Out: out, Trials: 3, Contracts: []string{"lease.redelivery"}, Scenarios: []string{"poison-job"},
		Plans: []string{powerLossPlan(t, dir)}})
	if Code(err) != ExitViolation {
		t.Fatalf("run: exit %d (%v), want 1 (the sabotaged plan)", Code(err), err)
	}
	res := filepath.Join(out, "result.json")
	text, code := checkResult(t, res, "")
	if code != ExitViolation {
		t.Fatalf("check --result: exit %d, want 1 (the run's violation)\n%s", code, text)
	}
	if !regexp.MustCompile(`(?m)^mem +plan/power-loss-volatile +1 +violation +violation +yes$`).MatchString(text) {
		t.Errorf("check --result output lacks the violation judged again as the run's:\n%s", text)
	}
	for _, want := range []string{"lease.redelivery (trial)", "scenario/poison-job", "lost false ×", "because", "12 verdicts judged again: 12 the run's, 0 not"} {
		if !strings.Contains(text, want) {
			t.Errorf("check --result output lacks %q:\n%s", want, text)
		}
	}
	js, _ := checkResult(t, res, "json")
	var rjs []reports.Rejudgement
	if err := json.Unmarshal([]byte(js), &rjs); err != nil || len(rjs) != 12 {
		t.Fatalf("json: %d re-judgements (%v), want 12", len(rjs), err)
	}
	if rjs[0].Checker.Properties["lost"].Valid != "false" || len(rjs[0].Again.Violations) == 0 || len(rjs[0].Again.Violations[0].Witness) == 0 {
		t.Errorf("json: the first re-judgement %+v lacks lost with its witness", rjs[0].Checker.Properties["lost"])
	}

	// A history with its final-state file: the engine's verdict, as the run's.
	doc, err := reports.ReadJSON(res)
	if err != nil {
		t.Fatal(err)
	}
	ev := doc.EvidenceFor("mem", "plan/power-loss-volatile")
	var b bytes.Buffer
	err = Check(CheckOptions{History: filepath.Join(out, ev.History), Final: filepath.Join(out, ev.Final)}, &b)
	if Code(err) != ExitViolation || !strings.Contains(b.String(), ": violation (") || !strings.Contains(b.String(), "judged as its run was") {
		t.Errorf("check history --final: exit %d\n%s", Code(err), b.String())
	}

	// Tampered: the lost jobs put back in the broker's queue.
	final := filepath.Join(out, ev.Final)
	orig, _ := os.ReadFile(final)
	var j reports.Judged
	if err := json.Unmarshal(orig, &j); err != nil {
		t.Fatal(err)
	}
	for _, v := range doc.Results[slotOf(doc, "plan/power-loss-volatile")].Violations {
		j.Final.Broker.Queued = append(j.Final.Broker.Queued, v.Job)
	}
	tampered, _ := json.Marshal(j)
	os.WriteFile(final, tampered, 0o644)
	text, code = checkResult(t, res, "")
	// The result and its first trial (one execution) differ; the others not.
	if code != ExitViolation || !strings.Contains(text, "NO: ") || !strings.Contains(text, "10 the run's, 2 not") {
		t.Errorf("a tampered final state: exit %d\n%s", code, text)
	}
	os.WriteFile(final, orig, 0o644)

	// --result takes nothing else.
	var e bytes.Buffer
	if err := Check(CheckOptions{Result: res, History: "x.jsonl"}, &e); Code(err) != ExitConfig {
		t.Errorf("--result with a history: exit %d, want 3", Code(err))
	}
	yes := true
	if err := Check(CheckOptions{Result: res, FIFO: &yes}, &e); Code(err) != ExitConfig {
		t.Errorf("--result with --fifo: exit %d, want 3", Code(err))
	}
}

func slotOf(d *reports.Document, contract string) int {
	for i, r := range d.Results {
		if r.Contract == contract {
			return i
		}
	}
	return -1
}

// A run recorded in testdata (the embedded target: a violation and a pass)
// judges again to its verdicts today: a change of the checker or the engine
// that changes a recorded verdict fails here (go test ./internal/cli -run
// TestRecordedRunRejudged -update-recorded records it again after review).
func TestRecordedRunRejudged(t *testing.T) {
	rec := filepath.Join("testdata", "rejudge-mem")
	if *updateRecorded {
		os.RemoveAll(rec)
		_, _, err := runCLI(t, RunOptions{Seed: 1, Out: rec, Formats: []string{"json"}, Contracts: []string{"lease.redelivery"}, Jobs: 12,
			Plans:   []string{powerLossPlan(t, "testdata")},
			Command: "durachk run --seed 1 --jobs 12 --contract lease.redelivery --plan testdata/power-loss-volatile.yaml --format json --out testdata/rejudge-mem"})
		if Code(err) != ExitViolation {
			t.Fatalf("recording: exit %d (%v)", Code(err), err)
		}
	}
	text, code := checkResult(t, filepath.Join(rec, "result.json"), "")
	if code != ExitViolation || !strings.Contains(text, "2 verdicts judged again: 2 the run's, 0 not") {
		t.Fatalf("the recorded run judged again: exit %d\n%s", code, text)
	}
}

// `durachk check --result` through the binary: the flag parses, a history
// argument beside it is refused.
func TestCheckResultFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := durachkBinary(t)
	res := filepath.Join("testdata", "rejudge-mem", "result.json")
	if err := exec.Command(bin, "check", "--result", res).Run(); exitCode(err) != ExitViolation {
		t.Errorf("check --result: exit %d, want 1", exitCode(err))
	}
	if err := exec.Command(bin, "check", "--result", res, "h.jsonl").Run(); exitCode(err) != ExitConfig {
		t.Errorf("check --result with a history: exit %d, want 3", exitCode(err))
	}
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
