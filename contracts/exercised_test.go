package contracts

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/pipeline"
)

// handRun is a history built by hand, each record a millisecond after the last,
// and the final state of the jobs it finished.
type handRun struct {
	ops   []history.Op
	t     int64
	seq   map[string]int64
	final Final
}

func newHandRun() *handRun {
	return &handRun{seq: map[string]int64{}, final: Final{Drained: true, Store: pipeline.State{Applied: map[string]int{}}}}
}

func (h *handRun) rec(op history.Op) *handRun {
	h.t += 1e6
	h.seq[op.Process]++
	op.T, op.Seq = h.t, h.seq[op.Process]
	h.ops = append(h.ops, op)
	return h
}

func handKey(job string) string { return "acme:" + job + ":v1" }

// wait moves the clock on by ms milliseconds.
func (h *handRun) wait(ms int64) *handRun {
	h.t += ms * 1e6
	return h
}

// enqueue is an enqueue the broker acknowledged.
func (h *handRun) enqueue(job string) *handRun {
	return h.tryEnqueue(job, history.OK)
}

// tryEnqueue is an enqueue the broker answered with typ.
func (h *handRun) tryEnqueue(job string, typ history.Type) *handRun {
	b, _ := json.Marshal(pipeline.JobMeta{Tenant: "acme", Doc: job, Version: 1, MaxAttempts: 3, Hash: "hash-" + job})
	h.rec(history.Op{Process: "producer", Type: history.Invoke, F: history.Enqueue, Job: job, Key: handKey(job), Value: string(b)})
	return h.rec(history.Op{Process: "producer", Type: typ, F: history.Enqueue, Job: job, Key: handKey(job)})
}

func (h *handRun) call(proc string, f history.F, job string, tok uint64, value string) *handRun {
	h.rec(history.Op{Process: proc, Type: history.Invoke, F: f, Job: job, Key: handKey(job), Token: tok})
	return h.rec(history.Op{Process: proc, Type: history.OK, F: f, Job: job, Key: handKey(job), Token: tok, Value: value})
}

// lease is a delivery of job to proc, fenced.
func (h *handRun) lease(proc, job string, tok uint64) *handRun {
	h.rec(history.Op{Process: proc, Type: history.Invoke, F: history.Lease})
	h.rec(history.Op{Process: proc, Type: history.OK, F: history.Lease, Job: job, Key: handKey(job), Token: tok, Attempt: int(tok), Value: "10000"})
	return h.call(proc, history.Fence, job, tok, "")
}

// done is the rest of a delivery's happy path: the work, the commit with its
// event, the ack, and the consumer applying the event.
func (h *handRun) done(proc, job string, tok uint64) *handRun {
	h.call(proc, history.Extract, job, tok, "digest:00").call(proc, history.Commit, job, tok, "new").call(proc, history.Ack, job, tok, "")
	h.rec(history.Op{Process: "consumer", Type: history.Invoke, F: history.Apply, Job: job, Key: handKey(job), Value: "ev:" + handKey(job)})
	h.rec(history.Op{Process: "consumer", Type: history.OK, F: history.Apply, Job: job, Key: handKey(job), Value: "applied"})
	k := handKey(job)
	h.final.Store.Results = append(h.final.Store.Results, pipeline.Result{Key: k, JobID: job, Tenant: "acme", Hash: "h", Token: tok, EventID: "ev:" + k})
	h.final.Store.Events = append(h.final.Store.Events, pipeline.Event{ID: "ev:" + k, Key: k, JobID: job, Published: true})
	h.final.Store.Applied["ev:"+k] = 1
	return h
}

func (h *handRun) finish(proc, job string) *handRun { return h.lease(proc, job, 1).done(proc, job, 1) }

// fault is a fault record: of the controller, or (key a crash point) of the
// process that fired it.
func (h *handRun) fault(value, target, key, job string) *handRun {
	proc := "controller"
	if key != "" && target != "" {
		proc = target
	}
	return h.rec(history.Op{Process: proc, Type: history.Info, F: history.Fault, Value: value, Target: target, Key: key, Job: job})
}

func (h *handRun) node(value, target string) *handRun {
	return h.rec(history.Op{Process: "controller", Type: history.Info, F: history.Node, Value: value, Target: target})
}

func (h *handRun) execution() Execution {
	return Execution{Ops: h.ops, Final: h.final, Check: CheckOptions{RelayRan: true}}
}

