package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/history"
)

// Worker is one pipeline worker. Not safe for concurrent use: a process runs one
// Worker in one goroutine; many workers share a queue and a store.
//
// It tells the infrastructure's failures from the job's. A broker or store call
// that fails because the broker or store is unavailable, or whose outcome is
// unknown (a lost reply, a timeout), is retried in place: the worker holds the
// delivery, backs off and keeps its lease alive, and spends none of the job's
// attempts, until the job is past its age budget (AgeBudgetOf), where the
// written policy applies (overAge). A delivery lost meanwhile (a partition)
// is given back, recorded as the infrastructure's. The job's own failures (its
// extract failing, transiently or for good) spend attempts, counted durably in
// the effect store's Ledger; so do deliveries its worker died in, as far as the
// broker's delivery count witnesses them (see crashes).
type Worker struct {
	Env      *Env
	Queue    adapters.Queue
	Store    Store
	Hooks    Hooks
	Policy   *Policy
	Lease    time.Duration // lease asked for on every Lease and Extend
	Poll     time.Duration // idle wait between empty leases
	Sabotage Sabotage
	// CallTimeout bounds every broker and store call; a call that runs out is
	// ambiguous (context.DeadlineExceeded). 0: no bound (the embedded target).
	CallTimeout time.Duration
	// CommitAck, if set, commits result and event and acks d in one transaction
	// (Postgres as the queue, in the store's database: an exactly-once effect
	// without a dedupe on redelivery). acked reports whether the ack was part of
	// the commit: a deduped commit acks nothing, and the worker acks as usual.
	CommitAck func(ctx context.Context, req CommitRequest, d adapters.Delivery) (deduped bool, err error)
	seq       int  // deliveries reached, for their names in the ledger
	started   bool // the store knows this process runs (Starts)
}

