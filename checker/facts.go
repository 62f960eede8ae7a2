package checker

import (
	"fmt"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/pipeline"
)

// FactKind names a kind of final-state fact.
type FactKind string

// The kinds of final-state facts a witness may rest on.
const (
	FactResult     FactKind = "store_result"      // the store holds a result
	FactEvent      FactKind = "store_event"       // the store holds an outbox event
	FactDeadLetter FactKind = "store_dead_letter" // the store holds a dead-letter record
	FactCancelled  FactKind = "store_cancelled"   // the store records a cancellation
	FactAudit      FactKind = "audit_entry"       // the store holds a reprocess audit entry
	FactApplied    FactKind = "event_applied"     // the consumer's dedupe table saw an event n times
	FactQueued     FactKind = "still_queued"      // the broker still holds the job, visible
	FactInFlight   FactKind = "in_flight"         // the broker still holds the job, leased
	FactBrokerDLQ  FactKind = "broker_dlq"        // the job is in the broker's dead-letter queue
	FactBrokerAct  FactKind = "broker_action"     // the broker did something to the job on its own
	FactUnnamed    FactKind = "broker_unnamed"    // the broker holds messages it cannot name
	FactDrained    FactKind = "drained"           // the run drained
	// FactAbsent is a negative fact: what was looked for and not found. It
	// adds nothing to a final state rebuilt from facts (absence is its default).
	FactAbsent FactKind = "absent"
)

// Fact is one typed record of the final state that a witness rests on.
type Fact struct {
	Kind   FactKind `json:"kind"`
	Job    string   `json:"job,omitempty"`
	Key    string   `json:"key,omitempty"`
	Tenant string   `json:"tenant,omitempty"`
	Event  string   `json:"event,omitempty"`
	Hash   string   `json:"hash,omitempty"`
	Token  uint64   `json:"token,omitempty"`
	// Mover of a job in a dead-letter queue: "broker" or "pipeline".
	Mover string `json:"mover,omitempty"`
	// Action the broker took on its own (adapters.Action*).
	Action string `json:"action,omitempty"`
	// Reason code of a dead-letter record, or the broker's own reason.
	Reason string `json:"reason,omitempty"`
	// Count: the broker's delivery count when it acted, a dead-letter
	// record's attempt, applications of an event, or unnamed messages.
	Count int `json:"count,omitempty"`
	// NewJob and Operator of an audit entry.
	NewJob   string `json:"new_job,omitempty"`
	Operator string `json:"operator,omitempty"`
	// Dead: an outbox event parked for good.
	Dead bool      `json:"dead,omitempty"`
	At   time.Time `json:"at,omitzero"`
	// Where an absent thing was looked for.
	Where string `json:"where,omitempty"`
}

func (f Fact) String() string {
	switch f.Kind {
	case FactResult:
		s := fmt.Sprintf("store: result of %s under %s (tenant %s, token %d", f.Job, f.Key, f.Tenant, f.Token)
		if f.Event != "" {
			s += ", event " + f.Event
		}
		return s + ")"
	case FactEvent:
		s := fmt.Sprintf("store: outbox event %s of %s under %s", f.Event, f.Job, f.Key)
		if f.Dead {
			s += ", parked for good (" + f.Reason + ")"
		}
		return s
	case FactDeadLetter:
		return fmt.Sprintf("store: dead-letter record of %s, reason %q, attempt %d", f.Job, f.Reason, f.Count)
	case FactCancelled:
		return fmt.Sprintf("store: %s cancelled", f.Job)
	case FactAudit:
		op := f.Operator
		if op == "" {
			op = "no operator"
		}
		return fmt.Sprintf("store: audit entry %s → %s by %s", f.Job, f.NewJob, op)
	case FactApplied:
		return fmt.Sprintf("consumer: event %s seen %d times by its dedupe table", f.Event, f.Count)
	case FactQueued:
		return fmt.Sprintf("broker: %s still queued", f.Job)
	case FactInFlight:
		return fmt.Sprintf("broker: %s still in flight", f.Job)
	case FactBrokerDLQ:
		s := fmt.Sprintf("broker: %s in the dead-letter queue, moved by the %s", f.Job, f.Mover)
		if f.Reason != "" {
			s += " (" + f.Reason + ")"
		}
		return s
	case FactBrokerAct:
		who := f.Job
		if who == "" {
			who = fmt.Sprintf("%d messages it cannot name", max(f.Count, 1))
		}
		s := fmt.Sprintf("broker: %s %s on its own", f.Action, who)
		switch {
		case f.Reason != "" && f.Job != "" && f.Count > 0:
			s += fmt.Sprintf(" (%s, after %s)", f.Reason, plural(f.Count, "delivery", "deliveries"))
		case f.Reason != "":
			s += " (" + f.Reason + ")"
		}
		return s
	case FactUnnamed:
		return fmt.Sprintf("broker: holds %d messages it cannot name", f.Count)
	case FactDrained:
		return "the run drained: nothing was left to do"
	case FactAbsent:
		who := f.Job
		if who == "" {
			who = f.Key
		}
		if f.Event != "" {
			who = "event " + f.Event
		}
		return fmt.Sprintf("%s: absent from %s", who, f.Where)
	}
	return fmt.Sprintf("%s %s", f.Kind, f.Job)
}

