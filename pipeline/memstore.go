package pipeline

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/durachk/durachk/adapters"
)

// MemStoreOptions configure the in-memory store. The two flags are deliberately
// broken stores, the negative controls of fencing.zombie and idempotency.conflict;
// never set them otherwise.
type MemStoreOptions struct {
	NoFence       bool // accept stale tokens
	KeyOnlyDedupe bool // dedupe on the key alone, silently reusing a result for another payload
}

// MemStore is the effect store of the embedded target. Safe for concurrent use.
type MemStore struct {
	opts      MemStoreOptions
	mu        sync.Mutex
	fences    map[string]uint64
	results   map[string]*Result
	order     []string // result keys in commit order
	events    []*Event
	eventIdx  map[string]*Event
	applied   map[string]int
	firstBy   map[string]string // event id → the application that applied it first
	dead      map[string]*DeadLetterRecord
	deadOrder []string
	cancelled map[string]bool
	cancelOrd []string
	audits    map[string]Audit
	auditOrd  []string
	pending   int
	// unsettled: events before this index are all published or dead (the
	// relay's scan starts there); oldestPub: the earliest PublishedAt of an
	// event kept (zero: none), so that a purge with nothing to purge is free.
	unsettled int
	oldestPub time.Time
	committed map[string]bool // job ids with a successful commit, new or deduped
	ledger    map[string]map[string]*ledgerEntry
	incs      map[string]int // worker slot → its latest incarnation started
}

// ledgerEntry is one delivery in the ledger: a delivery a worker reached, and how it ended.
type ledgerEntry struct {
	ended, spent bool
	attempt      int
	slot         string // its worker's slot and incarnation (Incarnation)
	inc          int
}

var (
	_ Store      = (*MemStore)(nil)
	_ DualWriter = (*MemStore)(nil)
	_ Starts     = (*MemStore)(nil)
)

// NewMemStore returns an empty store.
func NewMemStore(opts MemStoreOptions) *MemStore {
	return &MemStore{opts: opts, fences: map[string]uint64{}, results: map[string]*Result{},
		eventIdx: map[string]*Event{}, applied: map[string]int{}, firstBy: map[string]string{}, dead: map[string]*DeadLetterRecord{},
		cancelled: map[string]bool{}, audits: map[string]Audit{}, committed: map[string]bool{},
		ledger: map[string]map[string]*ledgerEntry{}, incs: map[string]int{}}
}

func (s *MemStore) Fence(ctx context.Context, jobID string, token uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.fences[jobID] && !s.opts.NoFence {
		return adapters.ErrStaleToken
	}
	if token > s.fences[jobID] {
		s.fences[jobID] = token
	}
	return nil
}

func (s *MemStore) Begin(ctx context.Context, jobID string, token uint64, delivery string, attempt int) (Ledger, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.fences[jobID] && !s.opts.NoFence {
		return Ledger{}, adapters.ErrStaleToken
	}
	if token > s.fences[jobID] {
		s.fences[jobID] = token
	}
	led := s.ledgerOf(jobID, delivery)
	led.Crashed, led.Unsure = s.crashedBefore(jobID, delivery, attempt)
	if s.ledger[jobID] == nil {
		s.ledger[jobID] = map[string]*ledgerEntry{}
	}
	if s.ledger[jobID][delivery] == nil {
		slot, inc := Incarnation(DeliveryProcess(delivery))
		s.ledger[jobID][delivery] = &ledgerEntry{attempt: attempt, slot: slot, inc: inc}
	}
	return led, nil
}

// Started records that process runs (Starts).
func (s *MemStore) Started(ctx context.Context, process string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	slot, inc := Incarnation(process)
	if cur, ok := s.incs[slot]; !ok || inc > cur {
		s.incs[slot] = inc
	}
	return nil
}

func (s *MemStore) End(ctx context.Context, jobID, delivery string, spent bool) (Ledger, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ledger[jobID] == nil {
		s.ledger[jobID] = map[string]*ledgerEntry{}
	}
	d := s.ledger[jobID][delivery]
	if d == nil {
		d = &ledgerEntry{}
		s.ledger[jobID][delivery] = d
	}
	if !d.ended {
		d.ended, d.spent = true, spent
	}
	return s.ledgerOf(jobID, ""), nil
}

