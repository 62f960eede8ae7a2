package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/durachk/durachk/checker"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/pipeline"
	"github.com/durachk/durachk/reports"
)

// selftest --seeds n runs each sabotage on n seeds and says per sabotage how
// many caught it.
func TestSelftestSeeds(t *testing.T) {
	var out bytes.Buffer
	err := Selftest(t.Context(), RunOptions{Contracts: []string{"retry.bounded", "dlq.redacted"}, Seed: 3, Seeds: 4}, &out)
	if err != nil {
		t.Fatalf("selftest --seeds 4: %v\n%s", err, out.String())
	}
	rows := regexp.MustCompile(`(?m)^mem +(retry\.bounded|dlq\.redacted) +\S+ +\S+ +yes 4/4 +violation `).FindAllString(out.String(), -1)
	if len(rows) != 5 { // retry.bounded's four sabotages, dlq.redacted's one
		t.Errorf("%d rows caught on 4 of 4 seeds, want 5:\n%s", len(rows), out.String())
	}
	if !strings.Contains(out.String(), "5 of 5 sabotages caught on every one of 4 seeds (3 to 6)") {
		t.Errorf("no summary naming the seeds:\n%s", out.String())
	}
	for _, n := range []int{-1, maxSeeds + 1} {
		if err := Selftest(t.Context(), RunOptions{Seeds: n}, &out); Code(err) != ExitConfig || !strings.Contains(err.Error(), "--seeds") {
			t.Errorf("--seeds %d: exit %d (%v), want 3 naming --seeds", n, Code(err), err)
		}
	}
}

// unsettledMem: every run of the embedded target reports a cluster that did
// not settle, so each sabotaged run's verdict is unknown though its
// violations stand.
type unsettledMem struct{ contracts.MemTarget }

func (unsettledMem) Execute(ctx context.Context, run contracts.Run) (contracts.Execution, error) {
	ex, err := contracts.MemTarget{}.Execute(ctx, run)
	ex.Unsettled = "node n2 would not rejoin (test)"
	return ex, err
}

// selftest fails (exit 1) on a sabotaged run whose verdict is not a
// violation, though the property it declares fired with a witness.
func TestSelftestFailsOnAVerdictNotViolation(t *testing.T) {
	tg := &target{Target: unsettledMem{}, spec: "mem", info: reports.DescribeTarget(unsettledMem{}, "mem", ""), scale: 1}
	var out bytes.Buffer
	err := Selftest(t.Context(), RunOptions{Contracts: []string{"dlq.redacted"}, Seed: 1, Seeds: 2, resolved: []*target{tg}}, &out)
	if Code(err) != ExitViolation || !strings.Contains(err.Error(), "dlq.redacted/raw-error-in-dlq on mem, not caught on 2 of 2 seeds (seed 1, 2)") {
		t.Fatalf("exit %d (%v), want 1 naming the sabotage and its seeds\n%s", Code(err), err, out.String())
	}
	for _, want := range []string{"NO 0/2  unknown  dlq_leak", "not caught: dlq.redacted/raw-error-in-dlq on mem, seed 2 (runs ended unknown; seeds tried 2, 8, 14): raised dlq_leak, but the verdict is unknown, not violation",
		"0 of 1 sabotages caught"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// writeHistory writes ops (t and seq filled in) and, unless final is nil, a
// final-state file; it returns their paths ("" for no final state).
func writeHistory(t *testing.T, ops []history.Op, final *checker.Final) (string, string) {
	t.Helper()
	dir := t.TempDir()
	seq := map[string]int64{}
	for i := range ops {
		seq[ops[i].Process]++
		ops[i].T, ops[i].Seq = int64(i+1), seq[ops[i].Process]
	}
	h := filepath.Join(dir, "history.jsonl")
	if err := history.WriteFile(h, ops); err != nil {
		t.Fatal(err)
	}
	if final == nil {
		return h, ""
	}
	f := filepath.Join(dir, "final.json")
	b, err := json.Marshal(checker.FinalFile{Final: *final})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return h, f
}

// durachk check exits with the merged answer: 1 when any property is false,
// whatever else is unknown; 2 when none is false and one is unknown; 0 when
// every one holds or is not checked.
func TestCheckExitFollowsTheMerge(t *testing.T) {
	meta := `{"tenant":"acme","doc":"doc-a","v":1,"max":3,"hash":"h"}`
	key := "acme:doc-a:v1"
	accepted := func() []history.Op {
		return []history.Op{
			{Process: "producer", Type: history.Invoke, F: history.Enqueue, Job: "a", Key: key, Value: meta},
			{Process: "producer", Type: history.OK, F: history.Enqueue, Job: "a", Key: key},
		}
	}
	done := func() []history.Op {
		ops := accepted()
		ops = append(ops, history.Op{Process: "w1", Type: history.Invoke, F: history.Lease},
			history.Op{Process: "w1", Type: history.OK, F: history.Lease, Job: "a", Key: key, Token: 1, Attempt: 1, Value: "10000"})
		for _, f := range []history.F{history.Fence, history.Extract, history.Commit, history.Ack} {
			v := ""
			if f == history.Commit {
				v = "new"
			}
			ops = append(ops, history.Op{Process: "w1", Type: history.Invoke, F: f, Job: "a", Key: key, Token: 1},
				history.Op{Process: "w1", Type: history.OK, F: f, Job: "a", Key: key, Token: 1, Value: v})
		}
		return ops
	}
	open := history.Op{Process: "relay", Type: history.Info, F: history.Circuit, Value: "open"}
	stored := checker.Final{Drained: true, Store: pipeline.State{Results: []pipeline.Result{{Key: key, JobID: "a", Tenant: "acme", Hash: "h", Token: 1}}}}
	queued := checker.Final{Drained: true}
	queued.Broker.Queued = []string{"a"}
	for _, tt := range []struct {
		name  string
		ops   []history.Op
		final *checker.Final
		code  int
		words string
	}{
		{"true and not checked", done(), &stored, ExitPass, ": pass ("},
		{"unknown (no final state) and true", done(), nil, ExitUnknown, ": unknown ("},
		{"unknown (a job still in the broker) and true", accepted(), &queued, ExitUnknown, ": unknown ("},
		{"false and unknown (no final state)", append(done(), open), nil, ExitViolation, ": violation ("},
		{"false and unknown (a job still in the broker)", append(accepted(), open), &queued, ExitViolation, ": violation ("},
		{"false and true", append(done(), open), &stored, ExitViolation, ": violation ("},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h, f := writeHistory(t, tt.ops, tt.final)
			var out bytes.Buffer
			err := Check(CheckOptions{History: h, Final: f}, &out)
			if Code(err) != tt.code || !strings.Contains(out.String(), tt.words) {
				t.Fatalf("exit %d (%v), want %d and %q\n%s", Code(err), err, tt.code, tt.words, out.String())
			}
		})
	}
}
