package contracts

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/pipeline"
)

// hist builds a small history by hand: each call appends records stamped with
// the next virtual nanosecond and the process's next sequence number.
type hist struct {
	ops []history.Op
	t   int64
	seq map[string]int64
}

func newHist() *hist { return &hist{seq: map[string]int64{}} }

func (h *hist) rec(op history.Op) *hist {
	h.t++
	h.seq[op.Process]++
	op.T, op.Seq = h.t, h.seq[op.Process]
	h.ops = append(h.ops, op)
	return h
}

func meta(tenant, doc string, max int) pipeline.JobMeta {
	return pipeline.JobMeta{Tenant: tenant, Doc: doc, Version: 1, MaxAttempts: max, Hash: "hash-" + doc}
}

func (h *hist) enqueue(job, key string, m pipeline.JobMeta) *hist {
	b, _ := json.Marshal(m)
	h.rec(history.Op{Process: "producer", Type: history.Invoke, F: history.Enqueue, Job: job, Key: key, Value: string(b)})
	return h.rec(history.Op{Process: "producer", Type: history.OK, F: history.Enqueue, Job: job, Key: key})
}

// pair records invoke then result for one call of a worker.
func (h *hist) pair(proc string, typ history.Type, f history.F, job, key string, tok uint64, value, errc string) *hist {
	h.rec(history.Op{Process: proc, Type: history.Invoke, F: f, Job: job, Key: key, Token: tok})
	return h.rec(history.Op{Process: proc, Type: typ, F: f, Job: job, Key: key, Token: tok, Value: value, Err: errc})
}

// deliver is lease (invoke, ok) and fence (invoke, ok).
func (h *hist) deliver(proc, job, key string, tok uint64) *hist {
	h.rec(history.Op{Process: proc, Type: history.Invoke, F: history.Lease})
	h.rec(history.Op{Process: proc, Type: history.OK, F: history.Lease, Job: job, Key: key, Token: tok, Attempt: int(tok), Value: "10000"})
	return h.pair(proc, history.OK, history.Fence, job, key, tok, "", "")
}

func (h *hist) extract(proc, job, key string, tok uint64) *hist {
	return h.pair(proc, history.OK, history.Extract, job, key, tok, "digest:00", "")
}

func (h *hist) commit(proc, job, key string, tok uint64, value string) *hist {
	return h.pair(proc, history.OK, history.Commit, job, key, tok, value, "")
}

func (h *hist) ack(proc, job, key string, tok uint64) *hist {
	return h.pair(proc, history.OK, history.Ack, job, key, tok, "", "")
}

// finish is the whole happy path of one delivery.
func (h *hist) finish(proc, job, key string, tok uint64) *hist {
	return h.deliver(proc, job, key, tok).extract(proc, job, key, tok).commit(proc, job, key, tok, "new").ack(proc, job, key, tok)
}

func (h *hist) apply(job, key, outcome string) *hist {
	h.rec(history.Op{Process: "consumer", Type: history.Invoke, F: history.Apply, Job: job, Key: key, Value: "ev:" + key})
	return h.rec(history.Op{Process: "consumer", Type: history.OK, F: history.Apply, Job: job, Key: key, Value: outcome})
}

func (h *hist) fault(kind, target string) *hist {
	return h.rec(history.Op{Process: "controller", Type: history.Info, F: history.Fault, Value: kind, Target: target})
}

func (h *hist) deadLetter(proc, job, key string, tok uint64, reason string) *hist {
	h.rec(history.Op{Process: proc, Type: history.Invoke, F: history.DeadLetter, Job: job, Key: key, Token: tok, Value: reason})
	return h.rec(history.Op{Process: proc, Type: history.OK, F: history.DeadLetter, Job: job, Key: key, Token: tok, Value: reason})
}

// committed is the final state of a store holding a result and an applied event
// for each (job, key, tenant) triple.
func committed(triples ...string) Final {
	f := Final{Drained: true, Store: pipeline.State{Applied: map[string]int{}}}
	for i := 0; i+2 < len(triples); i += 3 {
		job, key, tenant := triples[i], triples[i+1], triples[i+2]
		f.Store.Results = append(f.Store.Results, pipeline.Result{Key: key, JobID: job, Tenant: tenant, Hash: "h", Token: 1, EventID: "ev:" + key})
		f.Store.Events = append(f.Store.Events, pipeline.Event{ID: "ev:" + key, Key: key, JobID: job, Published: true})
		f.Store.Applied["ev:"+key] = 1
	}
	return f
}

const (
	keyA = "acme:doc-a:v1"
	keyB = "acme:doc-b:v1"
)

