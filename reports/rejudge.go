package reports

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/durachk/durachk/checker"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/plans"
)

// ErrNotRecorded marks a result whose verdict cannot be re-judged from its
// files: nothing ran (skipped), the broker was never reached, an exploration
// (judged over rounds), or a document written before final states were kept.
var ErrNotRecorded = errors.New("not recorded for re-judging")

// ContractOf returns the contract whose verdict j records.
func ContractOf(j Judged) (*contracts.Contract, error) {
	switch {
	case strings.HasPrefix(j.Contract, "scenario/"):
		return contracts.LookupScenario(j.Contract)
	case strings.HasPrefix(j.Contract, "plan/") || j.Contract == "plan":
		if len(j.Plan) == 0 {
			return nil, fmt.Errorf("%s: the final state holds no plan", j.Contract)
		}
		p, err := plans.Parse(j.Plan, j.Contract)
		if err != nil {
			return nil, err
		}
		return p.AsContract(j.Contract)
	}
	return contracts.Lookup(j.Contract)
}

// JudgeAgain judges ops with j as the engine judged the run (contracts.Judge):
// the result (verdict, reason, violations with their witnesses, stats,
// metrics, cluster facts) and the checker's answer per property.
func JudgeAgain(j Judged, ops []history.Op) (contracts.Result, checker.Result, error) {
	c, err := ContractOf(j)
	if err != nil {
		return contracts.Result{}, checker.Result{}, err
	}
	res := contracts.Result{Contract: j.Contract, Target: j.Target, Seed: j.Seed, Sabotage: j.Sabotage}
	cr := contracts.Judge(&res, c, contracts.Execution{Ops: ops, Final: j.Final, Check: j.Check, Unsettled: j.Unsettled, Unavailable: j.Unavailable, OverBudget: j.OverBudget})
	return res, cr, nil
}

// JudgeFile re-judges the final-state file at path with its history beside it.
func JudgeFile(path string) (Judged, contracts.Result, checker.Result, error) {
	j, err := ReadJudged(path)
	if err != nil {
		return j, contracts.Result{}, checker.Result{}, err
	}
	hp, err := j.historyBeside(path)
	if err != nil {
		return j, contracts.Result{}, checker.Result{}, err
	}
	ops, err := history.ReadFile(hp)
	if err != nil {
		return j, contracts.Result{}, checker.Result{}, fmt.Errorf("history of %s: %w", path, err)
	}
	if len(ops) != j.HistoryOps {
		return j, contracts.Result{}, checker.Result{}, fmt.Errorf("history of %s: %d operations, the final state says %d", path, len(ops), j.HistoryOps)
	}
	res, cr, err := JudgeAgain(j, ops)
	return j, res, cr, err
}

// Rejudgement is one verdict of a run judged again from its files alone.
type Rejudgement struct {
	Target   string `json:"target"`
	Contract string `json:"contract"`
	Seed     uint64 `json:"seed"`
	// Trial: the verdict of one trial of the result (Trials), not the
	// result's own.
	Trial bool `json:"trial,omitempty"`
	// Run is the verdict, reason and violations the run reported; Again what
	// judging its files gives, with the checker's answer per property.
	Run     contracts.Result `json:"run"`
	Again   contracts.Result `json:"judged_again"`
	Checker checker.Result   `json:"checker"`
	// File is the final-state file judged (relative to result.json).
	File string `json:"final,omitempty"`
	// Differs says what differs from the run's report ("" when nothing).
	Differs string `json:"differs,omitempty"`
	// Err says why it could not be judged (ErrNotRecorded for a result
	// nothing was recorded for; any other error: a file missing or broken).
	Err error `json:"-"`
}

