package reports

import (
	"bytes"
	"context"
	"encoding/xml"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/checker"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/history"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const planted = "pl4nted-S3cret"

// fakeTarget is a contracts.Target for describing targets in tests.
type fakeTarget struct {
	name, on string
	caps     adapters.Capabilities
}

func (f fakeTarget) Name() string                        { return f.name }
func (f fakeTarget) MeasuredOn() string                  { return f.on }
func (f fakeTarget) Capabilities() adapters.Capabilities { return f.caps }
func (f fakeTarget) Execute(_ context.Context, _ contracts.Run) (contracts.Execution, error) {
	return contracts.Execution{}, nil
}

// synthHistory is a small history: n jobs, each enqueued, leased, committed and
// acked, the second one leased twice after a crash, plus a pause window.
func synthHistory(n int) []history.Op {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	ms := int64(time.Millisecond)
	var ops []history.Op
	add := func(t int64, proc string, typ history.Type, f history.F, job string, tok uint64) {
		ops = append(ops, history.Op{T: t0 + t*ms, Process: proc, Seq: int64(len(ops)), Type: typ, F: f, Job: job, Token: tok, Attempt: int(max(tok, 1))})
	}
	for i := range n {
		job := fmt.Sprintf("job-%03d", i)
		at := int64(i * 40)
		add(at, "producer", history.Invoke, history.Enqueue, job, 0)
		add(at+1, "producer", history.OK, history.Enqueue, job, 0)
		add(at+20, "w1", history.OK, history.Lease, job, 1)
		if i == 1 {
			ops = append(ops, history.Op{T: t0 + (at+25)*ms, Process: "w1", Type: history.Info, F: history.Fault, Value: "crash", Key: "after_lease", Job: job, Target: "w1"})
			add(at+1025, "w2", history.OK, history.Lease, job, 2)
			add(at+1040, "w2", history.OK, history.Commit, job, 2)
			add(at+1045, "w2", history.OK, history.Ack, job, 2)
			continue
		}
		add(at+50, "w1", history.OK, history.Commit, job, 1)
		add(at+55, "w1", history.OK, history.Ack, job, 1)
	}
	ops = append(ops, history.Op{T: t0 + 100*ms, Process: "controller", Type: history.Info, F: history.Fault, Value: "pause", Target: "w3"},
		history.Op{T: t0 + 400*ms, Process: "controller", Type: history.Info, F: history.Fault, Value: "resume", Target: "w3"})
	return ops
}

// synthDoc is a document with four verdicts over two targets, one of them
// reached through a URL with a planted password.
func synthDoc() *Document {
	d := NewDocument(7, "durachk run --seed 7 --target redis://u:"+planted+"@127.0.0.1:6390/0?name=redis/aof", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	mem := fakeTarget{name: "mem", on: "mem (embedded)", caps: adapters.Capabilities{Broker: "mem", Lease: adapters.Native, FIFO: true, Durable: true}}
	red := fakeTarget{name: "redis/aof", on: "redis 7.0.15 (real processes)", caps: adapters.Capabilities{Broker: "redis", Lease: adapters.Emulated, Notes: []string{"XACK checks no owner"}}}
	d.AddTargetInfo(DescribeTarget(mem, "mem", ""))
	d.AddTargetInfo(DescribeTarget(red, "redis", "redis://u:"+planted+"@127.0.0.1:6390/0?name=redis/aof&appendonly=yes&auth_token="+planted, map[string]string{"appendonly": "yes", "password": planted}))
	ops := synthHistory(12)
	base := contracts.Result{Seed: 7, Stats: contracts.Stats{Accepted: 12, Executions: 13, Faults: map[string]int{"crash:after_lease": 1}}, HistoryLen: len(ops)}
	add := func(target, contract string, v contracts.Verdict, reason string, wall time.Duration, mut func(*contracts.Result)) {
		r := base
		r.Target, r.Contract, r.Verdict, r.Reason, r.Wall = target, contract, v, reason, wall
		r.Claim = "the claim of " + contract
		r.Scenario = "scenario of " + contract
		r.Planned = []string{"crash_at after_lease#2", "link_down broker @100ms+300ms"}
		r.Metrics = contracts.Measure(ops)
		if mut != nil {
			mut(&r)
		}
		d.Add(r)
		ev := Evidence{Reproduce: "durachk run --seed 7 --contract " + contract,
			Windows: MergeWindows(PlanWindows(planFor(), ops[0].T, 1), ObservedWindows(ops))}
		if v == contracts.Skipped {
			d.AddEvidence(r, nil, ev)
		} else {
			d.AddEvidence(r, ops, ev)
		}
	}
	add("mem", "lease.redelivery", contracts.Pass, "", 3*time.Millisecond, nil)
	add("mem", "durability.ack", contracts.Pass, "", 2*time.Millisecond, nil)
	add("redis/aof", "lease.redelivery", contracts.Unknown, "the run hit its time limit before it drained", 1500*time.Millisecond, nil)
	add("redis/aof", "durability.ack", contracts.Violated, "lost ×1: job-001 acknowledged, then gone", 2500*time.Millisecond, func(r *contracts.Result) {
		r.Violations = []contracts.Violation{{Property: "lost", Job: "job-001", Message: "acknowledged enqueue of job-001 is gone after the broker restart <script>",
			Witness: ops[5:9], T0: ops[0].T,
			Facts:   []checker.Fact{{Kind: checker.FactAbsent, Job: "job-001", Where: "the store and the broker"}},
			Because: []string{"the broker accepted job-001", "at the end no store record and no broker queue accounts for it: it is lost"}}}
	})
	add("redis/aof", "order.fifo", contracts.Skipped, "the target does not claim FIFO", 0, nil)
	d.Finish(d.Wall.StartedAt.Add(4 * time.Second))
	d.Complete = true
	if err := d.Scrub(planted); err != nil {
		panic(err)
	}
	return d
}

func render(t *testing.T, d *Document, format string) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Render(&b, d, format); err != nil {
		t.Fatalf("render %s: %v", format, err)
	}
	return b.Bytes()
}

func TestGolden(t *testing.T) {
	d := synthDoc()
	for _, tc := range []struct{ format, file string }{
		{"json", "golden.json"}, {"junit", "golden.junit.xml"}, {"md", "golden.md"}, {"html", "golden.html"},
	} {
		t.Run(tc.format, func(t *testing.T) {
			got := render(t, d, tc.format)
			path := filepath.Join("testdata", tc.file)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./reports -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from %s (go test ./reports -run TestGolden -update rewrites it after review); got %d bytes, want %d", tc.format, path, len(got), len(want))
			}
		})
	}
}

