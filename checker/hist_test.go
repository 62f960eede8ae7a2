package checker

import (
	"encoding/json"

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

// wait advances the clock by d nanoseconds.
func (h *hist) wait(d int64) *hist {
	h.t += d
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
	return h.deliverLate(proc, job, key, tok, 0)
}

// deliverLate is deliver with the lease's answer late nanoseconds after its
// invoke.
func (h *hist) deliverLate(proc, job, key string, tok uint64, late int64) *hist {
	h.rec(history.Op{Process: proc, Type: history.Invoke, F: history.Lease}).wait(late)
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
	return h.ackLate(proc, job, key, tok, 0)
}

// ackLate is ack with its answer late nanoseconds after its invoke.
func (h *hist) ackLate(proc, job, key string, tok uint64, late int64) *hist {
	h.rec(history.Op{Process: proc, Type: history.Invoke, F: history.Ack, Job: job, Key: key, Token: tok}).wait(late)
	return h.rec(history.Op{Process: proc, Type: history.OK, F: history.Ack, Job: job, Key: key, Token: tok})
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
