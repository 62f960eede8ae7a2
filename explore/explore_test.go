package explore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/explore"
	"github.com/durachk/durachk/plans"
)

// sabotageSeeds is the seed explore finds each sabotage of the catalogue
// with on the embedded target, or why it cannot.
var sabotageSeeds = map[string]struct {
	seed uint64
	why  string // not found by explore: the reason
}{
	"ack-before-commit": {seed: 1}, "ack-dropped": {seed: 1}, "broker-delivery-limit": {seed: 1},
	"no-heartbeat": {seed: 1}, "no-fence-check": {seed: 1}, "unfenced-ack": {seed: 1},
	"dual-write": {seed: 1}, "key-per-delivery": {seed: 1}, "commit-not-durable": {seed: 1},
	"consumer-no-dedupe": {seed: 1}, "consumer-drops-events": {seed: 1}, "key-only-dedupe": {seed: 1},
	"key-without-tenant": {seed: 1}, "unbounded-retry": {seed: 1}, "one-extra-attempt": {seed: 1},
	"one-attempt-short": {seed: 1}, "permanent-retried": {seed: 1}, "raw-error-in-dlq": {seed: 1},
	"reprocess-in-place": {seed: 1}, "deadline-ignored": {seed: 1}, "deadline-slack": {seed: 1},
	"cancel-into-dlq": {seed: 1}, "no-persistence": {seed: 1}, "break-order": {seed: 1},
	"timeout-as-failure": {seed: 1}, "timeout-as-unavailable": {seed: 1}, "fsync-ignored": {seed: 1},
	"naive-breaker":    {seed: 1},
	"unreplicated":     {why: "breaks a replicated broker (acks before any replica has the write): the embedded target has no replicas"},
	"writable-replica": {why: "breaks Redis replicas: the embedded target has no replicas"},
}

// Each sabotage of the catalogue in turn, on the embedded target: explore
// finds a round that raises a property the sabotage declares, within 60
// rounds of 100 jobs, and shrinks it to at most 3 faults and 5 jobs; the
// shrunk plan, written out and read back, raises that property again.
func TestExploreFindsAndShrinksEverySabotage(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range append(slices.Clone(contracts.Catalogue), contracts.SeedScenarios...) {
		for _, s := range c.Sabotages {
			if seen[s.Name] {
				continue // one name, one breakage (no-persistence of durability.ack and power-loss)
			}
			seen[s.Name] = true
			tc, ok := sabotageSeeds[s.Name]
			if !ok {
				t.Errorf("sabotage %s of %s has no row in the table", s.Name, c.ID)
				continue
			}
			t.Run(s.Name, func(t *testing.T) {
				if tc.why != "" {
					t.Skip(tc.why)
				}
				t.Parallel()
				ctx := context.Background()
				// Two replays: the embedded target's runs of a seed are all alike.
				sum, err := explore.Run(ctx, contracts.MemTarget{}, explore.Options{Seed: tc.seed, Rounds: 60, Jobs: 100,
					Want: s.Raises, Sabotage: &s, Parallel: 1, Shrink: explore.ShrinkOptions{Replay: 2}})
				if err != nil {
					t.Fatal(err)
				}
				if sum.Finding == nil {
					t.Fatalf("not found in %d rounds (violations %v)", sum.Rounds, sum.Violations)
				}
				if !slices.Contains(s.Raises, sum.Finding.Property) {
					t.Fatalf("found %s, which %s does not declare (%v)", sum.Finding.Property, s.Name, s.Raises)
				}
				sh := sum.Shrunk
				if sh == nil {
					t.Fatal("not shrunk")
				}
				jobs, faults := sh.Plan.Size()
				if faults > 3 || jobs > 5 {
					t.Errorf("shrunk to %d jobs, %d faults (want ≤ 5, ≤ 3); stopped: %s", jobs, faults, sh.Stopped)
				}
				if sh.FromJobs < jobs || sh.FromFaults < faults {
					t.Errorf("shrunk plan larger than the original")
				}
				// Deterministic: the replay is all or nothing, and says so.
				if rp := sh.Replay; !rp.Deterministic || rp.Runs != 2 || rp.Reproduced != rp.Runs {
					t.Errorf("replay %+v, want every run of the embedded target's", rp)
				}
				path := filepath.Join(t.TempDir(), "shrunk.yaml")
				if err := sh.Plan.Write(path); err != nil {
					t.Fatal(err)
				}
				back, err := plans.Read(path)
				if err != nil {
					t.Fatal(err)
				}
				pc, err := back.AsContract("plan/shrunk")
				if err != nil {
					t.Fatal(err)
				}
				r, err := contracts.EvaluateSabotage(ctx, contracts.MemTarget{}, pc, s, contracts.Options{Seed: back.Seed, Tries: 1})
				if err != nil {
					t.Fatal(err)
				}
				if !raises(r, sum.Finding.Property) {
					t.Errorf("the shrunk plan read back: %s %s, want %s", r.Verdict, r.Reason, sum.Finding.Property)
				}
				// The negative control of the negative control: the same plan on
				// the reference pipeline does not raise it.
				ref, err := contracts.Evaluate(ctx, contracts.MemTarget{}, pc, contracts.Options{Seed: back.Seed, Tries: 1})
				if err != nil {
					t.Fatal(err)
				}
				if raises(ref, sum.Finding.Property) {
					t.Errorf("the shrunk plan raises %s on the reference pipeline too: %s", sum.Finding.Property, ref.Reason)
				}
				t.Logf("round %d raised %s; shrunk from %d jobs, %d faults to %d, %d in %d candidates", sum.Finding.Round,
					sum.Finding.Property, sh.FromJobs, sh.FromFaults, jobs, faults, sh.Candidates)
			})
		}
	}
}

