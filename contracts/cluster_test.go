package contracts

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/history"
)

// notOnMem reports whether c needs a replicated topology, which the embedded
// target is not; it then checks that c is skipped there with its reason.
func notOnMem(t *testing.T, c *Contract) bool {
	t.Helper()
	if c.Needs == nil || c.Needs(MemTarget{}.Capabilities()) == "" {
		return false
	}
	r, err := Evaluate(context.Background(), MemTarget{}, c, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != Skipped || r.Reason == "" {
		t.Errorf("%s on the embedded target: %s (%s), want skipped with the reason", c.ID, r.Verdict, r.Reason)
	}
	return true
}

// op builds one history record at t ms.
func op(t int64, proc string, typ history.Type, f history.F, job string, token uint64, attempt int) history.Op {
	return history.Op{T: t * 1e6, Process: proc, Type: typ, F: f, Job: job, Token: token, Attempt: attempt}
}

func TestCheckTokenReissue(t *testing.T) {
	enq := []history.Op{
		{T: 1, Process: "producer", Type: history.Invoke, F: history.Enqueue, Job: "j", Value: `{"max":3}`},
		{T: 2, Process: "producer", Type: history.OK, F: history.Enqueue, Job: "j"},
	}
	tests := []struct {
		name string
		ops  []history.Op
		want int
	}{
		{"the same token to a second holder after the store accepted it", []history.Op{
			op(10, "w1", history.OK, history.Lease, "j", 1, 1), op(11, "w1", history.OK, history.Fence, "j", 1, 1),
			op(20, "w2", history.OK, history.Lease, "j", 1, 1),
		}, 1},
		{"a lower token to a second holder", []history.Op{
			op(10, "w1", history.OK, history.Lease, "j", 2, 2), op(11, "w1", history.OK, history.Fence, "j", 2, 2),
			op(20, "w2", history.OK, history.Lease, "j", 1, 1),
		}, 1},
		{"a growing token: clean", []history.Op{
			op(10, "w1", history.OK, history.Lease, "j", 1, 1), op(11, "w1", history.OK, history.Fence, "j", 1, 1),
			op(20, "w2", history.OK, history.Lease, "j", 2, 2),
		}, 0},
		{"the store never accepted the first token: clean", []history.Op{
			op(10, "w1", history.OK, history.Lease, "j", 1, 1), op(11, "w1", history.Fail, history.Fence, "j", 1, 1),
			op(20, "w2", history.OK, history.Lease, "j", 1, 1),
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ops := append(append([]history.Op(nil), enq...), tt.ops...)
			vs := checkTokenReissue(ops, Final{})
			if len(vs) != tt.want {
				t.Fatalf("%d violations %v, want %d", len(vs), vs, tt.want)
			}
			for _, v := range vs {
				if v.Property != PropTokenReissued || len(v.Witness) != 3 {
					t.Errorf("violation %+v: want %s with the first lease, its fence and the reissue", v, PropTokenReissued)
				}
			}
		})
	}
}

func TestClusterFacts(t *testing.T) {
	ops := []history.Op{
		{T: 0, Process: "controller", Type: history.Info, F: history.Node, Value: "started in 250ms: redis primary + 2 replicas"},
		{T: 1e6, Process: "controller", Type: history.Info, F: history.Node, Value: "primary", Target: "n1"},
		{T: 2e6, Process: "producer", Type: history.Invoke, F: history.Enqueue, Job: "a", Value: `{"max":3}`},
		{T: 3e6, Process: "producer", Type: history.Info, F: history.Enqueue, Job: "a", Err: "ambiguous"},
		{T: 4e6, Process: "producer", Type: history.Invoke, F: history.Enqueue, Job: "b", Value: `{"max":3}`},
		{T: 5e6, Process: "producer", Type: history.OK, F: history.Enqueue, Job: "b"},
		op(6, "w1", history.OK, history.Lease, "b", 2, 2),
		{T: 7e6, Process: "controller", Type: history.Info, F: history.Fault, Value: "failover", Target: "n2"},
		{T: 7e6, Process: "controller", Type: history.Info, F: history.Node, Value: "primary", Target: "n2"},
		op(8, "w2", history.OK, history.Lease, "a", 1, 1),
		op(9, "w2", history.OK, history.Lease, "b", 1, 1),
		{T: 10e6, Process: "controller", Type: history.Info, F: history.Node, Value: "settled in 1s", Target: "n2"},
	}
	f := clusterFacts(ops)
	if f == nil {
		t.Fatal("no cluster facts from a history with node records")
	}
	if f.Failovers != 1 || len(f.Primaries) != 2 || f.Settled != "settled in 1s" {
		t.Errorf("facts %+v", f)
	}
	if f.Recovered != 1 || f.RecoveredJobs[0] != "a" {
		t.Errorf("recovered %d %v, want job a (ambiguous enqueue, delivered)", f.Recovered, f.RecoveredJobs)
	}
	if len(f.Regressions) != 1 || !strings.Contains(f.Regressions[0], "b: delivery count 2 → 1") {
		t.Errorf("regressions %v, want job b's 2 → 1", f.Regressions)
	}
	if clusterFacts(ops[2:6]) != nil {
		t.Error("facts from a history without node records")
	}
}

// recorded is the content of a .final.json file of a recorded run.
type recorded struct {
	Contract string       `json:"contract"`
	Sabotage string       `json:"sabotage,omitempty"`
	Seed     uint64       `json:"seed"`
	Final    Final        `json:"final"`
	Check    CheckOptions `json:"check"`
}

func fixturePaths(name string) (ops, final string) {
	return filepath.Join("testdata", name+".jsonl"), filepath.Join("testdata", name+".final.json")
}

func properties(vs []Violation) []Property {
	var out []Property
	for _, v := range vs {
		if !slices.Contains(out, v.Property) {
			out = append(out, v.Property)
		}
	}
	return out
}

// clusterFixtures are runs recorded on real private clusters (go test
// ./internal/runner/clusters -run 'Failover|Partition|Sync|Quorum' -record
// ../../../contracts/testdata): the negative controls of the cluster contracts,
// which the embedded target cannot run. want empty: the run passed;
// unexercised: the run did not exercise the claim (it passed before the
// contract said what must be at risk), and its reason says so.
var clusterFixtures = []struct {
	name        string
	want        []Property
	unexercised string
}{
	{"redis-async-durability-failover-seed1", []Property{PropLost}, ""},
	// Recorded before durability.failover's jobs were slow enough: every
	// enqueue waited 450 ms for its replica (WAIT 1 through the lagging
	// link), and its job was done before the producer heard back; the
	// primary died with nothing acknowledged and unfinished.
	{"redis-wait1-durability-failover-seed1", nil, "jobs acknowledged and unfinished when the primary was killed 0"},
	{"redis-wait1-durability-failover-unreplicated-seed1", []Property{PropLost}, ""},
	{"redis-async-partition-minority-seed1", []Property{PropLost}, ""},
	// Recorded on main before partition.client said what must be at risk
	// (and before a producer could open its queue on a replica): the
	// producer pinned to the cut-off replica sent its first enqueue 24 ms
	// after the heal. It passed.
	{"redis-async-partition-client-seed1", nil, "enqueues attempted during the partition 0"},
	{"redis-async-fencing-failover-seed1", []Property{PropTokenReissued}, ""},
	{"pg-async-durability-failover-seed1", []Property{PropLost}, ""},
	// Recorded before the primary's kill waited for an enqueue acknowledged
	// within the replication lag's floor: the newest was 297 ms old when the
	// primary died, a write a replica lagging 200 ms had already. It passed.
	{"pg-sync-durability-failover-stale-kill-seed1", nil, "the newest 297 ms before"},
	{"pg-sync-durability-failover-seed1", nil, ""},
	{"pg-sync-partition-minority-seed1", nil, ""},
	{"rabbitmq-quorum-durability-failover-seed1", nil, ""},
}

func TestClusterFixtures(t *testing.T) {
	for _, fx := range clusterFixtures {
		t.Run(fx.name, func(t *testing.T) {
			opsPath, finalPath := fixturePaths(fx.name)
			ops, err := history.ReadFile(opsPath)
			if err != nil {
				t.Fatalf("%v (record it with go test ./internal/runner/clusters -record)", err)
			}
			b, err := os.ReadFile(finalPath)
			if err != nil {
				t.Fatal(err)
			}
			var rec recorded
			if err := json.Unmarshal(b, &rec); err != nil {
				t.Fatalf("%s: %v", finalPath, err)
			}
			c, err := Lookup(rec.Contract)
			if err != nil {
				t.Fatal(err)
			}
			var res Result
			judge(&res, Execution{Ops: ops, Final: rec.Final, Check: rec.Check}, c.Exercised, c.Properties)
			// A client's node cut off from the primary fails nothing over.
			if res.Cluster == nil || res.Cluster.Failovers == 0 && rec.Contract != "partition.client" {
				t.Errorf("no failover in the recorded run: %+v", res.Cluster)
			}
			got := properties(res.Violations)
			if fx.unexercised != "" {
				if res.Verdict != Unknown || !strings.Contains(res.Reason, fx.unexercised) {
					t.Fatalf("the recorded run of %s that put nothing at risk is %s (%s), want unknown: %s", rec.Contract, res.Verdict, res.Reason, fx.unexercised)
				}
				return
			}
			if len(fx.want) == 0 {
				if res.Verdict != Pass {
					t.Fatalf("the recorded clean run of %s is now %s: %s", rec.Contract, res.Verdict, res.Reason)
				}
				return
			}
			if res.Verdict != Violated {
				t.Fatalf("the recorded run of %s is now %s (%s), want a violation", rec.Contract, res.Verdict, res.Reason)
			}
			for _, p := range fx.want {
				if !slices.Contains(got, p) {
					t.Errorf("the checker no longer finds %s in the recorded %s run (found %v)", p, rec.Contract, got)
				}
			}
			for _, v := range res.Violations {
				if len(v.Witness) == 0 && v.Job != "" {
					t.Errorf("%s violation without a witness: %s", v.Property, v.Message)
				}
				if v.Property == PropLost && v.Job != "" && !witnessHas(v, history.Enqueue, "") {
					t.Errorf("lost %s: the witness lacks the acknowledged enqueue: %v", v.Job, v.Witness)
				}
				if v.Property == PropLost && v.Job != "" && !witnessHas(v, history.Fault, "node_") {
					t.Errorf("lost %s: the witness lacks the node fault: %v", v.Job, v.Witness)
				}
				if v.Property == PropLost && v.Job != "" {
					witnessOnce(t, v)
					becauseNamesTheFault(t, v)
				}
			}
		})
	}
}

// witnessHas: v's witness holds an ok record of f (a fault whose value starts
// with prefix, for faults).
func witnessHas(v Violation, f history.F, prefix string) bool {
	for _, op := range v.Witness {
		if op.F == f && (f == history.Fault && strings.HasPrefix(op.Value, prefix) || f != history.Fault && op.Type == history.OK) {
			return true
		}
	}
	return false
}

// Between a node fault and the rejoin a replicated target is degraded: a
// live holder whose calls block loses its lease without that being a
// preemption; outside that window it is one.
func TestDegradedClusterExplainsLeaseLoss(t *testing.T) {
	base := []history.Op{
		{T: 1, Process: "producer", Type: history.Invoke, F: history.Enqueue, Job: "j", Value: `{"max":3}`},
		{T: 2, Process: "producer", Type: history.OK, F: history.Enqueue, Job: "j"},
	}
	fault := history.Op{T: 3, Process: "controller", Type: history.Info, F: history.Fault, Value: "failover", Target: "n2"}
	rejoin := history.Op{T: 4, Process: "controller", Type: history.Info, F: history.Fault, Value: "rejoin"}
	leases := []history.Op{op(10, "w1", history.OK, history.Lease, "j", 1, 1), op(20, "w2", history.OK, history.Lease, "j", 2, 2)}
	tests := []struct {
		name      string
		ops       []history.Op
		preempted bool
	}{
		{"degraded: explained", append(append(append([]history.Op(nil), base...), fault), leases...), false},
		{"after the rejoin: a preemption", append(append(append([]history.Op(nil), base...), fault, rejoin), leases...), true},
		{"no node fault: a preemption", append(append([]history.Op(nil), base...), leases...), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs, st, _ := Check(tt.ops, Final{Broker: adapters.Inventory{Queued: []string{"j"}}}, CheckOptions{})
			got := slices.Contains(properties(vs), PropPreempted)
			if got != tt.preempted {
				t.Fatalf("preempted %v, want %v (redeliveries %v)", got, tt.preempted, st.Redeliveries)
			}
		})
	}
}