// TestNoCredentials plants a password in a target URL (user info and a query
// parameter) and in the command, and searches every format, the written
// result.json and its history files.
func TestNoCredentials(t *testing.T) {
	d := synthDoc()
	for _, f := range Formats {
		if out := render(t, d, f); bytes.Contains(out, []byte(planted)) {
			t.Errorf("%s output contains the planted credential", f)
		}
	}
	dir := t.TempDir()
	if err := d.WriteJSON(filepath.Join(dir, "result.json")); err != nil {
		t.Fatal(err)
	}
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(planted)) {
				t.Errorf("%s contains the planted credential", p)
			}
		}
		return nil
	})
	if ti, _ := d.Target("redis/aof"); !strings.Contains(ti.URL, Redacted) || ti.Settings["password"] != "" || ti.Settings["appendonly"] != "yes" {
		t.Errorf("target info = %+v, want a redacted URL, no password setting, appendonly kept", ti)
	}
}

func TestJUnitParsesWithProperties(t *testing.T) {
	var s junitSuites
	if err := xml.Unmarshal(render(t, synthDoc(), "junit"), &s); err != nil {
		t.Fatalf("junit does not parse: %v", err)
	}
	if len(s.Suites) != 2 || s.Tests != 5 || s.Failures != 1 || s.Errors != 1 || s.Skipped != 1 {
		t.Fatalf("suites=%d tests=%d failures=%d errors=%d skipped=%d, want 2 5 1 1 1", len(s.Suites), s.Tests, s.Failures, s.Errors, s.Skipped)
	}
	red := s.Suites[1]
	props := map[string]string{}
	for _, p := range red.Properties {
		props[p.Name] = p.Value
	}
	for _, k := range []string{"seed", "broker", "version", "endpoint", "fingerprint", "durachk_version"} {
		if props[k] == "" {
			t.Errorf("property %s missing or empty: %v", k, props)
		}
	}
	if props["seed"] != "7" || props["endpoint"] != "local" || props["version"] != "redis 7.0.15 (real processes)" {
		t.Errorf("properties = %v", props)
	}
	for _, c := range red.Cases {
		if c.Classname != "durachk.redis/aof" {
			t.Errorf("classname %q", c.Classname)
		}
		switch c.Name {
		case "lease.redelivery":
			if c.Error == nil || c.Error.Type != "unknown" || c.Failure != nil {
				t.Errorf("unknown verdict rendered as %+v, want an error of type unknown", c)
			}
		case "durability.ack":
			if c.Failure == nil || !strings.Contains(c.Failure.Message, "lost") || !strings.Contains(c.Failure.Body, "job-001") {
				t.Errorf("violation rendered as %+v, want a failure with the witness", c)
			}
		case "order.fifo":
			if c.Skipped == nil || c.Skipped.Message != "the target does not claim FIFO" {
				t.Errorf("skip rendered as %+v", c)
			}
		}
	}
}