func raises(r contracts.Result, p contracts.Property) bool {
	for _, v := range r.Violations {
		if v.Property == p {
			return true
		}
	}
	return false
}

// The nemesis draws only kinds the target supports, and the same plan for
// the same seed.
func TestNemesisDrawsSupportedKindsOnly(t *testing.T) {
	caps := contracts.MemTarget{}.Capabilities()
	caps.BrokerKill, caps.PowerLoss = false, false
	n := explore.NewNemesis(caps, 50, 8)
	drawn := map[string]int{}
	for i := range 200 {
		p := n.Draw(uint64(i))
		if _, err := p.Scenario(); err != nil {
			t.Fatalf("seed %d: invalid plan: %v", i, err)
		}
		for _, f := range p.Faults {
			drawn[f.Kind]++
		}
	}
	for _, k := range []string{"broker_crash", "power_loss", "node_kill", "node_partition", "failover"} {
		if drawn[k] > 0 {
			t.Errorf("drew %d %s on a target that cannot apply it", drawn[k], k)
		}
	}
	for _, k := range []string{"crash_at", "pause_at", "kill", "link_down", "reply_loss", "flap", "blackhole", "latency", "reset"} {
		if drawn[k] == 0 {
			t.Errorf("never drew %s in 200 rounds", k)
		}
	}
	a, _ := n.Draw(7).Marshal(true)
	b, _ := n.Draw(7).Marshal(true)
	if string(a) != string(b) {
		t.Error("two draws of one seed differ")
	}
}

// An exploration of the embedded target is deterministic per seed.
func TestExploreDeterministic(t *testing.T) {
	run := func() string {
		s, err := explore.Run(context.Background(), contracts.MemTarget{}, explore.Options{Seed: 5, Rounds: 6, Jobs: 60, KeepGoing: true, Shrink: explore.ShrinkOptions{Off: true}})
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(s.Rounds, s.Verdicts, s.Violations, s.Drawn, s.Stats.Accepted, s.Stats.Faults, s.Ops)
	}
	if a, b := run(), run(); a != b {
		t.Errorf("two explorations with one seed differ:\n%s\n%s", a, b)
	}
}

// Found sees the finding before the shrink starts: what a caller writes down
// then survives a shrink cut short.
func TestFoundBeforeShrink(t *testing.T) {
	c, _ := contracts.Lookup("outbox.atomic")
	s := c.Sabotages[0]
	var seen *explore.Summary
	var shrunkThen bool
	sum, err := explore.Run(context.Background(), contracts.MemTarget{}, explore.Options{Seed: 1, Rounds: 20, Jobs: 100,
		Want: s.Raises, Sabotage: &s, Parallel: 1, Shrink: explore.ShrinkOptions{Tries: 5},
		Found: func(x *explore.Summary) { seen, shrunkThen = x, x.Shrunk != nil }})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Finding == nil || sum.Shrunk == nil {
		t.Fatalf("no finding or no shrink: %+v", sum)
	}
	if seen == nil || seen.Finding == nil || shrunkThen {
		t.Errorf("Found called with %+v (shrunk already: %v), want the finding before its shrink", seen, shrunkThen)
	}
}

