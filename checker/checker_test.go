package checker

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/pipeline"
)

// relay: the options of a target whose relay ran and whose broker fences acks.
var relay = Options{FencedAck: true, RelayRan: true}

type testCase struct {
	name        string
	ops         *hist
	final       Final
	opts        Options
	want        Property   // "" for a clean history
	also        []Property // the other properties the history raises: no more, no fewer
	because     string     // a line some violation of want must say
	explained   string     // a redelivery the stats must count with this explanation
	wantUnknown bool
}

// cases are hand-written histories, one or more per property, and clean ones
// beside them: each property's own unit test. branchCases (branches_test.go)
// add one per branch a property's Detection text names.
func cases() []testCase {
	return append(baseCases(), branchCases()...)
}

func baseCases() []testCase {
	return []testCase{
		{
			name: "clean",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).enqueue("b", keyB, meta("acme", "doc-b", 3)).
				finish("w1", "a", keyA, 1).finish("w2", "b", keyB, 1).apply("a", keyA, "applied").apply("b", keyB, "applied").
				apply("a", keyA, "dropped"),
			final: committed("a", keyA, "acme", "b", keyB, "acme"),
			opts:  relay,
		},
		{
			name: "clean redelivery after a crash",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).fault("crash", "w1").
				finish("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		{
			name:        "still queued is unknown, not lost",
			ops:         newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).fault("crash", "w1"),
			final:       Final{Drained: false, Broker: inventory("a")},
			wantUnknown: true,
		},
		{
			name:  "lost",
			ops:   newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).fault("crash", "w1"),
			final: Final{Drained: true},
			want:  Lost,
		},
		{
			name: "never delivered and gone is lost",
			ops:  newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)),
			want: Lost,
		},
		{
			name: "multiple terminal: committed and dead-lettered",
			ops:  newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", keyA, 1).apply("a", keyA, "applied"),
			final: func() Final {
				f := committed("a", keyA, "acme")
				f.Store.DeadLetters = []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonMaxAttempts}}
				return f
			}(),
			want: MultipleTerminal,
			also: []Property{HealthyDeadLettered},
		},
		{
			name: "multiple terminal: committed and cancelled",
			ops:  newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", keyA, 1).apply("a", keyA, "applied"),
			final: func() Final {
				f := committed("a", keyA, "acme")
				f.Store.Cancelled = []string{"a"}
				return f
			}(),
			want: MultipleTerminal,
		},
		{
			name: "duplicate effect",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).commit("w1", "a", keyA, 1, "new").fault("crash", "w1").
				finish("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  DuplicateEffect,
		},
		{
			name: "duplicate apply",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", keyA, 1).
				apply("a", keyA, "applied").apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  DuplicateApply,
		},
		{
			name: "stale commit accepted",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).fault("pause", "w1").
				finish("w2", "a", keyA, 2).
				commit("w1", "a", keyA, 1, "deduped").apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  StaleCommit,
		},
		{
			name: "stale commit rejected is clean",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).fault("pause", "w1").
				finish("w2", "a", keyA, 2).
				pair("w1", history.Fail, history.Commit, "a", keyA, 1, "", "stale_token").apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		{
			name: "stale ack accepted",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).fault("pause", "w1").
				finish("w2", "a", keyA, 2).ack("w1", "a", keyA, 1).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  StaleAck,
		},
		{
			name: "attempts over budget",
			ops: func() *hist {
				h := newHist().enqueue("a", keyA, meta("acme", "doc-a", 2))
				for tok := uint64(1); tok <= 3; tok++ {
					h.deliver("w1", "a", keyA, tok).pair("w1", history.Fail, history.Extract, "a", keyA, tok, "", "transient").
						pair("w1", history.OK, history.Nack, "a", keyA, tok, "500ms", "")
				}
				return h.deliver("w1", "a", keyA, 4).deadLetter("w1", "a", keyA, 4, pipeline.ReasonMaxAttempts)
			}(),
			final: Final{Drained: true, Store: pipeline.State{DeadLetters: []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonMaxAttempts}}}},
			want:  OverBudget,
		},
		{
			name: "attempts within budget",
			ops: func() *hist {
				h := newHist().enqueue("a", keyA, meta("acme", "doc-a", 2))
				for tok := uint64(1); tok <= 2; tok++ {
					h.deliver("w1", "a", keyA, tok).pair("w1", history.Fail, history.Extract, "a", keyA, tok, "", "transient")
					if tok == 1 {
						h.pair("w1", history.OK, history.Nack, "a", keyA, tok, "500ms", "")
					}
				}
				return h.deadLetter("w1", "a", keyA, 2, pipeline.ReasonMaxAttempts)
			}(),
			final: Final{Drained: true, Store: pipeline.State{DeadLetters: []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonMaxAttempts}}}},
		},
		{
			// The pipeline counts a worker that died holding the job, to bound a
			// crash loop: dead-lettering at the budget after such deaths is by design.
			name: "dead-lettered after its holders died",
			ops: func() *hist {
				h := newHist().enqueue("a", keyA, meta("acme", "doc-a", 3))
				for i, w := range []string{"w1", "w2", "w3"} {
					h.deliver(w, "a", keyA, uint64(i+1)).fault("kill", w)
				}
				return h.deliver("w4", "a", keyA, 4).deadLetter("w4", "a", keyA, 4, pipeline.ReasonMaxAttempts)
			}(),
			final: Final{Drained: true, Store: pipeline.State{DeadLetters: []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonMaxAttempts}}}},
		},
		{
			// A zombie: paused while it held the job, delivered again before its
			// delivery ended; the pipeline counts it as a death, and so does the
			// checker (found by explore: a pause at after_lease).
			name: "dead-lettered after two spent attempts and a paused holder",
			ops: func() *hist {
				h := newHist().enqueue("a", keyA, meta("acme", "doc-a", 3))
				for tok := uint64(1); tok <= 2; tok++ {
					h.deliver("w1", "a", keyA, tok).pair("w1", history.Fail, history.Extract, "a", keyA, tok, "", "transient").
						pair("w1", history.OK, history.Nack, "a", keyA, tok, "500ms", "")
				}
				return h.deliver("w1", "a", keyA, 3).fault("pause", "w1").
					deliver("w2", "a", keyA, 4).deadLetter("w2", "a", keyA, 4, pipeline.ReasonMaxAttempts)
			}(),
			final: Final{Drained: true, Store: pipeline.State{DeadLetters: []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonMaxAttempts}}}},
		},
		{
			// The paused holder gave the job back before it was delivered again:
			// no death, and the dead-letter is not by design.
			name: "dead-lettered after a pause that ended its delivery",
			ops: func() *hist {
				h := newHist().enqueue("a", keyA, meta("acme", "doc-a", 3))
				for tok := uint64(1); tok <= 2; tok++ {
					h.deliver("w1", "a", keyA, tok).pair("w1", history.Fail, history.Extract, "a", keyA, tok, "", "transient").
						pair("w1", history.OK, history.Nack, "a", keyA, tok, "500ms", "")
				}
				return h.deliver("w1", "a", keyA, 3).fault("pause", "w1").
					pair("w1", history.OK, history.Nack, "a", keyA, 3, "500ms", "").
					deliver("w2", "a", keyA, 4).deadLetter("w2", "a", keyA, 4, pipeline.ReasonMaxAttempts)
			}(),
			final: Final{Drained: true, Store: pipeline.State{DeadLetters: []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonMaxAttempts}}}},
			want:  HealthyDeadLettered,
		},
		{
			// Three copies (lost enqueue replies), each run once at the same
			// time, each failing its "first" attempt: the job's budget of 3 is
			// spent, whatever the copies.
			name: "copies of a job spend one budget",
			ops: func() *hist {
				m := meta("acme", "doc-a", 3)
				m.FailTransient = 2
				h := newHist().enqueue("a", keyA, m).enqueue("a", keyA, m).enqueue("a", keyA, m)
				for i, w := range []string{"w1", "w2", "w3"} {
					h.deliver(w, "a", keyA, 1).pair(w, history.Fail, history.Extract, "a", keyA, 1, "", "transient")
					if i < 2 {
						h.pair(w, history.OK, history.Nack, "a", keyA, 1, "500ms", "")
					}
				}
				return h.deadLetter("w3", "a", keyA, 1, pipeline.ReasonMaxAttempts)
			}(),
			final: Final{Drained: true, Store: pipeline.State{DeadLetters: []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonMaxAttempts}}}},
		},
		{
			name: "dead-lettered after one death",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).fault("kill", "w1").
				deliver("w2", "a", keyA, 2).deadLetter("w2", "a", keyA, 2, pipeline.ReasonMaxAttempts),
			final: Final{Drained: true, Store: pipeline.State{DeadLetters: []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonMaxAttempts}}}},
			want:  HealthyDeadLettered,
		},
		{
			name: "permanent error retried",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).pair("w1", history.Fail, history.Extract, "a", keyA, 1, "", "permanent").
				pair("w1", history.OK, history.Nack, "a", keyA, 1, "500ms", "").
				deliver("w1", "a", keyA, 2).pair("w1", history.Fail, history.Extract, "a", keyA, 2, "", "permanent").
				deadLetter("w1", "a", keyA, 2, pipeline.ReasonPermanent),
			final: Final{Drained: true, Store: pipeline.State{DeadLetters: []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonPermanent}}}},
			want:  PermanentRetried,
		},
		{
			// w1 leased the job before w2's permanent error (a zombie resumed
			// after a pause): its run is no retry.
			name: "permanent error hit by a holder that leased before it",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).fault("pause", "w1").
				deliver("w2", "a", keyA, 2).pair("w2", history.Fail, history.Extract, "a", keyA, 2, "", "permanent").
				deadLetter("w2", "a", keyA, 2, pipeline.ReasonPermanent).
				pair("w1", history.Fail, history.Extract, "a", keyA, 1, "", "permanent"),
			final: Final{Drained: true, Store: pipeline.State{DeadLetters: []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonPermanent}}}},
		},
		{
			// w1 failed for good and was killed before its dead-letter: the
			// next holder cannot know, and runs the job again.
			name: "permanent error whose holder died before the dead-letter",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).pair("w1", history.Fail, history.Extract, "a", keyA, 1, "", "permanent").
				fault("kill", "w1").
				deliver("w2", "a", keyA, 2).pair("w2", history.Fail, history.Extract, "a", keyA, 2, "", "permanent").
				deadLetter("w2", "a", keyA, 2, pipeline.ReasonPermanent),
			final: Final{Drained: true, Store: pipeline.State{DeadLetters: []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonPermanent}}}},
		},
		{
			name: "work after deadline",
			ops: func() *hist {
				m := meta("acme", "doc-a", 3)
				m.Deadline = 3 // ns since the epoch; the extract comes later
				return newHist().enqueue("a", keyA, m).finish("w1", "a", keyA, 1).apply("a", keyA, "applied")
			}(),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  AfterDeadline,
		},
		{
			name: "work before deadline is clean",
			ops: func() *hist {
				m := meta("acme", "doc-a", 3)
				m.Deadline = 1 << 40
				return newHist().enqueue("a", keyA, m).finish("w1", "a", keyA, 1).apply("a", keyA, "applied")
			}(),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		{
			name: "cancelled job dead-lettered",
			ops: func() *hist {
				m := meta("acme", "doc-a", 3)
				m.Deadline = 3
				return newHist().enqueue("a", keyA, m).deliver("w1", "a", keyA, 1).deadLetter("w1", "a", keyA, 1, pipeline.ReasonPermanent)
			}(),
			final: Final{Drained: true, Store: pipeline.State{DeadLetters: []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonPermanent}}}},
			want:  CancelledToDLQ,
		},
		{
			name:  "key without tenant",
			ops:   newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", "doc-a:v1", 1).apply("a", "doc-a:v1", "applied"),
			final: committed("a", "doc-a:v1", "acme"),
			opts:  relay,
			want:  KeyWithoutTenant,
		},
		{
			name:  "key of another tenant",
			ops:   newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", "globex:doc-a:v1", 1).apply("a", "globex:doc-a:v1", "applied"),
			final: committed("a", "globex:doc-a:v1", "acme"),
			opts:  relay,
			want:  KeyWithoutTenant,
		},
		{
			name: "tenants share a key",
			ops: newHist().enqueue("a", "doc-a:v1", meta("acme", "doc-a", 3)).enqueue("b", "doc-a:v1", meta("globex", "doc-a", 3)).
				finish("w1", "a", "doc-a:v1", 1).
				deliver("w2", "b", "doc-a:v1", 1).extract("w2", "b", "doc-a:v1", 1).commit("w2", "b", "doc-a:v1", 1, "deduped").ack("w2", "b", "doc-a:v1", 1),
			final: committed("a", "doc-a:v1", "acme"),
			want:  TenantsShareKey,
			also:  []Property{KeyWithoutTenant},
		},
		{
			name: "silent reuse of another payload's result",
			ops: func() *hist {
				m2 := meta("acme", "doc-a", 3)
				m2.Hash = "another-hash"
				return newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).enqueue("a-mutated", keyA, m2).
					finish("w1", "a", keyA, 1).
					deliver("w2", "a-mutated", keyA, 1).extract("w2", "a-mutated", keyA, 1).commit("w2", "a-mutated", keyA, 1, "deduped").ack("w2", "a-mutated", keyA, 1).
					apply("a", keyA, "applied")
			}(),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  SilentReuse,
		},
		{
			name: "dlq leak: error text in the invoke",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).
				pair("w1", history.Fail, history.Extract, "a", keyA, 1, "", "permanent").
				deadLetter("w1", "a", keyA, 1, `permanent: cannot parse document doc-a: "invoice 4711"`),
			final: Final{Drained: true, Store: pipeline.State{DeadLetters: []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: `permanent: cannot parse document doc-a: "invoice 4711"`}}}},
			want:  DLQLeak,
		},
		{
			name: "dlq leak: canary in the record",
			ops: newHist().enqueue("a", "acme:CANARY-1:v1", meta("acme", "CANARY-1", 3)).deliver("w1", "a", "acme:CANARY-1:v1", 1).
				deadLetter("w1", "a", "acme:CANARY-1:v1", 1, pipeline.ReasonPermanent),
			final: Final{Drained: true, Store: pipeline.State{DeadLetters: []pipeline.DeadLetterRecord{{JobID: "a", Key: "acme:CANARY-1:v1", Reason: pipeline.ReasonPermanent}}}},
			opts:  Options{Canaries: []string{"CANARY-1"}},
			want:  DLQLeak,
			also:  []Property{HealthyDeadLettered},
		},
		{
			name: "dead-lettered with a reason code is clean",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).
				pair("w1", history.Fail, history.Extract, "a", keyA, 1, "", "permanent").
				deadLetter("w1", "a", keyA, 1, pipeline.ReasonPermanent),
			final: Final{Drained: true, Store: pipeline.State{DeadLetters: []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonPermanent}}}},
			opts:  Options{Canaries: []string{"CANARY-1"}},
		},
		{
			name:  "order inversion",
			ops:   orderHistory(),
			final: committed("a", keyA, "acme", "b", keyB, "acme"),
			opts:  Options{FIFO: true},
			want:  OrderInversion,
		},
		{
			// a's enqueue (another process) overlaps b's: b was sent before a
			// was acknowledged, so the broker may have received b first.
			name: "overlapping enqueues have no order",
			ops: func() *hist {
				h := newHist()
				mb, _ := json.Marshal(grouped(meta("acme", "doc-b", 3)))
				ma, _ := json.Marshal(grouped(meta("acme", "doc-a", 3)))
				h.rec(history.Op{Process: "producer", Type: history.Invoke, F: history.Enqueue, Job: "b", Key: keyB, Value: string(mb)})
				h.rec(history.Op{Process: "operator", Type: history.Invoke, F: history.Enqueue, Job: "a", Key: keyA, Value: string(ma)})
				h.rec(history.Op{Process: "operator", Type: history.OK, F: history.Enqueue, Job: "a", Key: keyA})
				h.rec(history.Op{Process: "producer", Type: history.OK, F: history.Enqueue, Job: "b", Key: keyB})
				return h.finish("w2", "b", keyB, 1).finish("w1", "a", keyA, 1)
			}(),
			final: committed("a", keyA, "acme", "b", keyB, "acme"),
			opts:  Options{FIFO: true},
		},
		{
			name:  "order not checked without FIFO",
			ops:   orderHistory(),
			final: committed("a", keyA, "acme", "b", keyB, "acme"),
		},
		{
			name: "order kept",
			ops: newHist().enqueue("a", keyA, grouped(meta("acme", "doc-a", 3))).enqueue("b", keyB, grouped(meta("acme", "doc-b", 3))).
				finish("w1", "a", keyA, 1).finish("w2", "b", keyB, 1),
			final: committed("a", keyA, "acme", "b", keyB, "acme"),
			opts:  Options{FIFO: true},
		},
		{
			// Transactional ack: the ack commits with the result, and its records
			// follow the commit's answer; the next job of the group may be
			// leased in between.
			name: "order kept with the ack in the commit",
			ops: func() *hist {
				h := newHist().enqueue("a", keyA, grouped(meta("acme", "doc-a", 3))).enqueue("b", keyB, grouped(meta("acme", "doc-b", 3))).
					deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).commit("w1", "a", keyA, 1, "new").
					deliver("w2", "b", keyB, 1)
				h.rec(history.Op{Process: "w1", Type: history.Invoke, F: history.Ack, Job: "a", Key: keyA, Token: 1, Value: "in_commit"})
				h.rec(history.Op{Process: "w1", Type: history.OK, F: history.Ack, Job: "a", Key: keyA, Token: 1, Value: "in_commit"})
				return h.extract("w2", "b", keyB, 1).commit("w2", "b", keyB, 1, "new").ack("w2", "b", keyB, 1)
			}(),
			final: committed("a", keyA, "acme", "b", keyB, "acme"),
			opts:  Options{FIFO: true},
		},
		{
			name: "order inversion before the commit that acks",
			ops: func() *hist {
				h := newHist().enqueue("a", keyA, grouped(meta("acme", "doc-a", 3))).enqueue("b", keyB, grouped(meta("acme", "doc-b", 3))).
					deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).deliver("w2", "b", keyB, 1).commit("w1", "a", keyA, 1, "new")
				h.rec(history.Op{Process: "w1", Type: history.Invoke, F: history.Ack, Job: "a", Key: keyA, Token: 1, Value: "in_commit"})
				h.rec(history.Op{Process: "w1", Type: history.OK, F: history.Ack, Job: "a", Key: keyA, Token: 1, Value: "in_commit"})
				return h.extract("w2", "b", keyB, 1).commit("w2", "b", keyB, 1, "new").ack("w2", "b", keyB, 1)
			}(),
			final: committed("a", keyA, "acme", "b", keyB, "acme"),
			opts:  Options{FIFO: true},
			want:  OrderInversion,
		},
		{
			name: "outbox orphan: result without event",
			ops:  newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", keyA, 1),
			final: func() Final {
				f := committed("a", keyA, "acme")
				f.Store.Events, f.Store.Applied = nil, nil
				return f
			}(),
			want: OutboxOrphan,
		},
		{
			name:  "event never applied",
			ops:   newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", keyA, 1),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  EventNotApplied,
		},
		{
			name:  "acknowledged commit lost",
			ops:   newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", keyA, 1),
			final: Final{Drained: true},
			want:  CommitLost,
		},
		{
			name: "preempted live worker",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).
				finish("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  Preempted,
		},
		{
			name: "a nack answered after the redelivery",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).
				rec(history.Op{Process: "w1", Type: history.Invoke, F: history.Nack, Job: "a", Key: keyA, Token: 1, Value: "500ms"}).
				finish("w2", "a", keyA, 2).
				rec(history.Op{Process: "w1", Type: history.OK, F: history.Nack, Job: "a", Key: keyA, Token: 1, Value: "500ms"}).
				apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		{
			name: "a lease held across a broker restart",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).fault("broker_crash", "redis").
				finish("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		{
			// A starved worker: it renewed its lease, then let its own renewal run out.
			name: "a heartbeating holder past its own renewal",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).pair("w1", history.OK, history.Extend, "a", keyA, 1, "10000", "").
				wait(11e9).finish("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		{
			// Its lease ran out during a slow store commit (a loaded machine):
			// the pipeline renews only while it works; late, not preempted.
			name: "a holder past its lease in a slow commit",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).
				rec(history.Op{Process: "w1", Type: history.Invoke, F: history.Commit, Job: "a", Key: keyA, Token: 1}).
				wait(11e9).finish("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		{
			// Working past its lease without renewing it: the no-heartbeat
			// sabotage.
			name: "a holder working past its lease without renewing",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).
				rec(history.Op{Process: "w1", Type: history.Invoke, F: history.Extract, Job: "a", Key: keyA, Token: 1, Value: "1"}).
				wait(11e9).finish("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  Preempted,
		},
		{
			// The same in the work of a job with no slow step: the pipeline
			// never renews during it, so the holder was stalled there (a gate
			// run beside two busy loops: postgres-txack idempotency.conflict,
			// w1's lease 2.8 s after w3's, w3 never heard from again in that
			// time). Late, not preempted.
			name: "a holder stalled in quick work past its lease",
			ops: newHist().enqueue("a", keyA, quick(meta("acme", "doc-a", 3))).
				deliver("w1", "a", keyA, 1).
				rec(history.Op{Process: "w1", Type: history.Invoke, F: history.Extract, Job: "a", Key: keyA, Token: 1, Value: "1"}).
				wait(11e9).finish("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final:     committed("a", keyA, "acme"),
			opts:      relay,
			explained: "lease_expiry",
		},
		{
			// Quick work does not excuse a lease granted while the holder's
			// was live.
			name: "a holder in quick work within its lease",
			ops: newHist().enqueue("a", keyA, quick(meta("acme", "doc-a", 3))).
				deliver("w1", "a", keyA, 1).
				rec(history.Op{Process: "w1", Type: history.Invoke, F: history.Extract, Job: "a", Key: keyA, Token: 1, Value: "1"}).
				wait(5e9).finish("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  Preempted,
		},
		{
			name: "a heartbeating holder within its renewal",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).pair("w1", history.OK, history.Extend, "a", keyA, 1, "10000", "").
				wait(5e9).finish("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  Preempted,
		},
		{
			// Its lease answer took 9 s of a 10 s lease (a commit waiting for a
			// synchronous standby through a failover, measured in the cluster
			// gate): counted from when it asked, the lease may have run out
			// before the next one was granted. Late, not preempted.
			name: "a holder whose lease answer came after it may have run out",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliverLate("w1", "a", keyA, 1, 9e9).
				rec(history.Op{Process: "w1", Type: history.Invoke, F: history.Extract, Job: "a", Key: keyA, Token: 1, Value: "1"}).
				wait(1e9).finish("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		{
			// Its negative control: the answer was as late, but the next lease
			// came before the first could have run out, however it is counted.
			name: "a holder whose late lease answer still held",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliverLate("w1", "a", keyA, 1, 5e9).
				rec(history.Op{Process: "w1", Type: history.Invoke, F: history.Extract, Job: "a", Key: keyA, Token: 1, Value: "1"}).
				wait(3e9).finish("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  Preempted,
		},
		{
			// A renewal answered late counts from when it was asked for too.
			name: "a holder whose renewal answer came after it may have run out",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).
				rec(history.Op{Process: "w1", Type: history.Invoke, F: history.Extract, Job: "a", Key: keyA, Token: 1, Value: "1"}).
				rec(history.Op{Process: "w1", Type: history.Invoke, F: history.Extend, Job: "a", Key: keyA, Token: 1}).wait(9e9).
				rec(history.Op{Process: "w1", Type: history.OK, F: history.Extend, Job: "a", Key: keyA, Token: 1, Value: "10000"}).
				wait(1e9).finish("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		{
			// Renewed only after its lease may have run out (a slow store call
			// on a loaded machine): the broker may have queued the job for
			// redelivery first and still answered the renewal OK (JetStream's
			// +WPI). Late, not preempted, though the latest renewal is live.
			name: "a holder whose renewal came after its lease may have run out",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).
				rec(history.Op{Process: "w1", Type: history.Invoke, F: history.Extract, Job: "a", Key: keyA, Token: 1, Value: "1"}).
				wait(11e9).pair("w1", history.OK, history.Extend, "a", keyA, 1, "10000", "").
				wait(1e9).finish("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final:     committed("a", keyA, "acme"),
			opts:      relay,
			explained: "lease_expiry",
		},
		{
			// Its negative control: every renewal asked before the one before
			// it could have run out; the chain is unbroken.
			name: "a holder whose renewals each came in time",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).
				rec(history.Op{Process: "w1", Type: history.Invoke, F: history.Extract, Job: "a", Key: keyA, Token: 1, Value: "1"}).
				wait(9e9).pair("w1", history.OK, history.Extend, "a", keyA, 1, "10000", "").
				wait(9e9).pair("w1", history.OK, history.Extend, "a", keyA, 1, "10000", "").
				wait(1e9).finish("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  Preempted,
		},
		{
			// An ack after such a late renewal: the broker may have handed the
			// job out again before it, whatever it answered.
			name: "a duplicate after an ack that followed a late renewal",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).
				wait(11e9).pair("w1", history.OK, history.Extend, "a", keyA, 1, "10000", "").
				commit("w1", "a", keyA, 1, "new").ack("w1", "a", keyA, 1).
				deliver("w2", "a", keyA, 2).extract("w2", "a", keyA, 2).commit("w2", "a", keyA, 2, "deduped").ack("w2", "a", keyA, 2).
				apply("a", keyA, "applied"),
			final:     committed("a", keyA, "acme"),
			opts:      relay,
			explained: "lease_expiry",
		},
		{
			name: "a restarted worker's predecessor held nothing any more",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).
				rec(history.Op{Process: "w1.2", Type: history.Invoke, F: history.Lease}).
				finish("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		{
			// The ack went out after the lease had run out: the broker may
			// deliver the job again whatever it answered.
			name: "a duplicate after an ack sent past the lease",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).commit("w1", "a", keyA, 1, "new").
				wait(11e9).ack("w1", "a", keyA, 1).
				deliver("w2", "a", keyA, 2).extract("w2", "a", keyA, 2).commit("w2", "a", keyA, 2, "deduped").ack("w2", "a", keyA, 2).
				apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		{
			// Sent in time, answered after the lease may have run out (10 s,
			// counted from its ask): the broker may have taken it late (seen
			// on the SQS emulator beside two busy loops).
			name: "a duplicate after an ack answered past the lease",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).commit("w1", "a", keyA, 1, "new").
				ackLate("w1", "a", keyA, 1, 11e9).
				deliver("w2", "a", keyA, 2).extract("w2", "a", keyA, 2).commit("w2", "a", keyA, 2, "deduped").ack("w2", "a", keyA, 2).
				apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		{
			// Its negative control: as slow an answer, but within the lease
			// counted from its ask, then a redelivery long after.
			name: "a duplicate after a slow ack answered within the lease",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).commit("w1", "a", keyA, 1, "new").
				ackLate("w1", "a", keyA, 1, 9e9).wait(20e9).
				deliver("w2", "a", keyA, 2).extract("w2", "a", keyA, 2).commit("w2", "a", keyA, 2, "deduped").ack("w2", "a", keyA, 2).
				apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  UnexplainedDuplicate,
		},
		{
			name: "unexplained duplicate delivery",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				finish("w1", "a", keyA, 1).
				deliver("w2", "a", keyA, 2).extract("w2", "a", keyA, 2).commit("w2", "a", keyA, 2, "deduped").ack("w2", "a", keyA, 2).
				apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  UnexplainedDuplicate,
		},
		{
			name: "duplicate delivery explained by a duplicate enqueue",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).enqueue("a", keyA, meta("acme", "doc-a", 3)).
				finish("w1", "a", keyA, 1).
				deliver("w2", "a", keyA, 1).extract("w2", "a", keyA, 1).commit("w2", "a", keyA, 1, "deduped").ack("w2", "a", keyA, 1).
				apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		{
			name: "dead job resurrected in place",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).
				deadLetter("w1", "a", keyA, 1, pipeline.ReasonPermanent).
				pair("operator", history.OK, history.Reprocess, "a", "", 0, "a", ""),
			final: Final{Drained: true, Store: pipeline.State{DeadLetters: []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonPermanent, Reprocessed: true}}}},
			want:  Resurrected,
			also:  []Property{HealthyDeadLettered, ReprocessUnaudited},
		},
		// New in the checker package.
		{
			name: "moved by broker: in its dead-letter queue at the delivery limit, never dead-lettered by the pipeline",
			ops:  newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).fault("crash", "w1"),
			final: Final{Drained: true, Broker: adapters.Inventory{DeadLettered: []string{"a"},
				Moved: []adapters.BrokerAction{{Job: "a", Action: adapters.ActionDeadLettered, Reason: "delivery_limit", Deliveries: 1}}}},
			want: MovedByBroker,
		},
		{
			name: "moved by broker: committed, then in the broker's dead-letter queue",
			ops:  newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", keyA, 1).apply("a", keyA, "applied"),
			final: func() Final {
				f := committed("a", keyA, "acme")
				f.Broker.DeadLettered = []string{"a"}
				return f
			}(),
			opts: relay,
			want: MovedByBroker,
		},
		{
			name:  "moved by broker: gone while the broker trimmed messages it cannot name",
			ops:   newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)),
			final: Final{Drained: true, Broker: adapters.Inventory{Moved: []adapters.BrokerAction{{Action: adapters.ActionTrimmed, Reason: "MAXLEN 100", Count: 3}}}},
			want:  MovedByBroker,
		},
		{
			name: "a pipeline dead-letter in the broker's dead-letter queue is clean",
			ops: newHist().enqueue("a", keyA, permanent(meta("acme", "doc-a", 3))).deliver("w1", "a", keyA, 1).
				pair("w1", history.Fail, history.Extract, "a", keyA, 1, "", "permanent").
				deadLetter("w1", "a", keyA, 1, pipeline.ReasonPermanent),
			final: Final{Drained: true, Store: pipeline.State{DeadLetters: []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonPermanent}}},
				Broker: adapters.Inventory{DeadLettered: []string{"a"}}},
		},
		{
			name: "healthy job dead-lettered after infrastructure failures",
			ops: func() *hist {
				h := newHist().enqueue("a", keyA, meta("acme", "doc-a", 3))
				for tok := uint64(1); tok <= 3; tok++ {
					h.deliver("w1", "a", keyA, tok).extract("w1", "a", keyA, tok).pair("w1", history.Fail, history.Commit, "a", keyA, tok, "", "unavailable")
					if tok < 3 {
						h.pair("w1", history.OK, history.Nack, "a", keyA, tok, "500ms", "")
					}
				}
				return h.deadLetter("w1", "a", keyA, 3, pipeline.ReasonMaxAttempts)
			}(),
			final: deadFinal("a", keyA, pipeline.ReasonMaxAttempts),
			want:  HealthyDeadLettered,
		},
		{
			name: "stubborn job dead-lettered is by design",
			ops: func() *hist {
				m := meta("acme", "doc-a", 2)
				m.Stubborn, m.FailTransient = true, -1
				h := newHist().enqueue("a", keyA, m)
				for tok := uint64(1); tok <= 2; tok++ {
					h.deliver("w1", "a", keyA, tok).pair("w1", history.Fail, history.Extract, "a", keyA, tok, "", "transient")
					if tok < 2 {
						h.pair("w1", history.OK, history.Nack, "a", keyA, tok, "500ms", "")
					}
				}
				return h.deadLetter("w1", "a", keyA, 2, pipeline.ReasonMaxAttempts)
			}(),
			final: deadFinal("a", keyA, pipeline.ReasonMaxAttempts),
		},
		{
			name: "age budget exceeded is by design",
			ops: func() *hist {
				m := meta("acme", "doc-a", 3)
				m.AgeBudget = 5
				return newHist().enqueue("a", keyA, m).deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).
					pair("w1", history.Fail, history.Commit, "a", keyA, 1, "", "unavailable").deadLetter("w1", "a", keyA, 1, ReasonAgeExceeded)
			}(),
			final: deadFinal("a", keyA, ReasonAgeExceeded),
		},
		{
			name: "age budget claimed but not exceeded",
			ops: func() *hist {
				m := meta("acme", "doc-a", 3)
				m.AgeBudget = 1 << 40
				return newHist().enqueue("a", keyA, m).deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).
					pair("w1", history.Fail, history.Commit, "a", keyA, 1, "", "unavailable").deadLetter("w1", "a", keyA, 1, ReasonAgeExceeded)
			}(),
			final: deadFinal("a", keyA, ReasonAgeExceeded),
			want:  HealthyDeadLettered,
		},
		{
			name: "executions cut short by infrastructure failures do not spend attempts",
			ops: func() *hist {
				h := newHist().enqueue("a", keyA, meta("acme", "doc-a", 2))
				for tok := uint64(1); tok <= 3; tok++ {
					h.deliver("w1", "a", keyA, tok).extract("w1", "a", keyA, tok).pair("w1", history.Fail, history.Commit, "a", keyA, tok, "", "unavailable").
						pair("w1", history.OK, history.Nack, "a", keyA, tok, "500ms", "")
				}
				return h.finish("w1", "a", keyA, 4).apply("a", keyA, "applied")
			}(),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		{
			name: "poison crashes spend attempts",
			ops: func() *hist {
				m := meta("acme", "doc-a", 2)
				m.Poison = true
				h := newHist().enqueue("a", keyA, m)
				for tok := uint64(1); tok <= 3; tok++ {
					w := fmt.Sprintf("w1.%d", tok)
					h.deliver(w, "a", keyA, tok).rec(history.Op{Process: w, Type: history.Invoke, F: history.Extract, Job: "a", Key: keyA, Token: tok}).
						rec(history.Op{Process: "controller", Type: history.Info, F: history.Fault, Value: "crash", Key: string(pipeline.Poison), Job: "a", Target: w})
				}
				return h.deliver("w1.4", "a", keyA, 4).deadLetter("w1.4", "a", keyA, 4, pipeline.ReasonMaxAttempts)
			}(),
			final: deadFinal("a", keyA, pipeline.ReasonMaxAttempts),
			want:  OverBudget,
		},
		{
			name: "a failed commit that was applied",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).
				pair("w1", history.Fail, history.Commit, "a", keyA, 1, "", "unavailable").pair("w1", history.OK, history.Nack, "a", keyA, 1, "500ms", "").
				deliver("w1", "a", keyA, 2).extract("w1", "a", keyA, 2).commit("w1", "a", keyA, 2, "deduped").ack("w1", "a", keyA, 2).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  FailedButApplied,
		},
		{
			name: "a failed commit whose result is in the store",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).
				pair("w1", history.Fail, history.Commit, "a", keyA, 1, "", "unavailable"),
			final: committed("a", keyA, "acme"),
			want:  FailedButApplied,
		},
		{
			name: "a failed enqueue that was delivered",
			ops: newHist().pair("producer", history.Fail, history.Enqueue, "a", keyA, 0, "", "unavailable").
				finish("w1", "a", keyA, 1).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  FailedButApplied,
		},
		{
			name: "a commit timeout retried and deduped is clean",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).
				pair("w1", history.Info, history.Commit, "a", keyA, 1, "", "ambiguous").commit("w1", "a", keyA, 1, "deduped").ack("w1", "a", keyA, 1).
				apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
		{
			name: "a commit timeout taken as failure",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).
				pair("w1", history.Info, history.Commit, "a", keyA, 1, "", "ambiguous").deadLetter("w1", "a", keyA, 1, pipeline.ReasonPermanent),
			final: deadFinal("a", keyA, pipeline.ReasonPermanent),
			want:  AmbiguousResolved,
			also:  []Property{HealthyDeadLettered},
		},
		{
			name: "a commit timeout taken as failure, the worker's bookkeeping in between",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).
				pair("w1", history.Info, history.Commit, "a", keyA, 1, "", "ambiguous").
				pair("w1", history.OK, history.Settle, "a", keyA, 1, "released", "").
				pair("w1", history.OK, history.Nack, "a", keyA, 1, "500ms", ""),
			final:       Final{Drained: false, Broker: inventory("a")},
			want:        AmbiguousResolved,
			wantUnknown: true,
		},
		{
			name: "a commit timeout taken as success",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).
				pair("w1", history.Info, history.Commit, "a", keyA, 1, "", "ambiguous").ack("w1", "a", keyA, 1).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  AmbiguousResolved,
		},
		{
			name:  "circuit opened on a healthy channel",
			ops:   newHist().rec(history.Op{Process: "relay", Type: history.Info, F: history.Circuit, Value: "open"}),
			final: Final{Drained: true},
			want:  CircuitOnHealthy,
		},
		{
			name: "circuit opened after a channel fault is clean",
			ops: newHist().rec(history.Op{Process: "controller", Type: history.Info, F: history.Fault, Value: "refused", Key: "channel", Target: "relay"}).
				rec(history.Op{Process: "relay", Type: history.Info, F: history.Circuit, Value: "open"}),
			final: Final{Drained: true},
		},
		{
			name: "a cancelled job reprocessed",
			ops: func() *hist {
				m := meta("acme", "doc-a", 3)
				m.Deadline = 3
				return newHist().enqueue("a", keyA, m).deliver("w1", "a", keyA, 1).pair("w1", history.OK, history.Cancel, "a", keyA, 1, "", "").
					ack("w1", "a", keyA, 1).pair("operator", history.OK, history.Reprocess, "a", "", 0, "a.v2", "")
			}(),
			final: Final{Drained: true, Store: pipeline.State{Cancelled: []string{"a"}, Audits: []pipeline.Audit{{OldJob: "a", NewJob: "a.v2", Operator: "op-alice"}}}},
			want:  CancelledReprocessed,
			also:  []Property{ReprocessUnaudited},
		},
		{
			name:  "reprocessed without an audit entry",
			ops:   reprocessHistory(),
			final: reprocessFinal(false),
			opts:  relay,
			want:  ReprocessUnaudited,
		},
		{
			name:  "audited reprocess at version+1 is clean",
			ops:   reprocessHistory(),
			final: reprocessFinal(true),
			opts:  relay,
		},
		{
			name: "two new results for one job under different keys",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", "acme:doc-a.1:v1", 1).extract("w1", "a", "acme:doc-a.1:v1", 1).commit("w1", "a", "acme:doc-a.1:v1", 1, "new").fault("crash", "w1").
				finish("w2", "a", "acme:doc-a.2:v1", 2).apply("a", "acme:doc-a.1:v1", "applied").apply("a", "acme:doc-a.2:v1", "applied"),
			final: committed("a", "acme:doc-a.1:v1", "acme", "a", "acme:doc-a.2:v1", "acme"),
			opts:  relay,
			want:  DuplicateEffect,
		},
		{
			name: "a commit sent before the newer fence completed is not proven stale",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).fault("pause", "w1").
				rec(history.Op{Process: "w1", Type: history.Invoke, F: history.Commit, Job: "a", Key: keyA, Token: 1}).
				deliver("w2", "a", keyA, 2).
				rec(history.Op{Process: "w2", Type: history.Invoke, F: history.Commit, Job: "a", Key: keyA, Token: 2}).
				rec(history.Op{Process: "w1", Type: history.OK, F: history.Commit, Job: "a", Key: keyA, Token: 1, Value: "new"}).
				rec(history.Op{Process: "w2", Type: history.OK, F: history.Commit, Job: "a", Key: keyA, Token: 2, Value: "deduped"}).
				ack("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
		},
	}
}

