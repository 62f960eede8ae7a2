package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/reports"
)

// TestInterruptedRunKeepsItsResults: the run is interrupted (ctx, as SIGINT
// does) once its third result is written; result.json holds those three,
// complete false and interrupted true, the run exits 2, and every rendering
// of it says it is partial.
func TestInterruptedRunKeepsItsResults(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	o := RunOptions{Seed: 1, Out: dir, Parallel: 1, Command: "durachk run"}
	o.placed = func(n int) {
		if n == 3 {
			cancel(fmt.Errorf("interrupt signal received"))
		}
	}
	var out, errb bytes.Buffer
	err := Run(ctx, o, &out, &errb)
	if Code(err) != ExitUnknown {
		t.Fatalf("exit %d (%v), want %d: an interrupted run cannot pass", Code(err), err, ExitUnknown)
	}
	doc, rerr := reports.ReadJSON(filepath.Join(dir, "result.json"))
	if rerr != nil {
		t.Fatal(rerr)
	}
	n := len(contracts.Catalogue)
	if len(doc.Results) != 3 || doc.Complete || !doc.Interrupted || doc.Planned != n {
		t.Fatalf("results %d, complete %v, interrupted %v, planned %d; want 3, false, true, %d", len(doc.Results), doc.Complete, doc.Interrupted, doc.Planned, n)
	}
	if !strings.Contains(doc.Stopped, "interrupt signal received") {
		t.Errorf("stopped %q does not name the signal", doc.Stopped)
	}
	for _, f := range []string{"junit.xml", "summary.md", "report.html"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("an interrupted run still writes %s: %v", f, err)
		}
	}
	want := map[string]string{
		"md":    "**⚠ partial run: 3 of " + fmt.Sprint(n) + " results; interrupted: interrupt signal received",
		"html":  `<p class="partial">⚠ partial run: 3 of ` + fmt.Sprint(n) + ` results; interrupted: interrupt signal received`,
		"junit": `<error message="partial run: 3 of ` + fmt.Sprint(n) + ` results; interrupted: interrupt signal received`,
		"text":  "!! partial run: 3 of " + fmt.Sprint(n) + " results; interrupted: interrupt signal received",
	}
	for f, w := range want {
		var b bytes.Buffer
		if err := Report(filepath.Join(dir, "result.json"), f, "", &b); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), w) {
			t.Errorf("report --format %s lacks the partial-run banner %q", f, w)
		}
	}
	if !strings.Contains(out.String(), "!! partial run: 3 of "+fmt.Sprint(n)+" results") {
		t.Errorf("the run's own table lacks the banner:\n%s", out.String())
	}
}