// twoDone is a run in which two jobs were sent and finished, nothing else.
func twoDone() *handRun {
	return newHandRun().enqueue("j1").finish("w1", "j1").enqueue("j2").finish("w2", "j2")
}

type vacuousCase struct {
	contract string
	run      func() *handRun
	atRisk   func() *handRun // nil: the embedded catalogue runs show it
	why      string
}

// vacuous lists, per contract whose scenario plans a fault, a run in which
// the fault happened and nothing was at risk from it, and the part of the
// reason its Exercised must give. Cluster contracts also have a run in which
// the fault did put the claim at risk (atRisk): the check can be met.
var vacuous = []vacuousCase{
	{"lease.redelivery", func() *handRun { return twoDone().fault("kill", "w3", "", "") },
		nil, "redeliveries after a crash 0"},
	{"fencing.zombie", func() *handRun {
		// Paused past its lease, resumed, and nobody had taken its job: its
		// commit is not stale.
		return newHandRun().enqueue("j1").lease("w1", "j1", 1).fault("pause", "w1", string(pipeline.AfterExtract), "j1").
			fault("resume", "w1", string(pipeline.AfterExtract), "j1").done("w1", "j1", 1)
	}, nil, "stale commits attempted and rejected 0"},
	{"outbox.atomic", func() *handRun {
		// A crash in the commit, redelivered and committed; the crash after
		// the commit never fired.
		return newHandRun().enqueue("j1").lease("w1", "j1", 1).fault("crash", "w1", string(pipeline.MidCommit), "j1").
			lease("w1.2", "j1", 2).done("w1.2", "j1", 2)
	}, nil, "crashes after_commit_before_ack 0"},
	{"outbox.relay", func() *handRun {
		return twoDone().fault("crash", "relay", string(pipeline.AfterPublishBeforeMark), "").
			fault("crash", "relay", string(pipeline.AfterPublishBeforeMark), "")
	}, nil, "repeats dropped by the consumer 0"},
	{"durability.ack", func() *handRun {
		return twoDone().fault("broker_crash", "redis", "", "").fault("broker_restart", "redis", "", "")
	},
		nil, "jobs acknowledged and unfinished when the broker was killed 0"},
	{"order.fifo", func() *handRun {
		return twoDone().fault("crash", "w3", string(pipeline.AfterLease), "").enqueue("j3").finish("w1", "j3").enqueue("j4").finish("w2", "j4")
	},
		nil, "redeliveries after a crash 0"},
	{"partition.ambiguous", func() *handRun {
		return twoDone().rec(history.Op{Process: "controller", Type: history.Info, F: history.Fault, Value: "reply_lost", Key: "store", Target: "w1"})
	}, nil, "commits or acks whose reply was lost (outcome unknown) 0"},
	{"durability.power-loss", func() *handRun {
		return twoDone().fault("power_loss", "redis", "", "").fault("broker_restart", "redis", "", "")
	}, nil, "jobs acknowledged and unfinished when the power failed 0"},
	{"durability.power-loss", func() *handRun {
		// A job acknowledged and unfinished, but 1.5 s before the cut of a
		// broker that syncs once a second: it was on the disk.
		return newHandRun().enqueue("j1").wait(1500).node(FlushWindowNote(time.Second, "appendfsync everysec: the log is synced once a second"), "").
			fault("power_loss", "redis", "", "").fault("broker_restart", "redis", "", "").finish("w1", "j1")
	}, func() *handRun {
		return newHandRun().enqueue("j1").wait(300).node(FlushWindowNote(time.Second, "appendfsync everysec: the log is synced once a second"), "").
			fault("power_loss", "redis", "", "").fault("broker_restart", "redis", "", "").finish("w1", "j1")
	}, "acknowledged enqueues younger than the flush interval (1s) at the power cut 0, need 1"},
	{"durability.failover", func() *handRun {
		// The primary killed after every acknowledged job had finished.
		return newHandRun().node("started in 1s: test cluster", "").node("primary", "n1").enqueue("j1").finish("w1", "j1").
			fault("node_kill", "n1", "", "").node("primary", "n2").fault("failover", "n2", "", "").
			enqueue("j2").finish("w1", "j2").fault("node_restart", "n1", "", "").node("settled in 1s", "n2")
	}, func() *handRun {
		return newHandRun().node("started in 1s: test cluster", "").node("primary", "n1").enqueue("j1").
			fault("node_kill", "n1", "", "").node("primary", "n2").fault("failover", "n2", "", "").
			finish("w1", "j1").fault("node_restart", "n1", "", "").node("settled in 1s", "n2")
	}, "jobs acknowledged and unfinished when the primary was killed 0"},
	{"durability.failover", func() *handRun {
		// A job acknowledged and unfinished, but 400 ms before the kill: a
		// replica lagging 200 ms had received it, replicated synchronously
		// or not.
		return newHandRun().node("started in 1s: test cluster", "").node("primary", "n1").enqueue("j1").wait(400).
			fault("node_kill", "n1", "", "").node("primary", "n2").fault("failover", "n2", "", "").
			finish("w1", "j1").fault("node_restart", "n1", "", "").node("settled in 1s", "n2")
	}, func() *handRun {
		return newHandRun().node("started in 1s: test cluster", "").node("primary", "n1").enqueue("j1").wait(140).
			fault("node_kill", "n1", "", "").node("primary", "n2").fault("failover", "n2", "", "").
			finish("w1", "j1").fault("node_restart", "n1", "", "").node("settled in 1s", "n2")
	}, "no unfinished job acknowledged less than 150ms (the replication lag's floor) before the primary was killed (the newest 401 ms before)"},
	{"fencing.failover", func() *handRun {
		// Jobs queued, none leased, when the primary died: no token at risk.
		return newHandRun().node("started in 1s: test cluster", "").node("primary", "n1").enqueue("j1").
			fault("node_kill", "n1", "", "").node("primary", "n2").fault("failover", "n2", "", "").
			finish("w1", "j1").fault("node_restart", "n1", "", "").node("settled in 1s", "n2")
	}, func() *handRun {
		return newHandRun().node("started in 1s: test cluster", "").node("primary", "n1").enqueue("j1").lease("w1", "j1", 1).
			fault("node_kill", "n1", "", "").node("primary", "n2").fault("failover", "n2", "", "").
			done("w1", "j1", 1).fault("node_restart", "n1", "", "").node("settled in 1s", "n2")
	}, "leases held when the primary was killed 0"},
	{"partition.minority", func() *handRun {
		// The pinned producer sent before the cut and after the heal only
		// (a producer that connected late, or was refused at connect).
		return newHandRun().node("producer pinned", "n1").node("started in 1s: test cluster", "").node("primary", "n1").
			enqueue("j1").fault("node_partition", "n1", "", "").node("primary", "n2").fault("failover", "n2", "", "").
			fault("node_heal", "n1", "", "").enqueue("j2").finish("w1", "j1").finish("w2", "j2").node("settled in 1s", "n2")
	}, func() *handRun {
		return newHandRun().node("producer pinned", "n1").node("started in 1s: test cluster", "").node("primary", "n1").
			fault("node_partition", "n1", "", "").tryEnqueue("j1", history.Info).fault("node_heal", "n1", "", "").
			enqueue("j1").finish("w1", "j1").node("settled in 1s", "n2")
	}, "enqueues attempted during the partition 0"},
	{"partition.minority", func() *handRun {
		// The cut-off primary's commit waits for a replica for 10 s (a
		// semi-synchronous timeout); the partition healed after 5 s, before
		// the primary gave up waiting.
		return newHandRun().node("producer pinned", "n1").node("started in 1s: test cluster", "").node("primary", "n1").
			fault("node_partition", "n1", "", "").node(OutlastNote(10*time.Second, "rpl_semi_sync_master_timeout 10000 ms"), "").
			tryEnqueue("j1", history.Info).wait(5000).fault("node_heal", "n1", "", "").
			enqueue("j1").finish("w1", "j1").node("settled in 1s", "n2")
	}, func() *handRun {
		return newHandRun().node("producer pinned", "n1").node("started in 1s: test cluster", "").node("primary", "n1").
			fault("node_partition", "n1", "", "").node(OutlastNote(10*time.Second, "rpl_semi_sync_master_timeout 10000 ms"), "").
			tryEnqueue("j1", history.Info).wait(12000).fault("node_heal", "n1", "", "").
			enqueue("j1").finish("w1", "j1").node("settled in 1s", "n2")
	}, "partitions that outlasted the topology's timeout (10s) 0, need 1"},
	{"partition.client", func() *handRun {
		return newHandRun().node("producer pinned", "n2").node("started in 1s: test cluster", "").node("primary", "n1").
			fault("node_partition", "n2", "", "").fault("node_heal", "n2", "", "").enqueue("j1").finish("w1", "j1").node("settled in 1s", "n1")
	}, func() *handRun {
		return newHandRun().node("producer pinned", "n2").node("started in 1s: test cluster", "").node("primary", "n1").
			fault("node_partition", "n2", "", "").tryEnqueue("j1", history.Fail).fault("node_heal", "n2", "", "").
			enqueue("j1").finish("w1", "j1").node("settled in 1s", "n1")
	}, "enqueues attempted during the partition 0"},
}

