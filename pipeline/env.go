// Package pipeline is the reference durable pipeline the contracts drive: lease →
// fence → deadline check → extract (with heartbeat) → commit result and outbox
// event in one transaction → ack; its retry policy; the outbox relay; the
// deduping consumer; audited reprocessing of dead jobs; the effect store.
package pipeline

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/history"
)

// Env is what a pipeline process needs from its surroundings: its name, where it
// records, and its clock. The embedded target hands in a virtual clock.
type Env struct {
	Process string
	Rec     history.Recorder
	Now     func() time.Time
	Sleep   func(ctx context.Context, d time.Duration) error
	seq     atomic.Int64
}

// Record appends one operation stamped with the process, its sequence and now.
func (e *Env) Record(op history.Op) {
	op.T = e.Now().UnixNano()
	op.Process = e.Process
	op.Seq = e.seq.Add(1)
	e.Rec.Record(op)
}

func (e *Env) op(t history.Type, f history.F, d adapters.Delivery, key string) history.Op {
	return history.Op{Type: t, F: f, Job: d.Job.ID, Key: key, Token: d.Token, Attempt: d.Attempt}
}

// CrashPoint names a place in the pipeline where a fault plan may kill the process.
type CrashPoint string

const (
	AfterLease             CrashPoint = "after_lease"
	AfterExtract           CrashPoint = "after_extract"
	MidCommit              CrashPoint = "mid_commit"
	AfterCommitBeforeAck   CrashPoint = "after_commit_before_ack"
	AfterPublishBeforeMark CrashPoint = "after_publish_before_mark"
	// Poison is where a job flagged Crash kills its worker, on every delivery.
	Poison CrashPoint = "poison"
)

// CrashPoints lists the named crash points of the worker and the relay.
var CrashPoints = []CrashPoint{AfterLease, AfterExtract, MidCommit, AfterCommitBeforeAck, AfterPublishBeforeMark}

// Hooks are called at every crash point. At may not return: the embedded target
// ends the simulated process there, a real worker SIGKILLs itself. For Poison it
// must not return.
type Hooks interface {
	At(ctx context.Context, p CrashPoint, jobID string)
}

// Sabotage switches on deliberately broken behaviour: each flag is the negative
// control of one contract and is set only by the self-test.
type Sabotage struct {
	AckBeforeCommit  bool `json:"ack_before_commit,omitempty"`
	NoHeartbeat      bool `json:"no_heartbeat,omitempty"`
	DualWrite        bool `json:"dual_write,omitempty"`
	ConsumerNoDedupe bool `json:"consumer_no_dedupe,omitempty"`
	UnboundedRetry   bool `json:"unbounded_retry,omitempty"`
	RawErrorInDLQ    bool `json:"raw_error_in_dlq,omitempty"`
	ReprocessInPlace bool `json:"reprocess_in_place,omitempty"`
	IgnoreDeadline   bool `json:"ignore_deadline,omitempty"`
	CancelToDLQ      bool `json:"cancel_to_dlq,omitempty"`
	TimeoutAsFailure bool `json:"timeout_as_failure,omitempty"`
	KeyWithoutTenant bool `json:"key_without_tenant,omitempty"`
	// NaiveBreaker: the relay's breaker cannot tell a dead channel from a
	// poison event, and opens on either.
	NaiveBreaker bool `json:"naive_breaker,omitempty"`
	// The rest are armed around a worker's broker and store (sabotage.go) or
	// in the consumer and policy, each the negative control of one property.
	// KeyPerDelivery: the idempotency key includes the delivery's token, so a
	// redelivery commits a second result.
	KeyPerDelivery bool `json:"key_per_delivery,omitempty"`
	// DropFirstAck: the ack of a job's first delivery never reaches the broker
	// though it is reported done (a handle the broker silently ignores).
	DropFirstAck bool `json:"drop_first_ack,omitempty"`
	// OneExtraAttempt and OneAttemptShort put the attempt budget off by one.
	OneExtraAttempt bool `json:"one_extra_attempt,omitempty"`
	OneAttemptShort bool `json:"one_attempt_short,omitempty"`
	// DeadlineSlack: a deadline counts as passed only 5 s after it.
	DeadlineSlack bool `json:"deadline_slack,omitempty"`
	// RetryPermanent: the policy retries permanent errors like transient ones.
	RetryPermanent bool `json:"retry_permanent,omitempty"`
	// TimeoutAsUnavailable: the store client reports a commit whose outcome is
	// unknown as a definite failure.
	TimeoutAsUnavailable bool `json:"timeout_as_unavailable,omitempty"`
	// CommitNotDurable: the store client acknowledges commits it never writes.
	CommitNotDurable bool `json:"commit_not_durable,omitempty"`
	// DropEvents: the consumer acknowledges events without applying them.
	DropEvents bool `json:"drop_events,omitempty"`
}

// InWorkerOnly reports whether s breaks the reference pipeline's worker
// itself — its loop, its broker calls, its retry policy or its store client —
// which a worker of one's own (the worker protocol) replaces: on such a
// target the sabotage would break nothing. The worker protocol's server
// (internal/driver) keeps the key, deadline and dead-letter sabotages; the
// relay, the consumer, the operator and the store are durachk's either way.
func (s Sabotage) InWorkerOnly() bool {
	return s.AckBeforeCommit || s.NoHeartbeat || s.DualWrite || s.UnboundedRetry || s.TimeoutAsFailure ||
		s.KeyPerDelivery || s.DropFirstAck || s.OneExtraAttempt || s.OneAttemptShort || s.DeadlineSlack ||
		s.RetryPermanent || s.TimeoutAsUnavailable || s.CommitNotDurable
}

// RecordType is the record type of a completed call: ok, info when its outcome is
// unknown (the reply was lost or timed out), fail when it definitely did not
// happen.
func RecordType(err error) history.Type {
	switch {
	case err == nil:
		return history.OK
	case ambiguous(err):
		return history.Info
	}
	return history.Fail
}
