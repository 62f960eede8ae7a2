package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/pipeline"
)

// Server serves one worker in the worker role: it records its reports as
// the history, runs each job's effect through the store with the fence, and
// fires the plan's crash points (Hooks) before it answers.
type Server struct {
	Env      *pipeline.Env
	Store    pipeline.Store
	Hooks    pipeline.Hooks
	Sabotage pipeline.Sabotage // the pipeline's sabotages that act on durachk's side (keys)
	// CallTimeout bounds every store call; 0: none.
	CallTimeout time.Duration
	// Backoff is the wait between store calls retried after the store did
	// not answer.
	Backoff time.Duration

	mu   sync.Mutex
	jobs map[string]held // by job id: the newest delivery received
	seq  int
	// reasons: the reason of each job's dead letter invoked, for its
	// outcome's record (a library's event may not carry it).
	reasons map[string]string
}

// held is a delivery the worker received.
type held struct {
	d   adapters.Delivery
	key string
	id  string // the delivery's name in the ledger
}

// Serve answers p's reports until p exits or ctx ends.
func (s *Server) Serve(ctx context.Context, p *Proc) error {
	s.jobs, s.reasons = map[string]held{}, map[string]string{}
	if st, ok := s.Store.(pipeline.Starts); ok {
		if err := st.Started(ctx, s.Env.Process); err != nil && ctx.Err() == nil {
			return fmt.Errorf("worker %s: %w", s.Env.Process, err)
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-p.Reports:
			if !ok {
				<-p.Done()
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("worker %s exited: %w", s.Env.Process, p.ExitErr())
			}
			// Every job in its own goroutine: an effect runs as long as the
			// job's work, and the library runs many at once.
			wg.Add(1)
			go func() {
				defer wg.Done()
				with, err := s.handle(ctx, m)
				if ctx.Err() == nil {
					_ = p.Answer(m, with, err)
				}
			}()
		}
	}
}

func (s *Server) call(ctx context.Context, f func(ctx context.Context) error) error {
	if s.CallTimeout <= 0 {
		return f(ctx)
	}
	cctx, cancel := context.WithTimeout(ctx, s.CallTimeout)
	defer cancel()
	return f(cctx)
}

func (s *Server) rec(t history.Type, f history.F, h held, value string, err error) {
	op := history.Op{Type: t, F: f, Job: h.d.Job.ID, Key: h.key, Token: h.d.Token, Attempt: h.d.Attempt, Value: value}
	if err != nil {
		op.Err = pipeline.ErrorCode(err)
	}
	s.Env.Record(op)
}

func (s *Server) recResult(f history.F, h held, value string, err error) {
	s.rec(pipeline.RecordType(err), f, h, value, err)
}

// lookup is the delivery of m's job, with the token m reports.
func (s *Server) lookup(m Msg) (held, error) {
	s.mu.Lock()
	h, ok := s.jobs[m.JobID]
	s.mu.Unlock()
	if !ok {
		return h, fmt.Errorf("%w: %s for job %q, which the worker never reported received", ErrProtocol, m.Type, m.JobID)
	}
	h.d.Token = m.Token
	return h, nil
}

func (s *Server) key(j adapters.Job) (string, error) {
	if s.Sabotage.KeyWithoutTenant {
		return j.DocumentID + ":v" + strconv.Itoa(j.Version), nil
	}
	return pipeline.BuildKey(j.Tenant, j.DocumentID, j.Version)
}

func (s *Server) handle(ctx context.Context, m Msg) (Msg, error) {
	switch m.Type {
	case TypeReceived:
		return Msg{}, s.received(ctx, m)
	case TypeEffect:
		h, err := s.lookup(m)
		if err != nil {
			return Msg{}, err
		}
		h.d.Attempt = m.Attempt
		outcome, reason := s.effect(ctx, h)
		return Msg{Outcome: outcome, Reason: reason}, nil
	case TypeExtended:
		h, err := s.lookup(m)
		if err != nil {
			return Msg{}, err
		}
		lease := strconv.FormatInt(m.LeaseMS, 10)
		s.rec(history.Invoke, history.Extend, h, "", nil)
		s.recResult(history.Extend, h, lease, m.Error.Err())
		return Msg{}, nil
	case TypeAck, TypeNack, TypeDeadLetter:
		h, err := s.lookup(m)
		if err != nil {
			return Msg{}, err
		}
		return s.finish(ctx, m, h)
	case TypePoint:
		s.Hooks.At(ctx, pipeline.CrashPoint(m.Name), m.JobID)
		return Msg{}, nil
	}
	return Msg{}, fmt.Errorf("%w: unknown report %q", adapters.ErrUnsupported, m.Type)
}