// A run in which a contract's fault happened but put nothing at risk is not
// a pass: it is unknown, saying what did not happen — the same history with
// nothing at risk made up by the fault, judged without the contract's
// Exercised, passes (so nothing else makes it unknown).
func TestFaultWithNothingAtRiskIsNotAPass(t *testing.T) {
	for _, v := range vacuous {
		t.Run(v.contract, func(t *testing.T) {
			c, err := Lookup(v.contract)
			if err != nil {
				t.Fatal(err)
			}
			ex := v.run().execution()
			var clean Result
			judge(&clean, ex, nil, c.Properties)
			if clean.Verdict != Pass {
				t.Fatalf("the hand-made run is not clean without the exercised check: %s (%s)", clean.Verdict, clean.Reason)
			}
			var res Result
			judge(&res, ex, c.Exercised, c.Properties)
			if res.Verdict != Unknown || !strings.Contains(res.Reason, v.why) {
				t.Fatalf("%s with nothing at risk: %s (%s), want unknown: %s", v.contract, res.Verdict, res.Reason, v.why)
			}
			if v.atRisk != nil {
				var ok Result
				judge(&ok, v.atRisk().execution(), c.Exercised, c.Properties)
				if ok.Verdict != Pass {
					t.Errorf("%s with the claim at risk: %s (%s), want pass", v.contract, ok.Verdict, ok.Reason)
				}
			}
		})
	}
}

