package contracts

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durachk/durachk/checker"
)

// Every sabotage is a negative control of the properties it declares: it is
// caught only when each of them fires, with a witness.
func TestSelfTestSabotagesAreCaught(t *testing.T) {
	cs, err := SelfTestContracts(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if len(c.Sabotages) == 0 && !strings.HasPrefix(c.ID, "scenario/") {
			t.Errorf("%s has no sabotage: its checker cannot be shown to fail", c.ID)
		}
		for _, s := range c.Sabotages {
			t.Run(c.ID+"/"+s.Name, func(t *testing.T) {
				t.Parallel()
				if len(s.Raises) == 0 {
					t.Fatalf("sabotage %q of %s declares no property it must raise", s.Name, c.ID)
				}
				if notOnMem(t, c) {
					return // caught on real clusters and recorded histories: cluster_test.go
				}
				for seed := uint64(1); seed <= 5; seed++ {
					r, err := EvaluateSabotage(context.Background(), MemTarget{}, c, s, Options{Seed: seed})
					if err != nil {
						t.Fatalf("seed %d: %v", seed, err)
					}
					if ok, why := Caught(r, s); !ok {
						t.Errorf("sabotage %q of %s was NOT caught on seed %d: %s", s.Name, c.ID, seed, why)
					}
					if r.Sabotage != s.Name {
						t.Errorf("seed %d: result names sabotage %q, want %q", seed, r.Sabotage, s.Name)
					}
				}
			})
		}
	}
}

// Every property of the checker is the declared target of some sabotage.
func TestEveryPropertyHasASabotage(t *testing.T) {
	cs, _ := SelfTestContracts(nil)
	declared := map[Property]bool{}
	for _, c := range cs {
		for _, s := range c.Sabotages {
			for _, p := range s.Raises {
				if _, ok := checker.Lookup(p); !ok {
					t.Errorf("%s/%s declares %q, which the checker does not know", c.ID, s.Name, p)
				}
				declared[p] = true
			}
		}
	}
	for _, spec := range checker.Properties {
		if !declared[spec.Name] {
			t.Errorf("no sabotage declares %s: nothing shows it can fail", spec.Name)
		}
	}
	// The checker's description of each property names its sabotages.
	for _, c := range cs {
		for _, s := range c.Sabotages {
			for _, p := range s.Raises {
				if spec, _ := checker.Lookup(p); !strings.Contains(spec.Sabotage, c.ID+"/"+s.Name) {
					t.Errorf("checker.Properties: %s's Sabotage %q does not name %s/%s, which declares it", p, spec.Sabotage, c.ID, s.Name)
				}
			}
		}
	}
}

// The witnesses of real runs prove themselves: re-checking a violation's
// witness operations and facts alone raises the same property.
func TestSabotageWitnessesProveThemselves(t *testing.T) {
	cs, _ := SelfTestContracts(nil)
	replayed := map[Property]int{}
	for _, c := range cs {
		for _, s := range c.Sabotages {
			sab := s
			ex, err := MemTarget{}.Execute(context.Background(), Run{Contract: c.ID, Scenario: c.Scenario(1, DefaultJobs), Seed: 1, Sabotage: &sab})
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range checker.Check(ex.Ops, ex.Final, ex.Check).Violations {
				if err := checker.ReplayWitness(v, ex.Check); err != nil {
					t.Errorf("%s/%s: %v", c.ID, s.Name, err)
					continue
				}
				replayed[v.Property]++
			}
		}
	}
	for _, spec := range checker.Properties {
		if replayed[spec.Name] == 0 {
			t.Errorf("no sabotage run produced a witness of %s to replay", spec.Name)
		}
	}
}

// replayTarget makes each run of the embedded target once and replays its
// execution after: the embedded target is deterministic per seed
// (TestDeterminism), so a run made again would record the same history and
// final state. The checker, the engine's judge and selftest's Caught still
// run afresh on every replay. Safe for concurrent use.
type replayTarget struct {
	MemTarget
	mu   sync.Mutex
	runs map[string]Execution
	made int
}

func (r *replayTarget) Execute(ctx context.Context, run Run) (Execution, error) {
	sab := ""
	if run.Sabotage != nil {
		sab = run.Sabotage.Name
	}
	key := fmt.Sprintf("%s/%s/%d/%d", run.Contract, sab, run.Seed, len(run.Scenario.Jobs))
	r.mu.Lock()
	ex, ok := r.runs[key]
	r.mu.Unlock()
	if !ok {
		var err error
		if ex, err = r.MemTarget.Execute(ctx, run); err != nil {
			return ex, err
		}
		r.mu.Lock()
		if r.runs == nil {
			r.runs = map[string]Execution{}
		}
		r.runs[key] = ex
		r.made++
		r.mu.Unlock()
	}
	ex.Ops = slices.Clone(ex.Ops)
	return ex, nil
}

