package contracts

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/pipeline"
)

// judgeOps: job a accepted and committed; b accepted and never finished;
// with healthyOpen, the relay's circuit opens while nothing faulted its
// channel (a violation the history alone proves).
func judgeOps(t *testing.T, healthyOpen bool) []history.Op {
	t.Helper()
	var ops []history.Op
	seq := map[string]int64{}
	add := func(o history.Op) {
		seq[o.Process]++
		o.T, o.Seq = int64(len(ops)+1), seq[o.Process]
		ops = append(ops, o)
	}
	for _, j := range []string{"a", "b"} {
		m, err := json.Marshal(pipeline.JobMeta{Tenant: "acme", Doc: "doc-" + j, Version: 1, MaxAttempts: 3, Hash: "h-" + j})
		if err != nil {
			t.Fatal(err)
		}
		key := "acme:doc-" + j + ":v1"
		add(history.Op{Process: "producer", Type: history.Invoke, F: history.Enqueue, Job: j, Key: key, Value: string(m)})
		add(history.Op{Process: "producer", Type: history.OK, F: history.Enqueue, Job: j, Key: key})
	}
	key := "acme:doc-a:v1"
	add(history.Op{Process: "w1", Type: history.Invoke, F: history.Lease})
	add(history.Op{Process: "w1", Type: history.OK, F: history.Lease, Job: "a", Key: key, Token: 1, Attempt: 1, Value: "10000"})
	for _, f := range []history.F{history.Fence, history.Extract, history.Commit, history.Ack} {
		add(history.Op{Process: "w1", Type: history.Invoke, F: f, Job: "a", Key: key, Token: 1})
		v := ""
		if f == history.Commit {
			v = "new"
		}
		add(history.Op{Process: "w1", Type: history.OK, F: f, Job: "a", Key: key, Token: 1, Value: v})
	}
	if healthyOpen {
		add(history.Op{Process: "relay", Type: history.Info, F: history.Circuit, Value: "open"})
	}
	return ops
}

func judgeFinal(queued ...string) Final {
	f := Final{Drained: len(queued) == 0, Store: pipeline.State{Results: []pipeline.Result{{Key: "acme:doc-a:v1", JobID: "a", Tenant: "acme", Hash: "h-a", Token: 1, EventID: "ev:a"}},
		Events: []pipeline.Event{{ID: "ev:a", Key: "acme:doc-a:v1", JobID: "a", Published: true}}}}
	f.Broker.Queued = queued
	if len(queued) == 0 {
		// b finished too, as far as the final state tells: cancelled.
		f.Store.Cancelled = []string{"b"}
	}
	return f
}

// The engine's verdict: a cluster that did not settle, then a broker gone
// (its violations dropped), then any violation, then anything undecided, a
// run that did not drain, a claim not exercised; else pass. A violation
// wins over every kind of unknown the run itself shows.
func TestJudgePrecedence(t *testing.T) {
	notExercised := func(Stats) string { return "the run did not exercise the claim (test)" }
	for _, tt := range []struct {
		name       string
		ex         Execution
		exercised  func(Stats) string
		verdict    Verdict
		reason     string
		violations bool
	}{
		{"a violation and a job still in the broker", Execution{Ops: judgeOps(t, true), Final: judgeFinal("b")}, nil, Violated, "circuit_opened_on_healthy_channel", true},
		{"a violation in a run that did not drain", Execution{Ops: judgeOps(t, true), Final: func() Final { f := judgeFinal(); f.Drained = false; return f }()}, nil, Violated, "circuit_opened_on_healthy_channel", true},
		{"a violation in a run that did not exercise the claim", Execution{Ops: judgeOps(t, true), Final: judgeFinal()}, notExercised, Violated, "circuit_opened_on_healthy_channel", true},
		{"a job still in the broker", Execution{Ops: judgeOps(t, false), Final: judgeFinal("b")}, nil, Unknown, "job b is still in the broker", false},
		{"a run that did not drain", Execution{Ops: judgeOps(t, false), Final: func() Final { f := judgeFinal(); f.Drained = false; return f }()}, nil, Unknown, "time limit", false},
		{"a claim not exercised", Execution{Ops: judgeOps(t, false), Final: judgeFinal()}, notExercised, Unknown, "did not exercise", false},
		{"a violation in a cluster that did not settle", Execution{Ops: judgeOps(t, true), Final: judgeFinal(), Unsettled: "no primary"}, nil, Unknown, "did not settle", true},
		{"a violation in a run cut short by the broker", Execution{Ops: judgeOps(t, true), Final: judgeFinal(), Unavailable: "broker unavailable for 4.0 s"}, nil, Unknown, "broker unavailable", false},
		{"clean", Execution{Ops: judgeOps(t, false), Final: judgeFinal()}, nil, Pass, "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var r Result
			judge(&r, tt.ex, tt.exercised)
			if r.Verdict != tt.verdict || !strings.Contains(r.Reason, tt.reason) || (len(r.Violations) > 0) != tt.violations {
				t.Errorf("verdict %s (%s), %d violations; want %s (%q), violations %v", r.Verdict, r.Reason, len(r.Violations), tt.verdict, tt.reason, tt.violations)
			}
		})
	}
}

