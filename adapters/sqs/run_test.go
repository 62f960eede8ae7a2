package sqs_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters/sqs"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/internal/targets"
)

// TestMain lets the runner re-execute this test binary as its child processes
// (`<binary> worker --config FILE`), as it re-executes durachk in a real run.
func TestMain(m *testing.M) {
	runner.ServeChildIfAsked()
	os.Exit(m.Run())
}

func targetURL(t *testing.T, knobs string) string {
	t.Helper()
	raw := os.Getenv("DURACHK_SQS_URL")
	if raw == "" {
		t.Skip("DURACHK_SQS_URL is not set: the SQS contract runs need an endpoint (see .ci/setup.d/20-sqs-emulator.sh)")
	}
	if testing.Short() {
		t.Skip("contract runs with real processes take seconds each")
	}
	sep := "?"
	if strings.Contains(raw, "?") {
		sep = "&"
	}
	return raw + sep + knobs
}

// runQueues lists every durachk- queue at the endpoint of raw.
// trackRuns records the id of every run of target; left lists the queues of
// those runs still on the endpoint. The emulator is shared with the other
// packages' tests, whose live runs' queues a listing shows too (one did, at
// the end of an idle .ci/run, 2026-12-06): only the test's own runs count.
func trackRuns(t *testing.T, target *runner.Target, raw string) (left func() []string) {
	var mu sync.Mutex
	var ids []string
	target.OnRun = func(id, _ string) { mu.Lock(); ids = append(ids, id); mu.Unlock() }
	return func() []string {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if len(ids) == 0 {
			t.Fatal("no run reported its id")
		}
		return slices.DeleteFunc(runQueues(t, raw), func(u string) bool {
			return !slices.ContainsFunc(ids, func(id string) bool { return strings.Contains(u, sqs.Prefix+id) })
		})
	}
}

