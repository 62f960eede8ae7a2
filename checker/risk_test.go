package checker

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/durachk/durachk/history"
)

// node records what the controller says a node of a replicated target was.
func (h *hist) node(value, target string) *hist {
	return h.rec(history.Op{Process: "controller", Type: history.Info, F: history.Node, Value: value, Target: target})
}

// tryEnqueue is an enqueue the broker answered with typ.
func (h *hist) tryEnqueue(job, key string, typ history.Type) *hist {
	b, _ := json.Marshal(meta("acme", job, 3))
	h.rec(history.Op{Process: "producer", Type: history.Invoke, F: history.Enqueue, Job: job, Key: key, Value: string(b)})
	return h.rec(history.Op{Process: "producer", Type: typ, F: history.Enqueue, Job: job, Key: key})
}

// What a node fault puts at risk is counted when it happens: the primary's
// kill counts the acknowledged jobs without an outcome and the leases held; a
// replica's kill counts nothing; a partition counts the enqueues tried (and
// acknowledged) until its heal, none after.
func TestStatsAtRiskOfNodeFaults(t *testing.T) {
	tests := []struct {
		name string
		h    *hist
		want Stats
	}{
		{"the primary killed holding a queued job and a leased one",
			newHist().node("primary", "n1").enqueue("a", keyA, meta("acme", "doc-a", 3)).enqueue("b", keyB, meta("acme", "doc-b", 3)).
				deliver("w1", "a", keyA, 1).fault("node_kill", "n1"),
			Stats{AtRiskAtPrimaryKill: 2, LeasesAtPrimaryKill: 1, NewestAckBeforePrimaryKillMs: 1}},
		{"the primary killed after every job finished",
			newHist().node("primary", "n1").enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", keyA, 1).fault("node_kill", "n1"),
			Stats{}},
		{"a replica killed while jobs are queued",
			newHist().node("primary", "n1").enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).fault("node_kill", "n2"),
			Stats{}},
		{"the new primary killed after a failover",
			newHist().node("primary", "n1").enqueue("a", keyA, meta("acme", "doc-a", 3)).node("primary", "n2").fault("node_kill", "n2"),
			Stats{AtRiskAtPrimaryKill: 1, NewestAckBeforePrimaryKillMs: 1}},
		{"the newest unfinished job acknowledged 120.5 ms before the primary's kill",
			newHist().node("primary", "n1").enqueue("a", keyA, meta("acme", "doc-a", 3)).wait(300e6).
				enqueue("b", keyB, meta("acme", "doc-b", 3)).wait(120.5e6).fault("node_kill", "n1"),
			Stats{AtRiskAtPrimaryKill: 2, NewestAckBeforePrimaryKillMs: 121}},
		{"a newer job finished before the kill: the unfinished one's age counts",
			newHist().node("primary", "n1").enqueue("a", keyA, meta("acme", "doc-a", 3)).wait(300e6).
				enqueue("b", keyB, meta("acme", "doc-b", 3)).finish("w1", "b", keyB, 1).fault("node_kill", "n1"),
			Stats{AtRiskAtPrimaryKill: 1, NewestAckBeforePrimaryKillMs: 301}},
		{"two primary kills: the freshest of the two",
			newHist().node("primary", "n1").enqueue("a", keyA, meta("acme", "doc-a", 3)).wait(40e6).fault("node_kill", "n1").
				node("primary", "n2").wait(500e6).fault("node_kill", "n2"),
			Stats{AtRiskAtPrimaryKill: 2, NewestAckBeforePrimaryKillMs: 41}},
		{"enqueues during a partition: refused, ambiguous, acknowledged",
			newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).fault("node_partition", "n1").
				tryEnqueue("b", keyB, history.Fail).tryEnqueue("b", keyB, history.Info).tryEnqueue("c", "acme:doc-c:v1", history.OK).
				fault("node_heal", "n1").tryEnqueue("d", "acme:doc-d:v1", history.OK),
			Stats{EnqueuesInPartition: 3, AckedInPartition: 1}},
		{"a partition with no enqueue in it",
			newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).fault("node_partition", "n1").fault("node_heal", "n1").
				enqueue("b", keyB, meta("acme", "doc-b", 3)),
			Stats{}},
		{"two nodes cut, one healed: still partitioned",
			newHist().fault("node_partition", "n1").fault("node_partition", "n2").fault("node_heal", "n1").
				tryEnqueue("a", keyA, history.OK).fault("node_heal", "n2").tryEnqueue("b", keyB, history.OK),
			Stats{EnqueuesInPartition: 1, AckedInPartition: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := Check(tt.h.ops, Final{}, Options{}).Stats
			got := Stats{AtRiskAtPrimaryKill: st.AtRiskAtPrimaryKill, LeasesAtPrimaryKill: st.LeasesAtPrimaryKill,
				NewestAckBeforePrimaryKillMs: st.NewestAckBeforePrimaryKillMs,
				EnqueuesInPartition:          st.EnqueuesInPartition, AckedInPartition: st.AckedInPartition}
			if got.AtRiskAtPrimaryKill != tt.want.AtRiskAtPrimaryKill || got.LeasesAtPrimaryKill != tt.want.LeasesAtPrimaryKill ||
				got.NewestAckBeforePrimaryKillMs != tt.want.NewestAckBeforePrimaryKillMs ||
				got.EnqueuesInPartition != tt.want.EnqueuesInPartition || got.AckedInPartition != tt.want.AckedInPartition {
				t.Errorf("at risk at the primary's kill %d, leases %d, newest ack %d ms before, enqueues in the partition %d (acknowledged %d); want %d, %d, %d ms, %d (%d)",
					got.AtRiskAtPrimaryKill, got.LeasesAtPrimaryKill, got.NewestAckBeforePrimaryKillMs, got.EnqueuesInPartition, got.AckedInPartition,
					tt.want.AtRiskAtPrimaryKill, tt.want.LeasesAtPrimaryKill, tt.want.NewestAckBeforePrimaryKillMs, tt.want.EnqueuesInPartition, tt.want.AckedInPartition)
			}
		})
	}
}

