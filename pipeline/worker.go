package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/history"
)

// Worker is one pipeline worker. Not safe for concurrent use: a process runs one
// Worker in one goroutine; many workers share a queue and a store.
type Worker struct {
	Env      *Env
	Queue    adapters.Queue
	Store    Store
	Hooks    Hooks
	Policy   *Policy
	Lease    time.Duration // lease asked for on every Lease and Extend
	Poll     time.Duration // idle wait between empty leases
	Sabotage Sabotage
	// CommitRetries is how often a commit whose outcome is unknown is retried
	// (it dedupes) before the delivery is left for redelivery.
	CommitRetries int
	// CallTimeout bounds every broker and store call; a call that runs out is
	// ambiguous (context.DeadlineExceeded). 0: no bound (the embedded target).
	CallTimeout time.Duration
	// CommitAck, if set, commits result and event and acks d in one transaction
	// (Postgres as the queue, in the store's database: an exactly-once effect
	// without a dedupe on redelivery). acked reports whether the ack was part of
	// the commit: a deduped commit acks nothing, and the worker acks as usual.
	CommitAck func(ctx context.Context, req CommitRequest, d adapters.Delivery) (deduped bool, err error)
}

// call runs f with the call timeout.
func (w *Worker) call(ctx context.Context, f func(ctx context.Context) error) error {
	if w.CallTimeout <= 0 {
		return f(ctx)
	}
	cctx, cancel := context.WithTimeout(ctx, w.CallTimeout)
	defer cancel()
	return f(cctx)
}

func (w *Worker) rec(t history.Type, f history.F, d adapters.Delivery, key, value string, err error) {
	op := w.Env.op(t, f, d, key)
	op.Value = value
	if err != nil {
		op.Err = ErrorCode(err)
	}
	w.Env.Record(op)
}

// ErrorCode is the short code a history records for err: never its text.
func ErrorCode(err error) string {
	var ce *IdempotencyConflictError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, adapters.ErrNoJob):
		return "no_job"
	case errors.Is(err, adapters.ErrStaleToken):
		return "stale_token"
	case errors.Is(err, adapters.ErrLeaseLost):
		return "lease_lost"
	case errors.Is(err, adapters.ErrAmbiguous), errors.Is(err, context.DeadlineExceeded):
		return "ambiguous"
	case errors.Is(err, adapters.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, adapters.ErrClosed), errors.Is(err, context.Canceled):
		return "closed"
	case errors.As(err, &ce):
		return ReasonIdempotencyConflict
	case errors.Is(err, ErrDeadlinePassed):
		return "deadline_passed"
	case errors.Is(err, ErrAlreadyCommitted):
		return "already_committed"
	case errors.Is(err, ErrAlreadyTerminal):
		return "already_terminal"
	}
	return Classify(err).String()
}

// errAckedInCommit ends a delivery whose ack committed with its result.
var errAckedInCommit = errors.New("acked in the commit")

// ambiguous reports whether err leaves the outcome of the call unknown.
func ambiguous(err error) bool {
	return errors.Is(err, adapters.ErrAmbiguous) || errors.Is(err, context.DeadlineExceeded)
}

func (w *Worker) recResult(f history.F, d adapters.Delivery, key, value string, err error) {
	w.rec(RecordType(err), f, d, key, value, err)
}

// Run works until ctx ends.
func (w *Worker) Run(ctx context.Context) error {
	w.Sabotage.arm(w)
	idle := w.Poll
	for ctx.Err() == nil {
		worked, err := w.Step(ctx)
		if err != nil {
			return err
		}
		if worked {
			idle = w.Poll
			continue
		}
		if err := w.Env.Sleep(ctx, idle); err != nil {
			return nil
		}
		idle = min(idle*2, 8*w.Poll)
	}
	return nil
}

// Key returns the idempotency key of job.
func (w *Worker) Key(job adapters.Job) (string, error) {
	if w.Sabotage.KeyWithoutTenant {
		return job.DocumentID + ":v" + strconv.Itoa(job.Version), nil
	}
	return BuildKey(job.Tenant, job.DocumentID, job.Version)
}

// Step leases and handles at most one job. It reports whether it got one; the
// error is only for a broken setup (the queue closed under it).
func (w *Worker) Step(ctx context.Context) (bool, error) {
	var none adapters.Delivery
	w.rec(history.Invoke, history.Lease, none, "", "", nil)
	var d adapters.Delivery
	err := w.call(ctx, func(ctx context.Context) (err error) { d, err = w.Queue.Lease(ctx, w.Lease); return err })
	if err != nil {
		w.recResult(history.Lease, none, "", "", err)
		if errors.Is(err, adapters.ErrClosed) {
			return false, err
		}
		return false, nil
	}
	key, kerr := w.Key(d.Job)
	w.rec(history.OK, history.Lease, d, key, strconv.FormatInt(w.Lease.Milliseconds(), 10), nil)
	if kerr == nil {
		w.rec(history.Invoke, history.Fence, d, key, "", nil)
		err := w.call(ctx, func(ctx context.Context) error { return w.Store.Fence(ctx, d.Job.ID, d.Token) })
		w.recResult(history.Fence, d, key, "", err)
		if err != nil {
			return true, nil // stale or unknown: another delivery owns the job, or redelivery will tell
		}
	}
	w.Hooks.At(ctx, AfterLease, d.Job.ID)
	w.handle(ctx, d, key, kerr)
	return true, nil
}