// withWitness is a violation of p with a witness.
func withWitness(p Property) Violation {
	return Violation{Property: p, Job: "a", Witness: []history.Op{{Process: "w1", Type: history.OK, F: history.Lease, Job: "a"}}}
}

// A sabotage is caught only by a violation verdict raised by every property
// it declares, each with a witness.
func TestCaught(t *testing.T) {
	s := Sabotage{Name: "s", Raises: []Property{PropLost, PropDuplicateEffect}}
	for _, tt := range []struct {
		name string
		r    Result
		s    Sabotage
		ok   bool
		why  string
	}{
		{"every declared property, a violation verdict", Result{Verdict: Violated, Violations: []Violation{withWitness(PropLost), withWitness(PropDuplicateEffect)}}, s, true, ""},
		{"and more than declared", Result{Verdict: Violated, Violations: []Violation{withWitness(PropLost), withWitness(PropDLQLeak), withWitness(PropDuplicateEffect)}}, s, true, ""},
		{"every declared property, but the verdict unknown", Result{Verdict: Unknown, Reason: "the cluster did not settle after the last fault: no primary",
			Violations: []Violation{withWitness(PropLost), withWitness(PropDuplicateEffect)}}, s, false, "verdict is unknown, not violation (the cluster did not settle"},
		{"every declared property, but the verdict pass", Result{Verdict: Pass, Violations: []Violation{withWitness(PropLost), withWitness(PropDuplicateEffect)}}, s, false, "verdict is pass"},
		{"one declared property silent", Result{Verdict: Violated, Violations: []Violation{withWitness(PropLost), withWitness(PropDLQLeak)}}, s, false,
			"must raise duplicate_effect; raised lost, dlq_leak (verdict violation)"},
		{"a declared property without a witness", Result{Verdict: Violated, Violations: []Violation{withWitness(PropLost), {Property: PropDuplicateEffect, Job: "a"}}}, s, false,
			"must raise duplicate_effect"},
		{"nothing raised", Result{Verdict: Pass}, s, false, "must raise lost, duplicate_effect; raised nothing (verdict pass)"},
		{"a sabotage that declares nothing", Result{Verdict: Violated, Violations: []Violation{withWitness(PropLost)}}, Sabotage{Name: "none"}, false, "declares no property"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ok, why := Caught(tt.r, tt.s)
			if ok != tt.ok || !strings.Contains(why, tt.why) {
				t.Errorf("Caught = %v, %q; want %v, %q", ok, why, tt.ok, tt.why)
			}
		})
	}
}

// unsettled is the embedded target reporting, after every run, that its
// cluster did not settle: each run's verdict is unknown, its violations kept.
type unsettled struct {
	MemTarget
	mu    sync.Mutex
	seeds []uint64
}

func (u *unsettled) Execute(ctx context.Context, run Run) (Execution, error) {
	u.mu.Lock()
	u.seeds = append(u.seeds, run.Seed)
	u.mu.Unlock()
	ex, err := u.MemTarget.Execute(ctx, run)
	ex.Unsettled = "node n2 would not rejoin (test)"
	return ex, err
}