// received records the lease the library gave the worker, then fires
// after_lease.
func (s *Server) received(ctx context.Context, m Msg) error {
	if m.Job == nil || m.Job.ID == "" {
		return fmt.Errorf("%w: received without a job", ErrProtocol)
	}
	key, _ := s.key(*m.Job) // an invalid key is the effect's to answer
	s.mu.Lock()
	s.seq++
	h := held{d: adapters.Delivery{Job: *m.Job, Token: m.Token, Attempt: m.Attempt}, key: key, id: s.Env.Process + "/" + strconv.Itoa(s.seq)}
	s.jobs[m.Job.ID] = h
	s.mu.Unlock()
	s.rec(history.Invoke, history.Lease, held{}, "", nil)
	s.rec(history.OK, history.Lease, h, strconv.FormatInt(m.LeaseMS, 10), nil)
	s.Hooks.At(ctx, pipeline.AfterLease, m.Job.ID)
	return nil
}

// try runs f until it succeeds or fails otherwise than by the store not
// answering, at most storeTries times.
func (s *Server) try(ctx context.Context, f func(ctx context.Context) error) error {
	var err error
	for n := 1; n <= storeTries; n++ {
		if err = f(ctx); err == nil || !infra(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(n) * max(s.Backoff, 20*time.Millisecond)):
		}
	}
	return err
}

// storeTries: a store that does not answer this many times in a row gives
// the job back to the library (outcome unavailable).
const storeTries = 5

// resolve is try for a call that dedupes (the commit): after an attempt whose
// outcome is unknown it goes on until one is known or ctx ends, so that the
// worker is never told "unavailable" — nothing committed — about a commit
// that may have landed (it would retry the job or give it up: the checker's
// ambiguous_taken_as_known, found by partition.ambiguous on pg-boss).
func (s *Server) resolve(ctx context.Context, f func(ctx context.Context) error) error {
	for n := 1; ; n++ {
		err := s.try(ctx, f)
		if err == nil || ctx.Err() != nil || !(errors.Is(err, adapters.ErrAmbiguous) || errors.Is(err, context.DeadlineExceeded)) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(time.Duration(n)*max(s.Backoff, 20*time.Millisecond), time.Second)):
		}
	}
}

func infra(err error) bool {
	return errors.Is(err, adapters.ErrUnavailable) || errors.Is(err, adapters.ErrAmbiguous) || errors.Is(err, context.DeadlineExceeded)
}

// effect is the job's work, as the reference pipeline does it between its
// lease and its ack: the fence and the ledger, the deadline, the extract,
// the commit of result and event with the fence.
func (s *Server) effect(ctx context.Context, h held) (outcome, reason string) {
	j := h.d.Job
	if _, err := s.key(j); err != nil {
		return OutcomePermanent, pipeline.ReasonInvalidJob
	}
	var led pipeline.Ledger
	err := s.try(ctx, func(ctx context.Context) error {
		s.rec(history.Invoke, history.Fence, h, "", nil)
		err := s.call(ctx, func(ctx context.Context) (err error) {
			led, err = s.Store.Begin(ctx, j.ID, h.d.Token, h.id, h.d.Attempt)
			return err
		})
		value := ""
		if err == nil {
			b, _ := json.Marshal(led)
			value = string(b)
		}
		s.recResult(history.Fence, h, value, err)
		return err
	})
	switch {
	case errors.Is(err, adapters.ErrStaleToken):
		return OutcomeStale, ""
	case err != nil:
		return OutcomeUnavailable, ""
	case led.Terminal:
		return OutcomeTerminal, ""
	}
	// A job committed before (its worker died before its ack) runs again and
	// its commit dedupes, as the reference pipeline's does.
	if !s.Sabotage.IgnoreDeadline && !j.Deadline.IsZero() && s.Env.Now().After(j.Deadline) {
		return s.cancel(ctx, h)
	}
	attempt := h.d.Attempt
	if attempt <= 0 {
		attempt = led.Spent + 1 // a library that counts no attempts: the store's count
	}
	s.rec(history.Invoke, history.Extract, h, strconv.Itoa(attempt), nil)
	p, err := pipeline.DecodePayload(j.Payload)
	if err != nil {
		s.rec(history.Fail, history.Extract, h, "", err)
		return OutcomePermanent, pipeline.ReasonInvalidJob
	}
	if p.Crash {
		s.Hooks.At(ctx, pipeline.Poison, j.ID)
	}
	if p.Slow > 0 {
		// The library renews the job's lock meanwhile, as it does for any
		// handler that runs long: that is what lease.heartbeat checks.
		select {
		case <-ctx.Done():
			return OutcomeUnavailable, ""
		case <-time.After(p.Slow):
		}
	}
	result, err := pipeline.Extract(p, attempt, j.Version)
	if err != nil {
		s.rec(history.Fail, history.Extract, h, "", err)
		var pe *pipeline.PermanentError
		if errors.As(err, &pe) {
			return OutcomePermanent, pe.Code
		}
		return OutcomeTransient, pipeline.ReasonMaxAttempts
	}
	s.rec(history.OK, history.Extract, h, result, nil)
	s.Hooks.At(ctx, pipeline.AfterExtract, j.ID)
	req := pipeline.CommitRequest{JobID: j.ID, Tenant: j.Tenant, Key: h.key, Token: h.d.Token,
		PayloadHash: pipeline.Hash(j.Payload), Result: result, EventID: "ev:" + h.key,
		BeforeCommit: func(ctx context.Context) { s.Hooks.At(ctx, pipeline.MidCommit, j.ID) }}
	var deduped bool
	err = s.resolve(ctx, func(ctx context.Context) error {
		s.rec(history.Invoke, history.Commit, h, "", nil)
		err := s.call(ctx, func(ctx context.Context) (err error) {
			deduped, err = s.Store.CommitResultWithEvent(ctx, req)
			return err
		})
		value := "new"
		if deduped {
			value = "deduped"
		}
		s.recResult(history.Commit, h, value, err)
		return err
	})
	var ce *pipeline.IdempotencyConflictError
	switch {
	case err == nil:
	case errors.Is(err, adapters.ErrStaleToken):
		return OutcomeStale, ""
	case errors.Is(err, pipeline.ErrAlreadyTerminal):
		return OutcomeTerminal, ""
	case errors.As(err, &ce):
		return OutcomePermanent, pipeline.ReasonIdempotencyConflict
	default:
		return OutcomeUnavailable, ""
	}
	s.Hooks.At(ctx, pipeline.AfterCommitBeforeAck, j.ID)
	if deduped {
		return OutcomeDeduped, ""
	}
	return OutcomeApplied, ""
}