func (w *Worker) attempt(d adapters.Delivery) int {
	if d.Attempt > 0 {
		return d.Attempt
	}
	return 1 // the broker cannot count: a crash loop cannot be bounded
}

func (w *Worker) handle(ctx context.Context, d adapters.Delivery, key string, kerr error) {
	if kerr != nil {
		w.deadLetter(ctx, d, key, &PermanentError{Code: ReasonInvalidJob, Err: kerr})
		return
	}
	// The deadline comes first: a cancelled job is never dead-lettered.
	if !w.Sabotage.IgnoreDeadline && !d.Job.Deadline.IsZero() && w.Env.Now().After(d.Job.Deadline) {
		w.cancel(ctx, d, key)
		return
	}
	if !w.Sabotage.UnboundedRetry && d.Attempt > d.Job.MaxAttempts {
		w.deadLetter(ctx, d, key, &PermanentError{Code: ReasonMaxAttempts, Err: fmt.Errorf("delivered %d times", d.Attempt)})
		return
	}
	result, err := w.extract(ctx, d, key)
	if errors.Is(err, adapters.ErrLeaseLost) || errors.Is(err, adapters.ErrStaleToken) {
		return // the heartbeat failed: another worker may hold the job now
	}
	if err != nil {
		w.resolve(ctx, d, key, err)
		return
	}
	w.Hooks.At(ctx, AfterExtract, d.Job.ID)
	if w.Sabotage.AckBeforeCommit {
		w.ack(ctx, d, key)
	}
	req := CommitRequest{JobID: d.Job.ID, Tenant: d.Job.Tenant, Key: key, Token: d.Token,
		PayloadHash: Hash(d.Job.Payload), Result: result, EventID: "ev:" + key,
		BeforeCommit: func(ctx context.Context) { w.Hooks.At(ctx, MidCommit, d.Job.ID) }}
	if err := w.commit(ctx, d, req); err != nil {
		if errors.Is(err, errAckedInCommit) {
			w.Hooks.At(ctx, AfterCommitBeforeAck, d.Job.ID)
		}
		return
	}
	w.Hooks.At(ctx, AfterCommitBeforeAck, d.Job.ID)
	if !w.Sabotage.AckBeforeCommit {
		w.ack(ctx, d, key)
	}
}

// extract runs the synthetic work, extending the lease every third of it while a
// slow step runs.
func (w *Worker) extract(ctx context.Context, d adapters.Delivery, key string) (string, error) {
	w.rec(history.Invoke, history.Extract, d, key, "", nil)
	p, err := DecodePayload(d.Job.Payload)
	if err != nil {
		w.rec(history.Fail, history.Extract, d, key, "", err)
		return "", err
	}
	if p.Crash {
		w.Hooks.At(ctx, Poison, d.Job.ID)
	}
	if p.Slow > 0 {
		ext, _ := w.Queue.(adapters.Extender)
		step := max(w.Lease/3, time.Millisecond)
		for left := p.Slow; left > 0; left -= step {
			if err := w.Env.Sleep(ctx, min(step, left)); err != nil {
				return "", err
			}
			if ext == nil || w.Sabotage.NoHeartbeat || left <= step {
				continue
			}
			w.rec(history.Invoke, history.Extend, d, key, "", nil)
			err := w.call(ctx, func(ctx context.Context) error { return ext.Extend(ctx, d, w.Lease) })
			w.recResult(history.Extend, d, key, strconv.FormatInt(w.Lease.Milliseconds(), 10), err)
			if errors.Is(err, adapters.ErrLeaseLost) || errors.Is(err, adapters.ErrStaleToken) {
				return "", err
			}
		}
	}
	result, err := Extract(p, w.attempt(d), d.Job.Version)
	if err != nil {
		w.rec(history.Fail, history.Extract, d, key, "", err)
		return "", err
	}
	w.rec(history.OK, history.Extract, d, key, result, nil)
	return result, nil
}