// Rejudge judges every result of d (read from dir), and every trial of
// each, again from the histories and final states beside result.json, and
// compares each with what the run reported: the verdict, the violations with
// their witnesses, and for a result its stats, metrics and cluster facts too;
// the reason the run gave must hold the one judged again (a trial's or a
// retried seed's note surrounds it).
func Rejudge(d *Document, dir string) []Rejudgement {
	var out []Rejudgement
	for _, i := range d.ReadingOrder() {
		r := d.Results[i]
		ev := d.EvidenceFor(r.Target, r.Contract)
		rj := Rejudgement{Target: r.Target, Contract: r.Contract, Seed: r.Seed, Run: r, File: ev.Final}
		switch {
		case r.Verdict == contracts.Skipped:
			rj.Err = fmt.Errorf("%w: skipped, nothing ran", ErrNotRecorded)
		case r.Contract == "explore" || strings.HasPrefix(r.Contract, "explore/"):
			rj.Err = fmt.Errorf("%w: an exploration's results are judged over its rounds; run its plan (original.yaml, shrunk.yaml) to judge one", ErrNotRecorded)
		case ev.Final == "" && ev.History == "":
			rj.Err = fmt.Errorf("%w: no execution was recorded (%s)", ErrNotRecorded, r.Reason)
		case ev.Final == "":
			rj.Err = fmt.Errorf("%w: no final-state file (a result.json written before durachk kept them)", ErrNotRecorded)
		default:
			_, again, cr, err := JudgeFile(filepath.Join(dir, filepath.FromSlash(ev.Final)))
			rj.Again, rj.Checker, rj.Err = again, cr, err
			if err == nil {
				rj.Differs = differs(r, again, true)
			}
		}
		out = append(out, rj)
		for _, tr := range r.Trials {
			if len(r.Trials) < 2 {
				break
			}
			f := ev.TrialFinals[tr.Seed]
			run := contracts.Result{Target: r.Target, Contract: r.Contract, Seed: tr.Seed, Verdict: tr.Verdict, Reason: tr.Reason, Violations: tr.Violations}
			tj := Rejudgement{Target: r.Target, Contract: r.Contract, Seed: tr.Seed, Trial: true, Run: run, File: f}
			switch {
			case rj.Err != nil && f == "":
				tj.Err = rj.Err
			case f == "":
				tj.Err = fmt.Errorf("%w: this trial's execution was not kept (a broker never reached, or a run that kept only the trials its result could show)", ErrNotRecorded)
			case f == rj.File:
				// The trial the result shows: judged above.
				tj.Again, tj.Checker, tj.Err = rj.Again, rj.Checker, rj.Err
			default:
				_, tj.Again, tj.Checker, tj.Err = JudgeFile(filepath.Join(dir, filepath.FromSlash(f)))
			}
			if tj.Err == nil {
				tj.Differs = differs(run, tj.Again, false)
			}
			out = append(out, tj)
		}
	}
	return out
}

// differs says what differs between what a run reported and what its files
// judge to, or "". whole: compare the stats, metrics, history length and
// cluster facts too (a trial's record holds only its verdict, reason and
// violations).
func differs(run, again contracts.Result, whole bool) string {
	var d []string
	if run.Verdict != again.Verdict {
		d = append(d, fmt.Sprintf("verdict %s, judged again %s", run.Verdict, again.Verdict))
	}
	if again.Reason != "" && !strings.Contains(run.Reason, again.Reason) {
		d = append(d, fmt.Sprintf("reason %q, judged again %q", Clip(run.Reason), Clip(again.Reason)))
	}
	same := func(what string, a, b any) {
		if !sameJSON(a, b) {
			d = append(d, what)
		}
	}
	same("violations or their witnesses", run.Violations, again.Violations)
	if whole {
		same("stats", run.Stats, again.Stats)
		same("metrics", run.Metrics, again.Metrics)
		same("cluster facts", run.Cluster, again.Cluster)
		if run.HistoryLen != again.HistoryLen {
			d = append(d, fmt.Sprintf("history of %d operations, judged again %d", run.HistoryLen, again.HistoryLen))
		}
	}
	return strings.Join(d, "; ")
}

// sameJSON compares two values as result.json holds them: through JSON, an
// empty list or object the same as none.
func sameJSON(a, b any) bool {
	norm := func(v any) []byte {
		x, _ := json.Marshal(v)
		var y any
		_ = json.Unmarshal(x, &y)
		z, _ := json.Marshal(noEmpty(y))
		return z
	}
	return bytes.Equal(norm(a), norm(b))
}

func noEmpty(v any) any {
	switch x := v.(type) {
	case []any:
		if len(x) == 0 {
			return nil
		}
		for i := range x {
			x[i] = noEmpty(x[i])
		}
	case map[string]any:
		if len(x) == 0 {
			return nil
		}
		for k := range x {
			x[k] = noEmpty(x[k])
		}
	}
	return v
}