func TestCheckProperties(t *testing.T) {
	relay := CheckOptions{FencedAck: true, RelayRan: true}
	tests := []struct {
		name        string
		ops         *hist
		final       Final
		opts        CheckOptions
		want        Property // "" for a clean history
		wantUnknown bool
	}{
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
			want:  PropLost,
		},
		{
			name: "never delivered and gone is lost",
			ops:  newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)),
			want: PropLost,
		},
		{
			name: "multiple terminal: committed and dead-lettered",
			ops:  newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", keyA, 1).apply("a", keyA, "applied"),
			final: func() Final {
				f := committed("a", keyA, "acme")
				f.Store.DeadLetters = []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonMaxAttempts}}
				return f
			}(),
			want: PropMultipleTerminal,
		},
		{
			name: "multiple terminal: committed and cancelled",
			ops:  newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", keyA, 1).apply("a", keyA, "applied"),
			final: func() Final {
				f := committed("a", keyA, "acme")
				f.Store.Cancelled = []string{"a"}
				return f
			}(),
			want: PropMultipleTerminal,
		},
		{
			name: "duplicate effect",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).commit("w1", "a", keyA, 1, "new").fault("crash", "w1").
				finish("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  PropDuplicateEffect,
		},
		{
			name: "duplicate apply",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", keyA, 1).
				apply("a", keyA, "applied").apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  PropDuplicateApply,
		},
		{
			name: "stale commit accepted",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).fault("pause", "w1").
				finish("w2", "a", keyA, 2).
				commit("w1", "a", keyA, 1, "deduped").apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  PropStaleCommit,
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
			want:  PropStaleAck,
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
			want:  PropOverBudget,
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
			name: "permanent error retried",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).pair("w1", history.Fail, history.Extract, "a", keyA, 1, "", "permanent").
				pair("w1", history.OK, history.Nack, "a", keyA, 1, "500ms", "").
				deliver("w1", "a", keyA, 2).pair("w1", history.Fail, history.Extract, "a", keyA, 2, "", "permanent").
				deadLetter("w1", "a", keyA, 2, pipeline.ReasonPermanent),
			final: Final{Drained: true, Store: pipeline.State{DeadLetters: []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonPermanent}}}},
			want:  PropPermanentRetried,
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
			want:  PropAfterDeadline,
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
			want:  PropCancelledToDLQ,
		},
		{
			name:  "key without tenant",
			ops:   newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", "doc-a:v1", 1).apply("a", "doc-a:v1", "applied"),
			final: committed("a", "doc-a:v1", "acme"),
			opts:  relay,
			want:  PropTenantKey,
		},
		{
			name:  "key of another tenant",
			ops:   newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", "globex:doc-a:v1", 1).apply("a", "globex:doc-a:v1", "applied"),
			final: committed("a", "globex:doc-a:v1", "acme"),
			opts:  relay,
			want:  PropTenantKey,
		},
		{
			name: "tenants share a key",
			ops: newHist().enqueue("a", "doc-a:v1", meta("acme", "doc-a", 3)).enqueue("b", "doc-a:v1", meta("globex", "doc-a", 3)).
				finish("w1", "a", "doc-a:v1", 1).
				deliver("w2", "b", "doc-a:v1", 1).extract("w2", "b", "doc-a:v1", 1).commit("w2", "b", "doc-a:v1", 1, "deduped").ack("w2", "b", "doc-a:v1", 1),
			final: committed("a", "doc-a:v1", "acme"),
			want:  PropTenantShared,
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
			want:  PropSilentReuse,
		},
		{
			name: "dlq leak: error text in the invoke",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).
				pair("w1", history.Fail, history.Extract, "a", keyA, 1, "", "permanent").
				deadLetter("w1", "a", keyA, 1, `permanent: cannot parse document doc-a: "invoice 4711"`),
			final: Final{Drained: true, Store: pipeline.State{DeadLetters: []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: `permanent: cannot parse document doc-a: "invoice 4711"`}}}},
			want:  PropDLQLeak,
		},
		{
			name: "dlq leak: canary in the record",
			ops: newHist().enqueue("a", "acme:CANARY-1:v1", meta("acme", "CANARY-1", 3)).deliver("w1", "a", "acme:CANARY-1:v1", 1).
				deadLetter("w1", "a", "acme:CANARY-1:v1", 1, pipeline.ReasonPermanent),
			final: Final{Drained: true, Store: pipeline.State{DeadLetters: []pipeline.DeadLetterRecord{{JobID: "a", Key: "acme:CANARY-1:v1", Reason: pipeline.ReasonPermanent}}}},
			opts:  CheckOptions{Canaries: []string{"CANARY-1"}},
			want:  PropDLQLeak,
		},
		{
			name: "dead-lettered with a reason code is clean",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).deliver("w1", "a", keyA, 1).
				pair("w1", history.Fail, history.Extract, "a", keyA, 1, "", "permanent").
				deadLetter("w1", "a", keyA, 1, pipeline.ReasonPermanent),
			final: Final{Drained: true, Store: pipeline.State{DeadLetters: []pipeline.DeadLetterRecord{{JobID: "a", Key: keyA, Reason: pipeline.ReasonPermanent}}}},
			opts:  CheckOptions{Canaries: []string{"CANARY-1"}},
		},
		{
			name:  "order inversion",
			ops:   orderHistory(),
			final: committed("a", keyA, "acme", "b", keyB, "acme"),
			opts:  CheckOptions{FIFO: true},
			want:  PropOrder,
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
			opts:  CheckOptions{FIFO: true},
		},
		{
			name: "outbox orphan: result without event",
			ops:  newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", keyA, 1),
			final: func() Final {
				f := committed("a", keyA, "acme")
				f.Store.Events, f.Store.Applied = nil, nil
				return f
			}(),
			want: PropOutboxOrphan,
		},
		{
			name:  "event never applied",
			ops:   newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", keyA, 1),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  PropEventLost,
		},
		{
			name:  "acknowledged commit lost",
			ops:   newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).finish("w1", "a", keyA, 1),
			final: Final{Drained: true},
			want:  PropCommitLost,
		},
		{
			name: "preempted live worker",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				deliver("w1", "a", keyA, 1).extract("w1", "a", keyA, 1).
				finish("w2", "a", keyA, 2).apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  PropPreempted,
		},
		{
			name: "unexplained duplicate delivery",
			ops: newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).
				finish("w1", "a", keyA, 1).
				deliver("w2", "a", keyA, 2).extract("w2", "a", keyA, 2).commit("w2", "a", keyA, 2, "deduped").ack("w2", "a", keyA, 2).
				apply("a", keyA, "applied"),
			final: committed("a", keyA, "acme"),
			opts:  relay,
			want:  PropUnexplainedDup,
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
			want:  PropResurrected,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs, _, unknown := Check(tt.ops.ops, tt.final, tt.opts)
			got := properties(vs)
			if tt.want == "" && len(vs) > 0 {
				t.Fatalf("clean history: got violations %v\nfirst: %s", got, vs[0].Message)
			}
			if tt.want != "" && !slices.Contains(got, tt.want) {
				t.Fatalf("want %s, got %v", tt.want, got)
			}
			for _, v := range vs {
				if len(v.Witness) == 0 {
					t.Errorf("%s violation without a witness: %s", v.Property, v.Message)
				}
			}
			if tt.wantUnknown != (len(unknown) > 0) {
				t.Fatalf("undecided reasons %q, want some: %v", unknown, tt.wantUnknown)
			}
		})
	}
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
	vs, _, _ := Check(h.ops, Final{Drained: true}, CheckOptions{})
	if len(vs) != maxPerProperty+1 {
		t.Fatalf("%d violations for 20 lost jobs, want %d and a note", len(vs), maxPerProperty+1)
	}
	if last := vs[len(vs)-1]; last.Property != PropLost || last.Witness != nil {
		t.Fatalf("last violation = %+v, want the omission note", last)
	}
}

func TestCheckStats(t *testing.T) {
	h := newHist().enqueue("a", keyA, meta("acme", "doc-a", 3)).enqueue("b", keyB, meta("acme", "doc-b", 3)).
		deliver("w1", "a", keyA, 1).fault("crash", "w1").
		finish("w2", "a", keyA, 2).finish("w1.2", "b", keyB, 1).
		apply("a", keyA, "applied").apply("b", keyB, "applied").apply("b", keyB, "dropped")
	vs, st, unknown := Check(h.ops, committed("a", keyA, "acme", "b", keyB, "acme"), CheckOptions{RelayRan: true})
	if len(vs) != 0 || len(unknown) != 0 {
		t.Fatalf("violations %v, unknown %v", properties(vs), unknown)
	}
	if st.Accepted != 2 || st.Committed != 2 || st.Executions != 2 || st.Applied != 2 || st.DroppedRepeats != 1 ||
		st.Redeliveries["fault"] != 1 || st.Explained != 1 || st.Faults["crash"] != 1 || st.MaxAttempts != 2 {
		t.Fatalf("stats = %+v", st)
	}
}