// Pace N sends the same jobs N times as fast: the producer's times shrink by
// N and the faults fall within the shorter span it sends them over.
func TestNemesisPace(t *testing.T) {
	caps := contracts.MemTarget{}.Capabilities()
	slow := explore.NewNemesis(caps, 200, 6)
	fast := explore.NewNemesis(caps, 200, 6)
	fast.Pace = 4
	for seed := range uint64(20) {
		a, b := slow.Draw(seed), fast.Draw(seed)
		if len(a.Jobs) != len(b.Jobs) || len(a.Faults) != len(b.Faults) {
			t.Fatalf("seed %d: pace changed the workload: %d jobs %d faults, %d jobs %d faults", seed, len(a.Jobs), len(a.Faults), len(b.Jobs), len(b.Faults))
		}
		at := map[string]plans.Duration{}
		for _, j := range b.Jobs {
			at[j.ID] = j.At
		}
		for _, j := range a.Jobs {
			if strings.HasSuffix(j.ID, "-again") { // a second later than its first, at any pace
				continue
			}
			if fa, ok := at[j.ID]; !ok || j.At != 4*fa {
				t.Fatalf("seed %d: %s at %v, at pace 4 at %v (there: %t): want a quarter of the time", seed, j.ID, j.At, fa, ok)
			}
		}
		span := at["j0199"] + at["j0001"]
		if at["j0001"] == 0 {
			t.Fatalf("seed %d: the producer sends every job at once", seed)
		}
		for _, f := range b.Faults {
			if f.At > span {
				t.Errorf("seed %d: a %s at %v, after the producer's span at pace 4 (%v)", seed, f.Kind, f.At, span)
			}
		}
		if _, err := b.Scenario(); err != nil {
			t.Fatalf("seed %d: invalid plan at pace 4: %v", seed, err)
		}
	}
}

// Costly bounds the slow and the poison jobs of a round; a plan within the
// bound is the one an unbounded nemesis draws for that seed.
func TestNemesisCostlyBound(t *testing.T) {
	caps := contracts.MemTarget{}.Capabilities()
	count := func(p *plans.Plan) map[string]int {
		m := map[string]int{}
		for _, j := range p.Jobs {
			m[j.Kind]++
		}
		return m
	}
	for _, jobs := range []int{24, 1600} {
		free := explore.NewNemesis(caps, jobs, 3)
		bound := explore.NewNemesis(caps, jobs, 3)
		bound.Costly = explore.DefaultCostly
		over := 0
		for seed := range uint64(30) {
			a, b := free.Draw(seed), bound.Draw(seed)
			ca, cb := count(a), count(b)
			if cb["slow"] > bound.Costly || cb["poison"] > bound.Costly {
				t.Fatalf("%d jobs, seed %d: %d slow and %d poison jobs, want at most %d of each", jobs, seed, cb["slow"], cb["poison"], bound.Costly)
			}
			if len(a.Jobs) != len(b.Jobs) || len(a.Faults) != len(b.Faults) {
				t.Fatalf("%d jobs, seed %d: the bound changed the workload's size or faults", jobs, seed)
			}
			ma, _ := a.Marshal(true)
			mb, _ := b.Marshal(true)
			within := ca["slow"] <= bound.Costly && ca["poison"] <= bound.Costly
			if within != (string(ma) == string(mb)) {
				t.Fatalf("%d jobs, seed %d: within the bound %v, yet the plans equal %v", jobs, seed, within, string(ma) == string(mb))
			}
			if !within {
				over++
				if ca["normal"] != 0 || cb[""] != ca[""]+(ca["slow"]-cb["slow"])+(ca["poison"]-cb["poison"]) {
					t.Fatalf("%d jobs, seed %d: the jobs over the bound are not drawn normal: %v, bounded %v", jobs, seed, ca, cb)
				}
			}
		}
		if jobs == 1600 && over == 0 {
			t.Fatal("no round of 1,600 jobs over the bound: the test shows nothing")
		}
	}
}
