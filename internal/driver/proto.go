// Package driver is durachk's side of the worker protocol
// (docs/worker-protocol.md): it starts a worker of a team's own — a job
// library's worker loop, or a consumer the team wrote — from a command, hands
// it its configuration and speaks JSON lines with it. In the admin role the
// worker is a queue (Queue: enqueue, inspect, drop) for the producer, the
// drain check, the final state and the teardown; in the worker role Serve
// records its reports as the history the checker reads, runs the job's effect
// through durachk's store with the fence, and fires crash points before it
// answers. The store, the history and the checker stay durachk's.
package driver

import (
	"errors"
	"fmt"

	"github.com/durachk/durachk/adapters"
)

// Version is the protocol version durachk speaks.
const Version = 1

// Roles a worker is started in.
const (
	RoleWorker = "worker"
	RoleAdmin  = "admin"
)

// Config is the first line durachk writes to a worker.
type Config struct {
	Type      string            `json:"type"` // "config"
	V         int               `json:"v"`
	Role      string            `json:"role"`
	Process   string            `json:"process"`
	RunID     string            `json:"run_id"`
	Namespace string            `json:"namespace"`
	BrokerURL string            `json:"broker_url"`
	Seed      uint64            `json:"seed"`
	LeaseMS   int64             `json:"lease_ms"`
	PollMS    int64             `json:"poll_ms"`
	Knobs     map[string]string `json:"knobs,omitempty"`
	Sabotage  string            `json:"sabotage,omitempty"`
}

// Caps are the capabilities a worker declares in its hello: an adapter's,
// and whether the library can finish a job as cancelled.
type Caps struct {
	Lease          adapters.Support `json:"lease"`
	LeaseExtension adapters.Support `json:"lease_extension"`
	Token          adapters.Support `json:"token"`
	FencedAck      bool             `json:"fenced_ack"`
	DeliveryCount  adapters.Support `json:"delivery_count"`
	DeadLetter     adapters.Support `json:"dead_letter"`
	DelayedNack    adapters.Support `json:"delayed_nack"`
	Cancel         adapters.Support `json:"cancel"`
	FIFO           bool             `json:"fifo"`
	Durable        bool             `json:"durable"`
	Notes          []string         `json:"notes,omitempty"`
}

// Hello is the worker's first line.
type Hello struct {
	Type         string   `json:"type"` // "hello"
	V            int      `json:"v"`
	Driver       string   `json:"driver"`
	Library      string   `json:"library"`
	Version      string   `json:"version"`
	Capabilities Caps     `json:"capabilities"`
	Sabotages    []string `json:"sabotages,omitempty"`
	Error        string   `json:"error,omitempty"`
}

// Adapter maps the declared capabilities onto an adapter's (broker names the
// library, for reports).
func (h Hello) Adapter() adapters.Capabilities {
	c := h.Capabilities
	notes := append([]string{fmt.Sprintf("worker protocol v%d: %s (%s %s)", h.V, h.Driver, h.Library, h.Version)}, c.Notes...)
	return adapters.Capabilities{Broker: h.Library, Lease: orNone(c.Lease), LeaseExtension: orNone(c.LeaseExtension),
		Token: orNone(c.Token), FencedAck: c.FencedAck, DeliveryCount: orNone(c.DeliveryCount), DeadLetter: orNone(c.DeadLetter),
		DelayedNack: orNone(c.DelayedNack), Cancel: orNone(c.Cancel), FIFO: c.FIFO, Durable: c.Durable, Notes: notes}
}

func orNone(s adapters.Support) adapters.Support {
	if s == "" {
		return adapters.None
	}
	return s
}

// Error is the error of an answer, or of a report.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

// Error codes of the protocol.
const (
	CodeUnavailable = "unavailable"
	CodeAmbiguous   = "ambiguous"
	CodeStale       = "stale_token"
	CodeLeaseLost   = "lease_lost"
	CodeUnsupported = "unsupported"
	CodeBadRequest  = "bad_request"
	CodeOther       = "other"
)

// Err maps a protocol error onto the adapters' sentinels, so that callers
// branch on them as on any adapter's.
func (e *Error) Err() error {
	if e == nil {
		return nil
	}
	var base error
	switch e.Code {
	case CodeUnavailable:
		base = adapters.ErrUnavailable
	case CodeAmbiguous:
		base = adapters.ErrAmbiguous
	case CodeStale:
		base = adapters.ErrStaleToken
	case CodeLeaseLost:
		base = adapters.ErrLeaseLost
	case CodeUnsupported:
		base = adapters.ErrUnsupported
	default:
		base = errWorker
	}
	return fmt.Errorf("%w: %s", base, e.Message)
}

// codeOf is the protocol code of err.
func codeOf(err error) string {
	switch {
	case errors.Is(err, adapters.ErrUnavailable):
		return CodeUnavailable
	case errors.Is(err, adapters.ErrAmbiguous):
		return CodeAmbiguous
	case errors.Is(err, adapters.ErrStaleToken):
		return CodeStale
	case errors.Is(err, adapters.ErrLeaseLost):
		return CodeLeaseLost
	}
	return CodeOther
}

var errWorker = errors.New("worker error")

// ErrProtocol marks a worker that does not speak the protocol: no hello, a
// version durachk does not speak, a line that is no message.
var ErrProtocol = errors.New("worker protocol")

// Msg is every other line, both ways: requests, reports and answers. Fields
// are set by type (docs/worker-protocol.md).
type Msg struct {
	Type  string `json:"type"`
	ID    int64  `json:"id,omitempty"`
	Re    int64  `json:"re,omitempty"`
	OK    bool   `json:"ok,omitempty"`
	Error *Error `json:"error,omitempty"`

	Job     *adapters.Job `json:"job,omitempty"`
	JobID   string        `json:"job_id,omitempty"`
	Token   uint64        `json:"token,omitempty"`
	Attempt int           `json:"attempt,omitempty"`
	LeaseMS int64         `json:"lease_ms,omitempty"`
	DelayMS int64         `json:"delay_ms,omitempty"`
	Phase   string        `json:"phase,omitempty"`
	Reason  string        `json:"reason,omitempty"`
	Name    string        `json:"name,omitempty"`

	// Answers.
	Outcome   string              `json:"outcome,omitempty"`
	Inventory *adapters.Inventory `json:"inventory,omitempty"`
}

// Report types (worker → durachk) and request types (durachk → admin).
const (
	TypeReceived   = "received"
	TypeEffect     = "effect"
	TypeExtended   = "extended"
	TypeAck        = "ack"
	TypeNack       = "nack"
	TypeDeadLetter = "dead_letter"
	TypePoint      = "point"
	TypeEnqueue    = "enqueue"
	TypeInspect    = "inspect"
	TypeDrop       = "drop"
	TypeAnswer     = "answer"
)

// Phases of ack, nack and dead_letter.
const (
	PhaseInvoke = "invoke"
	PhaseOK     = "ok"
	PhaseFail   = "fail"
)

// Outcomes of an effect.
const (
	OutcomeApplied     = "applied"
	OutcomeDeduped     = "deduped"
	OutcomeTransient   = "transient"
	OutcomePermanent   = "permanent"
	OutcomeCancelled   = "cancelled"
	OutcomeTerminal    = "terminal"
	OutcomeStale       = "stale"
	OutcomeUnavailable = "unavailable"
)

// MaxLine bounds one line of the protocol.
const MaxLine = 1 << 20
