// Package adapters is the port every broker adapter implements: a small required
// Queue interface plus optional abilities found by type assertion, the Capabilities
// an adapter declares from its broker's documented semantics, and the sentinel
// errors callers branch on. It imports the standard library only.
package adapters

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Job is one unit of work as the producer hands it to a broker. It is a value:
// adapters copy it and never mutate the caller's copy.
type Job struct {
	ID          string    `json:"id"`
	Tenant      string    `json:"tenant"`
	DocumentID  string    `json:"document_id"`
	Version     int       `json:"version"`
	Payload     []byte    `json:"payload"`
	CreatedAt   time.Time `json:"created_at"`
	Deadline    time.Time `json:"deadline,omitzero"` // zero: no deadline
	MaxAttempts int       `json:"max_attempts"`
	Group       string    `json:"group,omitempty"` // ordering group; empty: unordered
}

// Delivery is one lease of a job. Token is the fencing token: it grows with every
// delivery of the same job (exactly or approximately, see Capabilities.Token).
// Attempt is the broker's own delivery count (0 where the broker cannot count).
// Receipt is opaque to everyone but the adapter that issued it.
type Delivery struct {
	Job     Job
	Token   uint64
	Attempt int
	Receipt string
}

// Queue is the required port. Implementations must be safe for concurrent use by
// the goroutines of one process. Enqueue is at-least-once: a retried Enqueue may
// create a second message. Ack and Nack are idempotent for the current delivery.
type Queue interface {
	// Enqueue returns nil only once the broker has acknowledged the job.
	Enqueue(ctx context.Context, job Job) error
	// Lease returns the next visible job, leased for the given duration, or ErrNoJob.
	Lease(ctx context.Context, lease time.Duration) (Delivery, error)
	// Ack removes the delivered job; ErrStaleToken or ErrLeaseLost where the broker
	// can tell that the delivery is no longer current.
	Ack(ctx context.Context, d Delivery) error
	// Nack makes the job visible again after delay.
	Nack(ctx context.Context, d Delivery, delay time.Duration) error
	// Capabilities are constant for the life of the Queue.
	Capabilities() Capabilities
	Close() error
}

// Extender is implemented by queues that can extend a live lease (heartbeat).
type Extender interface {
	Extend(ctx context.Context, d Delivery, lease time.Duration) error
}

// DeadLetterer is implemented by queues with a dead-letter destination (native or
// the adapter's own, see Capabilities.DeadLetter). It removes d from the queue.
type DeadLetterer interface {
	DeadLetter(ctx context.Context, d Delivery, reason string) error
}

// Inspector is implemented by queues that can report what is left in them.
type Inspector interface {
	Inspect(ctx context.Context) (Inventory, error)
}

// Inventory is what a queue holds at the end of a run, by job id. A broker that
// can count its messages but not name them (SQS) reports the count as Unnamed.
type Inventory struct {
	Queued       []string `json:"queued"`
	InFlight     []string `json:"in_flight"`
	DeadLettered []string `json:"dead_lettered"`
	Unnamed      int      `json:"unnamed,omitempty"` // messages held whose jobs the broker cannot tell
	// Moved is what the broker did to jobs on its own (expiry, a delivery limit,
	// trimming, overflow, redrive), as far as the broker records it. The
	// pipeline's own dead-lettering is not listed here: it is in the history.
	Moved []BrokerAction `json:"moved_by_broker,omitempty"`
	// Library is every job's state in a job library's own words (the worker
	// protocol's inspect: "completed", "discarded", ...), by job id.
	Library map[string]string `json:"library,omitempty"`
}

// BrokerAction is one thing a broker did to a job without being asked by the
// pipeline. Job is empty when the broker cannot name the job (a stream trimmed
// by length): Count then says how many messages it removed.
type BrokerAction struct {
	Job    string `json:"job,omitempty"`
	Action string `json:"action"` // one of the Action* constants
	// Reason is the broker's own word for it, e.g. RabbitMQ's
	// x-first-death-reason "delivery_limit", SQS "maxReceiveCount 5", Redis
	// "MAXLEN 100".
	Reason string `json:"reason,omitempty"`
	// Deliveries is the broker's delivery count of the message when it acted,
	// where it records one (SQS ApproximateReceiveCount, x-delivery-count).
	Deliveries int `json:"deliveries,omitempty"`
	// Count of unnamed messages (Job empty); 0 means 1.
	Count int `json:"count,omitempty"`
	// At is when the broker acted, where it records it.
	At time.Time `json:"at,omitzero"`
}

