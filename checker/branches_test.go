package checker

import (
	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/pipeline"
)

// branchCases hold one hand-written history per branch a property's Detection
// text (properties.go) names — each source of a fact (the history, the store,
// the broker), each reason that explains or excuses — so that removing the
// branch turns a case red. mutants_test.go names, for each, the mutation it
// was shown to catch.
func branchCases() []testCase {
	return []testCase{
		// lost: "no commit, pipeline dead-letter or cancellation (history or
		// store), not queued, in flight or in any dead-letter queue, and with no
		// broker action that could account for it".
		{
			name:  "not lost: committed, its result only in the store (the commit's reply was lost)",
			ops:   commitUnknown(newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)), "w1", "a", keyA).fault("kill", "w1"),
			final: committed("a", keyA, "acme"),
		},
		{
			name: "not lost: dead-lettered, its record only in the store (the dead-letter's reply was lost)",
			ops: failPermanent(newHist().enqueue("a", keyA, permanent(meta("acme", "doc-a", 3))), "w1", "a", keyA, 1).
				deadLetterUnknown("w1", "a", keyA, 1, pipeline.ReasonPermanent),
			final: deadFinal("a", keyA, pipeline.ReasonPermanent),
		},
		{
			name: "not lost: dead-lettered in the history, no record in the store",
			ops: failPermanent(newHist().enqueue("a", keyA, permanent(meta("acme", "doc-a", 3))), "w1", "a", keyA, 1).
				deadLetter("w1", "a", keyA, 1, pipeline.ReasonPermanent),
			final: Final{Drained: true},
		},
		{
			name: "not lost: in the broker's dead-letter queue after a dead-letter whose reply was lost",
			ops: failPermanent(newHist().enqueue("a", keyA, permanent(meta("acme", "doc-a", 3))), "w1", "a", keyA, 1).
				deadLetterUnknown("w1", "a", keyA, 1, pipeline.ReasonPermanent),
			final: Final{Drained: true, Broker: adapters.Inventory{DeadLettered: []string{"a"}}},
		},
		{
			name: "not lost: in the broker's dead-letter queue after a dead-letter never answered",
			ops: failPermanent(newHist().enqueue("a", keyA, permanent(meta("acme", "doc-a", 3))), "w1", "a", keyA, 1).
				rec(history.Op{Process: "w1", Type: history.Invoke, F: history.DeadLetter, Job: "a", Key: keyA, Token: 1, Value: pipeline.ReasonPermanent}).
				fault("kill", "w1"),
			final: Final{Drained: true, Broker: adapters.Inventory{DeadLettered: []string{"a"}}},
		},
		{
			name:  "not lost: cancelled in the history, no record in the store",
			ops:   newHist().enqueue("a", keyA, deadline(meta("acme", "doc-a", 3), 3)).deliver("w1", "a", keyA, 1).pair("w1", history.OK, history.Cancel, "a", keyA, 1, "", "").ack("w1", "a", keyA, 1),
			final: Final{Drained: true},
		},
		{
			name:  "not lost: cancelled, only the store records it (the cancel's reply was lost)",
			ops:   newHist().enqueue("a", keyA, deadline(meta("acme", "doc-a", 3), 3)).deliver("w1", "a", keyA, 1).pair("w1", history.Info, history.Cancel, "a", keyA, 1, "", "timeout").ack("w1", "a", keyA, 1),
			final: Final{Drained: true, Store: pipeline.State{Cancelled: []string{"a"}}},
		},
		{
			name:        "in flight at the end is unknown, not lost",
			ops:         newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1),
			final:       Final{Drained: false, Broker: adapters.Inventory{InFlight: []string{"a"}}},
			wantUnknown: true,
		},
		{
			name:        "unfinished while the broker holds messages it cannot name is unknown, not lost",
			ops:         newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)),
			final:       Final{Drained: false, Broker: adapters.Inventory{Unnamed: 2}},
			wantUnknown: true,
		},
		{
			name:  "a job whose every enqueue failed is never lost",
			ops:   newHist().pair("producer", history.Fail, history.Enqueue, "a", keyA, 0, "", "unavailable"),
			final: Final{Drained: true},
		},
		// moved_by_broker: "in the broker's dead-letter queue or in its list of
		// own actions, that no pipeline process dead-lettered (no dead_letter
		// ok, no store dead-letter record)".
		{
			name:  "moved by broker: expired by the broker, not in any dead-letter queue",
			ops:   newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).fault("crash", "w1"),
			final: Final{Drained: true, Broker: adapters.Inventory{Moved: []adapters.BrokerAction{{Job: "a", Action: adapters.ActionExpired, Reason: "ttl"}}}},
			want:  MovedByBroker,
		},
		{
			name: "committed while the broker trimmed messages it cannot name is clean",
			ops:  newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", keyA, 1).apply("a", keyA, "applied"),
			final: func() Final {
				f := committed("a", keyA, "acme")
				f.Broker.Moved = []adapters.BrokerAction{{Action: adapters.ActionTrimmed, Reason: "MAXLEN 100", Count: 3}}
				return f
			}(),
			opts: relay,
		},
		{
			name: "in the broker's dead-letter queue after a pipeline dead-letter the store does not hold is clean",
			ops: failPermanent(newHist().enqueue("a", keyA, permanent(meta("acme", "doc-a", 3))), "w1", "a", keyA, 1).
				deadLetter("w1", "a", keyA, 1, pipeline.ReasonPermanent),
			final: Final{Drained: true, Broker: adapters.Inventory{DeadLettered: []string{"a"}}},
		},
		{
			name: "in the broker's dead-letter queue with only the store's dead-letter record is clean",
			ops:  failPermanent(newHist().enqueue("a", keyA, permanent(meta("acme", "doc-a", 3))), "w1", "a", keyA, 1).fault("kill", "w1"),
			final: func() Final {
				f := deadFinal("a", keyA, pipeline.ReasonPermanent)
				f.Broker.DeadLettered = []string{"a"}
				return f
			}(),
		},
		// multiple_terminal: "two of: commit ok or a store result; pipeline
		// dead_letter ok or a store dead-letter record; cancel ok or a store
		// cancellation" — each from the history alone, and from the store alone.
		{
			name: "multiple terminal: a commit ok and a dead_letter ok, the store holding neither",
			ops: newHist().enqueue("a", keyA, permanent(meta("acme", "doc-a", 3))).deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).
				commit("w1", "a", keyA, 1, "new").deadLetter("w1", "a", keyA, 1, pipeline.ReasonPermanent),
			final: Final{Drained: true},
			want:  MultipleTerminal,
			also:  []Property{CommitLost},
		},
		{
			name: "multiple terminal: a result and a dead-letter record only in the store",
			ops:  commitUnknown(newHist().enqueue("a", keyA, permanent(meta("acme", "doc-a", 3))), "w1", "a", keyA).fault("kill", "w1"),
			final: func() Final {
				f := committed("a", keyA, "acme")
				f.Store.DeadLetters = []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonPermanent}}
				return f
			}(),
			want: MultipleTerminal,
		},
		{
			name:  "multiple terminal: a result and a cancellation only in the store",
			ops:   commitUnknown(newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)), "w1", "a", keyA).fault("kill", "w1"),
			final: func() Final { f := committed("a", keyA, "acme"); f.Store.Cancelled = []string{"a"}; return f }(),
			want:  MultipleTerminal,
		},
		// cancelled_dead_lettered: "or a job both cancelled and dead-lettered"
		// — here leased before its deadline, so only that branch applies.
		{
			name: "a job cancelled and then dead-lettered, leased before its deadline",
			ops: newHist().enqueue("a", keyA, deadline(meta("acme", "doc-a", 3), 100)).deliver("w1", "a", keyA, 1).wait(200).
				pair("w1", history.OK, history.Cancel, "a", keyA, 1, "", "").deadLetter("w1", "a", keyA, 1, pipeline.ReasonPermanent),
			final: Final{Drained: true, Store: pipeline.State{Cancelled: []string{"a"}, DeadLetters: []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonPermanent}}}},
			want:  CancelledToDLQ,
			also:  []Property{MultipleTerminal},
		},
		{
			// Leased before its deadline, dead-lettered after it: past its
			// deadline, so by design (healthy_dead_lettered), and not a late
			// lease dead-lettered (cancelled_dead_lettered).
			name:  "dead-lettered past its deadline, leased before it, is clean",
			ops:   newHist().enqueue("a", keyA, deadline(meta("acme", "doc-a", 3), 100)).deliver("w1", "a", keyA, 1).wait(200).deadLetter("w1", "a", keyA, 1, pipeline.ReasonMaxAttempts),
			final: deadFinal("a", keyA, pipeline.ReasonMaxAttempts),
		},
		// duplicate_effect: "a second commit ok with value new for one key".
		{
			name: "two jobs' new results under one key",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).enqueue("b", keyA, meta("acme", "doc-a", 3)).
				finish("w1", "a", keyA, 1).finish("w2", "b", keyA, 1).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  DuplicateEffect,
		},
		// unexplained_duplicate: "none of those reasons: a fault, a lost reply,
		// a nack, an expired lease, a broker restart or a second enqueue".
		{
			name: "a redelivery after an ack whose reply was lost is explained",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).commit("w1", "a", keyA, 1, "new").
				pair("w1", history.Info, history.Ack, "a", keyA, 1, "", "timeout").
				deliver("w2", "a", keyA, 2).extract("w2", "a", keyA, 2).commit("w2", "a", keyA, 2, "deduped").ack("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final:     committed("a", keyA, "acme"),
			opts:      relay,
			explained: "lost_reply",
		},
		{
			name: "a redelivery after a failed ack is explained",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).commit("w1", "a", keyA, 1, "new").
				pair("w1", history.Fail, history.Ack, "a", keyA, 1, "", "unavailable").
				deliver("w2", "a", keyA, 2).extract("w2", "a", keyA, 2).commit("w2", "a", keyA, 2, "deduped").ack("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final:     committed("a", keyA, "acme"),
			opts:      relay,
			explained: "lost_reply",
		},
		{
			// A cancelled job's delivery ends with its ack.
			name: "a redelivery after a cancellation",
			ops: newHist().enqueue("a", keyA, deadline(meta("acme", "doc-a", 3), 3)).deliver("w1", "a", keyA, 1).
				pair("w1", history.OK, history.Cancel, "a", keyA, 1, "", "").ack("w1", "a", keyA, 1).
				deliver("w2", "a", keyA, 2).pair("w2", history.OK, history.Cancel, "a", keyA, 2, "", "").ack("w2", "a", keyA, 2),
			final: Final{Drained: true, Store: pipeline.State{Cancelled: []string{"a"}}},
			want:  UnexplainedDuplicate,
		},
		{
			// A broker restart explains a redelivery of what was acked before it,
			// not of what was acked after it.
			name: "a redelivery after an ack sent after the broker restarted",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).commit("w1", "a", keyA, 1, "new").
				fault("broker_crash", "broker").fault("broker_restart", "broker").ack("w1", "a", keyA, 1).
				deliver("w2", "a", keyA, 2).extract("w2", "a", keyA, 2).commit("w2", "a", keyA, 2, "deduped").ack("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  UnexplainedDuplicate,
		},
		{
			// Acked between the crash and the restart: no broker that lives on
			// took it (RabbitMQ's ack has no reply; seen in a gate run).
			name: "a redelivery after an ack answered while the broker was down is explained",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).commit("w1", "a", keyA, 1, "new").
				fault("broker_crash", "broker").ack("w1", "a", keyA, 1).fault("broker_restart", "broker").
				deliver("w2", "a", keyA, 2).extract("w2", "a", keyA, 2).commit("w2", "a", keyA, 2, "deduped").ack("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final:     committed("a", keyA, "acme"),
			opts:      relay,
			explained: "broker_restart",
		},
		{
			// No restart recorded (the embedded broker records none), but the
			// broker answered a lease before the ack: it was up again.
			name: "a redelivery after an ack answered once the broker answered again",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).enqueue("b", keyB, meta("acme", "doc-b", 3)).
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).commit("w1", "a", keyA, 1, "new").
				fault("broker_crash", "broker").finish("w3", "b", keyB, 1).ack("w1", "a", keyA, 1).
				deliver("w2", "a", keyA, 2).extract("w2", "a", keyA, 2).commit("w2", "a", keyA, 2, "deduped").ack("w2", "a", keyA, 2).apply("a", keyA, "applied").apply("b", keyB, "applied"),
			final: committed("a", keyA, "acme", "b", keyB, "acme"),
			opts:  relay,
			want:  UnexplainedDuplicate,
		},
		{
			// A job leased and acked while the primary was cut off, before the
			// failover was recorded: the deposed primary may have taken the ack
			// alone, and the promoted node never heard of it (seen on existing
			// clusters). Explained by the partition. (A delivery open when a
			// node fault strikes is explained by the fault itself.)
			name: "a redelivery after an ack answered while the primary was cut off is explained",
			ops: newHist().node("primary", "n1").enqueue("a", keyA, meta("acme", "doc-a", 3)).
				fault("node_partition", "n1").
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).commit("w1", "a", keyA, 1, "new").ack("w1", "a", keyA, 1).
				deliver("w2", "a", keyA, 2).extract("w2", "a", keyA, 2).commit("w2", "a", keyA, 2, "deduped").ack("w2", "a", keyA, 2).apply("a", keyA, "applied").
				node("primary", "n2").fault("failover", "n2").fault("node_heal", "n1"),
			final:     committed("a", keyA, "acme"),
			opts:      relay,
			explained: "failover",
		},
		{
			// A replica cut off: the primary that took the ack still leads.
			name: "a redelivery after an ack answered while a replica was cut off",
			ops: newHist().node("primary", "n1").enqueue("a", keyA, meta("acme", "doc-a", 3)).
				fault("node_partition", "n2").
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).commit("w1", "a", keyA, 1, "new").ack("w1", "a", keyA, 1).
				deliver("w2", "a", keyA, 2).extract("w2", "a", keyA, 2).commit("w2", "a", keyA, 2, "deduped").ack("w2", "a", keyA, 2).apply("a", keyA, "applied").
				fault("node_heal", "n2"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  UnexplainedDuplicate,
		},
		{
			// Acked after the failover was recorded: the new primary took it.
			name: "a redelivery after an ack answered once the failover was recorded",
			ops: newHist().node("primary", "n1").enqueue("a", keyA, meta("acme", "doc-a", 3)).
				fault("node_partition", "n1").node("primary", "n2").fault("failover", "n2").
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).commit("w1", "a", keyA, 1, "new").ack("w1", "a", keyA, 1).
				deliver("w2", "a", keyA, 2).extract("w2", "a", keyA, 2).commit("w2", "a", keyA, 2, "deduped").ack("w2", "a", keyA, 2).apply("a", keyA, "applied").
				fault("node_heal", "n1"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  UnexplainedDuplicate,
		},
		{
			// The dead-letter's outcome is unknown: the broker may never have
			// taken the job off its queue.
			name: "a redelivery after a dead-letter whose reply was lost is explained",
			ops: failPermanent(newHist().enqueue("a", keyA, permanent(meta("acme", "doc-a", 3))), "w1", "a", keyA, 1).
				deadLetterUnknown("w1", "a", keyA, 1, pipeline.ReasonPermanent).
				deliver("w2", "a", keyA, 2).deadLetter("w2", "a", keyA, 2, pipeline.ReasonPermanent),
			final:     deadFinal("a", keyA, pipeline.ReasonPermanent),
			explained: "lost_reply",
		},
		// dead_job_resurrected: "a lease ok after the job's pipeline
		// dead-letter (one enqueue)".
		{
			name: "a dead-lettered job delivered again by the broker",
			ops: failPermanent(newHist().enqueue("a", keyA, permanent(meta("acme", "doc-a", 3))), "w1", "a", keyA, 1).
				deadLetter("w1", "a", keyA, 1, pipeline.ReasonPermanent).
				deliver("w2", "a", keyA, 2).deadLetter("w2", "a", keyA, 2, pipeline.ReasonPermanent),
			final: deadFinal("a", keyA, pipeline.ReasonPermanent),
			want:  Resurrected,
			also:  []Property{UnexplainedDuplicate},
		},
		{
			// Two messages of the job (the producer sent twice): the second one's
			// delivery and its permanent error are neither a resurrection nor a
			// retry.
			name: "the second message of a job enqueued twice, after the first was dead-lettered",
			ops: func() *hist {
				h := newHist().enqueue("a", keyA, permanent(meta("acme", "doc-a", 3))).enqueue("a", keyA, permanent(meta("acme", "doc-a", 3)))
				failPermanent(h, "w1", "a", keyA, 1).deadLetter("w1", "a", keyA, 1, pipeline.ReasonPermanent)
				return failPermanent(h, "w2", "a", keyA, 1).deadLetter("w2", "a", keyA, 1, pipeline.ReasonPermanent)
			}(),
			final: deadFinal("a", keyA, pipeline.ReasonPermanent),
		},
		// preempted: "not checked on brokers with approximate leases".
		{
			name: "a second holder on a broker with approximate leases is not a preemption",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).
				finish("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  Options{RelayRan: true, FencedAck: true, ApproximateLeases: true},
		},
		{
			// On real processes the pause may land between the broker's answer
			// to a lease and the worker's record of it: the lease it records
			// after the pause may have run out while it was stopped.
			name: "a holder paused before it recorded its lease is not preempted",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				rec(history.Op{Process: "w1", Type: history.Invoke, F: history.Lease}).fault("pause", "w1").fault("resume", "w1").
				rec(history.Op{Process: "w1", Type: history.OK, F: history.Lease, Job: "a", Key: keyA, Token: 1, Attempt: 1, Value: "10000"}).
				extract("w1", "a", keyA, 1).
				finish("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final:     committed("a", keyA, "acme"),
			opts:      relay,
			explained: "lease_expiry",
		},
		{
			// A lease answered with a lower token than the open delivery's was
			// granted before it and reached its holder late (a gate run on
			// JetStream under load: token 1 answered 16 ms after token 2).
			name: "a lease answered late with an older token is not a preemption",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				rec(history.Op{Process: "w1", Type: history.Invoke, F: history.Lease}).
				deliver("w2", "a", keyA, 2).extract("w2", "a", keyA, 2).
				rec(history.Op{Process: "w1", Type: history.OK, F: history.Lease, Job: "a", Key: keyA, Token: 1, Attempt: 1, Value: "10000"}).
				extract("w1", "a", keyA, 1).
				commit("w2", "a", keyA, 2, "new").ack("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final:     committed("a", keyA, "acme"),
			opts:      relay,
			explained: "lease_expiry",
		},
		{
			// The same, the newer delivery acked before the older one's lease
			// answered (a gate run on JetStream under load: token 1 answered
			// 218 ms after token 2's ack).
			name: "a lease answered late with an older token after the newer delivery's ack is explained",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				rec(history.Op{Process: "w1", Type: history.Invoke, F: history.Lease}).
				finish("w2", "a", keyA, 2).
				rec(history.Op{Process: "w1", Type: history.OK, F: history.Lease, Job: "a", Key: keyA, Token: 1, Attempt: 1, Value: "10000"}).
				extract("w1", "a", keyA, 1).apply("a", keyA, "applied"),
			final:     committed("a", keyA, "acme"),
			opts:      relay,
			explained: "lease_expiry",
		},
		{
			// The same order with a newer token: the broker granted it while
			// the first holder's lease was live.
			name: "a lease answered late with a newer token is a preemption",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				rec(history.Op{Process: "w1", Type: history.Invoke, F: history.Lease}).
				deliver("w2", "a", keyA, 1).extract("w2", "a", keyA, 1).
				rec(history.Op{Process: "w1", Type: history.OK, F: history.Lease, Job: "a", Key: keyA, Token: 2, Attempt: 2, Value: "10000"}).
				extract("w1", "a", keyA, 2).
				commit("w1", "a", keyA, 2, "new").ack("w1", "a", keyA, 2).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  Preempted,
		},
		// attempts_over_budget: "an extract that failed with a job error
		// (transient, permanent) ... an infrastructure failure ... does not
		// spend"; each message of the job has its own budget.
		{
			name: "permanent errors spend attempts",
			ops: func() *hist {
				h := newHist().enqueue("a", keyA, meta("acme", "doc-a", 1))
				failPermanent(h, "w1", "a", keyA, 1).pair("w1", history.OK, history.Nack, "a", keyA, 1, "500ms", "")
				return failPermanent(h, "w1", "a", keyA, 2).deadLetter("w1", "a", keyA, 2, pipeline.ReasonPermanent)
			}(),
			final: deadFinal("a", keyA, pipeline.ReasonPermanent),
			want:  OverBudget,
			also:  []Property{PermanentRetried},
		},
		{
			name: "extracts failed by the infrastructure do not spend attempts",
			ops: func() *hist {
				h := newHist().enqueue("a", keyA, meta("acme", "doc-a", 2))
				for tok := uint64(1); tok <= 3; tok++ {
					h.deliver("w1", "a", keyA, tok).pair("w1", history.Fail, history.Extract, "a", keyA, tok, "", "lease_lost").
						pair("w1", history.OK, history.Nack, "a", keyA, tok, "500ms", "")
				}
				return h.finish("w1", "a", keyA, 4).apply("a", keyA, "applied")
			}(),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		{
			name: "two messages of a job double its budget",
			ops: func() *hist {
				h := newHist().enqueue("a", keyA, meta("acme", "doc-a", 2)).enqueue("a", keyA, meta("acme", "doc-a", 2))
				for tok := uint64(1); tok <= 3; tok++ {
					h.deliver("w1", "a", keyA, tok).pair("w1", history.Fail, history.Extract, "a", keyA, tok, "", "transient").
						pair("w1", history.OK, history.Nack, "a", keyA, tok, "500ms", "")
				}
				return h.finish("w1", "a", keyA, 4).apply("a", keyA, "applied")
			}(),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		// healthy_dead_lettered: each reason a dead-letter is earned, and each
		// claimed reason the history does not prove.
		{
			name: "a poison job dead-lettered is by design",
			ops: func() *hist {
				m := meta("acme", "doc-a", 3)
				m.Poison = true
				return newHist().enqueue("a", keyA, m).deliver("w1", "a", keyA, 1).
					rec(history.Op{Process: "w1", Type: history.Invoke, F: history.Extract, Job: "a", Key: keyA, Token: 1}).
					rec(history.Op{Process: "controller", Type: history.Info, F: history.Fault, Value: "crash", Key: string(pipeline.Poison), Job: "a", Target: "w1"}).
					deliver("w1.2", "a", keyA, 2).deadLetter("w1.2", "a", keyA, 2, pipeline.ReasonMaxAttempts)
			}(),
			final: deadFinal("a", keyA, pipeline.ReasonMaxAttempts),
		},
		{
			name: "a job designed to fail more often than its budget allows, dead-lettered early, is by design",
			ops: func() *hist {
				m := meta("acme", "doc-a", 3)
				m.FailTransient = 5
				return newHist().enqueue("a", keyA, m).deliver("w1", "a", keyA, 1).
					pair("w1", history.Fail, history.Extract, "a", keyA, 1, "", "transient").deadLetter("w1", "a", keyA, 1, pipeline.ReasonMaxAttempts)
			}(),
			final: deadFinal("a", keyA, pipeline.ReasonMaxAttempts),
		},
		{
			name: "a job permanent by its metadata, dead-lettered before any failure, is by design",
			ops: newHist().enqueue("a", keyA, permanent(meta("acme", "doc-a", 3))).deliver("w1", "a", keyA, 1).
				deadLetter("w1", "a", keyA, 1, pipeline.ReasonPermanent),
			final: deadFinal("a", keyA, pipeline.ReasonPermanent),
		},
		{
			// Deaths of its holders count towards its attempts, not towards a
			// permanent error it never had.
			name: "dead-lettered as permanent after its holders died, with no permanent error",
			ops: func() *hist {
				h := newHist().enqueue("a", keyA, meta("acme", "doc-a", 3))
				for i, w := range []string{"w1", "w2", "w3"} {
					h.deliver(w, "a", keyA, uint64(i+1)).fault("kill", w)
				}
				return h.deliver("w4", "a", keyA, 4).deadLetter("w4", "a", keyA, 4, pipeline.ReasonPermanent)
			}(),
			final: deadFinal("a", keyA, pipeline.ReasonPermanent),
			want:  HealthyDeadLettered,
		},
		{
			// Created long before its enqueue: its age runs from its creation.
			name: "age budget exceeded counted from the job's creation",
			ops: func() *hist {
				m := meta("acme", "doc-a", 3)
				m.Created, m.AgeBudget = 1, 500
				return newHist().wait(1000).enqueue("a", keyA, m).deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).
					pair("w1", history.Fail, history.Commit, "a", keyA, 1, "", "unavailable").deadLetter("w1", "a", keyA, 1, ReasonAgeExceeded)
			}(),
			final: deadFinal("a", keyA, ReasonAgeExceeded),
		},
		{
			// Past its age budget, but dead-lettered for its attempts, which it
			// had not spent: the age budget excuses only its own reason.
			name: "past its age budget, dead-lettered for attempts it did not spend",
			ops: func() *hist {
				m := meta("acme", "doc-a", 3)
				m.AgeBudget = 5
				return newHist().enqueue("a", keyA, m).deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).
					pair("w1", history.Fail, history.Commit, "a", keyA, 1, "", "unavailable").deadLetter("w1", "a", keyA, 1, pipeline.ReasonMaxAttempts)
			}(),
			final: deadFinal("a", keyA, pipeline.ReasonMaxAttempts),
			want:  HealthyDeadLettered,
		},
		{
			name: "a proven idempotency conflict dead-lettered is by design",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).
				pair("w1", history.Fail, history.Commit, "a", keyA, 1, "", pipeline.ReasonIdempotencyConflict).
				deadLetter("w1", "a", keyA, 1, pipeline.ReasonIdempotencyConflict),
			final: deadFinal("a", keyA, pipeline.ReasonIdempotencyConflict),
		},
		{
			name: "an idempotency conflict the history does not show",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).
				pair("w1", history.Fail, history.Commit, "a", keyA, 1, "", "unavailable").
				deadLetter("w1", "a", keyA, 1, pipeline.ReasonIdempotencyConflict),
			final: deadFinal("a", keyA, pipeline.ReasonIdempotencyConflict),
			want:  HealthyDeadLettered,
		},
		{
			// The worker could not build a key for it (no valid key at all).
			name:  "an invalid job with no key dead-lettered is by design",
			ops:   newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", "", 1).deadLetter("w1", "a", "", 1, pipeline.ReasonInvalidJob),
			final: deadFinal("a", "", pipeline.ReasonInvalidJob),
		},
		{
			name:  "a job refused as invalid although its key is valid",
			ops:   newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).deadLetter("w1", "a", keyA, 1, pipeline.ReasonInvalidJob),
			final: deadFinal("a", keyA, pipeline.ReasonInvalidJob),
			want:  HealthyDeadLettered,
		},
		// work_after_deadline: "an extract invoke later than the deadline" —
		// any execution, not only the first.
		{
			name: "work after the deadline on a retried job",
			ops: func() *hist {
				h := newHist().enqueue("a", keyA, deadline(meta("acme", "doc-a", 3), 100)).deliver("w1", "a", keyA, 1).
					pair("w1", history.Fail, history.Extract, "a", keyA, 1, "", "transient").pair("w1", history.OK, history.Nack, "a", keyA, 1, "500ms", "")
				return h.wait(200).finish("w1", "a", keyA, 2).apply("a", keyA, "applied")
			}(),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  AfterDeadline,
		},
		// cancelled_reprocessed: "cancel ok, or a store cancellation".
		{
			name:  "a job the store records as cancelled (the cancel's reply was lost), reprocessed",
			ops:   cancelledThenReprocessed(history.Info),
			final: cancelledReprocessFinal(true),
			opts:  relay,
			want:  CancelledReprocessed,
		},
		{
			name:  "a job cancelled in the history (the store holds no cancellation), reprocessed",
			ops:   cancelledThenReprocessed(history.OK),
			final: cancelledReprocessFinal(false),
			opts:  relay,
			want:  CancelledReprocessed,
		},
		// stale_commit_accepted, stale_ack_accepted: "another delivery of the
		// same message"; acks only where the broker claims fenced acks.
		{
			name: "an older token of another message of the job committing is not stale",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).fault("pause", "w1").
				finish("w2", "a", keyA, 2).
				commit("w1", "a", keyA, 1, "deduped").apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		{
			name: "an older token of another message of the job acking is not stale",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).fault("pause", "w1").
				finish("w2", "a", keyA, 2).ack("w1", "a", keyA, 1).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		{
			name: "a stale ack on a broker that does not claim fenced acks is not checked",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).fault("pause", "w1").
				finish("w2", "a", keyA, 2).ack("w1", "a", keyA, 1).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  Options{RelayRan: true},
		},
		{
			// The job's metadata names no tenant: only the key's own form shows
			// it names none either.
			name:  "a key naming no tenant, for a job whose metadata names none",
			ops:   newHist().enqueue("a", keyA, meta("", "doc-a", 3)).finish("w1", "a", "doc-a:v1", 1).apply("a", "doc-a:v1", "applied"),
			final: committed("a", "doc-a:v1", ""),
			opts:  relay,
			want:  KeyWithoutTenant,
		},
		// tenants_share_key, silent_reuse: two jobs of one tenant with one
		// payload under one key share nothing across tenants and reuse nothing
		// silently; a result stored under another tenant's key is reuse.
		{
			name: "two jobs of one tenant and one payload under one key, the second deduped, are clean",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).enqueue("a2", keyA, meta("acme", "doc-a", 3)).
				finish("w1", "a", keyA, 1).
				deliver("w2", "a2", keyA, 1).extract("w2", "a2", keyA, 1).commit("w2", "a2", keyA, 1, "deduped").ack("w2", "a2", keyA, 1).
				apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		{
			name:  "a result stored under another tenant's key",
			ops:   newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", keyA, 1).apply("a", keyA, "applied"),
			final: committed("a", keyA, "globex"),
			opts:  relay,
			want:  SilentReuse,
		},
		// dlq_leak: "a dead-letter reason that is not a reason code" — in the
		// history or in the store, also when it contains one.
		{
			name: "dlq leak: a reason code embedded in error text",
			ops: failPermanent(newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)), "w1", "a", keyA, 1).
				deadLetter("w1", "a", keyA, 1, pipeline.ReasonPermanent+": cannot parse document doc-a"),
			final: deadFinal("a", keyA, pipeline.ReasonPermanent+": cannot parse document doc-a"),
			want:  DLQLeak,
		},
		{
			name: "dlq leak: error text only in the dead_letter call, the store's record holding a code",
			ops: failPermanent(newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)), "w1", "a", keyA, 1).
				deadLetter("w1", "a", keyA, 1, "cannot parse document doc-a"),
			final: deadFinal("a", keyA, pipeline.ReasonPermanent),
			want:  DLQLeak,
		},
		{
			name: "dlq leak: error text only in the store's record",
			ops: failPermanent(newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)), "w1", "a", keyA, 1).
				deadLetter("w1", "a", keyA, 1, pipeline.ReasonPermanent),
			final: deadFinal("a", keyA, "cannot parse document doc-a"),
			want:  DLQLeak,
		},
		// outbox_orphan: "a store result naming an event the store does not
		// hold (and the consumer never applied), or an event without its
		// result".
		{
			name: "outbox orphan: an event without its result",
			ops:  commitUnknown(newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)), "w1", "a", keyA).fault("kill", "w1"),
			final: func() Final {
				f := committed("a", keyA, "acme")
				f.Store.Results = nil
				return f
			}(),
			want: OutboxOrphan,
			also: []Property{Lost},
		},
		{
			name: "a result whose event the consumer applied and the outbox no longer holds is clean",
			ops:  newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", keyA, 1).apply("a", keyA, "applied"),
			final: func() Final {
				f := committed("a", keyA, "acme")
				f.Store.Events = nil
				return f
			}(),
		},
		// event_not_applied: "a store event, not dead".
		{
			name: "an event parked for good is not owed to the consumer",
			ops:  newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", keyA, 1),
			final: func() Final {
				f := committed("a", keyA, "acme")
				f.Store.Events[0].Dead, f.Store.Events[0].DeadReason = true, pipeline.ReasonRejectedEvent
				f.Store.Applied = nil
				return f
			}(),
			opts: relay,
		},
		// reprocess_unaudited: "without an audit entry naming an operator, or
		// whose new job is not at version+1" — another version, a job never
		// enqueued, the dead job itself.
		{
			name:  "reprocessed with an audit entry naming no operator",
			ops:   reprocessHistory(),
			final: func() Final { f := reprocessFinal(true); f.Store.Audits[0].Operator = ""; return f }(),
			opts:  relay,
			want:  ReprocessUnaudited,
		},
		{
			name: "an audited reprocess to a new job at version+2",
			ops: func() *hist {
				m3 := meta("acme", "doc-a", 3)
				m3.Version = 3
				return reprocessHistoryAs("a.v3", "acme:doc-a:v3", m3)
			}(),
			final: func() Final {
				f := committed("a.v3", "acme:doc-a:v3", "acme")
				f.Store.DeadLetters = []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonPermanent, Reprocessed: true}}
				f.Store.Audits = []pipeline.Audit{{OldJob: "a", NewJob: "a.v3", Operator: "op-alice"}}
				return f
			}(),
			opts:    relay,
			want:    ReprocessUnaudited,
			because: "a.v3 is at version 3, not 2",
		},
		{
			name:    "an audited reprocess to a job never enqueued",
			ops:     reprocessHistory(),
			final:   func() Final { f := reprocessFinal(true); f.Store.Audits[0].NewJob = "a.v9"; return f }(),
			opts:    relay,
			want:    ReprocessUnaudited,
			because: "a.v9 was never enqueued",
		},
		{
			name: "an audited reprocess whose new job is the dead job itself",
			ops: failPermanent(newHist().enqueue("a", keyA, permanent(meta("acme", "doc-a", 3))), "w1", "a", keyA, 1).
				deadLetter("w1", "a", keyA, 1, pipeline.ReasonPermanent).
				rec(history.Op{Process: "operator", Type: history.Invoke, F: history.Reprocess, Job: "a", Value: "op-alice"}).
				rec(history.Op{Process: "operator", Type: history.OK, F: history.Reprocess, Job: "a", Value: "a"}),
			final: Final{Drained: true, Store: pipeline.State{
				DeadLetters: []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonPermanent, Reprocessed: true}},
				Audits:      []pipeline.Audit{{OldJob: "a", NewJob: "a", Operator: "op-alice"}}}},
			want:    ReprocessUnaudited,
			also:    []Property{Resurrected},
			because: "the new job is the dead job itself",
		},
		// failed_but_applied: "every earlier commit failed" / "every enqueue
		// failed": one whose outcome is unknown may have applied it.
		{
			name: "a failed commit, then one of unknown outcome, then deduped, is clean",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).
				pair("w1", history.Fail, history.Commit, "a", keyA, 1, "", "unavailable").
				pair("w1", history.Info, history.Commit, "a", keyA, 1, "", "timeout").
				commit("w1", "a", keyA, 1, "deduped").ack("w1", "a", keyA, 1).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		{
			name: "a failed enqueue, then one of unknown outcome, then delivered, is clean",
			ops: newHist().pair("producer", history.Fail, history.Enqueue, "a", keyA, 0, "", "unavailable").
				pair("producer", history.Info, history.Enqueue, "a", keyA, 0, "", "timeout").
				finish("w1", "a", keyA, 1).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		// ambiguous_taken_as_known: "right after a commit or ack info".
		{
			name: "an ack timeout taken as failure",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).commit("w1", "a", keyA, 1, "new").
				pair("w1", history.Info, history.Ack, "a", keyA, 1, "", "timeout").
				pair("w1", history.OK, history.Nack, "a", keyA, 1, "500ms", "").apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  AmbiguousResolved,
		},
		{
			name: "an ack retried after an ack timeout is clean",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).commit("w1", "a", keyA, 1, "new").
				pair("w1", history.Info, history.Ack, "a", keyA, 1, "", "timeout").ack("w1", "a", keyA, 1).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		// circuit_opened_on_healthy_channel: a fault on another link does not
		// make the channel faulted.
		{
			name: "a circuit opened after a fault on another link",
			ops: newHist().rec(history.Op{Process: "controller", Type: history.Info, F: history.Fault, Value: "refused", Key: "store", Target: "relay"}).
				rec(history.Op{Process: "relay", Type: history.Info, F: history.Circuit, Value: "open"}),
			final: Final{Drained: true},
			want:  CircuitOnHealthy,
		},
	}
}