// TestCompleteRunHasNoBanner is the negative control of the banner.
func TestCompleteRunHasNoBanner(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := runCLI(t, RunOptions{Seed: 1, Out: dir, Contracts: []string{"lease.redelivery"}}); err != nil {
		t.Fatal(err)
	}
	doc, err := reports.ReadJSON(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !doc.Complete || doc.Interrupted || reports.PartialNote(doc) != "" {
		t.Fatalf("complete %v, interrupted %v, note %q: want a complete run", doc.Complete, doc.Interrupted, reports.PartialNote(doc))
	}
	for _, f := range []string{"md", "html", "junit", "text"} {
		var b bytes.Buffer
		if err := Report(filepath.Join(dir, "result.json"), f, "", &b); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(b.String(), "partial run") {
			t.Errorf("report --format %s of a complete run says partial", f)
		}
	}
}

// TestResultWrittenAfterEveryResult: while the run goes on, result.json is
// there, valid, complete false, with every result so far.
func TestResultWrittenAfterEveryResult(t *testing.T) {
	dir := t.TempDir()
	var seen []int
	o := RunOptions{Seed: 2, Out: dir, Parallel: 3, Contracts: []string{"lease.redelivery", "fencing.zombie", "outbox.atomic", "retry.bounded"}}
	o.placed = func(n int) {
		doc, err := reports.ReadJSON(filepath.Join(dir, "result.json"))
		if err != nil {
			t.Errorf("after %d results: %v", n, err)
			return
		}
		if doc.Complete || len(doc.Results) != n {
			t.Errorf("after %d results: result.json has %d, complete %v", n, len(doc.Results), doc.Complete)
		}
		seen = append(seen, n)
	}
	if _, _, err := runCLI(t, o); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 4 {
		t.Fatalf("told after %v results, want 1..4", seen)
	}
	doc, err := reports.ReadJSON(filepath.Join(dir, "result.json"))
	if err != nil || !doc.Complete || doc.Wall.RunID == "" {
		t.Fatalf("final result.json: %v, complete %v, run id %q", err, doc != nil && doc.Complete, doc.Wall.RunID)
	}
	var ids []string
	for _, r := range doc.Results {
		ids = append(ids, r.Contract)
	}
	if strings.Join(ids, " ") != "lease.redelivery fencing.zombie outbox.atomic retry.bounded" {
		t.Errorf("results in the order %v, want the selection's", ids)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*.tmp"))
	left2, _ := filepath.Glob(filepath.Join(dir, "histories", ".*.tmp"))
	if len(left)+len(left2) > 0 {
		t.Errorf("temporary files left: %v %v", left, left2)
	}
}

// TestStaleResultMovedAside: an earlier run's files in --out are moved aside
// before the first contract, with a line saying so.
func TestStaleResultMovedAside(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := runCLI(t, RunOptions{Seed: 1, Out: dir, Contracts: []string{"lease.redelivery"}}); err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(filepath.Join(dir, "result.json"))
	_, stderr, err := runCLI(t, RunOptions{Seed: 1, Out: dir, Contracts: []string{"retry.bounded"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "held an earlier run: moved result.json, histories, junit.xml, summary.md, report.html aside to") {
		t.Errorf("stderr does not say the earlier run was moved aside:\n%s", stderr)
	}
	prev, _ := filepath.Glob(filepath.Join(dir, "previous-*", "result.json"))
	if len(prev) != 1 {
		t.Fatalf("moved-aside result.json: %v, want one", prev)
	}
	if b, _ := os.ReadFile(prev[0]); !bytes.Equal(b, old) {
		t.Errorf("the moved-aside result.json is not the earlier run's")
	}
	doc, err := reports.ReadJSON(filepath.Join(dir, "result.json"))
	if err != nil || len(doc.Results) != 1 || doc.Results[0].Contract != "retry.bounded" {
		t.Fatalf("result.json is not this run's: %v", err)
	}
	hs, _ := filepath.Glob(filepath.Join(dir, "histories", "*"))
	if len(hs) != 2 || !strings.Contains(hs[0], "retry.bounded") || !strings.Contains(hs[1], "retry.bounded") {
		t.Errorf("histories/ holds %v, want this run's history and its final state", hs)
	}
}

// TestParallelDeterministic: on the embedded target, the run's document is
// the same one contract at a time and many at a time, apart from the wall
// section and the command.
func TestParallelDeterministic(t *testing.T) {
	read := func(parallel, trials int) (map[string]any, []string) {
		dir := t.TempDir()
		if _, _, err := runCLI(t, RunOptions{Seed: 7, Out: dir, Parallel: parallel, Trials: trials, Targets: []string{"mem", "mem?name=dl2&delivery_limit=2"}}); Code(err) == ExitConfig {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "result.json"))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		delete(m, "wall")
		delete(m, "command")
		hs, _ := filepath.Glob(filepath.Join(dir, "histories", "*"))
		for i := range hs {
			b, _ := os.ReadFile(hs[i])
			hs[i] = filepath.Base(hs[i]) + fmt.Sprint(len(b))
		}
		return m, hs
	}
	for _, trials := range []int{1, 3} {
		a, ha := read(1, trials)
		b, hb := read(8, trials)
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if !bytes.Equal(ja, jb) {
			t.Errorf("--trials %d: --parallel 1 and --parallel 8 differ outside the wall section and the command", trials)
		}
		if strings.Join(ha, " ") != strings.Join(hb, " ") {
			t.Errorf("--trials %d: history files differ:\n%v\n%v", trials, ha, hb)
		}
		rs := a["results"].([]any)
		if want := 2 * len(contracts.Catalogue); len(rs) != want {
			t.Errorf("%d results, want %d", len(rs), want)
		}
		if ts, _ := rs[0].(map[string]any)["trials"].([]any); trials > 1 && len(ts) != trials {
			t.Errorf("%d trials recorded, want %d", len(ts), trials)
		}
	}
}

// zombieAt4 is the embedded target with the fencing check sabotaged on seed
// 4 only: a violation in one trial of five.
type zombieAt4 struct{ contracts.MemTarget }

func (z zombieAt4) Execute(ctx context.Context, run contracts.Run) (contracts.Execution, error) {
	if run.Seed == 4 {
		c, _ := contracts.Lookup(run.Contract)
		run.Sabotage = &c.Sabotages[0]
	}
	return z.MemTarget.Execute(ctx, run)
}

// TestTrialsReported: five trials, one violating: every rendering reads
// "violation in 1 of 5 trials" with the violating seed's reproduce command.
func TestTrialsReported(t *testing.T) {
	c, err := contracts.Lookup("fencing.zombie")
	if err != nil {
		t.Fatal(err)
	}
	tg := &target{Target: zombieAt4{}, spec: "mem", info: reports.DescribeTarget(zombieAt4{}, "mem", ""), scale: 1}
	o := RunOptions{Seed: 1, Trials: 5}
	e, err := evaluate(context.Background(), tg, c, o)
	if err != nil {
		t.Fatal(err)
	}
	r := e.Result
	if r.Verdict != contracts.Violated || len(r.Trials) != 5 || r.Seed != 4 {
		t.Fatalf("verdict %s, %d trials, seed %d; want violation, 5, 4", r.Verdict, len(r.Trials), r.Seed)
	}
	doc := reports.NewDocument(1, "durachk run --trials 5", time.Time{})
	doc.Complete, doc.Planned, doc.Trials = true, 1, 5
	doc.AddTargetInfo(tg.info)
	doc.Place(0, e)
	const repro = "durachk run --seed 4 --contract fencing.zombie"
	for _, f := range []string{"md", "html", "junit"} {
		var b bytes.Buffer
		if err := reports.Render(&b, doc, f); err != nil {
			t.Fatal(err)
		}
		for _, w := range []string{"violation in 1 of 5 trials", repro} {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s lacks %q", f, w)
			}
		}
		if strings.Contains(b.String(), "durachk run --seed 3 --contract") {
			t.Errorf("%s gives a reproduce command for a passing trial", f)
		}
	}
	var b bytes.Buffer
	PrintTable(&b, doc)
	for _, w := range []string{"violation in 1 of 5 trials", "seed 4: violation", "reproduce: " + repro, "seed 2: pass"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("the table lacks %q:\n%s", w, b.String())
		}
	}
	if bl := reports.BaselineOf(doc); bl["mem"]["fencing.zombie"] != contracts.Violated {
		t.Errorf("a baseline taken from the run expects %s, want violation (a pass means no violation in any trial)", bl["mem"]["fencing.zombie"])
	}
}

// broken is a target whose every run fails as the harness's own error.
type broken struct{ contracts.MemTarget }

func (broken) Name() string { return "broken" }
func (broken) Execute(context.Context, contracts.Run) (contracts.Execution, error) {
	return contracts.Execution{}, fmt.Errorf("the harness failed: s3cr3tpw in an error")
}

// TestErrorStopsTheRunAndKeepsItsResults: an error of the harness (not a
// verdict) stops the run; the results it had stay, with what stopped it
// (credentials scrubbed), in every format; the run exits 3.
func TestErrorStopsTheRunAndKeepsItsResults(t *testing.T) {
	dir := t.TempDir()
	mem, err := resolveMem("mem")
	if err != nil {
		t.Fatal(err)
	}
	bad := &target{Target: broken{}, spec: "mem", info: reports.DescribeTarget(broken{}, "mem", ""), secrets: []string{"s3cr3tpw"}, scale: 1}
	o := RunOptions{Seed: 1, Out: dir, Parallel: 1, Contracts: []string{"lease.redelivery", "retry.bounded"}, resolved: []*target{mem, bad}}
	var out, errb bytes.Buffer
	err = Run(context.Background(), o, &out, &errb)
	if Code(err) != ExitConfig {
		t.Fatalf("exit %d (%v), want 3", Code(err), err)
	}
	doc, rerr := reports.ReadJSON(filepath.Join(dir, "result.json"))
	if rerr != nil {
		t.Fatal(rerr)
	}
	if len(doc.Results) != 1 || doc.Complete || doc.Interrupted || !strings.Contains(doc.Stopped, "the harness failed: xxxxx in an error") {
		t.Fatalf("results %d, complete %v, interrupted %v, stopped %q; want the one result before the error, and the error scrubbed",
			len(doc.Results), doc.Complete, doc.Interrupted, doc.Stopped)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "summary.md"))
	if !strings.Contains(string(b), "partial run: 1 of 4 results; stopped by an error: ") {
		t.Errorf("summary.md lacks the banner:\n%.400s", b)
	}
}
