package pipeline

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/history"
)

// An invalid job (its key cannot be built: the tenant is not one) is
// dead-lettered with the reason code invalid_job alone: neither its error
// text, which quotes the tenant, nor its payload reaches the dead-letter
// record or the history's dead_letter operations. (Killed by hand the
// mutant that dead-letters it with kerr.Error() as its reason, which no
// catalogue scenario exercises: none enqueues an invalid job.)
func TestWorkerInvalidJobDeadLetterIsRedacted(t *testing.T) {
	const canary = "CANARY-7f3a"
	r := newRig(nil, nil, false)
	job := adapters.Job{ID: "job-1", Tenant: "Not A Tenant " + canary, DocumentID: "d1", Version: 1,
		Payload: Payload{Doc: "d1", Text: "secret " + canary}.Encode(), CreatedAt: r.now, MaxAttempts: 3}
	if _, err := BuildKey(job.Tenant, job.DocumentID, job.Version); err == nil {
		t.Fatalf("setup: tenant %q builds a key; want an invalid job", job.Tenant)
	}
	if err := r.q.Enqueue(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	r.run(10)
	st := r.state(t)
	if len(st.DeadLetters) != 1 || r.q.Live() != 0 {
		t.Fatalf("dead letters %+v, live %d: want the invalid job dead-lettered once and gone from the broker", st.DeadLetters, r.q.Live())
	}
	rec := st.DeadLetters[0]
	if rec.Reason != ReasonInvalidJob {
		t.Errorf("dead-letter reason %q: want the code %q, never the error's text", rec.Reason, ReasonInvalidJob)
	}
	if strings.Contains(rec.Reason+rec.Key, canary) {
		t.Errorf("dead-letter record %+v carries the canary", rec)
	}
	n := 0
	for _, op := range r.log.Ops() {
		if op.F == history.DeadLetter {
			n++
			if !slices.Contains(ReasonCodes, op.Value) || strings.Contains(op.Value, canary) {
				t.Errorf("history dead_letter %s with value %q: want a reason code", op.Type, op.Value)
			}
		}
	}
	if n == 0 {
		t.Errorf("no dead_letter operation in the history")
	}
}

// A job whose deadline passes between its first delivery and its second is
// cancelled on the second: the deadline is checked on every delivery, not
// only the first. The first delivery fails transiently, before the deadline;
// the retry's backoff puts the second delivery after it. (Killed by hand the
// mutant that checks the deadline only when d.Attempt <= 1, caught before
// only by chance in an explore round of a merge test.)
func TestWorkerDeadlineCheckedOnEveryDelivery(t *testing.T) {
	r := newRig(nil, nil, false)
	r.w.Policy = &Policy{Base: 30 * time.Second, Max: 30 * time.Second}
	job := adapters.Job{ID: "job-1", Tenant: "acme", DocumentID: "d1", Version: 1,
		Payload: Payload{Doc: "d1", FailTransient: 1}.Encode(), CreatedAt: r.now, MaxAttempts: 3,
		Deadline: r.now.Add(5 * time.Second)}
	if err := r.q.Enqueue(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	r.run(20)
	var leases []time.Time
	for _, op := range r.log.Ops() {
		if op.F == history.Lease && op.Type == history.OK {
			leases = append(leases, time.Unix(0, op.T))
		}
	}
	if len(leases) != 2 || !leases[0].Before(job.Deadline) || !leases[1].After(job.Deadline) {
		t.Fatalf("deliveries at %v, deadline %v: want one before it and one after", leases, job.Deadline)
	}
	if got := r.count(history.Extract, history.Invoke, ""); got != 1 {
		t.Errorf("extracted %d times: want once (the first delivery), never after the deadline", got)
	}
	st := r.state(t)
	if len(st.Cancelled) != 1 || len(st.Results) != 0 || len(st.DeadLetters) != 0 {
		t.Errorf("cancelled %v, results %d, dead letters %+v: want the job cancelled on its second delivery, nothing else", st.Cancelled, len(st.Results), st.DeadLetters)
	}
	if r.count(history.Cancel, history.OK, "") != 1 || r.q.Live() != 0 {
		t.Errorf("cancel ok %d, live %d: want one cancellation and the job gone from the broker", r.count(history.Cancel, history.OK, ""), r.q.Live())
	}
}