func runQueues(t *testing.T, raw string) []string {
	t.Helper()
	spec, err := targets.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	o, err := targets.SQSOptions(spec)
	if err != nil {
		t.Fatal(err)
	}
	client, err := sqs.NewClient(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	urls, err := sqs.ListRunQueues(context.Background(), client, sqs.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	return urls
}

// TestRedriveProfiles runs retry.bounded on a queue without a RedrivePolicy,
// on one with maxReceiveCount=3 (= the jobs' maxAttempts) and on one with
// maxReceiveCount=10, with the reference pipeline and with the unbounded-retry
// sabotage (a consumer that ignores the receive count).
//
// What it shows: the reference pipeline bounds a poison job itself, because it
// dead-letters a delivery whose ApproximateReceiveCount exceeds maxAttempts
// (pipeline/worker.go) — SQS counts receives with or without a RedrivePolicy —
// as long as SQS does not move the message first. With maxReceiveCount=3 SQS
// redrives the poison job on its 4th receive, before the pipeline sees it: the
// broker's own action, never a pipeline outcome (moved_by_broker, with SQS's
// reason). Without a RedrivePolicy a consumer that does not count loops
// (attempts_over_budget, the witness carries the receive count). After every
// run no queue of the run is left (ListQueues with the prefix).
func TestRedriveProfiles(t *testing.T) {
	c, err := contracts.Lookup("retry.bounded")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		knobs    string
		sabotage bool
		want     contracts.Verdict
		prop     contracts.Property // the first violation's, for a violation
	}{
		{"no redrive, reference pipeline", "name=no-redrive", false, contracts.Pass, ""},
		{"redrive 10, reference pipeline", "name=redrive10&redrive.maxReceiveCount=10", false, contracts.Pass, ""},
		{"redrive 3, reference pipeline", "name=redrive3&redrive.maxReceiveCount=3", false, contracts.Violated, contracts.PropMovedByBroker},
		{"no redrive, consumer ignores the receive count", "name=no-redrive", true, contracts.Violated, contracts.PropOverBudget},
		{"redrive 3, consumer ignores the receive count", "name=redrive3&redrive.maxReceiveCount=3", true, contracts.Violated, contracts.PropMovedByBroker},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw := targetURL(t, tc.knobs)
			ctx, cancel := context.WithTimeout(context.Background(), runnertest.Loaded(2*time.Minute))
			defer cancel()
			spec, err := targets.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			target, err := runner.New(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			left := trackRuns(t, target, raw)
			if !strings.Contains(target.MeasuredOn(), "(") {
				t.Errorf("measured on %q names no endpoint kind", target.MeasuredOn())
			}
			run := func(seed uint64) contracts.Result {
				var r contracts.Result
				if tc.sabotage {
					r, err = contracts.EvaluateSabotage(ctx, target, c, c.Sabotages[0], contracts.Options{Seed: seed})
				} else {
					r, err = contracts.Evaluate(ctx, target, c, contracts.Options{Seed: seed})
				}
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			// The class of the outcome, sought across seeds.
			var r contracts.Result
			if tc.want == contracts.Pass {
				r = runnertest.SeekPasses(t, tc.name, 1, run)[0]
			} else {
				rs, ok := runnertest.Seek(t, 1, run, func(r contracts.Result) bool {
					return r.Verdict == contracts.Violated && len(r.Violations) > 0 && r.Violations[0].Property == tc.prop
				})
				if r = rs[len(rs)-1]; !ok {
					t.Fatalf("no violation with %s first in %d seeds; the last: %s (%s) %+v", tc.prop, len(rs), r.Verdict, r.Reason, r.Violations)
				}
			}
			if tc.prop == contracts.PropOverBudget {
				if len(r.Violations) == 0 || !hasReceiveCount(r.Violations[0].Witness, 4) {
					t.Errorf("the witness does not show a receive count above maxAttempts: %+v", r.Violations)
				}
			}
			if l := left(); len(l) > 0 {
				t.Errorf("queues left after the run: %v", l)
			}
		})
	}
}

func hasReceiveCount(w []history.Op, atLeast int) bool {
	for _, op := range w {
		if op.F == history.Lease && op.Attempt >= atLeast {
			return true
		}
	}
	for _, op := range w {
		if op.Attempt >= atLeast {
			return true
		}
	}
	return false
}

// A run of retry.bounded through real processes with a RedrivePolicy: when the
// consumer ignores the receive count, SQS's redrive moves the poison jobs and
// the final inventory lists them (reason maxReceiveCount 3); with the
// reference pipeline, which dead-letters at its own bound, whatever is listed
// was never dead-lettered by the pipeline.
func TestRedriveInARun(t *testing.T) {
	raw := targetURL(t, "name=redrive3&redrive.maxReceiveCount=3")
	c, err := contracts.Lookup("retry.bounded")
	if err != nil {
		t.Fatal(err)
	}
	for _, sabotage := range []bool{true, false} {
		t.Run(map[bool]string{true: "consumer ignores the receive count", false: "reference pipeline"}[sabotage], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), runnertest.Loaded(2*time.Minute))
			defer cancel()
			spec, err := targets.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			target, err := runner.New(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			// With the sabotage, seek a run where the redrive moved a job
			// (whether a poison job reaches its 4th receive before the run
			// drains depends on the run); every run's moves are checked.
			for seed := uint64(1); seed <= runnertest.MaxSeeds; seed++ {
				run := contracts.Run{Contract: c.ID, Scenario: c.Scenario(seed, contracts.DefaultJobs), Seed: seed}
				if sabotage {
					run.Sabotage = &c.Sabotages[0]
				}
				ex, err := target.Execute(ctx, run)
				if err != nil {
					t.Fatal(err)
				}
				byPipeline := map[string]bool{}
				for _, op := range ex.Ops {
					if op.F == history.DeadLetter && op.Type == history.OK {
						byPipeline[op.Job] = true
					}
				}
				inv := ex.Final.Broker
				for _, m := range inv.Moved {
					if m.Action != "dead_lettered" || m.Reason != "maxReceiveCount 3" || !slices.Contains(inv.DeadLettered, m.Job) {
						t.Errorf("moved %+v, want dead_lettered with reason maxReceiveCount 3, in the DLQ", m)
					}
					if byPipeline[m.Job] {
						t.Errorf("%s was dead-lettered by the pipeline, yet listed as moved by the broker", m.Job)
					}
				}
				t.Logf("seed %d: %d dead letters, %d moved by SQS: %+v", seed, len(inv.DeadLettered), len(inv.Moved), inv.Moved)
				if !sabotage || len(inv.Moved) > 0 {
					return
				}
			}
			t.Fatalf("nothing moved by SQS's redrive in %d seeds", runnertest.MaxSeeds)
		})
	}
}
