package explore_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/explore"
	"github.com/durachk/durachk/plans"
)

// flaky is a target whose runs raise a property as a script says: hit(jobs,
// n) decides the n-th run (from 0) of a plan with those jobs. A hit runs the
// embedded target with a sabotage (key-without-tenant unless sab is set), a
// miss with the reference pipeline: real runs, real verdicts, only which one
// is scripted. bare, if set, says which runs go without the plan's faults.
// It is not deterministic to explore (its broker is not mem).
type flaky struct {
	mu   sync.Mutex
	hit  func(jobs string, n int) bool
	bare func(n int) bool
	// unavailable, if set, says which runs find the broker gone (unknown).
	unavailable func(n int) bool
	sab         *contracts.Sabotage
	runs        map[string]int
}

var keyWithoutTenant = func() contracts.Sabotage {
	s, err := plans.LookupSabotage("key-without-tenant")
	if err != nil {
		panic(err)
	}
	return *s
}()

func (f *flaky) Name() string       { return "flaky" }
func (f *flaky) MeasuredOn() string { return "flaky 1.0 (scripted)" }
func (f *flaky) Capabilities() adapters.Capabilities {
	c := contracts.MemTarget{}.Capabilities()
	c.Broker = "flaky"
	return c
}

func (f *flaky) Execute(ctx context.Context, run contracts.Run) (contracts.Execution, error) {
	var ids []string
	for _, j := range run.Scenario.Jobs {
		ids = append(ids, j.Job.ID)
	}
	slices.Sort(ids)
	jobs := strings.Join(ids, ",")
	f.mu.Lock()
	n := f.runs[jobs]
	f.runs[jobs]++
	f.mu.Unlock()
	switch {
	case f.unavailable != nil && f.unavailable(n):
		return contracts.Execution{}, fmt.Errorf("%w: the broker does not answer", contracts.ErrUnavailable)
	case f.hit(jobs, n):
		run.Sabotage = cmp.Or(f.sab, &keyWithoutTenant)
	case f.bare != nil && f.bare(n):
		run.Scenario.Plan.Faults = nil
	}
	return contracts.MemTarget{}.Execute(ctx, run)
}

// finding is a plan of jobs a, b, c, d that raised key_without_tenant.
func finding() *explore.Finding {
	p := &plans.Plan{Format: plans.Format, Seed: 1, Workers: 1}
	for _, id := range []string{"a", "b", "c", "d"} {
		p.Jobs = append(p.Jobs, plans.Job{ID: id, Tenant: "acme", Doc: "doc-" + id})
	}
	return &explore.Finding{Plan: p, Property: contracts.PropTenantKey}
}

// Scripts of the tests: which plans fail, how often.
var (
	// needsAB: a plan with jobs a and b fails every time; one with a only
	// fails its first run and then in one run of four; nothing else fails.
	needsAB = func(jobs string, n int) bool {
		switch {
		case strings.Contains(jobs, "a") && strings.Contains(jobs, "b"):
			return true
		case strings.Contains(jobs, "a"):
			return n == 0 || n%4 == 3
		}
		return false
	}
	// seeded: a plan with a and b fails with probability 0.95, one with a
	// only with 0.3 (a seeded random draw per run).
	seeded = func(seed uint64) func(string, int) bool {
		r := rand.New(rand.NewPCG(seed, 7))
		return func(jobs string, _ int) bool {
			u := r.Float64()
			switch {
			case strings.Contains(jobs, "a") && strings.Contains(jobs, "b"):
				return u < 0.95
			case strings.Contains(jobs, "a"):
				return u < 0.3
			}
			return false
		}
	}
)

func jobIDs(p *plans.Plan) string {
	var ids []string
	for _, j := range p.Jobs {
		ids = append(ids, j.ID)
	}
	return strings.Join(ids, ",")
}