func (w *Worker) commit(ctx context.Context, d adapters.Delivery, req CommitRequest) error {
	for try := 0; ; try++ {
		w.rec(history.Invoke, history.Commit, d, req.Key, "", nil)
		var deduped bool
		var err error
		if dw, ok := w.Store.(DualWriter); ok && w.Sabotage.DualWrite {
			err = w.call(ctx, func(ctx context.Context) (err error) { deduped, err = dw.WriteResult(ctx, req); return err })
			if err == nil && !deduped {
				req.BeforeCommit(ctx)
				err = w.call(ctx, func(ctx context.Context) error { return dw.WriteEvent(ctx, req) })
			}
		} else if w.CommitAck != nil && !w.Sabotage.AckBeforeCommit {
			err = w.call(ctx, func(ctx context.Context) (err error) {
				deduped, err = w.CommitAck(ctx, req, d)
				return err
			})
			if err == nil && !deduped {
				value := "new"
				w.recResult(history.Commit, d, req.Key, value, nil)
				// The ack was part of the commit: record it as such.
				w.rec(history.Invoke, history.Ack, d, req.Key, "in_commit", nil)
				w.rec(history.OK, history.Ack, d, req.Key, "in_commit", nil)
				return errAckedInCommit
			}
		} else {
			err = w.call(ctx, func(ctx context.Context) (err error) {
				deduped, err = w.Store.CommitResultWithEvent(ctx, req)
				return err
			})
		}
		value := "new"
		if deduped {
			value = "deduped"
		}
		w.recResult(history.Commit, d, req.Key, value, err)
		switch {
		case err == nil:
			return nil
		case ambiguous(err) && w.Sabotage.TimeoutAsFailure:
			w.deadLetter(ctx, d, req.Key, &PermanentError{Code: ReasonPermanent, Err: err})
			return err
		case ambiguous(err) && try < w.CommitRetries:
			// Unknown, not failed: retry, the store dedupes if it was applied.
			if w.Env.Sleep(ctx, w.Policy.Backoff(try+1)) != nil {
				return err
			}
			continue
		case ambiguous(err), errors.Is(err, adapters.ErrStaleToken):
			return err // leave the delivery: redelivery or the newer holder finishes it
		case errors.Is(err, ErrAlreadyTerminal):
			w.ack(ctx, d, req.Key) // dead-lettered or cancelled before: only the ack was missing
			return err
		}
		w.resolve(ctx, d, req.Key, err)
		return err
	}
}

func (w *Worker) ack(ctx context.Context, d adapters.Delivery, key string) {
	w.rec(history.Invoke, history.Ack, d, key, "", nil)
	err := w.call(ctx, func(ctx context.Context) error { return w.Queue.Ack(ctx, d) })
	w.recResult(history.Ack, d, key, "", err)
	if ambiguous(err) && w.Sabotage.TimeoutAsFailure {
		w.deadLetter(ctx, d, key, &PermanentError{Code: ReasonPermanent, Err: err})
	}
}

// resolve applies the retry policy to a failed attempt.
func (w *Worker) resolve(ctx context.Context, d adapters.Delivery, key string, err error) {
	dec := w.Policy.Decide(err, w.attempt(d), d.Job.MaxAttempts)
	switch dec.Outcome {
	case Cancel:
		w.cancel(ctx, d, key)
	case DeadLetter:
		w.deadLetter(ctx, d, key, err)
	default:
		w.rec(history.Invoke, history.Nack, d, key, dec.Delay.String(), nil)
		err := w.call(ctx, func(ctx context.Context) error { return w.Queue.Nack(ctx, d, dec.Delay) })
		w.recResult(history.Nack, d, key, dec.Delay.String(), err)
	}
}

func (w *Worker) cancel(ctx context.Context, d adapters.Delivery, key string) {
	if w.Sabotage.CancelToDLQ {
		w.deadLetter(ctx, d, key, &PermanentError{Code: ReasonPermanent, Err: ErrDeadlinePassed})
		return
	}
	w.rec(history.Invoke, history.Cancel, d, key, "", nil)
	err := w.call(ctx, func(ctx context.Context) error { return w.Store.Cancel(ctx, d.Job.ID) })
	w.recResult(history.Cancel, d, key, "", err)
	if err == nil || errors.Is(err, ErrAlreadyCommitted) || errors.Is(err, ErrAlreadyTerminal) {
		w.ack(ctx, d, key) // finished before: only the ack was missing
	}
}

// deadLetter records the classified reason in the store, then removes the job
// from the queue (natively where the queue can, else by ack).
func (w *Worker) deadLetter(ctx context.Context, d adapters.Delivery, key string, cause error) {
	reason := ReasonFor(cause)
	if w.Sabotage.RawErrorInDLQ {
		reason = cause.Error()
	}
	rec := DeadLetterRecord{JobID: d.Job.ID, Tenant: d.Job.Tenant, Key: key, Reason: reason, Attempt: d.Attempt, At: w.Env.Now()}
	w.rec(history.Invoke, history.DeadLetter, d, key, reason, nil)
	if err := w.call(ctx, func(ctx context.Context) error { return w.Store.DeadLetter(ctx, rec) }); err != nil && !(w.Sabotage.TimeoutAsFailure && errors.Is(err, ErrAlreadyCommitted)) {
		w.recResult(history.DeadLetter, d, key, reason, err)
		if errors.Is(err, ErrAlreadyCommitted) || errors.Is(err, ErrAlreadyTerminal) {
			w.ack(ctx, d, key) // finished before: only the ack was missing
		}
		return
	}
	var err error
	if dl, ok := w.Queue.(adapters.DeadLetterer); ok {
		err = w.call(ctx, func(ctx context.Context) error { return dl.DeadLetter(ctx, d, reason) })
	} else {
		err = w.call(ctx, func(ctx context.Context) error { return w.Queue.Ack(ctx, d) })
	}
	w.recResult(history.DeadLetter, d, key, reason, err)
}