// Selftest fails on a sabotaged run whose verdict is not a violation, though
// the declared properties fired with witnesses: each seed is tried three
// times, never on a seed another seed of the sabotage takes.
func TestSelfTestFailsOnAVerdictNotViolation(t *testing.T) {
	c, err := Lookup("lease.redelivery")
	if err != nil {
		t.Fatal(err)
	}
	tg := &unsettled{}
	rs, err := SelfTest(context.Background(), tg, []*Contract{c}, Options{Seed: 1, Trials: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Caught || r.Result.Verdict != Unknown || r.CaughtOn() != 0 || len(r.Seeds) != 2 {
			t.Errorf("%s: caught %v on %d of %d seeds, verdict %s; want caught on none of 2, unknown", r.Sabotage.Name, r.Caught, r.CaughtOn(), len(r.Seeds), r.Result.Verdict)
		}
		if !strings.Contains(r.Why, "not violation") {
			t.Errorf("%s: why %q, want it to say the verdict is not a violation", r.Sabotage.Name, r.Why)
		}
		for i, sd := range r.Seeds {
			// Seed 1+i, and two more three runs apart (each try's own runs
			// step by the two seeds).
			want := []uint64{1 + uint64(i), 1 + uint64(i) + 6, 1 + uint64(i) + 12}
			if sd.Seed != 1+uint64(i) || !slices.Equal(sd.Ran, want) {
				t.Errorf("%s seed %d: ran %v, want %v", r.Sabotage.Name, sd.Seed, sd.Ran, want)
			}
		}
	}
	err = Missed(rs)
	if err == nil || !strings.Contains(err.Error(), "lease.redelivery/ack-before-commit on mem, not caught on 2 of 2 seeds (seed 1, 2)") {
		t.Errorf("Missed = %v", err)
	}
	if n := len(tg.seeds); n != len(c.Sabotages)*2*3 {
		t.Errorf("%d runs, want 3 per seed", n)
	}
}

// onSeed runs the reference pipeline, not the sabotage, on one seed: the
// sabotage goes uncaught on that seed only.
type onSeed struct {
	MemTarget
	clean uint64
}

func (o onSeed) Execute(ctx context.Context, run Run) (Execution, error) {
	if run.Seed == o.clean {
		run.Sabotage = nil
	}
	return o.MemTarget.Execute(ctx, run)
}

// With n seeds, each sabotage runs on n successive seeds and is caught only
// when every one of them is.
func TestSelfTestSeeds(t *testing.T) {
	cs, err := SelfTestContracts([]string{"retry.bounded", "dlq.redacted"})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := SelfTest(context.Background(), MemTarget{}, cs, Options{Seed: 4, Trials: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		var seeds []uint64
		for _, sd := range r.Seeds {
			seeds = append(seeds, sd.Seed)
		}
		if !r.Caught || r.CaughtOn() != 3 || !slices.Equal(seeds, []uint64{4, 5, 6}) || r.Result.Seed != 6 {
			t.Errorf("%s/%s: caught %v on %d seeds %v (last run seed %d), want on 3: 4, 5, 6", r.Contract, r.Sabotage.Name, r.Caught, r.CaughtOn(), seeds, r.Result.Seed)
		}
	}
	if err := Missed(rs); err != nil {
		t.Fatal(err)
	}
	rs, err = SelfTest(context.Background(), onSeed{clean: 5}, cs, Options{Seed: 4, Trials: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Caught || r.CaughtOn() != 2 || r.Seeds[1].Caught || r.Seeds[1].Verdict != Pass || r.Result.Seed != 5 {
			t.Errorf("%s/%s with seed 5 clean: caught %v on %d seeds, seed 5 %+v, result of seed %d", r.Contract, r.Sabotage.Name, r.Caught, r.CaughtOn(), r.Seeds[1], r.Result.Seed)
		}
	}
	err = Missed(rs)
	if err == nil || !strings.Contains(err.Error(), "retry.bounded/unbounded-retry on mem, not caught on 1 of 3 seeds (seed 5) (must raise") {
		t.Errorf("Missed = %v", err)
	}
}

// An unknown run of one seed is tried again on another; the seed is caught
// when that one is.
type unknownOnce struct {
	MemTarget
	unknown uint64
}

func (u unknownOnce) Execute(ctx context.Context, run Run) (Execution, error) {
	ex, err := u.MemTarget.Execute(ctx, run)
	if run.Seed == u.unknown {
		ex.Unsettled = "node n2 would not rejoin (test)"
	}
	return ex, err
}

func TestSelfTestRetriesAnUnknownSeed(t *testing.T) {
	cs, err := SelfTestContracts([]string{"dlq.redacted"})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := SelfTest(context.Background(), unknownOnce{unknown: 2}, cs, Options{Seed: 1, Trials: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if !r.Caught || !slices.Equal(r.Seeds[1].Ran, []uint64{2, 8}) || r.Seeds[0].Ran != nil {
			t.Errorf("%s: caught %v, seeds %+v; want seed 2 tried again on 8 and caught", r.Sabotage.Name, r.Caught, r.Seeds)
		}
	}
}