// The shrink's decisions on a target whose failures are scripted: which
// candidates it keeps (K of N), that it goes back to the best reproducing
// plan when a smaller one does not confirm (also when the budget ends on
// it), when it stops, and the rate the replay states.
func TestShrinkDecisions(t *testing.T) {
	cases := []struct {
		name     string
		hit      func(string, int) bool
		o        explore.ShrinkOptions
		jobs     string // the plan it ends on
		rate     int    // reproduced of 10 in the replay
		stopped  string // a part of Stopped, "" for none
		confirms bool   // at least one smaller plan was confirmed
		reverted bool   // at least one smaller plan did not confirm
	}{
		{name: "3 of 3 rejects the plan that fails once in three", hit: needsAB,
			o: explore.ShrinkOptions{}, jobs: "a,b", rate: 10, confirms: true},
		{name: "1 of 3 takes it, its confirmation fails, the shrink goes back and ends on the reproducing plan", hit: needsAB,
			o: explore.ShrinkOptions{K: 1, N: 3}, jobs: "a,b", rate: 10, confirms: true, reverted: true},
		{name: "a budget that ends on a plan that does not confirm keeps the newest reproducing plan", hit: needsAB,
			// the original, {a,b} (kept by ddmin), {a}: then the budget is spent
			o: explore.ShrinkOptions{K: 1, N: 1, Tries: 3}, jobs: "a,b", rate: 10, stopped: "budget of 3 candidates", confirms: true, reverted: true},
		{name: "going back ends on the finding's plan when nothing smaller reproduces", hit: func(jobs string, n int) bool { return jobs == "a,b,c,d" || n == 0 },
			o: explore.ShrinkOptions{K: 1, N: 1}, jobs: "a,b,c,d", rate: 10, stopped: "no smaller plan reproduced", reverted: true},
		{name: "a plan that never fails again is kept as found", hit: func(string, int) bool { return false },
			o: explore.ShrinkOptions{}, jobs: "a,b,c,d", rate: 0, stopped: "kept as found"},
		{name: "nothing smaller fails: the original, confirmed by its replay", hit: func(jobs string, _ int) bool { return jobs == "a,b,c,d" },
			o: explore.ShrinkOptions{}, jobs: "a,b,c,d", rate: 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tg := &flaky{hit: tc.hit, runs: map[string]int{}}
			sh, err := explore.Shrink(context.Background(), tg, finding(), nil, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if got := jobIDs(sh.Plan); got != tc.jobs {
				t.Errorf("ended on jobs %s, want %s (stopped: %q)", got, tc.jobs, sh.Stopped)
			}
			if sh.Replay.Runs != explore.DefaultReplay || sh.Replay.Reproduced != tc.rate {
				t.Errorf("replay %s, want %d of %d", sh.Replay, tc.rate, explore.DefaultReplay)
			}
			if sh.Replay.Deterministic || !strings.Contains(sh.Replay.String(), "reproduces") {
				t.Errorf("replay text %q", sh.Replay)
			}
			if (tc.stopped == "") != (sh.Stopped == "") || !strings.Contains(sh.Stopped, tc.stopped) {
				t.Errorf("stopped %q, want %q", sh.Stopped, tc.stopped)
			}
			if tc.confirms != (sh.Confirmed > 0) || tc.reverted != (sh.Unconfirmed > 0) {
				t.Errorf("confirmed %d, unconfirmed %d; want confirmed %v, reverted %v", sh.Confirmed, sh.Unconfirmed, tc.confirms, tc.reverted)
			}
			if tc.rate > 0 && !raises(sh.Result, contracts.PropTenantKey) {
				t.Errorf("the run shown does not raise the property: %s %s", sh.Result.Verdict, sh.Result.Reason)
			}
		})
	}
}