// deadLetterUnknown: proc dead-letters job for reason; the outcome is unknown.
func (h *hist) deadLetterUnknown(proc, job, key string, tok uint64, reason string) *hist {
	h.rec(history.Op{Process: proc, Type: history.Invoke, F: history.DeadLetter, Job: job, Key: key, Token: tok, Value: reason})
	return h.rec(history.Op{Process: proc, Type: history.Info, F: history.DeadLetter, Job: job, Key: key, Token: tok, Err: "timeout"})
}

// deadline sets m's deadline (ns since the epoch; a hist's clock starts at 1).
func deadline(m pipeline.JobMeta, t int64) pipeline.JobMeta {
	m.Deadline = t
	return m
}

// failPermanent: proc leases job and its work fails with a permanent error.
func failPermanent(h *hist, proc, job, key string, tok uint64) *hist {
	return h.deliver(proc, job, key, tok).pair(proc, history.Fail, history.Extract, job, key, tok, "", "permanent")
}

// commitUnknown: proc leases job and works; its commit's outcome is unknown.
func commitUnknown(h *hist, proc, job, key string) *hist {
	return h.deliver(proc, job, key, 1).extract(proc, job, key, 1).pair(proc, history.Info, history.Commit, job, key, 1, "", "timeout")
}

// reprocessHistoryAs: a fails permanently and is dead-lettered; an operator
// reprocesses it as newJob (enqueued with m under key), which commits.
func reprocessHistoryAs(newJob, key string, m pipeline.JobMeta) *hist {
	return failPermanent(newHist().enqueue("a", keyA, permanent(meta("acme", "doc-a", 3))), "w1", "a", keyA, 1).
		deadLetter("w1", "a", keyA, 1, pipeline.ReasonPermanent).
		rec(history.Op{Process: "operator", Type: history.Invoke, F: history.Reprocess, Job: "a", Value: "op-alice"}).
		enqueue(newJob, key, m).
		rec(history.Op{Process: "operator", Type: history.OK, F: history.Reprocess, Job: "a", Value: newJob}).
		finish("w1", newJob, key, 1).apply(newJob, key, "applied")
}