// witnessOnce: no operation appears twice in v's witness.
func witnessOnce(t *testing.T, v Violation) {
	t.Helper()
	seen := map[history.Op]bool{}
	for _, op := range v.Witness {
		if seen[op] {
			t.Errorf("%s %s: the witness holds %s %s %s %s twice", v.Property, v.Job, op.Process, op.F, op.Type, op.Value)
		}
		seen[op] = true
	}
}

// becauseNamesTheFault: a lost job's because lines on a cluster name the
// node kill or the partition that explains the loss, never the checker's
// "the broker went down" about a later node event (a failover, a rejoin).
func becauseNamesTheFault(t *testing.T, v Violation) {
	t.Helper()
	named := false
	for _, l := range v.Because {
		if strings.HasSuffix(l, ": the broker went down after it accepted the job") || strings.Contains(l, "fault rejoin") {
			t.Errorf("lost %s: because %q blames a later node event", v.Job, l)
		}
		if strings.Contains(l, "fault node_kill") || strings.Contains(l, "fault node_partition") {
			named = true
		}
	}
	if !named {
		t.Errorf("lost %s: no because line names the node kill or partition: %q", v.Job, v.Because)
	}
}

// The witness: the checker names the latest node event before the
// end (a rejoin) as the broker going down, and the enqueue's ok appears
// twice. On a cluster the witness holds each operation once and its because
// lines name the kill of the primary that acknowledged the job, then the
// failover; a partition in force at the acknowledgement is named instead of
// a later kill.
func TestClusterWitnessNamesTheFault(t *testing.T) {
	ctl := func(ms int64, f history.F, value, target string) history.Op {
		return history.Op{T: ms * 1e6, Process: "controller", Type: history.Info, F: f, Value: value, Target: target}
	}
	enq := []history.Op{
		{T: 2e6, Process: "producer", Seq: 1, Type: history.Invoke, F: history.Enqueue, Job: "j", Value: `{"max":3}`},
		{T: 3e6, Process: "producer", Seq: 2, Type: history.OK, F: history.Enqueue, Job: "j"},
	}
	start := []history.Op{ctl(0, history.Node, "started in 1s: redis primary + 2 replicas", ""), ctl(1, history.Node, "primary", "n1")}
	tests := []struct {
		name   string
		faults []history.Op
		want   []string // in the because lines, in order
	}{
		{"a kill, a failover, a rejoin", []history.Op{ctl(10, history.Fault, "node_kill", "n1"), ctl(20, history.Fault, "failover", "n2"),
			ctl(20, history.Node, "primary", "n2"), ctl(30, history.Fault, "rejoin", "n1")},
			[]string{"fault node_kill → n1", "the primary that acknowledged j, n1, was killed", "fault failover → n2", "n2 took over as primary"}},
		{"a partition in force, then a failover and a heal", []history.Op{ctl(25, history.Fault, "failover", "n3"), ctl(25, history.Node, "primary", "n3"),
			ctl(40, history.Fault, "node_heal", "n1"), ctl(50, history.Fault, "rejoin", "n1")},
			[]string{"fault node_partition → n1", "the primary, n1, was cut off from the other nodes when it acknowledged j", "fault failover → n3"}},
		{"a replica killed", []history.Op{ctl(10, history.Fault, "node_kill", "n2"), ctl(30, history.Fault, "rejoin", "n2")},
			[]string{"fault node_kill → n2", "n2 was killed after the primary, n1, acknowledged j"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ops := append([]history.Op(nil), start...)
			if strings.Contains(tt.name, "partition in force") {
				ops = append(ops, ctl(1, history.Fault, "node_partition", "n1"))
			}
			ops = append(append(ops, enq...), tt.faults...)
			var res Result
			judge(&res, Execution{Ops: ops, Final: Final{Drained: true}}, nil)
			if res.Verdict != Violated || len(res.Violations) != 1 || res.Violations[0].Property != PropLost {
				t.Fatalf("verdict %s %v, want one lost", res.Verdict, res.Violations)
			}
			v := res.Violations[0]
			witnessOnce(t, v)
			becauseNamesTheFault(t, v)
			all := strings.Join(v.Because, "\n")
			at := 0
			for _, w := range tt.want {
				i := strings.Index(all[at:], w)
				if i < 0 {
					t.Fatalf("because lines lack %q after offset %d:\n%s", w, at, all)
				}
				at += i
			}
			if !witnessHas(v, history.Enqueue, "") {
				t.Errorf("the witness lost the acknowledged enqueue: %v", v.Witness)
			}
		})
	}
}