// Seeded probabilistic failures: a plan with a and b fails in 95 % of runs,
// one with a only in 30 %. Over 20 seeds the default rule ends on a plan
// with a and b every time (a and b alone, unless a run of it missed and a
// larger one was kept); taking a candidate that failed once in one run with
// no confirmation (the rule this replaced, as close as the options allow)
// ends on a alone for some seed, whose replay then says so.
func TestShrinkSeededFailures(t *testing.T) {
	loose := 0
	for seed := range uint64(20) {
		sh, err := explore.Shrink(context.Background(), &flaky{hit: seeded(seed), runs: map[string]int{}}, finding(), nil, explore.ShrinkOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := jobIDs(sh.Plan); !strings.HasPrefix(got, "a,b") {
			t.Errorf("seed %d: ended on %s (%s), want a, b and perhaps more", seed, got, sh.Replay)
		}
		if sh.Replay.Reproduced < 7 {
			t.Errorf("seed %d: the kept plan %s", seed, sh.Replay)
		}
		one, err := explore.Shrink(context.Background(), &flaky{hit: seeded(seed), runs: map[string]int{}}, finding(), nil,
			explore.ShrinkOptions{K: 1, N: 1, MinRate: 0.01})
		if err != nil {
			t.Fatal(err)
		}
		if jobIDs(one.Plan) == "a" {
			loose++
			if one.Replay.Reproduced > 7 {
				t.Errorf("seed %d: the plan with a only %s", seed, one.Replay)
			}
		}
	}
	if loose == 0 {
		t.Error("1 of 1 without confirmation never ended on the flaky plan in 20 seeds: the test shows nothing")
	}
}

// The budget in time ends the search, not the last confirmation and the
// replay: the plan kept reproduces.
func TestShrinkTimeBudget(t *testing.T) {
	tg := &flaky{hit: needsAB, runs: map[string]int{}}
	sh, err := explore.Shrink(context.Background(), tg, finding(), nil, explore.ShrinkOptions{Time: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sh.Stopped, "time budget") {
		t.Errorf("stopped %q, want the time budget", sh.Stopped)
	}
	if sh.Replay.Reproduced != sh.Replay.Runs {
		t.Errorf("kept %s: %s", jobIDs(sh.Plan), sh.Replay)
	}
}

// The replay counts each run by what it did: raised the property, put less
// at risk than the plan's at_risk (derived from the violating run: a job
// acknowledged and unfinished at the power cut), or neither — another
// unknown is neither. Scripted: the finding's plan raises lost in its three
// candidate runs, then in 7 of the 10 replays; 2 replays run without the
// power cut (nothing at risk), 1 finds the broker gone (unknown). The budget
// of one candidate keeps the plan whole. The rate is over the 8 replays that
// put something at risk.
func TestShrinkReplayCountsNotAtRisk(t *testing.T) {
	fsync, err := plans.LookupSabotage("fsync-ignored")
	if err != nil {
		t.Fatal(err)
	}
	p := &plans.Plan{Format: plans.Format, Seed: 1, Workers: 1,
		Jobs:   []plans.Job{{ID: "a", Slow: plans.Duration(2 * time.Second)}},
		Faults: []plans.Fault{{Kind: "power_loss", At: plans.Duration(500 * time.Millisecond), For: plans.Duration(time.Second)}}}
	f := &explore.Finding{Plan: p, Property: contracts.PropLost}
	tg := &flaky{sab: fsync, runs: map[string]int{},
		hit:         func(_ string, n int) bool { return n < 3+7 },
		bare:        func(n int) bool { return n < 3+7+2 },
		unavailable: func(n int) bool { return n == 3+7+2 }}
	sh, err := explore.Shrink(context.Background(), tg, f, nil, explore.ShrinkOptions{Tries: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := explore.Replay{Property: contracts.PropLost, Runs: 10, Reproduced: 7, NotAtRisk: 2, Other: 1, AtRisk: true, MeasuredOn: tg.MeasuredOn()}
	if sh.Replay != want {
		t.Errorf("replay %+v, want %+v", sh.Replay, want)
	}
	if !slices.Equal(sh.Plan.AtRisk, []plans.Risk{{What: "acked_unfinished_at_broker_fault", Min: 1}, {What: "acked_in_flush_window_at_power_loss", Min: 1}}) {
		t.Errorf("at_risk %v", sh.Plan.AtRisk)
	}
	if s := sh.Replay.String(); s != "reproduces 7 of 8 on flaky 1.0 (scripted) (the replays that put at risk what at_risk needs; 2 of 10 put too little at risk: unknown, set aside); 1 did not raise lost" {
		t.Errorf("text %q", s)
	}
}

// manyJobs is a finding of n jobs named j00.. that raised key_without_tenant.
func manyJobs(n int) *explore.Finding {
	p := &plans.Plan{Format: plans.Format, Seed: 1, Workers: 1}
	for i := range n {
		id := fmt.Sprintf("j%02d", i)
		p.Jobs = append(p.Jobs, plans.Job{ID: id, Tenant: "acme", Doc: "doc-" + id})
	}
	return &explore.Finding{Plan: p, Property: contracts.PropTenantKey}
}

// A smaller plan that passes its candidate runs (3 of 3) but reproduces 7
// of 10 is never kept at the 0.8 minimum: when none of the plans the shrink
// walks back over confirms, it keeps the round's own plan (the last resort),
// not the one that did best. Before, it kept a plan of one job that
// reproduced 7 of 10. Scripted: the round's 64 jobs fail every run; a plan
// with j00 fails its first 3 runs and then 7 of every 10.
func TestShrinkKeepsOnlyConfirmedPlans(t *testing.T) {
	f := manyJobs(64)
	all := jobIDs(f.Plan)
	tg := &flaky{runs: map[string]int{}, hit: func(jobs string, n int) bool {
		return jobs == all || strings.Contains(jobs, "j00") && (n < 3 || n%10 < 7)
	}}
	sh, err := explore.Shrink(context.Background(), tg, f, nil, explore.ShrinkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := jobIDs(sh.Plan); got != all || sh.Replay.Reproduced < 8 {
		n, _ := sh.Plan.Size()
		t.Errorf("kept a plan of %d jobs (%s) that %s: want the round's own plan", n, got, sh.Replay)
	}
	if sh.Unconfirmed == 0 || sh.Confirmed != 0 {
		t.Errorf("confirmed %d, unconfirmed %d: want none confirmed, some not", sh.Confirmed, sh.Unconfirmed)
	}
	if !strings.Contains(sh.Stopped, "reproduced") {
		t.Errorf("stopped %q: want it to say no smaller plan reproduced", sh.Stopped)
	}
}

// The rate a shrunk plan states counts only the replays that put at risk
// what its at_risk needs: 7 raised lost, 2 put too little at risk (set
// aside, and said), 1 ended unknown for another reason (the broker did not
// answer: counted, as not reproducing). Without at_risk the rate is over
// every replay, and says so.
func TestReplayRateText(t *testing.T) {
	for _, c := range []struct {
		rp   explore.Replay
		want string
	}{
		{explore.Replay{Property: contracts.PropLost, Runs: 10, Reproduced: 7, NotAtRisk: 2, Other: 1, AtRisk: true, MeasuredOn: "redis 7.0.15"},
			"reproduces 7 of 8 on redis 7.0.15 (the replays that put at risk what at_risk needs; 2 of 10 put too little at risk: unknown, set aside); 1 did not raise lost"},
		{explore.Replay{Property: contracts.PropLost, Runs: 10, Reproduced: 10, AtRisk: true, MeasuredOn: "redis 7.0.15"},
			"reproduces 10 of 10 on redis 7.0.15"},
		{explore.Replay{Property: contracts.PropOutboxOrphan, Runs: 10, Reproduced: 7, Other: 3, MeasuredOn: "mem"},
			"reproduces 7 of 10 on mem; 3 did not raise outbox_orphan (no at_risk: the rate is over every replay, and one that passed did not reproduce it)"},
		{explore.Replay{Property: contracts.PropOutboxOrphan, Runs: 2, Reproduced: 2, MeasuredOn: "mem", Deterministic: true},
			"reproduces 2 of 2 on mem (no at_risk: the rate is over every replay, and one that passed did not reproduce it) (a deterministic target: every run of one seed is the same)"},
	} {
		if got := c.rp.String(); got != c.want {
			t.Errorf("%+v:\n got %s\nwant %s", c.rp, got, c.want)
		}
	}
}