// held is the delivery a worker holds.
type held struct {
	d        adapters.Delivery
	key      string
	id       string // the delivery's name in the ledger: process/sequence
	since    time.Time
	extended time.Time     // when its lease was last asked for or extended
	budget   time.Duration // the job's age budget
	attempt  int           // the job's attempt this delivery runs, 1-based
	// committed: the job's result is committed (by this delivery or before), so
	// no other terminal outcome is possible.
	committed bool
	// spent: the job's own failure ended this delivery, recorded or not; it is
	// never given back as the infrastructure's.
	spent bool
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

// errTimeoutTaken is the TimeoutAsFailure sabotage acting on an unknown outcome.
var errTimeoutTaken = errors.New("timeout taken as failure")

// errLeft: an ack's outcome is unknown and the queue cannot be asked (no
// Extender); the delivery is left to the broker, which redelivers it if the ack
// did not take, and the next delivery finds the job committed.
var errLeft = errors.New("ack outcome unknown; delivery left to the broker")

// pastAgeError: infrastructure failures held the job past its age budget; Last
// is the failure that found it there.
type pastAgeError struct{ Last error }

func (e *pastAgeError) Error() string { return "past the age budget: " + e.Last.Error() }
func (e *pastAgeError) Unwrap() error { return e.Last }

// ambiguous reports whether err leaves the outcome of the call unknown.
func ambiguous(err error) bool {
	return errors.Is(err, adapters.ErrAmbiguous) || errors.Is(err, context.DeadlineExceeded)
}

// infra reports whether err is the infrastructure's, not the job's: the call
// was refused (unavailable) or its outcome is unknown.
func infra(err error) bool {
	return err != nil && (ambiguous(err) || errors.Is(err, adapters.ErrUnavailable))
}

// lost reports whether the delivery is no longer the current one.
func lost(err error) bool {
	return errors.Is(err, adapters.ErrLeaseLost) || errors.Is(err, adapters.ErrStaleToken)
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
	if !w.announce(ctx) {
		return false, nil
	}
	var none adapters.Delivery
	asked := w.Env.Now()
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
	w.seq++
	now := w.Env.Now()
	// The lease runs from when it was asked for: its answer may come late (a
	// commit waiting for a synchronous standby through a failover).
	h := &held{d: d, key: key, id: w.Env.Process + "/" + strconv.Itoa(w.seq), since: now, extended: asked, budget: AgeBudgetOf(d.Job)}
	var led Ledger
	if kerr == nil {
		if led, err = w.begin(ctx, h); err != nil {
			// Stale: another delivery owns the job. Else the store held the
			// job past its age budget, or the worker is stopping.
			w.stopped(ctx, h, err)
			return true, nil
		}
		h.committed = led.Committed
	}
	w.Hooks.At(ctx, AfterLease, d.Job.ID)
	w.handle(ctx, h, led, kerr)
	return true, nil
}

// announce tells a store that learns of starts (Starts) that this process
// runs, before its first lease: its start proves the earlier incarnations of
// its slot dead, and with them the deliveries they never ended. It reports
// whether the store knows (or cannot learn); a failure is tried again on the
// next step, and nothing is leased meanwhile.
func (w *Worker) announce(ctx context.Context) bool {
	s, ok := w.Store.(Starts)
	if !ok || w.started {
		return true
	}
	if err := w.call(ctx, func(ctx context.Context) error { return s.Started(ctx, w.Env.Process) }); err != nil {
		return false
	}
	w.started = true
	return true
}

// awaitHolders holds the delivery while a holder of the job that may be alive
// (Ledger.Unsure) has not spoken, for up to a lease and a stalled call's
// bound: most often that holder died and its slot is restarting, and its
// start settles the question at once. The ledger is read again (Begin, the
// same delivery: idempotent) every poll, the lease kept alive meanwhile.
// Waiting here, not by giving the job back, keeps a broker that redelivers
// at once (RabbitMQ requeues a nack immediately) from counting a delivery
// every poll: RabbitMQ's delivery limit dead-lettered jobs whose holder had
// just been killed, 2026-12-06.
func (w *Worker) awaitHolders(ctx context.Context, h *held, led Ledger) (Ledger, error) {
	until := w.Env.Now().Add(w.Lease + w.CallTimeout)
	for unsure(h.d, led) > 0 && !led.Terminal && !led.Committed && w.Env.Now().Before(until) {
		if err := w.Env.Sleep(ctx, max(w.Poll, 50*time.Millisecond)); err != nil {
			return led, err
		}
		w.keepAlive(ctx, h)
		next, err := w.begin(ctx, h)
		if err != nil {
			return led, err
		}
		led = next
	}
	return led, nil
}

// begin fences the delivery and reads the job's ledger (recorded as the fence,
// its value the ledger), retried in place while the store fails.
func (w *Worker) begin(ctx context.Context, h *held) (Ledger, error) {
	var led Ledger
	err := w.try(ctx, h, func(ctx context.Context) error {
		w.rec(history.Invoke, history.Fence, h.d, h.key, "", nil)
		err := w.call(ctx, func(ctx context.Context) (err error) {
			led, err = w.Store.Begin(ctx, h.d.Job.ID, h.d.Token, h.id, h.d.Attempt)
			return err
		})
		value := ""
		if err == nil {
			b, _ := json.Marshal(led)
			value = string(b)
		}
		w.recResult(history.Fence, h.d, h.key, value, err)
		return err
	})
	return led, err
}

// crashes is how many of the job's earlier deliveries its worker died in (a
// poison job's crash loop; a kill, which the worker cannot tell from one), as
// far as the broker's delivery count witnesses them: the attempts before this
// one whose every delivery neither ended nor committed and whose holder is
// known dead (Ledger.Crashed), at most the ledger's unended deliveries and
// the deliveries the broker counted before this one. A broker that cannot
// count witnesses none, and a crash loop there is not bounded (the
// retry.bounded contract says so).
func crashes(d adapters.Delivery, led Ledger) int {
	if d.Attempt <= 0 || led.Committed {
		return 0
	}
	return min(led.Crashed, led.Unended(), d.Attempt-1)
}

// unsure is how many more of the job's earlier deliveries may have been
// crashes (Ledger.Unsure), within the same bounds as crashes.
func unsure(d adapters.Delivery, led Ledger) int {
	if d.Attempt <= 0 || led.Committed {
		return 0
	}
	c := crashes(d, led)
	return max(min(led.Unsure, led.Unended()-c, d.Attempt-1-c), 0)
}

func (w *Worker) handle(ctx context.Context, h *held, led Ledger, kerr error) {
	d := h.d
	if kerr != nil {
		w.deadLetter(ctx, h, ReasonInvalidJob, kerr)
		return
	}
	if !w.Sabotage.UnboundedRetry && !led.Terminal && !h.committed && unsure(d, led) > 0 {
		var err error
		if led, err = w.awaitHolders(ctx, h, led); err != nil {
			w.stopped(ctx, h, err)
			return
		}
		h.committed = led.Committed
	}
	if led.Terminal {
		w.ack(ctx, h) // dead-lettered or cancelled before: only the ack was missing
		return
	}
	// The deadline comes first: a cancelled job is never dead-lettered.
	if !w.Sabotage.IgnoreDeadline && !d.Job.Deadline.IsZero() && w.Env.Now().After(d.Job.Deadline) {
		w.cancel(ctx, h)
		return
	}
	used := led.Spent + crashes(d, led)
	if !w.Sabotage.UnboundedRetry && !h.committed {
		switch {
		case d.Attempt > DeliveryCap(d.Job.MaxAttempts):
			w.deadLetter(ctx, h, ReasonMaxAttempts, fmt.Errorf("delivered %d times", d.Attempt))
			return
		case used >= d.Job.MaxAttempts:
			w.deadLetter(ctx, h, ReasonMaxAttempts, fmt.Errorf("%d attempts spent", used))
			return
		case unsure(d, led) > 0:
			// A holder not known dead never ended its delivery. It may have
			// died (its slot not restarted yet), or be alive and stalled by
			// the infrastructure past its lease, its outcome on its way: a
			// commit, the permanent error it is dead-lettering, a spent
			// attempt. Running the job now could spend its budget on crashes
			// no process had (a healthy job dead-lettered on Redis, found by
			// explore) or retry a permanent error (on Redis and Postgres).
			// Give it back unrun until that holder speaks (its delivery ends,
			// or the job's outcome is stored) or its death is known (its slot
			// restarts), a lease and a stalled call's bound at a time; the
			// broker's delivery cap bounds the wait. Its own give-back must
			// land in the ledger (retried while the store fails), or it would
			// be one more delivery of a live holder that never ended.
			if err := w.try(ctx, h, func(ctx context.Context) error { _, err := w.settle(ctx, h, false); return err }); err != nil {
				w.stopped(ctx, h, err)
				return
			}
			w.nack(ctx, h, w.Lease+w.CallTimeout)
			return
		}
	}
	h.attempt = used + 1
	result, err := w.extract(ctx, h)
	if lost(err) {
		w.giveBack(ctx, h) // the heartbeat failed: another worker may hold the job now
		return
	}
	if err != nil {
		if ctx.Err() == nil {
			w.failed(ctx, h, err)
		}
		return
	}
	w.Hooks.At(ctx, AfterExtract, d.Job.ID)
	if w.Sabotage.AckBeforeCommit {
		w.ack(ctx, h)
	}
	req := CommitRequest{JobID: d.Job.ID, Tenant: d.Job.Tenant, Key: h.key, Token: d.Token,
		PayloadHash: Hash(d.Job.Payload), Result: result, EventID: "ev:" + h.key,
		BeforeCommit: func(ctx context.Context) { w.Hooks.At(ctx, MidCommit, d.Job.ID) }}
	if err := w.commit(ctx, h, req); err != nil {
		if errors.Is(err, errAckedInCommit) {
			w.Hooks.At(ctx, AfterCommitBeforeAck, d.Job.ID)
		}
		return
	}
	w.Hooks.At(ctx, AfterCommitBeforeAck, d.Job.ID)
	if !w.Sabotage.AckBeforeCommit {
		w.ack(ctx, h)
	}
}

// try runs call, which records itself, until it succeeds or fails for a reason
// that is not the infrastructure's. An infrastructure failure is retried in
// place after a backoff, the lease kept alive meanwhile, and spends nothing of
// the job's budget. try returns *pastAgeError once the job is past its age
// budget, and ctx's error once ctx ends.
func (w *Worker) try(ctx context.Context, h *held, call func(ctx context.Context) error) error {
	for n := 1; ; n++ {
		err := call(ctx)
		if !infra(err) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if w.pastAge(h) {
			return &pastAgeError{Last: err}
		}
		if w.Env.Sleep(ctx, w.Policy.Backoff(n)) != nil {
			return ctx.Err()
		}
		w.keepAlive(ctx, h)
	}
}

// pastAge reports whether the job is past its age budget: measured from its
// creation, or from this lease for a job that does not say when it was created.
func (w *Worker) pastAge(h *held) bool {
	born := h.d.Job.CreatedAt
	if born.IsZero() {
		born = h.since
	}
	return w.Env.Now().Sub(born) > h.budget
}

// keepAlive extends the held lease once a third of it has passed, where the
// queue can. A failed extension ends nothing: the broker may be down, and a
// lease that ran out while nobody else took the job is still current on most
// brokers. Whether another delivery owns the job now, the fenced store and
// broker calls tell.
func (w *Worker) keepAlive(ctx context.Context, h *held) {
	if ext, ok := w.Queue.(adapters.Extender); ok && !w.Sabotage.NoHeartbeat && w.Env.Now().Sub(h.extended) >= w.Lease/3 {
		_ = w.extend(ctx, h, ext)
	}
}

func (w *Worker) extend(ctx context.Context, h *held, ext adapters.Extender) error {
	asked := w.Env.Now()
	w.rec(history.Invoke, history.Extend, h.d, h.key, "", nil)
	err := w.call(ctx, func(ctx context.Context) error { return ext.Extend(ctx, h.d, w.Lease) })
	w.recResult(history.Extend, h.d, h.key, strconv.FormatInt(w.Lease.Milliseconds(), 10), err)
	if err == nil {
		h.extended = asked
	}
	return err
}

// stopped ends a hold that ended for a reason other than the job's and reports
// whether err was one: the worker stopping, the delivery no longer current (a
// newer one owns the job), or the age budget.
func (w *Worker) stopped(ctx context.Context, h *held, err error) bool {
	var pa *pastAgeError
	switch {
	case ctx.Err() != nil:
	case lost(err):
		w.giveBack(ctx, h)
	case errors.As(err, &pa):
		w.overAge(ctx, h, pa.Last)
	default:
		return false
	}
	return true
}

// overAge is the written policy for a job the infrastructure held past its age
// budget: it is dead-lettered with ReasonAgeExceeded, unless its result is
// committed (only the ack is missing), its deadline passed (it is cancelled,
// never dead-lettered) or the failure that found it there left an outcome
// unknown (a dead letter would take it as a failure); then, and when the dead
// letter cannot be written, it is given back and stays in the broker, parked
// until a later delivery finds the infrastructure working. Never dropped.
func (w *Worker) overAge(ctx context.Context, h *held, last error) {
	deadline := h.d.Job.Deadline
	if h.committed || ambiguous(last) || (!deadline.IsZero() && w.Env.Now().After(deadline)) {
		w.giveBack(ctx, h)
		return
	}
	w.deadLetter(ctx, h, ReasonAgeExceeded, last)
}

// giveBack ends the hold after an infrastructure failure: the delivery is
// recorded in the ledger as the infrastructure's, and the job stays in the
// broker, delivered again after its lease. The record is retried while the
// store fails, for up to the job's age budget: until it lands, the job's next
// deliveries cannot tell this live worker from a dead one and give the job
// back unrun (a zombie resumed into a flapping store left its delivery
// unended, and its job was dead-lettered at the delivery cap, found by
// explore).
func (w *Worker) giveBack(ctx context.Context, h *held) {
	if ctx.Err() != nil || h.committed || h.spent || h.key == "" {
		return
	}
	start := w.Env.Now()
	for n := 1; ; n++ {
		_, err := w.settle(ctx, h, false)
		if !infra(err) || ctx.Err() != nil || w.Env.Now().Sub(start) > h.budget {
			return
		}
		if w.Env.Sleep(ctx, w.Policy.Backoff(n)) != nil {
			return
		}
	}
}

// settle records in the ledger how the delivery ended without a terminal
// outcome: spent by the job's own failure, or released.
func (w *Worker) settle(ctx context.Context, h *held, spent bool) (Ledger, error) {
	value := "released"
	if spent {
		value = "spent"
	}
	var led Ledger
	w.rec(history.Invoke, history.Settle, h.d, h.key, value, nil)
	err := w.call(ctx, func(ctx context.Context) (err error) {
		led, err = w.Store.End(ctx, h.d.Job.ID, h.id, spent)
		return err
	})
	w.recResult(history.Settle, h.d, h.key, value, err)
	return led, err
}

// extract runs the synthetic work, extending the lease every third of it while a
// slow step runs. Its invoke's value is the job's attempt number.
func (w *Worker) extract(ctx context.Context, h *held) (string, error) {
	d, key := h.d, h.key
	w.rec(history.Invoke, history.Extract, d, key, strconv.Itoa(h.attempt), nil)
	p, err := DecodePayload(d.Job.Payload)
	if err != nil {
		w.rec(history.Fail, history.Extract, d, key, "", err)
		return "", err
	}
	if p.Crash {
		w.Hooks.At(ctx, Poison, d.Job.ID)
	}
	ext, _ := w.Queue.(adapters.Extender)
	if ext != nil && !w.Sabotage.NoHeartbeat && w.Env.Now().Sub(h.extended) >= w.Lease/3 {
		// A third of the lease or more went by before the work starts (its
		// answer came late, or the fence waited on the store): renew it first,
		// or give the job back if another delivery owns it now.
		if err := w.extend(ctx, h, ext); lost(err) {
			return "", err
		}
	}
	if p.Slow > 0 {
		step := max(w.Lease/3, time.Millisecond)
		for left := p.Slow; left > 0; left -= step {
			if err := w.Env.Sleep(ctx, min(step, left)); err != nil {
				return "", err
			}
			if ext == nil || w.Sabotage.NoHeartbeat || left <= step {
				continue
			}
			if err := w.extend(ctx, h, ext); lost(err) {
				return "", err
			}
		}
	}
	result, err := Extract(p, h.attempt, d.Job.Version)
	if err != nil {
		w.rec(history.Fail, history.Extract, d, key, "", err)
		return "", err
	}
	w.rec(history.OK, history.Extract, d, key, result, nil)
	return result, nil
}

// commit writes result and event, retried in place while the store fails (an
// unknown outcome included: the store dedupes a commit that took).
func (w *Worker) commit(ctx context.Context, h *held, req CommitRequest) error {
	d := h.d
	err := w.try(ctx, h, func(ctx context.Context) error {
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
				w.recResult(history.Commit, d, req.Key, "new", nil)
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
		if ambiguous(err) && w.Sabotage.TimeoutAsFailure {
			return errTimeoutTaken
		}
		return err
	})
	switch {
	case err == nil, errors.Is(err, errAckedInCommit):
		h.committed = true
		return err
	case errors.Is(err, errTimeoutTaken):
		w.deadLetter(ctx, h, ReasonPermanent, err)
	case errors.Is(err, ErrAlreadyTerminal):
		w.ack(ctx, h) // dead-lettered or cancelled before: only the ack was missing
	case w.stopped(ctx, h, err):
	default:
		w.failed(ctx, h, err) // the job's own: an idempotency conflict, say
	}
	return err
}

// ack removes the job from the queue. An ack whose outcome is unknown is not
// taken as done nor as failed: the worker asks the broker whether the delivery
// is still its own (an extension) and acks again only then.
func (w *Worker) ack(ctx context.Context, h *held) {
	err := w.try(ctx, h, func(ctx context.Context) error {
		w.rec(history.Invoke, history.Ack, h.d, h.key, "", nil)
		err := w.call(ctx, func(ctx context.Context) error { return w.Queue.Ack(ctx, h.d) })
		w.recResult(history.Ack, h.d, h.key, "", err)
		if !ambiguous(err) {
			return err
		}
		if w.Sabotage.TimeoutAsFailure {
			return errTimeoutTaken
		}
		ext, ok := w.Queue.(adapters.Extender)
		if !ok {
			return errLeft
		}
		if perr := w.extend(ctx, h, ext); perr == nil || infra(perr) {
			return err // still ours, or unknown yet: ack again
		} else {
			return perr // the ack took, or another delivery owns the job: done here
		}
	})
	switch {
	case errors.Is(err, errTimeoutTaken):
		w.deadLetter(ctx, h, ReasonPermanent, err)
	case err == nil, errors.Is(err, errLeft), lost(err):
	default:
		w.stopped(ctx, h, err)
	}
}

// failed applies the retry policy to the job's own failure, which spends the
// attempt the delivery ran.
func (w *Worker) failed(ctx context.Context, h *held, cause error) {
	dec := w.Policy.Decide(cause, h.attempt, h.d.Job.MaxAttempts)
	switch dec.Outcome {
	case Cancel:
		w.cancel(ctx, h)
	case DeadLetter:
		w.deadLetter(ctx, h, dec.Reason, cause)
	default:
		// Spent before the job goes back: a worker that dies in between leaves
		// a delivery that never ended, which the next delivery counts too.
		h.spent = true
		err := w.try(ctx, h, func(ctx context.Context) error { _, err := w.settle(ctx, h, true); return err })
		if err != nil {
			w.stopped(ctx, h, err)
			return
		}
		w.nack(ctx, h, dec.Delay)
	}
}

func (w *Worker) nack(ctx context.Context, h *held, delay time.Duration) {
	err := w.try(ctx, h, func(ctx context.Context) error {
		w.rec(history.Invoke, history.Nack, h.d, h.key, delay.String(), nil)
		err := w.call(ctx, func(ctx context.Context) error { return w.Queue.Nack(ctx, h.d, delay) })
		w.recResult(history.Nack, h.d, h.key, delay.String(), err)
		return err
	})
	if err != nil && !lost(err) {
		w.stopped(ctx, h, err)
	}
}

func (w *Worker) cancel(ctx context.Context, h *held) {
	if w.Sabotage.CancelToDLQ {
		w.deadLetter(ctx, h, ReasonPermanent, ErrDeadlinePassed)
		return
	}
	err := w.try(ctx, h, func(ctx context.Context) error {
		w.rec(history.Invoke, history.Cancel, h.d, h.key, "", nil)
		err := w.call(ctx, func(ctx context.Context) error { return w.Store.Cancel(ctx, h.d.Job.ID) })
		w.recResult(history.Cancel, h.d, h.key, "", err)
		return err
	})
	switch {
	case err == nil, errors.Is(err, ErrAlreadyCommitted), errors.Is(err, ErrAlreadyTerminal):
		w.ack(ctx, h) // finished before: only the ack was missing
	default:
		w.stopped(ctx, h, err) // past its age: its deadline makes overAge give it back
	}
}

// deadLetter records reason in the store, then removes the job from the queue
// (natively where the queue can, else by ack), each step retried in place while
// the infrastructure fails.
func (w *Worker) deadLetter(ctx context.Context, h *held, reason string, cause error) {
	d, key := h.d, h.key
	if w.Sabotage.RawErrorInDLQ {
		reason = cause.Error()
	}
	rec := DeadLetterRecord{JobID: d.Job.ID, Tenant: d.Job.Tenant, Key: key, Reason: reason, Attempt: d.Attempt, At: w.Env.Now()}
	stored := false
	err := w.try(ctx, h, func(ctx context.Context) error {
		w.rec(history.Invoke, history.DeadLetter, d, key, reason, nil)
		if !stored {
			err := w.call(ctx, func(ctx context.Context) error { return w.Store.DeadLetter(ctx, rec) })
			if err != nil && !(w.Sabotage.TimeoutAsFailure && errors.Is(err, ErrAlreadyCommitted)) {
				w.recResult(history.DeadLetter, d, key, reason, err)
				return err
			}
			stored = true
		}
		var err error
		if dl, ok := w.Queue.(adapters.DeadLetterer); ok {
			err = w.call(ctx, func(ctx context.Context) error { return dl.DeadLetter(ctx, d, reason) })
		} else {
			err = w.call(ctx, func(ctx context.Context) error { return w.Queue.Ack(ctx, d) })
		}
		w.recResult(history.DeadLetter, d, key, reason, err)
		return err
	})
	var pa *pastAgeError
	switch {
	case err == nil, lost(err):
		// Removed, or a newer delivery owns the job and finds it dead.
	case errors.Is(err, ErrAlreadyCommitted), errors.Is(err, ErrAlreadyTerminal):
		h.committed = h.committed || errors.Is(err, ErrAlreadyCommitted)
		w.ack(ctx, h) // finished before: only the ack was missing
	case errors.As(err, &pa) && !stored:
		w.giveBack(ctx, h) // parked: a later delivery decides
	}
	// Past its age with the record stored: the next delivery finds the job
	// dead and acks it.
}