// A broker kill counts what it puts at risk as a power loss does (AtRisk):
// nothing when every job had finished.
func TestStatsAtRiskOfABrokerKill(t *testing.T) {
	for _, tt := range []struct {
		name string
		h    *hist
		want int
	}{
		{"killed with a job queued", newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).fault("broker_crash", "redis"), 1},
		{"killed after the job finished", newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", keyA, 1).fault("broker_crash", "redis"), 0},
	} {
		if got := Check(tt.h.ops, Final{}, Options{}).Stats.AtRisk; got != tt.want {
			t.Errorf("%s: at risk %d, want %d", tt.name, got, tt.want)
		}
	}
}

// What only the broker had at a broker fault (QueuedAtBrokerFault): the
// acknowledged jobs without an outcome that no live worker held, less a job
// whose lease was asked for before the fault and answered after it.
func TestStatsQueuedAtBrokerFault(t *testing.T) {
	a := meta("acme", "doc-a", 3)
	// leaseAcross: w1 asks for a lease, the power fails, the answer comes.
	leaseAcross := func(h *hist) *hist {
		h.rec(history.Op{Process: "w1", Type: history.Invoke, F: history.Lease})
		h.fault("power_loss", "redis")
		return h.rec(history.Op{Process: "w1", Type: history.OK, F: history.Lease, Job: "a", Key: keyA, Token: 1, Attempt: 1, Value: "10000"})
	}
	for _, tt := range []struct {
		name         string
		h            *hist
		risk, queued int
	}{
		{"a queued job", newHist().enqueue("a", keyA, a).fault("power_loss", "redis"), 1, 1},
		{"a job a live worker holds", newHist().enqueue("a", keyA, a).deliver("w1", "a", keyA, 1).fault("power_loss", "redis"), 1, 0},
		{"a job a killed worker holds", newHist().enqueue("a", keyA, a).deliver("w1", "a", keyA, 1).fault("kill", "w1").fault("broker_crash", "redis"), 1, 1},
		{"one held, one queued", newHist().enqueue("a", keyA, a).enqueue("b", keyB, meta("acme", "doc-b", 3)).deliver("w1", "a", keyA, 1).
			fault("broker_crash", "redis"), 2, 1},
		{"a lease asked for before the cut and answered after it", leaseAcross(newHist().enqueue("a", keyA, a)), 1, 0},
		{"a lease asked for after the cut", newHist().enqueue("a", keyA, a).fault("power_loss", "redis").fault("broker_restart", "redis").
			deliver("w1", "a", keyA, 1), 1, 1},
		{"every job finished", newHist().enqueue("a", keyA, a).finish("w1", "a", keyA, 1).fault("power_loss", "redis"), 0, 0},
	} {
		st := Check(tt.h.ops, Final{}, Options{}).Stats
		if st.AtRisk != tt.risk || st.QueuedAtBrokerFault != tt.queued {
			t.Errorf("%s: at risk %d, queued %d; want %d, %d", tt.name, st.AtRisk, st.QueuedAtBrokerFault, tt.risk, tt.queued)
		}
	}
}

