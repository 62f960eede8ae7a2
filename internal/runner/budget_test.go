package runner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/internal/targets"
	"github.com/durachk/durachk/pipeline"
)

// neverSettles is a cluster of two nodes that are the shared Postgres: every
// fault is a no-op, and its settle never ends — it spends the run's budget
// (budgetAt) and waits for the run to give up.
type neverSettles struct {
	spec  targets.Spec
	spend func()

	mu             sync.Mutex
	settleEnded    error // the context's cause when Settle returned
	stopped, torn  bool
	killed, healed int
}

func (f *neverSettles) Describe() string                        { return "a cluster that never settles" }
func (f *neverSettles) Nodes() []string                         { return []string{"n1", "n2"} }
func (f *neverSettles) URL() string                             { return f.spec.URL }
func (f *neverSettles) NodeURL(string) (string, error)          { return f.spec.URL, nil }
func (f *neverSettles) Primary(context.Context) (string, error) { return "n1", nil }
func (f *neverSettles) Restart(context.Context, string) error   { return nil }
func (f *neverSettles) Failover(context.Context) (string, error) {
	return "", targets.ErrAutomaticFailover
}
func (f *neverSettles) Partition([]string) error    { return nil }
func (f *neverSettles) Unpin(context.Context) error { return nil }
func (f *neverSettles) StartTime() time.Duration    { return time.Millisecond }
func (f *neverSettles) Kill(string) error           { f.mu.Lock(); f.killed++; f.mu.Unlock(); return nil }
func (f *neverSettles) Heal() error                 { f.mu.Lock(); f.healed++; f.mu.Unlock(); return nil }
func (f *neverSettles) Settle(ctx context.Context) error {
	f.spend()
	<-ctx.Done()
	f.mu.Lock()
	f.settleEnded = context.Cause(ctx)
	f.mu.Unlock()
	return ctx.Err()
}

// Stop removes the run's queue: this cluster's nodes are the shared server.
func (f *neverSettles) Stop() error {
	f.mu.Lock()
	f.stopped = true
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := targets.TeardownQueue(ctx, f.spec)
	f.mu.Lock()
	f.torn = err == nil
	f.mu.Unlock()
	return err
}

// killThenSettle is a contract whose primary is killed at 0.2 s (scaled) and
// restarted 0.3 s later; then the cluster must settle.
var killThenSettle = &contracts.Contract{ID: "test.kill-then-settle", Claim: "a cluster that never settles is stopped at the run's budget",
	Scenario: func(seed uint64, n int) contracts.Scenario {
		var jobs []contracts.JobSpec
		for i := range 4 {
			// Slow (2 s, scaled 0.2 s): a lease is held when the kill comes.
			p := pipeline.Payload{Doc: "doc", Text: "x", Slow: 2 * time.Second}
			jobs = append(jobs, contracts.JobSpec{Job: adapters.Job{ID: "job-" + string(rune('a'+i)), Tenant: "acme", DocumentID: "doc",
				Version: 1, MaxAttempts: 3, Payload: p.Encode()}, At: time.Duration(i) * 500 * time.Millisecond})
		}
		return contracts.Scenario{Name: "kill, then a settle that never ends", Jobs: jobs, Workers: 1, Lease: 10 * time.Second,
			Poll: 200 * time.Millisecond, Limit: 10 * time.Minute, Plan: faults.Plan{Faults: []faults.Fault{
				{Kind: faults.NodeKill, Node: faults.SelPrimary, At: 2 * time.Second, For: 3 * time.Second}}}}
	}}