// cancelledThenReprocessed: a is cancelled past its deadline (the cancel
// answered typ), then reprocessed as a.v2 at version 2, which commits.
func cancelledThenReprocessed(typ history.Type) *hist {
	m2 := meta("acme", "doc-a", 3)
	m2.Version = 2
	return newHist().enqueue("a", keyA, deadline(meta("acme", "doc-a", 3), 3)).deliver("w1", "a", keyA, 1).
		pair("w1", typ, history.Cancel, "a", keyA, 1, "", "").ack("w1", "a", keyA, 1).
		rec(history.Op{Process: "operator", Type: history.Invoke, F: history.Reprocess, Job: "a", Value: "op-alice"}).
		enqueue("a.v2", keyA2, m2).
		rec(history.Op{Process: "operator", Type: history.OK, F: history.Reprocess, Job: "a", Value: "a.v2"}).
		finish("w1", "a.v2", keyA2, 1).apply("a.v2", keyA2, "applied")
}

func cancelledReprocessFinal(storeCancelled bool) Final {
	f := committed("a.v2", keyA2, "acme")
	f.Store.Audits = []pipeline.Audit{{OldJob: "a", NewJob: "a.v2", Operator: "op-alice"}}
	if storeCancelled {
		f.Store.Cancelled = []string{"a"}
	}
	return f
}