// crashedBefore counts the attempts below attempt whose every delivery
// (except delivery) is unended: those with a holder known dead (a later
// incarnation of its slot started) and the others (Ledger.Crashed and
// Unsure); it holds s.mu.
func (s *MemStore) crashedBefore(jobID, except string, attempt int) (crashed, unsure int) {
	ended, dead, unended := map[int]bool{}, map[int]bool{}, map[int]bool{}
	for id, d := range s.ledger[jobID] {
		if id == except || d.attempt < 1 || d.attempt >= attempt {
			continue
		}
		switch {
		case d.ended:
			ended[d.attempt] = true
		default:
			unended[d.attempt] = true
			if inc, ok := s.incs[d.slot]; ok && inc > d.inc {
				dead[d.attempt] = true
			}
		}
	}
	for a := range unended {
		switch {
		case ended[a]:
		case dead[a]:
			crashed++
		default:
			unsure++
		}
	}
	return crashed, unsure
}

// ledgerOf counts the job's ledger without the delivery except; it holds s.mu.
func (s *MemStore) ledgerOf(jobID, except string) Ledger {
	_, dead := s.dead[jobID]
	led := Ledger{Committed: s.committed[jobID], Terminal: dead || s.cancelled[jobID]}
	for id, d := range s.ledger[jobID] {
		if id == except {
			continue
		}
		led.Seen++
		if d.ended {
			led.Ended++
		}
		if d.spent {
			led.Spent++
		}
	}
	return led
}

// check validates req against the fence and the idempotency key; it holds s.mu.
func (s *MemStore) check(req CommitRequest) (deduped bool, err error) {
	if _, dead := s.dead[req.JobID]; dead || s.cancelled[req.JobID] {
		return false, ErrAlreadyTerminal
	}
	if req.Token < s.fences[req.JobID] && !s.opts.NoFence {
		return false, adapters.ErrStaleToken
	}
	if r, ok := s.results[req.Key]; ok {
		if r.Hash != req.PayloadHash && !s.opts.KeyOnlyDedupe {
			return false, &IdempotencyConflictError{Key: req.Key, ExistingHash: r.Hash, NewHash: req.PayloadHash}
		}
		return true, nil
	}
	return false, nil
}

func (s *MemStore) CommitResultWithEvent(ctx context.Context, req CommitRequest) (bool, error) {
	s.mu.Lock()
	deduped, err := s.check(req)
	if err == nil && deduped {
		s.committed[req.JobID] = true
	}
	s.mu.Unlock()
	if err != nil || deduped {
		return deduped, err
	}
	// The writes are staged; a crash in BeforeCommit abandons them.
	if req.BeforeCommit != nil {
		req.BeforeCommit(ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	deduped, err = s.check(req)
	if err == nil {
		s.committed[req.JobID] = true
	}
	if err != nil || deduped {
		return deduped, err
	}
	s.putResult(req)
	s.putEvent(req)
	return false, nil
}

func (s *MemStore) putResult(req CommitRequest) {
	if req.Token > s.fences[req.JobID] {
		s.fences[req.JobID] = req.Token
	}
	s.results[req.Key] = &Result{Key: req.Key, JobID: req.JobID, Tenant: req.Tenant, Hash: req.PayloadHash, Token: req.Token, EventID: req.EventID}
	s.order = append(s.order, req.Key)
}

func (s *MemStore) putEvent(req CommitRequest) {
	if _, ok := s.eventIdx[req.EventID]; ok {
		return
	}
	e := &Event{ID: req.EventID, Key: req.Key, JobID: req.JobID, Body: req.Result}
	s.events = append(s.events, e)
	s.eventIdx[e.ID] = e
	s.pending++
}

// WriteResult is the first half of the naive dual write.
func (s *MemStore) WriteResult(ctx context.Context, req CommitRequest) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	deduped, err := s.check(req)
	if err == nil {
		s.committed[req.JobID] = true
	}
	if err != nil || deduped {
		return deduped, err
	}
	s.putResult(req)
	return false, nil
}

// WriteEvent is the second half of the naive dual write.
func (s *MemStore) WriteEvent(ctx context.Context, req CommitRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putEvent(req)
	return nil
}

func (s *MemStore) DeadLetter(ctx context.Context, rec DeadLetterRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.committed[rec.JobID] {
		return ErrAlreadyCommitted
	}
	if s.cancelled[rec.JobID] {
		return ErrAlreadyTerminal
	}
	if _, ok := s.dead[rec.JobID]; ok {
		return nil
	}
	s.dead[rec.JobID] = &rec
	s.deadOrder = append(s.deadOrder, rec.JobID)
	return nil
}

func (s *MemStore) Cancel(ctx context.Context, jobID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.committed[jobID] {
		return ErrAlreadyCommitted
	}
	if _, dead := s.dead[jobID]; dead {
		return ErrAlreadyTerminal
	}
	if !s.cancelled[jobID] {
		s.cancelled[jobID] = true
		s.cancelOrd = append(s.cancelOrd, jobID)
	}
	return nil
}

func (s *MemStore) RecordReprocess(ctx context.Context, a Audit) (Audit, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.Operator == "" {
		return Audit{}, ErrOperatorRequired
	}
	if s.cancelled[a.OldJob] {
		return Audit{}, ErrCancelledJob
	}
	rec, ok := s.dead[a.OldJob]
	if !ok {
		return Audit{}, ErrNotDeadLettered
	}
	if prev, ok := s.audits[a.OldJob]; ok {
		return prev, nil
	}
	rec.Reprocessed = true
	s.audits[a.OldJob] = a
	s.auditOrd = append(s.auditOrd, a.OldJob)
	return a, nil
}

func (s *MemStore) PendingEvents(ctx context.Context, limit int) ([]Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Event
	for s.unsettled < len(s.events) && (s.events[s.unsettled].Published || s.events[s.unsettled].Dead) {
		s.unsettled++
	}
	for _, e := range s.events[s.unsettled:] {
		if len(out) == limit || s.pending == 0 {
			break
		}
		if !e.Published && !e.Dead {
			out = append(out, *e)
		}
	}
	return out, nil
}

func (s *MemStore) MarkPublished(ctx context.Context, ids []string, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if e, ok := s.eventIdx[id]; ok && !e.Published {
			e.Published, e.PublishedAt = true, at
			s.pending--
			if s.oldestPub.IsZero() || at.Before(s.oldestPub) {
				s.oldestPub = at
			}
		}
	}
	return nil
}