// FinalFromFacts rebuilds the part of a final state that facts describe: a
// witness's facts, turned back into a Final, let the checker re-check the
// witness alone.
func FinalFromFacts(facts []Fact) Final {
	f := Final{Store: pipeline.State{Applied: map[string]int{}}}
	for _, x := range facts {
		switch x.Kind {
		case FactResult:
			f.Store.Results = append(f.Store.Results, pipeline.Result{Key: x.Key, JobID: x.Job, Tenant: x.Tenant, Hash: x.Hash, Token: x.Token, EventID: x.Event})
		case FactEvent:
			f.Store.Events = append(f.Store.Events, pipeline.Event{ID: x.Event, Key: x.Key, JobID: x.Job, Dead: x.Dead, DeadReason: x.Reason, Published: true})
		case FactDeadLetter:
			f.Store.DeadLetters = append(f.Store.DeadLetters, pipeline.DeadLetterRecord{JobID: x.Job, Tenant: x.Tenant, Key: x.Key, Reason: x.Reason, Attempt: x.Count, At: x.At})
		case FactCancelled:
			f.Store.Cancelled = append(f.Store.Cancelled, x.Job)
		case FactAudit:
			f.Store.Audits = append(f.Store.Audits, pipeline.Audit{OldJob: x.Job, NewJob: x.NewJob, Operator: x.Operator, At: x.At})
		case FactApplied:
			f.Store.Applied[x.Event] = x.Count
		case FactQueued:
			f.Broker.Queued = append(f.Broker.Queued, x.Job)
		case FactInFlight:
			f.Broker.InFlight = append(f.Broker.InFlight, x.Job)
		case FactBrokerDLQ:
			f.Broker.DeadLettered = append(f.Broker.DeadLettered, x.Job)
		case FactBrokerAct:
			f.Broker.Moved = append(f.Broker.Moved, adapters.BrokerAction{Job: x.Job, Action: x.Action, Reason: x.Reason, Deliveries: deliveriesOf(x), Count: countOf(x), At: x.At})
		case FactUnnamed:
			f.Broker.Unnamed += x.Count
		case FactDrained:
			f.Drained = true
		}
	}
	return f
}

// A broker action's Count is its delivery count when it names a job, else the
// number of unnamed messages.
func deliveriesOf(x Fact) int {
	if x.Job != "" {
		return x.Count
	}
	return 0
}

func countOf(x Fact) int {
	if x.Job == "" {
		return x.Count
	}
	return 0
}

func resultFact(r pipeline.Result) Fact {
	return Fact{Kind: FactResult, Job: r.JobID, Key: r.Key, Tenant: r.Tenant, Hash: r.Hash, Token: r.Token, Event: r.EventID}
}

func eventFact(e pipeline.Event) Fact {
	return Fact{Kind: FactEvent, Job: e.JobID, Key: e.Key, Event: e.ID, Dead: e.Dead, Reason: e.DeadReason}
}

func deadLetterFact(d pipeline.DeadLetterRecord) Fact {
	return Fact{Kind: FactDeadLetter, Job: d.JobID, Key: d.Key, Tenant: d.Tenant, Reason: d.Reason, Count: d.Attempt, At: d.At}
}

func actionFact(a adapters.BrokerAction) Fact {
	n := a.Deliveries
	if a.Job == "" {
		n = max(a.Count, 1)
	}
	return Fact{Kind: FactBrokerAct, Job: a.Job, Action: a.Action, Reason: a.Reason, Count: n, At: a.At}
}