// What a broker can do to a job on its own.
const (
	ActionDeadLettered = "dead_lettered" // moved to its dead-letter destination (delivery limit, rejection by policy, redrive)
	ActionExpired      = "expired"       // removed or dead-lettered because its TTL passed
	ActionTrimmed      = "trimmed"       // removed by a length or age cap (stream MAXLEN/MINID)
	ActionDropped      = "dropped"       // removed on overflow (max length with drop-head; a publish refused by reject-publish-dlx), or deleted by someone else
)

// Empty reports whether nothing is queued or in flight.
func (i Inventory) Empty() bool { return len(i.Queued) == 0 && len(i.InFlight) == 0 && i.Unnamed == 0 }

// Support says how a broker provides an ability.
type Support string

const (
	None        Support = "none"        // the broker does not do it
	Native      Support = "native"      // the broker does it, by its documented semantics
	Emulated    Support = "emulated"    // the adapter does it with the broker's primitives
	Approximate Support = "approximate" // the broker does it, by its own word approximately
)

// Capabilities are declared by an adapter from its broker's documented semantics,
// never from what one test run happened to observe. Contracts that need an ability
// the target lacks are skipped with the reason.
type Capabilities struct {
	Broker         string  `json:"broker"`          // e.g. "mem", "postgres", "redis"
	Lease          Support `json:"lease"`           // an unacked lease expires and the job is redelivered
	LeaseExtension Support `json:"lease_extension"` // Extender
	Token          Support `json:"token"`           // fencing token grows per delivery
	FencedAck      bool    `json:"fenced_ack"`      // Ack/Nack with a stale token is rejected
	DeliveryCount  Support `json:"delivery_count"`  // Delivery.Attempt counted by the broker
	DeadLetter     Support `json:"dead_letter"`     // DeadLetterer; Native: the broker moves poison jobs itself
	DelayedNack    Support `json:"delayed_nack"`
	// Cancel: a worker of a job library (the worker protocol) can finish a job
	// as cancelled; empty for brokers, whose jobs the pipeline cancels in its
	// store and acks.
	Cancel         Support  `json:"cancel,omitempty"`
	FIFO           bool     `json:"fifo"`                      // jobs of one Group are delivered in acceptance order, one at a time
	Durable        bool     `json:"durable"`                   // an acknowledged Enqueue survives a broker crash, as configured
	BrokerKill     bool     `json:"broker_kill"`               // the harness can kill and restart this broker instance
	PowerLoss      bool     `json:"power_loss"`                // the harness can cut this broker instance's power, losing what it never fsynced
	NodeFaults     bool     `json:"node_faults,omitempty"`     // a replicated topology the harness faults node by node
	NodePartitions bool     `json:"node_partitions,omitempty"` // ... and whose nodes it can cut apart
	Notes          []string `json:"notes,omitempty"`
}

// Sentinel errors. Adapters wrap them with %w; callers use errors.Is.
var (
	ErrNoJob       = errors.New("no job visible")
	ErrStaleToken  = errors.New("stale fencing token")
	ErrLeaseLost   = errors.New("lease lost")
	ErrUnavailable = errors.New("broker unavailable") // definite: the request was not applied
	ErrAmbiguous   = errors.New("outcome unknown")    // the request may or may not have been applied
	ErrClosed      = errors.New("queue closed")
	ErrUnsupported = errors.New("not supported by this target")
)

// OpError carries the target, operation, job and attempt of a failed call.
type OpError struct {
	Target  string
	Op      string
	JobID   string
	Attempt int
	Err     error
}

// Error names the job and its attempt where the call had one (Enqueue, Lease
// and Inspect have none: "redis inspect: broker unavailable").
func (e *OpError) Error() string {
	switch {
	case e.JobID == "":
		return fmt.Sprintf("%s %s: %v", e.Target, e.Op, e.Err)
	case e.Attempt == 0:
		return fmt.Sprintf("%s %s job %s: %v", e.Target, e.Op, e.JobID, e.Err)
	}
	return fmt.Sprintf("%s %s job %s attempt %d: %v", e.Target, e.Op, e.JobID, e.Attempt, e.Err)
}

func (e *OpError) Unwrap() error { return e.Err }
