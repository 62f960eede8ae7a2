package cli

import (
	"bytes"
	"context"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/reports"
)

// sabotagedPlan writes the plan of retry.bounded with a sabotage that makes
// it violate (a negative control) as dir/name.yaml.
func sabotagedPlan(t *testing.T, dir, name string, sabotage bool) string {
	t.Helper()
	p := filepath.Join(dir, name+".yaml")
	if err := Plan(PlanOptions{Contract: "retry.bounded", Seed: 1, Output: p}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if sabotage {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b = bytes.Replace(b, []byte("\nworkers: "), []byte("\nsabotage: one-extra-attempt\nworkers: "), 1)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// junitCounts reads a JUnit file's totals.
func junitCounts(t *testing.T, path string) (tests, failures, errs, skipped int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var top struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Errors   int `xml:"errors,attr"`
		Skipped  int `xml:"skipped,attr"`
	}
	if err := xml.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	return top.Tests, top.Failures, top.Errors, top.Skipped
}

// TestGatePlans: the gate holds a --plan's results to the baseline like any
// other — a plan with a sabotage included (it was skipped, so its violation
// passed a baseline that did not list it) — and a baseline may expect them,
// in a baseline object or a result.json (both were refused: "unknown
// contract plan/…").
func TestGatePlans(t *testing.T) {
	dir := t.TempDir()
	bad := sabotagedPlan(t, dir, "neg", true)
	onlyCatalogue := writeTestFile(t, dir, "bl.json", `{"mem": {"retry.bounded": "pass"}}`)
	o := RunOptions{Plans: []string{bad}, Contracts: []string{"retry.bounded"}, Baseline: onlyCatalogue}
	out, _, err := runCLI(t, o)
	if Code(err) != ExitViolation || !strings.Contains(out, "mem: plan/neg (not in baseline) → violation") {
		t.Fatalf("a sabotaged plan's violation the baseline does not list: exit %d (%v), want 1 naming it\n%s", Code(err), err, out)
	}

	o.Baseline = writeTestFile(t, dir, "accepts.json", `{"mem": {"retry.bounded": "pass", "plan/neg": "violation"}}`)
	if out, _, err := runCLI(t, o); err != nil || !strings.Contains(out, "baseline: every verdict as expected") {
		t.Fatalf("a baseline that expects the plan's violation: exit %d (%v)\n%s", Code(err), err, out)
	}

	// A result.json as the baseline: its plan rows are expected too.
	prev := filepath.Join(dir, "prev")
	if _, _, err := runCLI(t, RunOptions{Plans: []string{bad}, Out: prev}); Code(err) != ExitViolation {
		t.Fatalf("the sabotaged plan alone: exit %d (%v), want 1", Code(err), err)
	}
	clean := filepath.Join(dir, "clean")
	if err := os.MkdirAll(clean, 0o755); err != nil {
		t.Fatal(err)
	}
	good := sabotagedPlan(t, clean, "neg", false) // same contract id, plan/neg, no sabotage
	out, _, err = runCLI(t, RunOptions{Plans: []string{good}, Baseline: filepath.Join(prev, "result.json")})
	if Code(err) != ExitViolation || !strings.Contains(out, "mem: plan/neg violation → pass (improvement") {
		t.Fatalf("result.json baseline expecting the plan's violation, run passing: exit %d (%v), want 1 and the improvement\n%s", Code(err), err, out)
	}

	for _, id := range []string{"plan/", "plan/../x", "plan/-x"} {
		if _, err := reports.ParseBaseline([]byte(`{"mem": {"` + id + `": "pass"}}`)); err == nil {
			t.Errorf("baseline naming %q: accepted", id)
		}
	}
}

// TestGateJUnitAgrees: a gated run's junit.xml is red exactly when the gate
// fails. A violation the baseline accepts is skipped there with the
// property in its message (it was a failure: a red check beside a green
// gate); a difference is a failure; without a baseline every violation is a
// failure, as before. `durachk report --format junit` renders it the same.
func TestGateJUnitAgrees(t *testing.T) {
	dir := t.TempDir()
	cfg := writeTestFile(t, dir, "durachk.yaml", "seed: 1\ntargets:\n  - name: jobs\n    url: mem\n    delivery_limit: 1\n")
	o := RunOptions{Config: cfg, Contracts: []string{"retry.bounded", "dlq.reprocess"}, Out: filepath.Join(dir, "plain")}
	if _, _, err := runCLI(t, o); Code(err) != ExitViolation {
		t.Fatalf("delivery_limit 1: exit %d (%v), want violations", Code(err), err)
	}
	if _, failures, _, _ := junitCounts(t, filepath.Join(o.Out, "junit.xml")); failures == 0 {
		t.Fatal("without a baseline, the violations are not failures in junit.xml")
	}
	doc, err := reports.ReadJSON(filepath.Join(o.Out, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	accept := reports.BaselineOf(doc)
	violated := ""
	for c, v := range accept["jobs"] {
		if v == contracts.Violated {
			violated = c
		}
	}
	if violated == "" {
		t.Fatalf("no violation to accept: %v", accept)
	}
	o.Baseline = filepath.Join(dir, "accept.json")
	if err := accept.Write(o.Baseline); err != nil {
		t.Fatal(err)
	}
	o.Out = filepath.Join(dir, "accepted")
	if out, _, err := runCLI(t, o); err != nil {
		t.Fatalf("baseline accepting the violations: exit %d (%v)\n%s", Code(err), err, out)
	}
	junit := filepath.Join(o.Out, "junit.xml")
	tests, failures, errs, skipped := junitCounts(t, junit)
	b, _ := os.ReadFile(junit)
	if failures != 0 || errs != 0 || skipped == 0 || tests != 2 {
		t.Fatalf("the gate passes; junit.xml has %d tests, %d failures, %d errors, %d skipped: want no failure or error\n%s", tests, failures, errs, skipped, b)
	}
	if !strings.Contains(string(b), "expected by the baseline: violation: ") {
		t.Errorf("the accepted violation's testcase does not say so:\n%s", b)
	}
	var md bytes.Buffer
	if err := Report(filepath.Join(o.Out, "result.json"), "junit", "", &md); err != nil || !bytes.Equal(md.Bytes(), b) {
		t.Errorf("durachk report --format junit renders the gated run otherwise (%v):\n%s", err, md.String())
	}
	if s, _ := os.ReadFile(filepath.Join(o.Out, "summary.md")); !strings.Contains(string(s), "baseline: every verdict as expected") {
		t.Errorf("summary.md does not give the gate's verdict:\n%.600s", s)
	}

	// Expecting a pass where the run violates: the gate fails, and so does
	// the JUnit file, on that testcase.
	expectPass := reports.Baseline{"jobs": {}}
	for c := range accept["jobs"] {
		expectPass["jobs"][c] = contracts.Pass
	}
	o.Baseline = filepath.Join(dir, "pass.json")
	if err := expectPass.Write(o.Baseline); err != nil {
		t.Fatal(err)
	}
	o.Out = filepath.Join(dir, "regressed")
	if _, _, err := runCLI(t, o); Code(err) != ExitViolation {
		t.Fatalf("baseline expecting pass: exit %d (%v), want 1", Code(err), err)
	}
	b, _ = os.ReadFile(filepath.Join(o.Out, "junit.xml"))
	if _, failures, _, _ := junitCounts(t, filepath.Join(o.Out, "junit.xml")); failures == 0 || !strings.Contains(string(b), `type="baseline"`) ||
		!strings.Contains(string(b), "baseline: jobs: "+violated+" pass → violation") {
		t.Errorf("the gate fails; junit.xml has no baseline failure for %s:\n%s", violated, b)
	}
}

// TestUpdateBaselineCreatesAFirstOne: --update-baseline naming a file that
// does not exist writes it from the run (it was exit 3), and exits 0 saying
// so; the next run gates on it. Without --update-baseline a missing file
// stays exit 3, and so does a directory that does not exist.
func TestUpdateBaselineCreatesAFirstOne(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "expected.json")
	o := RunOptions{Targets: []string{"mem?delivery_limit=1"}, Contracts: []string{"retry.bounded", "lease.redelivery"}, Baseline: path}
	if _, _, err := runCLI(t, o); Code(err) != ExitConfig {
		t.Fatalf("a missing baseline without --update-baseline: exit %d (%v), want 3", Code(err), err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Fatal("the baseline was created without --update-baseline")
	}
	o.UpdateBaseline = true
	o.Out = filepath.Join(dir, "first")
	out, _, err := runCLI(t, o)
	if err != nil || !strings.Contains(out, "baseline: created "+path+", expecting the 2 verdict(s) of this run") {
		t.Fatalf("--update-baseline of a missing file: exit %d (%v), want 0 saying it created it\n%s", Code(err), err, out)
	}
	bl, err := reports.ReadBaseline(path)
	if err != nil || len(bl["mem"]) != 2 {
		t.Fatalf("the created baseline: %v (%v)", bl, err)
	}
	if _, failures, errs, _ := junitCounts(t, filepath.Join(o.Out, "junit.xml")); failures+errs != 0 {
		t.Errorf("the gate passed on the baseline it created; junit.xml has %d failures, %d errors", failures, errs)
	}
	o.UpdateBaseline = false
	o.Out = ""
	if out, _, err := runCLI(t, o); err != nil || !strings.Contains(out, "baseline: every verdict as expected") {
		t.Fatalf("gated on the created baseline: exit %d (%v)\n%s", Code(err), err, out)
	}
	o.UpdateBaseline = true
	o.Baseline = filepath.Join(dir, "no-such-dir", "expected.json")
	if _, _, err := runCLI(t, o); Code(err) != ExitConfig || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("--update-baseline into a missing directory: exit %d (%v), want 3", Code(err), err)
	}
}

// lateTarget is the embedded target whose runs end only once the run is
// interrupted, and then return a whole execution without an error: as a real
// target's run that ends as the signal cuts its connections and reads
// unknown (an outage) or whatever it had.
type lateTarget struct {
	contracts.MemTarget
	started chan struct{}
}

func (l *lateTarget) Execute(ctx context.Context, run contracts.Run) (contracts.Execution, error) {
	select {
	case l.started <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return l.MemTarget.Execute(context.Background(), run)
}

// TestInterruptedRunNeverUpdatesTheBaseline: a run interrupted while its
// last contract runs is partial and interrupted however that contract ends
// — it was complete, exit 0, and --update-baseline rewrote the baseline from
// it — and neither updates nor creates a baseline.
func TestInterruptedRunNeverUpdatesTheBaseline(t *testing.T) {
	for _, create := range []bool{false, true} {
		name := map[bool]string{false: "update", true: "create"}[create]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "expected.json")
			const before = `{"mem": {"retry.bounded": "violation"}}` + "\n"
			if !create {
				writeTestFile(t, dir, "expected.json", before)
			}
			lt := &lateTarget{started: make(chan struct{}, 1)}
			tg := &target{Target: lt, spec: "mem", info: reports.DescribeTarget(lt, "mem", ""), scale: 1}
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			go func() {
				<-lt.started
				cancel(context.Canceled)
			}()
			o := RunOptions{Seed: 1, Out: filepath.Join(dir, "out"), Contracts: []string{"retry.bounded"}, Baseline: path, UpdateBaseline: true,
				resolved: []*target{tg}}
			var out, errb bytes.Buffer
			err := Run(ctx, o, &out, &errb)
			if Code(err) != ExitUnknown {
				t.Errorf("exit %d (%v), want 2 (interrupted)\n%s", Code(err), err, out.String())
			}
			doc, rerr := reports.ReadJSON(filepath.Join(o.Out, "result.json"))
			if rerr != nil {
				t.Fatal(rerr)
			}
			if doc.Complete || !doc.Interrupted {
				t.Errorf("complete %v, interrupted %v; want an interrupted run", doc.Complete, doc.Interrupted)
			}
			b, rerr := os.ReadFile(path)
			switch {
			case create && rerr == nil:
				t.Errorf("an interrupted run created the baseline:\n%s", b)
			case !create && string(b) != before:
				t.Errorf("an interrupted run rewrote the baseline:\n%s", b)
			}
			want := map[bool]string{false: "not updated: the run is partial", true: "not created: the run is partial"}[create]
			if !strings.Contains(out.String(), want) {
				t.Errorf("output does not say %q:\n%s", want, out.String())
			}
		})
	}
}