// A run whose cluster never settles is stopped when its budget runs out
// there: unknown with the reason, the settle's wait ended by the budget, the
// cluster stopped and the namespace torn down, nothing left.
func TestBudgetStopsARunThatNeverSettles(t *testing.T) {
	url := os.Getenv("DURACHK_PG_URL")
	if url == "" {
		t.Skip("DURACHK_PG_URL is not set: no Postgres to run real processes against")
	}
	spec, err := targets.Parse(url + "&private-cluster.standbys=1")
	if err != nil {
		t.Fatal(err)
	}
	tg, err := New(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	fake := &neverSettles{}
	prev := clusterStarter
	clusterStarter = func(_ context.Context, s targets.Spec, _ targets.ClusterEnv) (targets.Cluster, targets.Spec, error) {
		fake.spec = s
		return fake, s, nil
	}
	defer func() { clusterStarter = prev }()
	tg.budgetAt = func(spend func()) { fake.spend = spend }
	var runID, dir string
	tg.OnRun = func(id, d string) { runID, dir = id, d }
	tg.Log = testLog{t}

	r, err := contracts.Evaluate(context.Background(), tg, killThenSettle, contracts.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != contracts.Unknown || !strings.Contains(r.Reason, "stopped at its wall-time budget") {
		t.Fatalf("verdict %s (%s), want unknown: stopped at its wall-time budget", r.Verdict, r.Reason)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if !errors.Is(fake.settleEnded, errOverBudget) {
		t.Errorf("the settle ended with %v, want the budget", fake.settleEnded)
	}
	if fake.killed != 1 || !fake.stopped || !fake.torn {
		t.Errorf("killed %d, stopped %v, queue torn down %v: want the kill, then the cluster stopped and its queue removed", fake.killed, fake.stopped, fake.torn)
	}
	if r.HistoryLen == 0 {
		t.Error("the history of the run so far is not kept")
	}
	if left := leftovers(t, runID, dir); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// The budget runs out wherever the run is, also before it started anything
// (a budget of a nanosecond): unknown, and nothing left.
func TestBudgetStopsARunWhereverItIs(t *testing.T) {
	tg := pgTarget(t)
	tg.budget = time.Nanosecond
	var runID, dir string
	tg.OnRun = func(id, d string) { runID, dir = id, d }
	c, _ := contracts.Lookup("outbox.atomic")
	r, err := contracts.Evaluate(context.Background(), tg, c, contracts.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != contracts.Unknown || !strings.Contains(r.Reason, "wall-time budget of 1ns") {
		t.Fatalf("verdict %s (%s), want unknown at the budget", r.Verdict, r.Reason)
	}
	if runID != "" {
		if left := leftovers(t, runID, dir); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	}
}

// The budget is the scenario's scaled limit plus an allowance for each
// thing the run does outside it, and only for what the target does.
func TestBudgetAllowances(t *testing.T) {
	parse := func(raw string) targets.Spec {
		s, err := targets.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	lookup := func(id string) contracts.Scenario {
		c, err := contracts.Lookup(id)
		if err != nil {
			t.Fatal(err)
		}
		return c.Scenario(1, contracts.DefaultJobs)
	}
	plain := setupAllowance + finishAllowance
	tests := []struct {
		name  string
		spec  targets.Spec
		sc    contracts.Scenario
		want  time.Duration
		parts string
	}{
		{"a contract without broker faults", parse("redis://127.0.0.1:6379/0"), lookup("outbox.atomic"), 30*time.Second + plain, "limit 30s"},
		{"a broker kill: its start and restart, and its wait for an acknowledgement", parse("redis://127.0.0.1:6379/0"), lookup("durability.ack"),
			30*time.Second + plain + 2*brokerAllowance + riskWait, "broker start and restart 1m30s + fault trigger 4s"},
		{"a private cluster: its start, the fault trigger, the settle", parse("amqp://guest:guest@127.0.0.1:5672/?private-cluster.nodes=3&private-cluster.cluster_partition_handling=autoheal"),
			lookup("partition.minority"), time.Minute + plain + clusterAllowance + riskWait + settleTimeout, "settle 40s"},
	}
	for _, tt := range tests {
		tg := &Target{Spec: tt.spec, Scale: DefaultScale}
		got, parts := tg.Budget(tt.sc)
		if got != tt.want || !strings.Contains(parts, tt.parts) {
			t.Errorf("%s: budget %s (%s), want %s (with %s)", tt.name, got, parts, tt.want, tt.parts)
		}
	}
}

// The history tail tells the controller what a node fault would put at risk:
// whether the producer has tried an enqueue, and how many acknowledged jobs
// have no outcome yet.
func TestHistoryTailCountsWhatIsAtRisk(t *testing.T) {
	dir := t.TempDir()
	prod, work := filepath.Join(dir, "producer.jsonl"), filepath.Join(dir, "w1.jsonl")
	wp, _ := history.Create(prod)
	ww, _ := history.Create(work)
	defer wp.Close()
	defer ww.Close()
	tail := newHistoryTail()
	check := func(step string, produced bool, unfinished, leased int) {
		t.Helper()
		tail.read([]string{prod, work})
		if tail.produced != produced || tail.unfinished != unfinished || tail.leased != leased {
			t.Fatalf("%s: produced %v, unfinished %d, leased %d; want %v, %d, %d", step, tail.produced, tail.unfinished, tail.leased, produced, unfinished, leased)
		}
	}
	check("nothing yet", false, 0, 0)
	ww.Record(history.Op{Process: "operator", Type: history.Invoke, F: history.Enqueue, Job: "x"})
	check("an operator's enqueue is not the producer's", false, 0, 0)
	wp.Record(history.Op{Process: "producer", Type: history.Invoke, F: history.Enqueue, Job: "a"})
	check("tried, not acknowledged", true, 0, 0)
	ww.Record(history.Op{Process: "w1", Type: history.OK, F: history.Lease, Job: "a"}) // leased before the producer heard back
	wp.Record(history.Op{Process: "producer", Type: history.OK, F: history.Enqueue, Job: "a"})
	wp.Record(history.Op{Process: "producer", Type: history.Invoke, F: history.Enqueue, Job: "b"})
	wp.Record(history.Op{Process: "producer", Type: history.OK, F: history.Enqueue, Job: "b"})
	check("two acknowledged, one leased", true, 2, 1)
	ww.Record(history.Op{Process: "w1", Type: history.OK, F: history.Ack, Job: "a"})
	ww.Record(history.Op{Process: "w1", Type: history.OK, F: history.Ack, Job: "a"}) // a second ack counts once
	check("one acked", true, 1, 0)
	ww.Record(history.Op{Process: "w1", Type: history.OK, F: history.Lease, Job: "b"})
	ww.Record(history.Op{Process: "w2", Type: history.OK, F: history.Lease, Job: "b"}) // a redelivery: still one job
	check("the other leased twice", true, 1, 1)
	ww.Record(history.Op{Process: "w1", Type: history.OK, F: history.DeadLetter, Job: "c"}) // never acknowledged
	ww.Record(history.Op{Process: "w1", Type: history.OK, F: history.Cancel, Job: "b"})
	check("the other cancelled", true, 0, 0)
}
