package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors of the store and the pipeline.
var (
	ErrOperatorRequired = errors.New("reprocess needs an operator id")
	ErrNotDeadLettered  = errors.New("job is not dead-lettered")
	ErrCancelledJob     = errors.New("a cancelled job has no reprocess path")
	// ErrAlreadyCommitted: the job's result is committed, so it cannot also be
	// dead-lettered or cancelled. The store keeps one terminal outcome per job.
	ErrAlreadyCommitted = errors.New("job already committed")
	// ErrAlreadyTerminal: the job is dead-lettered or cancelled, so it can take no
	// other terminal outcome. The caller acks: the job is finished.
	ErrAlreadyTerminal = errors.New("job already dead-lettered or cancelled")
)

// IdempotencyConflictError: the key exists with a different payload hash. Nothing
// was written.
type IdempotencyConflictError struct {
	Key          string
	ExistingHash string
	NewHash      string
}

func (e *IdempotencyConflictError) Error() string {
	return fmt.Sprintf("idempotency conflict on %s: stored payload %s, new payload %s", e.Key, short(e.ExistingHash), short(e.NewHash))
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// CommitRequest is one result and its outbox event, written in one transaction.
type CommitRequest struct {
	JobID       string
	Tenant      string
	Key         string
	Token       uint64
	PayloadHash string
	Result      string
	EventID     string
	// BeforeCommit, if set, runs after the writes and before they are committed:
	// the mid_commit crash point. A crash there must leave neither row.
	BeforeCommit func(ctx context.Context)
}

// Reason codes: the only text a dead-letter record may hold.
const (
	ReasonPermanent           = "permanent_error"
	ReasonMaxAttempts         = "max_attempts_exceeded"
	ReasonIdempotencyConflict = "idempotency_conflict"
	ReasonInvalidJob          = "invalid_job"
	// ReasonRejectedEvent: the consumer rejected an outbox event on a healthy
	// channel more often than the relay's budget.
	ReasonRejectedEvent = "rejected_event"
	// ReasonAgeExceeded: infrastructure failures (broker or store unavailable,
	// unknown outcomes) held the job up past its age budget (see AgeBudgetOf).
	ReasonAgeExceeded = "age_budget_exceeded"
)

// ReasonCodes lists every valid dead-letter reason.
var ReasonCodes = []string{ReasonPermanent, ReasonMaxAttempts, ReasonIdempotencyConflict, ReasonInvalidJob, ReasonRejectedEvent, ReasonAgeExceeded}

// Ledger is what the store knows of a job's deliveries: the attempt budget
// counts what the job did, not what the infrastructure did to it. A delivery is
// named by the worker that reached it (process/sequence), so a call retried
// after an unknown outcome counts once.
type Ledger struct {
	// Seen counts the deliveries a worker reached (Begin) before this one.
	Seen int `json:"seen"`
	// Ended counts those whose end the worker recorded (End): spent by the job's
	// own failure, or given back after an infrastructure failure. A seen delivery
	// that never ended, and never committed, died with its worker: a crash or a
	// kill, which the pipeline cannot tell from a poison job.
	Ended int `json:"ended"`
	// Spent counts deliveries whose extract failed by the job's own fault.
	Spent int `json:"spent"`
	// Crashed counts the broker attempts before this one (Begin's attempt) in
	// which every recorded delivery of the job stayed unended and a holder is
	// known dead: a later incarnation of its worker's slot has started since
	// (Starts). An attempt with one ended delivery is not counted, so a second
	// copy of a job sent twice, running now, is never taken for a crash of
	// this copy (it was: a healthy job dead-lettered, found by explore). Copies
	// can hide a crash this way; the broker's delivery cap still bounds the
	// job.
	Crashed int `json:"crashed,omitempty"`
	// Unsure counts the attempts Crashed would count but for the proof: their
	// holders may have died and not restarted yet, or be alive and stalled —
	// a commit waiting on a lost reply while its lease lapsed, a paused
	// process. Taking those for crashes dead-lettered healthy jobs (found by
	// explore on Redis: three live holders, each stalled past its lease).
	Unsure    int  `json:"unsure,omitempty"`
	Committed bool `json:"committed,omitempty"`
	// Terminal: dead-lettered or cancelled.
	Terminal bool `json:"terminal,omitempty"`
}

// Starts is an optional ability of a Store: it learns when a worker process
// starts, which proves the earlier incarnations of its slot dead. Begin then
// tells a delivery whose holder died (Ledger.Crashed) from one whose holder
// may be alive (Ledger.Unsure), and a worker runs no job while a holder of it
// may be alive. A store without it, or workers whose supervisor does not name
// incarnations, prove no death: a job whose holder died is then given back
// unrun until the broker's delivery cap dead-letters it.
type Starts interface {
	// Started records that process (a name Incarnation splits) runs.
	// Idempotent.
	Started(ctx context.Context, process string) error
}

// Incarnation splits a worker process's name into its slot and incarnation:
// "w2.3" is slot "w2" restarted for the third time, "w2" its first
// incarnation (0). A supervisor that restarts a worker names the new process
// with a higher incarnation (the runner and the embedded target do), so a
// later incarnation's start proves the earlier ones dead.
func Incarnation(process string) (slot string, inc int) {
	if i := strings.LastIndexByte(process, '.'); i > 0 {
		if n, err := strconv.Atoi(process[i+1:]); err == nil && n >= 0 {
			return process[:i], n
		}
	}
	return process, 0
}

// DeliveryProcess is the process part of a delivery's name in the ledger
// (process/sequence).
func DeliveryProcess(delivery string) string {
	if i := strings.LastIndexByte(delivery, '/'); i >= 0 {
		return delivery[:i]
	}
	return delivery
}

// Unended is the number of seen deliveries that neither ended nor committed:
// the deliveries the worker died in.
func (l Ledger) Unended() int { return max(l.Seen-l.Ended, 0) }

// DeadLetterRecord is what the DLQ keeps of a job: identity and a reason code,
// never payload or error text.
type DeadLetterRecord struct {
	JobID       string    `json:"job_id"`
	Tenant      string    `json:"tenant"`
	Key         string    `json:"key"`
	Reason      string    `json:"reason"`
	Attempt     int       `json:"attempt"`
	At          time.Time `json:"at"`
	Reprocessed bool      `json:"reprocessed"`
}

// Audit links a reprocessed job to its successor and the operator who asked.
type Audit struct {
	OldJob   string    `json:"old_job"`
	NewJob   string    `json:"new_job"`
	Operator string    `json:"operator"`
	At       time.Time `json:"at"`
}

// Result is one committed result row.
type Result struct {
	Key     string `json:"key"`
	JobID   string `json:"job_id"`
	Tenant  string `json:"tenant"`
	Hash    string `json:"hash"`
	Token   uint64 `json:"token"`
	EventID string `json:"event_id"`
}

// Event is one outbox row. Body is what the consumer receives (the result).
type Event struct {
	ID          string    `json:"id"`
	Key         string    `json:"key"`
	JobID       string    `json:"job_id"`
	Body        string    `json:"body,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	Published   bool      `json:"published"`
	PublishedAt time.Time `json:"published_at,omitzero"`
	// Dead: the consumer rejected the event on a healthy channel beyond its
	// budget; the relay parked it for good (DeadReason is a reason code).
	Dead       bool   `json:"dead,omitempty"`
	DeadReason string `json:"dead_reason,omitempty"`
}

// State is the store's content at the end of a run, in a deterministic order.
type State struct {
	Results     []Result           `json:"results"`
	Events      []Event            `json:"events"`
	Applied     map[string]int     `json:"applied"` // event id → times the consumer's dedupe table saw it
	DeadLetters []DeadLetterRecord `json:"dead_letters"`
	Cancelled   []string           `json:"cancelled"`
	Audits      []Audit            `json:"audits"`
}

// DefaultOutboxRetention is how long published outbox rows are kept before
// PurgePublished removes them: long enough for the consumer's dedupe window.
const DefaultOutboxRetention = 7 * 24 * time.Hour

// Store is the transactional effect store. Implementations are safe for
// concurrent use; every method is idempotent where its doc says so, so that a
// caller may retry after ErrAmbiguous.
type Store interface {
	// Fence raises the job's highest fencing token to token; ErrStaleToken (from
	// package adapters) if a higher one was seen. Idempotent.
	Fence(ctx context.Context, jobID string, token uint64) error
	// Begin fences token as Fence does and records that a worker reached the
	// delivery named delivery, the broker's attempt-th delivery of its message
	// (0: the broker does not count), in one transaction, and returns the job's
	// ledger without this delivery. A stale token records nothing. Idempotent
	// per delivery.
	Begin(ctx context.Context, jobID string, token uint64, delivery string, attempt int) (Ledger, error)
	// End records that delivery ended without a terminal outcome: spent by the
	// job's own failure, or (spent false) given back after an infrastructure
	// failure. It returns the ledger with the delivery. Idempotent per delivery:
	// the first end counts.
	End(ctx context.Context, jobID, delivery string, spent bool) (Ledger, error)
	// CommitResultWithEvent writes result and event atomically. Same key and hash:
	// deduped=true, nothing written. Same key, other hash: *IdempotencyConflictError.
	// A token below the job's highest: ErrStaleToken. A job already dead-lettered
	// or cancelled: ErrAlreadyTerminal.
	CommitResultWithEvent(ctx context.Context, req CommitRequest) (deduped bool, err error)
	// DeadLetter records rec; idempotent per job id. ErrAlreadyCommitted if a
	// commit of the job (new or deduped) succeeded, ErrAlreadyTerminal if it was
	// cancelled: the caller then acks.
	DeadLetter(ctx context.Context, rec DeadLetterRecord) error
	// Cancel records a terminal cancellation; idempotent; ErrAlreadyCommitted as
	// for DeadLetter, ErrAlreadyTerminal if it was dead-lettered.
	Cancel(ctx context.Context, jobID string) error
	// RecordReprocess marks the dead job reprocessed and writes the audit entry, in
	// one transaction. ErrNotDeadLettered, ErrCancelledJob. Idempotent per old job:
	// a repeat returns the first audit.
	RecordReprocess(ctx context.Context, a Audit) (Audit, error)
	// PendingEvents returns unpublished events in creation order.
	PendingEvents(ctx context.Context, limit int) ([]Event, error)
	// MarkPublished is idempotent.
	MarkPublished(ctx context.Context, ids []string, at time.Time) error
	// DeadLetterEvent parks an event for good with a reason code: PendingEvents
	// no longer returns it. Idempotent.
	DeadLetterEvent(ctx context.Context, id, reason string) error
	// PurgePublished removes events published before cutoff; it returns how many.
	PurgePublished(ctx context.Context, cutoff time.Time) (int, error)
	// ApplyEvent records the consumer's application of an event id, named by,
	// and reports whether the first application of the event was by: a call
	// repeated with the same by after an unknown outcome gets the answer the
	// first call would have had.
	ApplyEvent(ctx context.Context, eventID, by string) (first bool, err error)
	// Snapshot reads the whole state.
	Snapshot(ctx context.Context) (State, error)
	Close() error
}

// DualWriter is the naive non-transactional write path, kept only as the negative
// control of outbox.atomic: a result without its event is possible through it.
type DualWriter interface {
	WriteResult(ctx context.Context, req CommitRequest) (deduped bool, err error)
	WriteEvent(ctx context.Context, req CommitRequest) error
}