// TestMarkdownBounded renders a synthetic huge run and checks the summary
// stays under 1 MiB, table first, with a note on what was left out.
func TestMarkdownBounded(t *testing.T) {
	d := NewDocument(1, "durachk run", time.Time{})
	long := strings.Repeat("x", 400)
	var witness []history.Op
	for i := range 200 {
		witness = append(witness, history.Op{T: int64(i), Process: "w1", Type: history.OK, F: history.Ack, Job: "job-" + long, Value: long})
	}
	for ti := range 8 {
		name := fmt.Sprintf("target-%d", ti)
		d.AddTargetInfo(TargetInfo{Name: name, Broker: "x", MeasuredOn: "x"})
		for c := range 4000 {
			d.Add(contracts.Result{Target: name, Contract: fmt.Sprintf("contract.%04d", c), Verdict: contracts.Violated,
				Reason: long, Violations: []contracts.Violation{{Property: "lost", Message: long, Witness: witness}}})
		}
	}
	out := render(t, d, "md")
	if len(out) >= MaxMarkdown {
		t.Fatalf("summary is %d bytes, want < %d", len(out), MaxMarkdown)
	}
	if !bytes.HasPrefix(out, []byte("## durachk: 0 pass, 32000 violation")) || !bytes.Contains(out, []byte("| contract |")) {
		t.Errorf("summary does not start with the headline and table: %.200s", out)
	}
	if !bytes.Contains(out, []byte("left out")) {
		t.Errorf("summary does not say what it left out")
	}
	if bytes.Index(out, []byte("| contract |")) > bytes.Index(out, []byte("<details>")) && bytes.Contains(out, []byte("<details>")) {
		t.Errorf("details come before the verdict table")
	}
}

