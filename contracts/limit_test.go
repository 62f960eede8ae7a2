package contracts

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestFitLimitKeepsTheDefaults: at the default 24 jobs every scenario keeps
// the limit it was written with (plans and results stay as they were);
// beyond, no scenario's limit is below twice its workload's least time, and
// none passes MaxLimit.
func TestFitLimitKeepsTheDefaults(t *testing.T) {
	own := map[string]time.Duration{}
	for _, c := range append(append([]*Contract{}, Catalogue...), SeedScenarios...) {
		own[c.ID] = defaultLimit
	}
	for _, id := range []string{"durability.failover", "partition.minority", "partition.client", "fencing.failover"} {
		own[id] = clusterLimit
	}
	for _, c := range append(append([]*Contract{}, Catalogue...), SeedScenarios...) {
		for _, jobs := range []int{1, DefaultJobs, 1000, 10000} {
			sc := c.Scenario(1, jobs)
			if jobs <= DefaultJobs && sc.Limit != own[c.ID] {
				t.Errorf("%s with %d jobs: limit %v, want its own %v", c.ID, jobs, sc.Limit, own[c.ID])
			}
			if sc.Limit > MaxLimit || sc.Limit < own[c.ID] {
				t.Errorf("%s with %d jobs: limit %v out of [%v, %v]", c.ID, jobs, sc.Limit, own[c.ID], MaxLimit)
			}
			var last time.Duration
			for _, j := range sc.Jobs {
				last = max(last, j.At)
			}
			if sc.Limit < 2*last {
				t.Errorf("%s with %d jobs: limit %v, but the last job is sent at %v", c.ID, jobs, sc.Limit, last)
			}
		}
	}
}

// TestLargeWorkloadsDrain: every contract the embedded target runs passes
// with 1000 jobs (on main lease.heartbeat, cancel.terminal, durability.ack and
// durability.power-loss did not drain past 100 or so); the negative control is
// lease.heartbeat run with its unfitted 5-minute limit, which cannot drain.
// tools/bench-jobs.sh runs the CLI's largest workload, 10,000 jobs.
func TestLargeWorkloadsDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("about 2 s of CPU")
	}
	for _, c := range Catalogue {
		if c.Needs != nil && c.Needs(MemTarget{}.Capabilities()) != "" {
			continue
		}
		r, err := Evaluate(context.Background(), MemTarget{}, c, Options{Seed: 1, Jobs: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if r.Verdict != Pass {
			t.Errorf("%s with 1000 jobs: %s: %s", c.ID, r.Verdict, r.Reason)
		}
	}
	c, _ := Lookup("lease.heartbeat")
	sc := c.Scenario(1, 1000)
	sc.Limit = defaultLimit
	ex, err := MemTarget{}.Execute(context.Background(), Run{Contract: c.ID, Scenario: sc, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if ex.Final.Drained {
		t.Fatalf("lease.heartbeat with 1000 jobs drained in %v: the negative control does not hold", defaultLimit)
	}
}

// TestMemTargetStopsWithItsContext: a run whose context has ended stops
// within its first thousand scheduling steps with the context's error, however
// much scenario time it has left (here a job sent at 23 h, 64 workers polling
// an empty queue until then: about 25 s of work before); with its context
// alive the same run drains.
func TestMemTargetStopsWithItsContext(t *testing.T) {
	for _, tc := range []struct {
		name   string
		at     time.Duration
		cancel bool
	}{
		{"cancelled", 23 * time.Hour, true},
		{"left alone", time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobs := workload(1, 1, nil)
			jobs[0].At = tc.at
			sc := Scenario{Name: "late job", Jobs: jobs, Workers: 64, Lease: defaultLease, Poll: defaultPoll, Limit: MaxLimit}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				cancel()
			}
			ex, err := MemTarget{}.Execute(ctx, Run{Contract: "plan", Scenario: sc, Seed: 1})
			switch {
			case tc.cancel && !errors.Is(err, context.Canceled):
				t.Fatalf("Execute with its context ended: %v (drained %v), want context.Canceled", err, ex.Final.Drained)
			case !tc.cancel && (err != nil || !ex.Final.Drained):
				t.Fatalf("Execute: %v, drained %v: want a drained run", err, ex.Final.Drained)
			}
		})
	}
}