func TestCheckProperties(t *testing.T) {
	for _, tt := range cases() {
		t.Run(tt.name, func(t *testing.T) {
			vs, st, unknown := check3(tt.ops.ops, tt.final, tt.opts)
			if tt.explained != "" && st.Redeliveries[tt.explained] == 0 {
				t.Errorf("no redelivery explained as %s: %v", tt.explained, st.Redeliveries)
			}
			got := properties(vs)
			if tt.want == "" && len(vs) > 0 {
				t.Fatalf("clean history: got violations %v\nfirst: %s", got, vs[0].Message)
			}
			if tt.want != "" && !slices.Contains(got, tt.want) {
				t.Fatalf("want %s, got %v", tt.want, got)
			}
			// Exactly the properties named: a checker that raises more on a
			// history is as wrong as one that raises fewer.
			want := append([]Property{tt.want}, tt.also...)
			for _, p := range got {
				if !slices.Contains(want, p) {
					t.Errorf("raised %s too (want %v): %s", p, want, vs[slices.IndexFunc(vs, func(v Violation) bool { return v.Property == p })].Message)
				}
			}
			for _, p := range tt.also {
				if !slices.Contains(got, p) {
					t.Errorf("want %s too, got %v", p, got)
				}
			}
			if tt.because != "" && !slices.ContainsFunc(vs, func(v Violation) bool {
				return v.Property == tt.want && slices.ContainsFunc(v.Because, func(l string) bool { return strings.Contains(l, tt.because) })
			}) {
				t.Errorf("no %s violation says %q", tt.want, tt.because)
			}
			for _, v := range vs {
				if len(v.Witness) == 0 && len(v.Facts) == 0 {
					t.Errorf("%s violation without a witness: %s", v.Property, v.Message)
				}
				if len(v.Because) == 0 {
					t.Errorf("%s violation without a because line: %s", v.Property, v.Message)
				}
			}
			if tt.wantUnknown != (len(unknown) > 0) {
				t.Fatalf("undecided reasons %q, want some: %v", unknown, tt.wantUnknown)
			}
		})
	}
}