func TestBaseline(t *testing.T) {
	d := synthDoc()
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, fmt.Sprintf("b%d.json", len(s)))
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	prev := filepath.Join(dir, "prev", "result.json")
	if err := d.WriteJSON(prev); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, baseline string
		want           []string
	}{
		{"previous run", prev, nil},
		{"accepts the known-bad verdicts", write(`{"mem": {"lease.redelivery": "pass", "durability.ack": "pass"},
			"redis/aof": {"lease.redelivery": "unknown", "durability.ack": "violation", "order.fifo": "skipped"}}`), nil},
		{"regression", write(`{"redis/aof": {"durability.ack": "pass", "order.fifo": "pass", "lease.redelivery": "unknown"}}`),
			[]string{"redis/aof: durability.ack pass → violation", "redis/aof: order.fifo pass → skipped"}},
		{"unlisted violation", write(`{"redis/aof": {"lease.redelivery": "unknown", "order.fifo": "skipped"}}`),
			[]string{"redis/aof: durability.ack (not in baseline) → violation"}},
		{"improvements", write(`{"mem": {"lease.redelivery": "violation", "durability.ack": "unknown"},
			"redis/aof": {"lease.redelivery": "unknown", "durability.ack": "violation", "order.fifo": "skipped"}}`),
			[]string{"mem: lease.redelivery violation → pass (improvement: update the baseline to expect it)",
				"mem: durability.ack unknown → pass (improvement: update the baseline to expect it)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bl, err := ReadBaseline(tc.baseline)
			if err != nil {
				t.Fatal(err)
			}
			diffs := bl.Compare(d)
			var got []string
			for _, x := range diffs {
				got = append(got, x.String())
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("diffs = %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := ReadBaseline(write(`{"mem": {"lease.redelivery": "passed"}}`)); err == nil || !strings.Contains(err.Error(), `"passed"`) {
		t.Errorf("a bad verdict in a baseline: err = %v, want one naming it", err)
	}
}

// TestGateSummary: the gate's first line tells regressions from
// improvements, and says that an improvement fails the gate too.
func TestGateSummary(t *testing.T) {
	diff := func(exp, got contracts.Verdict) Difference {
		return Difference{Target: "mem", Contract: "lease.redelivery", Expected: exp, Got: got}
	}
	tests := []struct {
		name  string
		diffs []Difference
		want  string
	}{
		{"none", nil, "baseline: every verdict as expected"},
		{"pass → violation", []Difference{diff(contracts.Pass, contracts.Violated)}, "baseline: 1 regression"},
		{"violation → pass", []Difference{diff(contracts.Violated, contracts.Pass)},
			"baseline: 1 improvement (the gate fails until the baseline expects the new verdict)"},
		{"skipped → pass", []Difference{diff(contracts.Skipped, contracts.Pass)},
			"baseline: 1 improvement (the gate fails until the baseline expects the new verdict)"},
		{"violation → unknown", []Difference{diff(contracts.Violated, contracts.Unknown)}, "baseline: 1 regression"},
		{"pass → not measured", []Difference{diff(contracts.Pass, "")}, "baseline: 1 regression"},
		{"unlisted violation", []Difference{diff("", contracts.Violated)}, "baseline: 1 regression"},
		{"both", []Difference{diff(contracts.Pass, contracts.Skipped), diff(contracts.Unknown, contracts.Pass), diff(contracts.Pass, contracts.Unknown)},
			"baseline: 2 regressions, 1 improvement (the gate fails until the baseline expects the new verdict)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := GateSummary(tc.diffs); got != tc.want {
				t.Errorf("GateSummary = %q, want %q", got, tc.want)
			}
			for _, d := range tc.diffs {
				if strings.Contains(d.String(), "improvement") != d.Improvement() || d.Improvement() != (d.Got == contracts.Pass) {
					t.Errorf("%s: improvement %v", d, d.Improvement())
				}
			}
		})
	}
}

func TestRoundTripWithHistories(t *testing.T) {
	d := synthDoc()
	p := filepath.Join(t.TempDir(), "result.json")
	if err := d.WriteJSON(p); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(p)
	if err != nil {
		t.Fatal(err)
	}
	k := Key("redis/aof", "durability.ack")
	if len(back.Histories[k]) != len(d.Histories[k]) || len(back.Histories[k]) == 0 {
		t.Fatalf("history of %s: %d ops back, want %d", k, len(back.Histories[k]), len(d.Histories[k]))
	}
	for _, f := range []string{"md", "junit", "json"} {
		// Wall per result lives in wall.results, so every format but HTML re-renders identically.
		if !bytes.Equal(render(t, back, f), render(t, d, f)) {
			t.Errorf("%s of the re-read document differs from the original", f)
		}
	}
	if !bytes.Equal(render(t, back, "html"), render(t, d, "html")) {
		t.Errorf("html of the re-read document differs from the original")
	}
}

func TestSampleHistoryKeepsWholeJobs(t *testing.T) {
	ops := synthHistory(200)
	s := SampleHistory(ops, 300)
	if len(s) > 300 || len(s) == 0 {
		t.Fatalf("sample has %d ops, want 1..300", len(s))
	}
	per := map[string]int{}
	for _, op := range ops {
		per[op.Job]++
	}
	got := map[string]int{}
	for _, op := range s {
		got[op.Job]++
	}
	for j, n := range got {
		if j != "" && n != per[j] {
			t.Errorf("job %s: %d of its %d ops kept, want all or none", j, n, per[j])
		}
	}
}

func TestRedactURL(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"user info", "amqp://guest:hunter2@127.0.0.1:5672/", "amqp://guest:xxxxx@127.0.0.1:5672/"},
		{"query secret", "sqs://127.0.0.1:4566?region=x&secret_access_key=abc&queue-arguments.x-dead-letter-routing-key=k", "sqs://127.0.0.1:4566?region=x&secret_access_key=xxxxx&queue-arguments.x-dead-letter-routing-key=k"},
		{"password param", "postgres://127.0.0.1/test?password=pw1&sslmode=disable", "postgres://127.0.0.1/test?password=xxxxx&sslmode=disable"},
		{"user without password", "redis://u@127.0.0.1:6379", "redis://u@127.0.0.1:6379"},
		{"not a URL", "mem", "mem"},
		{"at sign in the path", "redis://127.0.0.1:6379/0?name=a@b", "redis://127.0.0.1:6379/0?name=a@b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := RedactURL(tc.in); got != tc.want {
				t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	if got := RedactCommand("durachk run --target=redis://a:b1c2@h:1 --target 'amqp://g:s3cr@h/'"); strings.Contains(got, "b1c2") || strings.Contains(got, "s3cr") {
		t.Errorf("RedactCommand left a password: %s", got)
	}
}

func TestFingerprint(t *testing.T) {
	a := TargetInfo{Kind: "redis", MeasuredOn: "redis 7", Endpoint: "local", Settings: map[string]string{"appendonly": "yes"}}
	b := a
	b.Settings = map[string]string{"appendonly": "no"}
	c := a
	c.Name, c.URL = "other-name", "redis://elsewhere:1"
	if Fingerprint(a) == Fingerprint(b) {
		t.Errorf("appendonly yes and no share a fingerprint")
	}
	if Fingerprint(a) != Fingerprint(c) {
		t.Errorf("name or host changed the fingerprint")
	}
}

func TestWindows(t *testing.T) {
	ops := synthHistory(3)
	ws := ObservedWindows(ops)
	if len(ws) != 1 || ws[0].Kind != "pause" || ws[0].Target != "w3" || ws[0].To-ws[0].From != int64(300*time.Millisecond) {
		t.Errorf("observed windows = %+v, want one 300ms pause of w3", ws)
	}
	outage := append(synthHistory(3),
		history.Op{T: ops[0].T + 500*int64(time.Millisecond), Process: "controller", Type: history.Info, F: history.Fault, Value: "broker_unavailable", Target: "broker"},
		history.Op{T: ops[0].T + 900*int64(time.Millisecond), Process: "controller", Type: history.Info, F: history.Fault, Value: "broker_available", Target: "broker"})
	ws = ObservedWindows(outage)
	if len(ws) != 2 || ws[1].Kind != "broker_unavailable" || ws[1].To-ws[1].From != int64(400*time.Millisecond) {
		t.Errorf("observed windows = %+v, want the pause and a 400ms broker outage", ws)
	}
	pw := PlanWindows(planFor(), 1000, 0.1)
	if len(pw) != 1 || pw[0].From != 1000+int64(10*time.Millisecond) || pw[0].To != 1000+int64(40*time.Millisecond) {
		t.Errorf("plan windows = %+v, want link_down scaled by 0.1", pw)
	}
}

// TestPowerLossWindow: a power cut is a broker window of its own kind, observed
// from the cut to the restart, and it replaces the planned one.
func TestPowerLossWindow(t *testing.T) {
	ops := []history.Op{
		{T: 100, Process: "controller", Type: history.Info, F: history.Fault, Value: "power_loss", Target: "redis"},
		{T: 400, Process: "controller", Type: history.Info, F: history.Fault, Value: "broker_restart", Target: "redis"},
	}
	obs := ObservedWindows(ops)
	if len(obs) != 1 || obs[0].Kind != "power_loss" || obs[0].Target != "broker" || obs[0].From != 100 || obs[0].To != 400 {
		t.Fatalf("observed windows = %+v, want power_loss of the broker from 100 to 400", obs)
	}
	plan := faults.Plan{Faults: []faults.Fault{{Kind: faults.PowerLoss, At: 6 * time.Second, For: 2 * time.Second}}}
	pw := PlanWindows(plan, 0, 0.1)
	if len(pw) != 1 || pw[0].Kind != "power_loss" || !pw[0].Planned {
		t.Fatalf("plan windows = %+v, want one planned power_loss", pw)
	}
	if m := MergeWindows(pw, obs); len(m) != 1 || m[0].Planned {
		t.Errorf("merged = %+v, want the observed window only", m)
	}
}