// A power cut counts, in the broker's terms, the acknowledged and unfinished
// jobs younger than the flush window the history notes before it (all of
// them where it notes none, or nothing), and the age of the newest; a
// partition counts the nodes cut off at least as long as the timeout the
// history says it must outlast (until their heal, or the rejoin).
func TestStatsInTheBrokersTerms(t *testing.T) {
	everysec := FlushWindowNote(time.Second, "appendfsync everysec")
	always := FlushWindowNote(0, "appendfsync always")
	semisync := OutlastNote(10*time.Second, "rpl_semi_sync_master_timeout 10000 ms")
	tests := []struct {
		name string
		h    *hist
		want Stats
	}{
		{"acknowledged 1.5 s and 0.3 s before the cut of a broker that syncs every second",
			newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).wait(1200e6).enqueue("b", keyB, meta("acme", "doc-b", 3)).wait(300e6).
				node(everysec, "").fault("power_loss", "redis"),
			Stats{AckedInFlushWindow: 1, FlushWindowMs: 1000, NewestAckBeforeBrokerFaultMs: 301}},
		{"every acknowledged job older than the window",
			newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).wait(1500e6).node(everysec, "").fault("power_loss", "redis"),
			Stats{FlushWindowMs: 1000, NewestAckBeforeBrokerFaultMs: 1501}},
		{"a broker that syncs before it acknowledges: every unfinished job counts",
			newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).wait(1500e6).node(always, "").fault("power_loss", "redis"),
			Stats{AckedInFlushWindow: 1, NewestAckBeforeBrokerFaultMs: 1501}},
		{"no window noted (an older history): every unfinished job counts",
			newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).wait(1500e6).fault("power_loss", "redis"),
			Stats{AckedInFlushWindow: 1, NewestAckBeforeBrokerFaultMs: 1501}},
		{"a broker kill counts the newest acknowledgement's age, not the window",
			newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).wait(20e6).fault("broker_crash", "redis"),
			Stats{NewestAckBeforeBrokerFaultMs: 21}},
		{"a partition outlasting the timeout",
			newHist().fault("node_partition", "n1").node(semisync, "").wait(11e9).fault("node_heal", "n1"),
			Stats{PartitionMustOutlastMs: 10000, PartitionsOutlasting: 1}},
		{"a partition healed before the timeout",
			newHist().fault("node_partition", "n1").node(semisync, "").wait(9e9).fault("node_heal", "n1"),
			Stats{PartitionMustOutlastMs: 10000}},
		{"a partition until the rejoin",
			newHist().fault("node_partition", "n1").node(semisync, "").wait(11e9).fault("rejoin", ""),
			Stats{PartitionMustOutlastMs: 10000, PartitionsOutlasting: 1}},
		{"a partition without a timeout to outlast",
			newHist().fault("node_partition", "n1").wait(11e9).fault("node_heal", "n1"),
			Stats{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := Check(tt.h.ops, Final{}, Options{}).Stats
			got := Stats{AckedInFlushWindow: st.AckedInFlushWindow, FlushWindowMs: st.FlushWindowMs, NewestAckBeforeBrokerFaultMs: st.NewestAckBeforeBrokerFaultMs,
				PartitionMustOutlastMs: st.PartitionMustOutlastMs, PartitionsOutlasting: st.PartitionsOutlasting}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("stats %+v, want %+v", got, tt.want)
			}
		})
	}
}