// Mutation test: with any one property disabled, selftest fails naming it;
// with none disabled, it passes. Not parallel: the switch is global. Each
// sabotaged run is made once and replayed to every mutant (replayTarget): what
// each mutant is judged by is the whole selftest after the run — checker,
// judge, Caught, the retries of runs that end unknown.
func TestMutationEveryPropertyIsLoadBearing(t *testing.T) {
	cs, _ := SelfTestContracts(nil)
	tg := &replayTarget{}
	rs, err := SelfTest(context.Background(), tg, cs, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := Missed(rs); err != nil {
		t.Fatalf("with no property disabled, selftest fails: %v", err)
	}
	for _, spec := range checker.Properties {
		restore := checker.DisableForTest(spec.Name)
		rs, err := SelfTest(context.Background(), tg, cs, Options{Seed: 1})
		restore()
		if err != nil {
			t.Fatal(err)
		}
		err = Missed(rs)
		if err == nil {
			t.Errorf("with %s disabled, selftest still passes: the property is not load-bearing", spec.Name)
			continue
		}
		if !strings.Contains(err.Error(), "must raise "+string(spec.Name)) && !strings.Contains(err.Error(), ", "+string(spec.Name)) {
			t.Errorf("with %s disabled, selftest fails without naming it: %v", spec.Name, err)
		}
	}
	t.Logf("%d sabotaged runs made, replayed to %d mutants", tg.made, len(checker.Properties))
}

// The boundary sabotages are load-bearing too: a checker that allows one
// attempt beyond the budget, or a 5 s slack past a deadline, fails selftest.
func TestMutationBoundaries(t *testing.T) {
	cs, _ := SelfTestContracts([]string{"retry.bounded", "cancel.terminal"})
	tg := &replayTarget{}
	for _, tt := range []struct {
		name string
		weak checker.Weakening
		want Property
	}{
		{"one attempt of slack", checker.Weakening{BudgetSlack: 1}, PropOverBudget},
		{"5 s past the deadline", checker.Weakening{DeadlineSlack: int64(5 * time.Second)}, PropAfterDeadline},
	} {
		restore := checker.WeakenForTest(tt.weak)
		rs, err := SelfTest(context.Background(), tg, cs, Options{Seed: 1})
		restore()
		if err != nil {
			t.Fatal(err)
		}
		if err := Missed(rs); err == nil || !strings.Contains(err.Error(), string(tt.want)) {
			t.Errorf("checker weakened by %s: selftest error %v, want one naming %s", tt.name, err, tt.want)
		}
	}
}

// noFaults runs scenarios without their fault plan.
type noFaults struct{ MemTarget }

func (n noFaults) Execute(ctx context.Context, run Run) (Execution, error) {
	run.Scenario.Plan.Faults = nil
	return n.MemTarget.Execute(ctx, run)
}

// The engine's "exercised" gate is load-bearing: a run of a contract whose
// claim needs faults, with none applied, is unknown, never a pass.
func TestExercisedGate(t *testing.T) {
	for _, id := range []string{"lease.redelivery", "fencing.zombie", "outbox.atomic", "outbox.relay", "durability.ack", "partition.ambiguous"} {
		c, err := Lookup(id)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Evaluate(context.Background(), noFaults{}, c, Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if r.Verdict != Unknown || !strings.Contains(r.Reason, "did not exercise") {
			t.Errorf("%s without faults: %s (%s), want unknown: the run did not exercise the claim", id, r.Verdict, r.Reason)
		}
	}
}

// The reference pipeline passes every contract and every seed scenario.
func TestSelfTestReferencePasses(t *testing.T) {
	seeds := uint64(20)
	if testing.Short() {
		seeds = 3
	}
	all := append(append([]*Contract(nil), Catalogue...), SeedScenarios...)
	for _, c := range all {
		t.Run(c.ID, func(t *testing.T) {
			t.Parallel()
			if notOnMem(t, c) {
				return
			}
			for seed := uint64(1); seed <= seeds; seed++ {
				r, err := Evaluate(context.Background(), MemTarget{}, c, Options{Seed: seed})
				if err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				if r.Verdict != Pass {
					t.Errorf("reference pipeline on %s, seed %d: %s: %s", c.ID, seed, r.Verdict, r.Reason)
					for _, v := range r.Violations[:min(3, len(r.Violations))] {
						for _, w := range v.Witness {
							t.Logf("    %s", w)
						}
					}
				}
			}
		})
	}
}

func withoutWall(rs []Result) []Result {
	out := make([]Result, len(rs))
	for i, r := range rs {
		r.Wall = 0
		out[i] = r
	}
	return out
}

func evaluateAll(t *testing.T, seed uint64, sabotaged bool) []Result {
	t.Helper()
	var rs []Result
	for _, c := range append(append([]*Contract(nil), Catalogue...), SeedScenarios...) {
		if !sabotaged {
			r, err := Evaluate(context.Background(), MemTarget{}, c, Options{Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
			continue
		}
		for _, s := range c.Sabotages {
			r, err := EvaluateSabotage(context.Background(), MemTarget{}, c, s, Options{Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
		}
	}
	return withoutWall(rs)
}

// One seed, one result: two runs with seed 7 are identical but for Wall.
func TestDeterminism(t *testing.T) {
	a, b := evaluateAll(t, 7, false), evaluateAll(t, 7, false)
	if len(a) != len(Catalogue)+len(SeedScenarios) {
		t.Fatalf("%d results", len(a))
	}
	for i := range a {
		if !reflect.DeepEqual(a[i], b[i]) {
			t.Errorf("%s: two runs with seed 7 differ:\n%s", a[i].Contract, diffResults(a[i], b[i]))
		}
	}
}

func diffResults(a, b Result) string {
	switch {
	case a.Verdict != b.Verdict:
		return fmt.Sprintf("verdict %s vs %s", a.Verdict, b.Verdict)
	case a.HistoryLen != b.HistoryLen:
		return fmt.Sprintf("history length %d vs %d", a.HistoryLen, b.HistoryLen)
	case !reflect.DeepEqual(a.Stats, b.Stats):
		return fmt.Sprintf("stats\n%+v\n%+v", a.Stats, b.Stats)
	case !reflect.DeepEqual(a.Violations, b.Violations):
		s := fmt.Sprintf("violations (%d vs %d):", len(a.Violations), len(b.Violations))
		for i := range min(len(a.Violations), len(b.Violations)) {
			if !reflect.DeepEqual(a.Violations[i], b.Violations[i]) {
				s += fmt.Sprintf("\n  #%d: %s %s %q\n   vs %s %s %q", i, a.Violations[i].Property, a.Violations[i].Job, a.Violations[i].Message,
					b.Violations[i].Property, b.Violations[i].Job, b.Violations[i].Message)
			}
		}
		return s
	case a.Reason != b.Reason:
		return fmt.Sprintf("reason %q vs %q", a.Reason, b.Reason)
	}
	return fmt.Sprintf("%+v\n%+v", a, b)
}

// A different seed gives a different run (the seed is used at all).
func TestSeedMatters(t *testing.T) {
	c, err := Lookup("lease.redelivery")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := Evaluate(context.Background(), MemTarget{}, c, Options{Seed: 7})
	b, _ := Evaluate(context.Background(), MemTarget{}, c, Options{Seed: 8})
	a.Wall, b.Wall = 0, 0
	a.Seed, b.Seed = 0, 0
	if reflect.DeepEqual(a, b) {
		t.Fatal("seeds 7 and 8 gave identical results")
	}
}

// ownWorkerMem is the embedded target posing as one that runs a worker of
// its own which declares sabotages.
type ownWorkerMem struct {
	MemTarget
	declared []string
}

func (o ownWorkerMem) OwnWorker() ([]string, bool) { return o.declared, true }

// On a target with a worker of its own, the catalogue's sabotages that break
// the reference worker are skipped with the reason, the worker's declared
// sabotages run on their contract, and one durachk does not know is skipped
// with the reason.
func TestSelfTestOwnWorker(t *testing.T) {
	c, err := Lookup("lease.redelivery")
	if err != nil {
		t.Fatal(err)
	}
	res, err := SelfTest(context.Background(), ownWorkerMem{declared: []string{"ack-before-effect", "swallow-errors", "mystery"}}, []*Contract{c}, Options{Seed: 1, Jobs: 8})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]SabotageResult{}
	for _, r := range res {
		got[r.Sabotage.Name] = r
	}
	for _, tc := range []struct {
		name, skipped string // skipped: a part of the reason; "": it ran
	}{
		{"ack-before-commit", "the target's own worker (worker.command) replaces"},
		{"ack-dropped", "the target's own worker (worker.command) replaces"},
		{"broker-delivery-limit", ""},
		{"ack-before-effect", ""},
		{"mystery", "which durachk does not know"},
	} {
		r, ok := got[tc.name]
		switch {
		case !ok:
			t.Errorf("%s: not in the self-test", tc.name)
		case tc.skipped == "" && r.Skipped():
			t.Errorf("%s: skipped (%s), want it run", tc.name, r.Result.Reason)
		case tc.skipped != "" && (!r.Skipped() || !strings.Contains(r.Result.Reason, tc.skipped)):
			t.Errorf("%s: verdict %s (%s), want skipped: ...%s...", tc.name, r.Result.Verdict, r.Result.Reason, tc.skipped)
		}
	}
	if r := got["ack-before-effect"]; r.Sabotage.Worker != "ack-before-effect" || fmt.Sprint(r.Sabotage.Raises) != "[lost]" {
		t.Errorf("ack-before-effect runs as %+v, want the worker's sabotage raising lost", r.Sabotage)
	}
	if _, ok := got["swallow-errors"]; ok {
		t.Errorf("swallow-errors ran on lease.redelivery; it belongs to retry.bounded")
	}
	// The reference pipeline's target never runs a worker's sabotage.
	r, err := EvaluateSabotageTrial(context.Background(), MemTarget{}, c, WorkerSabotages["ack-before-effect"].Sabotage, Options{Seed: 1, Jobs: 8}, 0)
	if err != nil || r.Verdict != Skipped {
		t.Errorf("a worker's sabotage on the reference pipeline: %s (%v), want skipped", r.Verdict, err)
	}
}