// Every property has a hand-written history that raises it.
func TestEveryPropertyHasACase(t *testing.T) {
	have := map[Property]bool{}
	for _, tt := range cases() {
		have[tt.want] = true
	}
	for _, s := range Properties {
		if !have[s.Name] {
			t.Errorf("no test case raises %s", s.Name)
		}
	}
}

// The witness proves itself: the checker run on a violation's witness
// operations and facts alone raises the same property.
func TestWitnessReplayRaisesTheSameProperty(t *testing.T) {
	seen := map[Property]bool{}
	for _, tt := range cases() {
		if tt.want == "" {
			continue
		}
		t.Run(tt.name, func(t *testing.T) {
			r := Check(tt.ops.ops, tt.final, tt.opts)
			for _, v := range r.Violations {
				if err := ReplayWitness(v, tt.opts); err != nil {
					t.Error(err)
					continue
				}
				seen[v.Property] = true
			}
		})
	}
	for _, s := range Properties {
		if !seen[s.Name] {
			t.Errorf("no witness of %s was replayed", s.Name)
		}
	}
}

func check3(ops []history.Op, final Final, opts Options) ([]Violation, Stats, []string) {
	r := Check(ops, final, opts)
	return r.Violations, r.Stats, r.Undecided
}

// quick: the job's work has no slow step.
func quick(m pipeline.JobMeta) pipeline.JobMeta {
	m.Quick = true
	return m
}

