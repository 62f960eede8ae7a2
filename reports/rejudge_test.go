package reports

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/history"
)

// capture is a target that keeps every execution it hands back, by seed.
type capture struct {
	contracts.Target
	exs map[uint64]contracts.Execution
}

func (c *capture) Execute(ctx context.Context, run contracts.Run) (contracts.Execution, error) {
	ex, err := c.Target.Execute(ctx, run)
	if c.exs == nil {
		c.exs = map[uint64]contracts.Execution{}
	}
	c.exs[run.Seed] = ex
	return ex, err
}

// judgedRun evaluates contract id on the embedded target (with the named
// sabotage, if any) and returns its entry with what it was judged on.
func judgedRun(t *testing.T, id, sabotage string) Entry {
	t.Helper()
	c, err := contracts.Lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	tgt := &capture{Target: contracts.MemTarget{}}
	var r contracts.Result
	if sabotage == "" {
		r, err = contracts.Evaluate(context.Background(), tgt, c, contracts.Options{Seed: 1})
	} else {
		var sab *contracts.Sabotage
		for i := range c.Sabotages {
			if c.Sabotages[i].Name == sabotage {
				sab = &c.Sabotages[i]
			}
		}
		if sab == nil {
			t.Fatalf("%s has no sabotage %s", id, sabotage)
		}
		r, err = contracts.EvaluateSabotage(context.Background(), tgt, c, *sab, contracts.Options{Seed: 1})
	}
	if err != nil {
		t.Fatal(err)
	}
	ex := tgt.exs[r.Seed]
	e := NewEntry(r, ex.Ops, Evidence{})
	e.Judged = []Recorded{{Judged: Judged{Contract: id, Target: r.Target, Seed: r.Seed, Sabotage: sabotage, Final: ex.Final, Check: ex.Check}, Ops: ex.Ops}}
	return e
}

func writeRun(t *testing.T, es ...Entry) (string, *Document) {
	t.Helper()
	d := NewDocument(1, "durachk run", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	d.AddTarget(contracts.MemTarget{})
	for i, e := range es {
		d.Place(i, e)
	}
	d.Complete = true
	p := filepath.Join(t.TempDir(), "result.json")
	if err := d.WriteJSON(p); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, back
}

// A run's --out re-judges to the run's verdicts and violations; a final
// state or history changed after the run does not.
func TestRejudgeFromTheFilesAlone(t *testing.T) {
	viol := judgedRun(t, "durability.power-loss", "no-persistence")
	pass := judgedRun(t, "lease.redelivery", "")
	if viol.Result.Verdict != contracts.Violated || pass.Result.Verdict != contracts.Pass {
		t.Fatalf("verdicts %s, %s: want a violation and a pass", viol.Result.Verdict, pass.Result.Verdict)
	}
	p, doc := writeRun(t, pass, viol)
	dir := filepath.Dir(p)
	ev := doc.EvidenceFor("mem", "durability.power-loss")
	if ev.Final == "" || ev.HistoryOps != viol.Result.HistoryLen || ev.HistoryOps != ev.HistoryTotal {
		t.Fatalf("evidence %+v: want a final-state file and the whole history (%d operations)", ev, viol.Result.HistoryLen)
	}
	// The history file is the whole history: durachk check takes it.
	ops, err := history.ReadFile(filepath.Join(dir, ev.History))
	if err != nil || len(ops) != viol.Result.HistoryLen {
		t.Fatalf("history file: %d operations (%v), want %d", len(ops), err, viol.Result.HistoryLen)
	}
	rjs := Rejudge(doc, dir)
	if len(rjs) != 2 || rjs[0].Contract != "durability.power-loss" {
		t.Fatalf("re-judged %d results, the first %s: want 2, the violation first", len(rjs), rjs[0].Contract)
	}
	for _, rj := range rjs {
		if rj.Err != nil || rj.Differs != "" || rj.Again.Verdict != rj.Run.Verdict {
			t.Errorf("%s: err %v, differs %q, verdict %s judged again %s", rj.Contract, rj.Err, rj.Differs, rj.Run.Verdict, rj.Again.Verdict)
		}
	}
	if v := rjs[0].Again.Violations; len(v) == 0 || v[0].Property != contracts.PropLost || len(v[0].Witness) == 0 {
		t.Errorf("violations judged again: %+v, want lost with its witness", v)
	}
	if a := rjs[0].Checker.Properties[contracts.PropLost]; a.Valid != "false" || a.Count != viol.Result.Stats.Violations["lost"] {
		t.Errorf("lost answers %+v, want false ×%d", a, viol.Result.Stats.Violations["lost"])
	}

	// Negative controls: what the files say is what is judged.
	final := filepath.Join(dir, ev.Final)
	orig, _ := os.ReadFile(final)
	tamper := func(name string, f func(j *Judged), want string) {
		t.Run(name, func(t *testing.T) {
			var j Judged
			if err := json.Unmarshal(orig, &j); err != nil {
				t.Fatal(err)
			}
			f(&j)
			b, _ := json.Marshal(j)
			if err := os.WriteFile(final, b, 0o644); err != nil {
				t.Fatal(err)
			}
			defer os.WriteFile(final, orig, 0o644)
			rj := Rejudge(doc, dir)[0]
			if rj.Err != nil || !strings.Contains(rj.Differs, want) {
				t.Errorf("err %v, differs %q: want %q", rj.Err, rj.Differs, want)
			}
		})
	}
	tamper("the witnessed lost jobs back in the broker", func(j *Judged) { j.Final.Broker.Queued = append(j.Final.Broker.Queued, lostJobs(viol)...) }, "violations or their witnesses; stats")
	tamper("an outage recorded", func(j *Judged) { j.Unavailable = "broker unavailable for 4.0 s" }, "verdict violation, judged again unknown")
	tamper("a cluster that did not settle", func(j *Judged) { j.Unsettled = "no primary known" }, "verdict violation, judged again unknown")
	t.Run("a history cut short", func(t *testing.T) {
		h := filepath.Join(dir, ev.History)
		b, _ := os.ReadFile(h)
		defer os.WriteFile(h, b, 0o644)
		lines := strings.SplitAfter(string(b), "\n")
		os.WriteFile(h, []byte(strings.Join(lines[:len(lines)/2], "")), 0o644)
		if rj := Rejudge(doc, dir)[0]; rj.Err == nil || errors.Is(rj.Err, ErrNotRecorded) {
			t.Errorf("a history cut in half re-judged: err %v, differs %q", rj.Err, rj.Differs)
		}
	})
	t.Run("no final-state file", func(t *testing.T) {
		os.Remove(final)
		defer os.WriteFile(final, orig, 0o644)
		if rj := Rejudge(doc, dir)[0]; rj.Err == nil || errors.Is(rj.Err, ErrNotRecorded) {
			t.Errorf("a missing final-state file: err %v", rj.Err)
		}
	})
}

func lostJobs(e Entry) []string {
	var out []string
	for _, v := range e.Result.Violations {
		out = append(out, v.Job)
	}
	return out
}

// The final-state files hold no credential: a secret in the final state and
// the history is scrubbed like the rest of the run.
func TestJudgedFilesScrubbed(t *testing.T) {
	e := judgedRun(t, "lease.redelivery", "")
	e.Judged[0].Judged.Final.Broker.Queued = []string{"job-" + planted}
	e.Judged[0].Judged.Unsettled = "could not reach redis://u:" + planted + "@127.0.0.1"
	e.Judged[0].Ops = append(e.Judged[0].Ops, history.Op{Process: "controller", Type: history.Info, F: history.Fault, Value: planted})
	e.full = e.Judged[0].Ops
	if err := e.Scrub(planted); err != nil {
		t.Fatal(err)
	}
	p, _ := writeRun(t, e)
	n := 0
	_ = filepath.Walk(filepath.Dir(p), func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			n++
			if b, _ := os.ReadFile(path); strings.Contains(string(b), planted) {
				t.Errorf("%s holds the planted secret", path)
			}
		}
		return nil
	})
	if n != 3 {
		t.Errorf("%d files, want result.json, the history and its final state", n)
	}
}