func (s *MemStore) DeadLetterEvent(ctx context.Context, id, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.eventIdx[id]; ok && !e.Published && !e.Dead {
		e.Dead, e.DeadReason = true, reason
		s.pending--
	}
	return nil
}

func (s *MemStore) PurgePublished(ctx context.Context, cutoff time.Time) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.oldestPub.IsZero() || !s.oldestPub.Before(cutoff) {
		return 0, nil // the relay asks on every idle poll: nothing is old enough
	}
	kept, n := s.events[:0], 0
	s.oldestPub = time.Time{}
	for _, e := range s.events {
		if e.Published && e.PublishedAt.Before(cutoff) {
			delete(s.eventIdx, e.ID)
			n++
			continue
		}
		if e.Published && (s.oldestPub.IsZero() || e.PublishedAt.Before(s.oldestPub)) {
			s.oldestPub = e.PublishedAt
		}
		kept = append(kept, e)
	}
	clear(s.events[len(kept):])
	s.events, s.unsettled = kept, 0
	return n, nil
}

func (s *MemStore) ApplyEvent(ctx context.Context, eventID, by string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applied[eventID]++
	if s.applied[eventID] == 1 {
		s.firstBy[eventID] = by
	}
	return s.firstBy[eventID] == by, nil
}

// PendingCount is the number of unpublished events.
func (s *MemStore) PendingCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending
}

func (s *MemStore) Snapshot(ctx context.Context) (State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := State{Applied: map[string]int{}}
	for _, k := range s.order {
		if r, ok := s.results[k]; ok && r.Key == k {
			st.Results = append(st.Results, *r)
		}
	}
	for _, e := range s.events {
		st.Events = append(st.Events, *e)
	}
	for k, v := range s.applied {
		st.Applied[k] = v
	}
	for _, id := range s.deadOrder {
		st.DeadLetters = append(st.DeadLetters, *s.dead[id])
	}
	st.Cancelled = append(st.Cancelled, s.cancelOrd...)
	for _, id := range s.auditOrd {
		st.Audits = append(st.Audits, s.audits[id])
	}
	sort.Strings(st.Cancelled)
	return st, nil
}

func (s *MemStore) Close() error { return nil }