func permanent(m pipeline.JobMeta) pipeline.JobMeta {
	m.Permanent = true
	return m
}

// deadFinal: the store holds a dead-letter record of job.
func deadFinal(job, key, reason string) Final {
	return Final{Drained: true, Store: pipeline.State{DeadLetters: []pipeline.DeadLetterRecord{{JobID: job, Key: key, Reason: reason}}}}
}

const keyA2 = "acme:doc-a:v2"

// reprocessHistory: a fails permanently at version 1, is dead-lettered, and
// an operator reprocesses it as a.v2, which commits.
func reprocessHistory() *hist {
	m2 := meta("acme", "doc-a", 3)
	m2.Version = 2
	return newHist().enqueue("a", keyA, permanent(meta("acme", "doc-a", 3))).deliver("w1", "a", keyA, 1).
		pair("w1", history.Fail, history.Extract, "a", keyA, 1, "", "permanent").deadLetter("w1", "a", keyA, 1, pipeline.ReasonPermanent).
		rec(history.Op{Process: "operator", Type: history.Invoke, F: history.Reprocess, Job: "a", Value: "op-alice"}).
		enqueue("a.v2", keyA2, m2).
		rec(history.Op{Process: "operator", Type: history.OK, F: history.Reprocess, Job: "a", Value: "a.v2"}).
		finish("w1", "a.v2", keyA2, 1).apply("a.v2", keyA2, "applied")
}