// Every contract whose scenario plans a fault (and every cluster contract)
// has its case above.
func TestEveryFaultedContractHasANotExercisedCase(t *testing.T) {
	for _, c := range Catalogue {
		sc := c.Scenario(1, DefaultJobs)
		if len(sc.Plan.Faults) == 0 {
			continue
		}
		if !slices.ContainsFunc(vacuous, func(v vacuousCase) bool { return v.contract == c.ID }) {
			t.Errorf("%s plans faults and has no case in vacuous", c.ID)
		}
	}
}

// replayed hands back the same execution for every run: a target on which no
// seed exercises the claim.
type replayed struct {
	ex  Execution
	ran []uint64
}

func (r *replayed) Name() string       { return "replayed" }
func (r *replayed) MeasuredOn() string { return "a recorded run" }
func (r *replayed) Capabilities() adapters.Capabilities {
	return adapters.Capabilities{Broker: "replayed", Lease: adapters.Native, Token: adapters.Native, NodeFaults: true, NodePartitions: true,
		BrokerKill: true, PowerLoss: true, FIFO: true, LeaseExtension: adapters.Native}
}
func (r *replayed) Execute(_ context.Context, run Run) (Execution, error) {
	r.ran = append(r.ran, run.Seed)
	return r.ex, nil
}

// A run that does not exercise its claim tries the next seeds (Tries), and is
// unknown when none does, naming every seed tried.
func TestNotExercisedTriesTheNextSeedsThenIsUnknown(t *testing.T) {
	for _, v := range vacuous {
		t.Run(v.contract, func(t *testing.T) {
			c, _ := Lookup(v.contract)
			tg := &replayed{ex: v.run().execution()}
			r, err := Evaluate(context.Background(), tg, c, Options{Seed: 7})
			if err != nil {
				t.Fatal(err)
			}
			if r.Verdict != Unknown || !strings.Contains(r.Reason, v.why) || !strings.Contains(r.Reason, "on each of 3 seeds (7, 8, 9)") {
				t.Errorf("%s: %s (%s), want unknown after seeds 7, 8, 9: %s", v.contract, r.Verdict, r.Reason, v.why)
			}
			if !slices.Equal(tg.ran, []uint64{7, 8, 9}) {
				t.Errorf("%s ran seeds %v, want 7, 8, 9", v.contract, tg.ran)
			}
		})
	}
}