// Validate keeps the final-state files in histories/.
func TestFinalFilesStayInHistories(t *testing.T) {
	for _, bad := range []Evidence{{Final: "../etc/passwd"}, {TrialFinals: map[uint64]string{3: "/tmp/x.final.json"}}, {Final: "histories/../x"}} {
		d := synthDoc()
		k := Key("mem", "lease.redelivery")
		ev := *d.Evidence[k]
		ev.Final, ev.TrialFinals = bad.Final, bad.TrialFinals
		d.Evidence[k] = &ev
		if err := d.Validate(); err == nil || !errors.Is(err, ErrBadResult) {
			t.Errorf("evidence %+v: Validate = %v, want ErrBadResult", bad, err)
		}
	}
}

// A run recorded on a private Redis cluster (fencing.failover: lost and the
// contract's own token_reissued, with the cluster's context on each lost
// job's witness) re-judged from the files a run writes is the same result.
func TestRejudgeClusterRun(t *testing.T) {
	base := filepath.Join("..", "contracts", "testdata", "redis-async-fencing-failover-seed1")
	ops, err := history.ReadFile(base + ".jsonl")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(base + ".final.json")
	if err != nil {
		t.Fatal(err)
	}
	var j Judged
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	c, err := contracts.Lookup(j.Contract)
	if err != nil {
		t.Fatal(err)
	}
	r := contracts.Result{Contract: c.ID, Target: "mem", Seed: j.Seed}
	contracts.Judge(&r, c, contracts.Execution{Ops: ops, Final: j.Final, Check: j.Check})
	if r.Verdict != contracts.Violated || r.Stats.Violations[string(contracts.PropTokenReissued)] == 0 || r.Cluster == nil {
		t.Fatalf("the recorded run: %s %v, cluster %v: want lost and token_reissued on a cluster", r.Verdict, r.Stats.Violations, r.Cluster)
	}
	e := NewEntry(r, ops, Evidence{})
	j.Target = "mem"
	e.Judged = []Recorded{{Judged: j, Ops: ops}}
	p, doc := writeRun(t, e)
	rj := Rejudge(doc, filepath.Dir(p))[0]
	if rj.Err != nil || rj.Differs != "" {
		t.Fatalf("re-judged: err %v, differs %q", rj.Err, rj.Differs)
	}
	if n := rj.Again.Stats.Violations[string(contracts.PropTokenReissued)]; n != r.Stats.Violations[string(contracts.PropTokenReissued)] {
		t.Errorf("token_reissued ×%d judged again, the run ×%d", n, r.Stats.Violations[string(contracts.PropTokenReissued)])
	}
}