func reprocessFinal(audited bool) Final {
	f := committed("a.v2", keyA2, "acme")
	f.Store.DeadLetters = []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonPermanent, Reprocessed: true}}
	if audited {
		f.Store.Audits = []pipeline.Audit{{OldJob: "a", NewJob: "a.v2", Operator: "op-alice"}}
	}
	return f
}

func grouped(m pipeline.JobMeta) pipeline.JobMeta {
	m.Group = "g"
	return m
}

// orderHistory: a and b of one group, accepted in that order; b runs first.
func orderHistory() *hist {
	return newHist().enqueue("a", keyA, grouped(meta("acme", "doc-a", 3))).enqueue("b", keyB, grouped(meta("acme", "doc-b", 3))).
		finish("w2", "b", keyB, 1).finish("w1", "a", keyA, 1)
}

func inventory(queued ...string) (inv adapters.Inventory) {
	inv.Queued = queued
	return inv
}

func properties(vs []Violation) []Property {
	var ps []Property
	for _, v := range vs {
		if !slices.Contains(ps, v.Property) {
			ps = append(ps, v.Property)
		}
	}
	return ps
}

func TestCheckCapsViolationsPerProperty(t *testing.T) {
	h := newHist()
	for i := range 20 {
		id := string(rune('a' + i))
		h.enqueue(id, "acme:"+id+":v1", meta("acme", id, 3))
	}
	r := Check(h.ops, Final{Drained: true}, Options{})
	if len(r.Violations) != maxPerProperty || r.Stats.Violations[string(Lost)] != 20 || r.Stats.Lost != 20 {
		t.Fatalf("%d violations kept, %d counted, %d lost for 20 lost jobs, want %d kept and 20 counted",
			len(r.Violations), r.Stats.Violations[string(Lost)], r.Stats.Lost, maxPerProperty)
	}
	if r.Properties[Lost].Valid != Invalid || r.Properties[Lost].Count != 20 || r.Valid != Invalid {
		t.Fatalf("answer %+v, merged %s", r.Properties[Lost], r.Valid)
	}
}