// cancel records the job's cancellation in the store: its deadline passed.
func (s *Server) cancel(ctx context.Context, h held) (string, string) {
	if s.Sabotage.CancelToDLQ {
		return OutcomePermanent, pipeline.ReasonPermanent
	}
	err := s.try(ctx, func(ctx context.Context) error {
		s.rec(history.Invoke, history.Cancel, h, "", nil)
		err := s.call(ctx, func(ctx context.Context) error { return s.Store.Cancel(ctx, h.d.Job.ID) })
		s.recResult(history.Cancel, h, "", err)
		return err
	})
	switch {
	case err == nil:
		return OutcomeCancelled, ""
	case errors.Is(err, pipeline.ErrAlreadyCommitted):
		return OutcomeDeduped, ""
	case errors.Is(err, pipeline.ErrAlreadyTerminal):
		return OutcomeTerminal, ""
	}
	return OutcomeUnavailable, ""
}

// finish records the library's ack, nack or dead letter, phase by phase. A
// nack's invoke records first that the delivery spent its attempt (settle),
// a dead letter's invoke writes the dead-letter record in the store, before
// the library moves the job.
func (s *Server) finish(ctx context.Context, m Msg, h held) (Msg, error) {
	f := map[string]history.F{TypeAck: history.Ack, TypeNack: history.Nack, TypeDeadLetter: history.DeadLetter}[m.Type]
	value := ""
	switch m.Type {
	case TypeNack:
		value = (time.Duration(m.DelayMS) * time.Millisecond).String()
	case TypeDeadLetter:
		s.mu.Lock()
		if m.Phase == PhaseInvoke {
			s.reasons[h.d.Job.ID] = m.Reason
		} else if m.Reason == "" {
			m.Reason = s.reasons[h.d.Job.ID]
		}
		s.mu.Unlock()
		value = m.Reason
		if !contains(pipeline.ReasonCodes, m.Reason) {
			value = pipeline.ReasonPermanent
		}
		if s.Sabotage.RawErrorInDLQ && m.Reason != "" {
			value = m.Reason
		}
	}
	switch m.Phase {
	case PhaseInvoke:
		switch m.Type {
		case TypeNack:
			how, spent := "spent", m.Reason != "released"
			if !spent {
				how = "released"
			}
			err := s.try(ctx, func(ctx context.Context) error {
				s.rec(history.Invoke, history.Settle, h, how, nil)
				err := s.call(ctx, func(ctx context.Context) error { _, err := s.Store.End(ctx, h.d.Job.ID, h.id, spent); return err })
				s.recResult(history.Settle, h, how, err)
				return err
			})
			if err != nil {
				return Msg{}, err
			}
		case TypeDeadLetter:
			s.rec(history.Invoke, f, h, value, nil)
			rec := pipeline.DeadLetterRecord{JobID: h.d.Job.ID, Tenant: h.d.Job.Tenant, Key: h.key, Reason: value, Attempt: h.d.Attempt, At: s.Env.Now()}
			err := s.try(ctx, func(ctx context.Context) error {
				return s.call(ctx, func(ctx context.Context) error { return s.Store.DeadLetter(ctx, rec) })
			})
			switch {
			case errors.Is(err, pipeline.ErrAlreadyCommitted), errors.Is(err, pipeline.ErrAlreadyTerminal):
				// Finished before: the worker completes the job instead.
				s.recResult(f, h, value, err)
				return Msg{Outcome: OutcomeTerminal}, nil
			case err != nil:
				s.recResult(f, h, value, err)
				return Msg{}, err
			}
			return Msg{}, nil
		}
		s.rec(history.Invoke, f, h, value, nil)
	case PhaseOK:
		s.rec(history.OK, f, h, value, nil)
	case PhaseFail:
		err := m.Error.Err()
		if err == nil {
			err = errWorker
		}
		s.recResult(f, h, value, err)
	default:
		return Msg{}, fmt.Errorf("%w: %s phase %q", ErrProtocol, m.Type, m.Phase)
	}
	return Msg{}, nil
}
