package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/durachk/durachk/adapters"
)

// Payload is the synthetic work item the contracts enqueue. Its flags make the
// extract step fail transiently, fail permanently, run slowly or crash the worker.
type Payload struct {
	Doc  string `json:"doc"`
	Text string `json:"text,omitempty"`
	// FailTransient fails the first n attempts transiently; -1 fails every attempt.
	FailTransient int           `json:"fail_transient,omitempty"`
	FailPermanent bool          `json:"fail_permanent,omitempty"`
	Slow          time.Duration `json:"slow,omitempty"`
	Crash         bool          `json:"crash,omitempty"` // kill the worker on every delivery (poison)
	// FailBelowVersion fails permanently while the job's operation version is
	// below it: a bug fixed upstream, so that a reprocessed job (version+1) succeeds.
	FailBelowVersion int `json:"fail_below_version,omitempty"`
	// PoisonEvent makes the job succeed with a result its outbox event's
	// consumer rejects on every delivery (a poison event).
	PoisonEvent bool `json:"poison_event,omitempty"`
	// AgeBudget is the job's age budget (see AgeBudgetOf); 0: DefaultAgeBudget.
	AgeBudget time.Duration `json:"age_budget,omitempty"`
}

// DefaultAgeBudget is the age budget of a job that names none. The seed
// scenarios' longest outage ends a minute into the run, their jobs are all sent
// in its first seconds and a run is cut at five minutes: three minutes let every
// outage pass and leave the written policy time to act. On real targets the
// runner scales it with every other scenario time.
const DefaultAgeBudget = 3 * time.Minute

// AgeBudgetOf is how long after its creation infrastructure failures (broker or
// store unavailable, calls whose outcome is unknown, a lease lost through a
// partition) may hold job up before the worker's written policy for it applies:
// past it, a job held up by the infrastructure is dead-lettered with
// ReasonAgeExceeded, or, where that cannot be written or the last outcome is
// unknown, left in the broker for a later delivery (parked); never dropped. A
// job's own failures spend attempts instead, whatever its age.
func AgeBudgetOf(job adapters.Job) time.Duration {
	if p, err := DecodePayload(job.Payload); err == nil && p.AgeBudget > 0 {
		return p.AgeBudget
	}
	return DefaultAgeBudget
}

// PoisonEventPrefix starts the result, and so the event body, of a job flagged
// PoisonEvent; the reference consumer rejects such events.
const PoisonEventPrefix = "poison:"

// Encode returns the payload's bytes.
func (p Payload) Encode() []byte {
	b, _ := json.Marshal(p)
	return b
}

// DecodePayload parses payload bytes.
func DecodePayload(b []byte) (Payload, error) {
	var p Payload
	if err := json.Unmarshal(b, &p); err != nil {
		return p, &PermanentError{Code: ReasonInvalidJob, Err: err}
	}
	return p, nil
}

// Hash is the payload hash stored with a result: same key + same hash dedupes.
func Hash(payload []byte) string {
	h := sha256.Sum256(payload)
	return hex.EncodeToString(h[:])
}

// Error classes. Every error the pipeline meets is one of these three.
type Class int

const (
	Transient Class = iota
	Permanent
	Cancelled
)

func (c Class) String() string { return [...]string{"transient", "permanent", "cancelled"}[c] }

// TransientError may succeed on a later attempt.
type TransientError struct{ Err error }

func (e *TransientError) Error() string { return "transient: " + e.Err.Error() }
func (e *TransientError) Unwrap() error { return e.Err }

// PermanentError will fail on every attempt; Code is its DLQ reason.
type PermanentError struct {
	Code string
	Err  error
}

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// ErrDeadlinePassed classifies as Cancelled.
var ErrDeadlinePassed = errors.New("deadline passed")

// Classify maps any error to its class. Unknown errors are transient: retrying
// within the budget is safe because every effect is idempotent.
func Classify(err error) Class {
	var pe *PermanentError
	var ce *IdempotencyConflictError
	switch {
	case errors.Is(err, ErrDeadlinePassed):
		return Cancelled
	case errors.As(err, &pe), errors.As(err, &ce):
		return Permanent
	}
	return Transient
}

// ReasonFor returns the DLQ reason code of a permanent error.
func ReasonFor(err error) string {
	var pe *PermanentError
	if errors.As(err, &pe) && pe.Code != "" {
		return pe.Code
	}
	var ce *IdempotencyConflictError
	if errors.As(err, &ce) {
		return ReasonIdempotencyConflict
	}
	return ReasonPermanent
}

// Extract is the synthetic, deterministic work: a digest of the document and text.
// attempt is the 1-based attempt number used for FailTransient. Slow and Crash are
// the worker's business (they need its clock and its hooks).
func Extract(p Payload, attempt, version int) (string, error) {
	if p.FailPermanent || version < p.FailBelowVersion {
		return "", &PermanentError{Code: ReasonPermanent, Err: fmt.Errorf("cannot parse document %s: %q", p.Doc, p.Text)}
	}
	if p.FailTransient < 0 || attempt <= p.FailTransient {
		return "", &TransientError{Err: fmt.Errorf("upstream busy for document %s: %q", p.Doc, p.Text)}
	}
	h := sha256.Sum256([]byte(p.Doc + "\x00" + p.Text))
	if p.PoisonEvent {
		return PoisonEventPrefix + hex.EncodeToString(h[:8]), nil
	}
	return "digest:" + hex.EncodeToString(h[:8]), nil
}