func TestCheckStats(t *testing.T) {
	h := newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).enqueue("b", keyB, meta("acme", "doc-b", 3)).
		deliver("w1", "a", keyA, 1).fault("crash", "w1").
		finish("w2", "a", keyA, 2).finish("w1.2", "b", keyB, 1).
		apply("a", keyA, "applied").apply("b", keyB, "applied").apply("b", keyB, "dropped")
	vs, st, unknown := check3(h.ops, committed("a", keyA, "acme", "b", keyB, "acme"), Options{RelayRan: true})
	if len(vs) != 0 || len(unknown) != 0 {
		t.Fatalf("violations %v, unknown %v", properties(vs), unknown)
	}
	if st.Accepted != 2 || st.Committed != 2 || st.Executions != 2 || st.Applied != 2 || st.DroppedRepeats != 1 ||
		st.Redeliveries["fault"] != 1 || st.Explained != 1 || st.Faults["crash"] != 1 || st.MaxAttempts != 2 {
		t.Fatalf("stats = %+v", st)
	}
}

// TestPowerLossIsABrokerFault: a power loss counts the acknowledged jobs still
// unfinished (at risk), explains the redelivery of one acked before it, and a
// job lost to it has the power loss in its witness.
func TestPowerLossIsABrokerFault(t *testing.T) {
	h := newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).enqueue("b", keyB, meta("acme", "doc-b", 3)).
		finish("w1", "a", keyA, 1).fault("power_loss", "redis").
		deliver("w1", "a", keyA, 2).extract("w1", "a", keyA, 2)
	// a: acked before the cut, delivered again after it (its ack was not
	// durable); b: acknowledged, unfinished and gone after the cut.
	h.pair("w1", history.OK, history.Commit, "a", keyA, 2, "dedup", "").ack("w1", "a", keyA, 2).apply("a", keyA, "applied")
	vs, st, _ := check3(h.ops, committed("a", keyA, "acme"), Options{RelayRan: true})
	if st.AtRisk != 1 || st.Faults["power_loss"] != 1 || st.Redeliveries["broker_restart"] != 1 {
		t.Errorf("stats: at risk %d, power losses %d, redeliveries %v; want 1, 1, one broker_restart", st.AtRisk, st.Faults["power_loss"], st.Redeliveries)
	}
	if len(vs) != 1 || vs[0].Property != Lost || vs[0].Job != "b" {
		t.Fatalf("violations %+v, want b lost", vs)
	}
	var cut bool
	for _, op := range vs[0].Witness {
		cut = cut || (op.F == history.Fault && op.Value == "power_loss")
	}
	if !cut {
		t.Errorf("the witness lacks the power loss: %+v", vs[0].Witness)
	}
}
