// Package checker judges a recorded history of a durable job pipeline, and the
// final state of its broker and effect store, against a set of named
// properties: no accepted job lost, one terminal outcome per job, no effect
// applied twice, bounded attempts, fencing, deadlines, dead-letter hygiene,
// ordering and more. It stands apart from the runner that records histories:
// any pipeline that writes the documented format (docs/checker.md) can be
// judged, from Go (New, Observe, Finish; or Check) or with `durachk check`.
//
// Every violation carries its witness: the few history operations and typed
// final-state facts its property rests on, and "because" lines that prove it
// from those alone. Re-checking the witness alone raises the same property.
//
// Memory grows with jobs, not operations: per job the checker keeps a handful
// of operations (those a witness may need), so a history can stream from disk.
package checker

import (
	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/pipeline"
)

// Property names a checked invariant; every violation carries one. The names
// are stable: reports and CI baselines use them.
type Property string

// The properties, in the order docs/checker.md lists them (see Properties for
// each one's claim, detection and witness).
const (
	Lost                 Property = "lost"
	MovedByBroker        Property = "moved_by_broker"
	MultipleTerminal     Property = "multiple_terminal"
	DuplicateEffect      Property = "duplicate_effect"
	DuplicateApply       Property = "duplicate_apply"
	UnexplainedDuplicate Property = "unexplained_duplicate"
	Preempted            Property = "preempted"
	OverBudget           Property = "attempts_over_budget"
	HealthyDeadLettered  Property = "healthy_dead_lettered"
	PermanentRetried     Property = "permanent_retried"
	AfterDeadline        Property = "work_after_deadline"
	CancelledToDLQ       Property = "cancelled_dead_lettered"
	CancelledReprocessed Property = "cancelled_reprocessed"
	StaleCommit          Property = "stale_commit_accepted"
	StaleAck             Property = "stale_ack_accepted"
	KeyWithoutTenant     Property = "key_without_tenant"
	TenantsShareKey      Property = "tenants_share_key"
	SilentReuse          Property = "silent_reuse"
	DLQLeak              Property = "dlq_leak"
	OutboxOrphan         Property = "outbox_orphan"
	EventNotApplied      Property = "event_not_applied"
	ReprocessUnaudited   Property = "reprocess_unaudited"
	Resurrected          Property = "dead_job_resurrected"
	OrderInversion       Property = "order_inversion"
	FailedButApplied     Property = "failed_but_applied"
	CommitLost           Property = "acknowledged_commit_lost"
	AmbiguousResolved    Property = "ambiguous_taken_as_known"
	CircuitOnHealthy     Property = "circuit_opened_on_healthy_channel"
)

// Violation is one broken invariant with its witness. Witness holds every
// history operation the property rests on, Facts the final-state facts, and
// Because the lines that prove it from those alone. T0 is the time of the
// history's first operation: witness times are shown relative to it.
type Violation struct {
	Property Property     `json:"property"`
	Job      string       `json:"job,omitempty"`
	Message  string       `json:"message"`
	Witness  []history.Op `json:"witness,omitempty"`
	Facts    []Fact       `json:"facts,omitempty"`
	Because  []string     `json:"because,omitempty"`
	T0       int64        `json:"t0,omitempty"`
}

// Final is the state read at the end of a run: the effect store's content, the
// broker's inventory, and whether the run drained (nothing left to do).
type Final struct {
	Store   pipeline.State     `json:"store"`
	Broker  adapters.Inventory `json:"broker"`
	Drained bool               `json:"drained"`
}

// Options say what the target claims and what the scenario planted.
type Options struct {
	// FIFO: order is checked among jobs of one group.
	FIFO bool `json:"fifo,omitempty"`
	// FencedAck: the broker rejects an ack with a stale token, so a stale ack
	// it accepted is a violation.
	FencedAck bool `json:"fenced_ack,omitempty"`
	// Canaries are strings planted in payloads that must never reach the DLQ.
	Canaries []string `json:"canaries,omitempty"`
	// RelayRan: the outbox relay ran, so every event must be applied by the end.
	RelayRan bool `json:"relay_ran,omitempty"`
	// ApproximateLeases: the broker's leases are not exact (RabbitMQ returns a
	// message only when its holder's connection dies), so a second delivery to
	// a live holder is not a preemption the broker promised to avoid.
	ApproximateLeases bool `json:"approximate_leases,omitempty"`
	// HistoryOnly: there is no final state. Properties that rest on it are
	// unknown, never passed.
	HistoryOnly bool `json:"history_only,omitempty"`
}

// Stats summarise a checked history. Counts are per job unless named otherwise.
type Stats struct {
	Accepted       int            `json:"accepted"`
	Executions     int            `json:"executions"`
	Extends        int            `json:"lease_extensions"`
	RenewalsTried  int            `json:"lease_renewals_tried,omitempty"` // asked for, taken or not
	Committed      int            `json:"committed"`
	Deduped        int            `json:"deduped_commits"`
	DeadLettered   int            `json:"dead_lettered"`
	Cancelled      int            `json:"cancelled"`
	Applied        int            `json:"applied"`
	DroppedRepeats int            `json:"duplicates_dropped"`
	Redeliveries   map[string]int `json:"redeliveries"` // by explanation
	Explained      int            `json:"duplicates_explained"`
	Unexplained    int            `json:"duplicates_unexplained"`
	StaleRejected  int            `json:"stale_commits_rejected"`
	// Ambiguous counts commits and acks whose outcome was unknown (info).
	Ambiguous       int            `json:"ambiguous_commits_acks"`
	Conflicts       int            `json:"idempotency_conflicts"`
	Reprocessed     int            `json:"reprocessed"`
	ReprocessDenied int            `json:"reprocess_denied"`
	NotDrained      int            `json:"not_drained"`
	Faults          map[string]int `json:"faults"` // applied, by kind (and crash point)
	MaxAttempts     int            `json:"max_attempts_seen"`
	// CircuitOpens counts the relay's breaker opening; EventsDeadLettered the
	// outbox events it parked for good after the consumer rejected them.
	CircuitOpens int `json:"circuit_opens,omitempty"`
	// AcksInCommit counts acks that committed with their result (transactional ack).
	AcksInCommit       int `json:"acks_in_commit,omitempty"`
	EventsDeadLettered int `json:"events_dead_lettered,omitempty"`
	// The seed design's columns. Lost: accepted jobs with no outcome and no
	// trace. AppliedTwice: effects (keys) committed as new, or applied by the
	// consumer, more than once. RepeatsDropped: repeats the store deduped or
	// the consumer dropped. DeadLetteredByDesign: dead-lettered jobs whose
	// dead-lettering the job itself or the history justifies (poison, stubborn,
	// permanent, past deadline or age budget, a proven refusal);
	// DeadLetteredOtherwise: every other job in a dead-letter queue, whoever put
	// it there. MovedByBroker: jobs the broker moved or removed on its own.
	Lost                  int `json:"lost"`
	AppliedTwice          int `json:"applied_twice"`
	RepeatsDropped        int `json:"repeats_dropped"`
	DeadLetteredByDesign  int `json:"dead_lettered_by_design"`
	DeadLetteredOtherwise int `json:"dead_lettered_otherwise"`
	MovedByBroker         int `json:"moved_by_broker,omitempty"`
	// AtRisk counts the jobs the broker had acknowledged and that were not
	// finished when it was killed or lost power, summed over those faults.
	AtRisk int `json:"at_risk_at_broker_fault,omitempty"`
	// QueuedAtBrokerFault counts those of AtRisk that only the broker had:
	// no live worker held them (queued, or held by a worker a fault hit),
	// less the ones a lease asked for before the fault and answered after it
	// took (the broker may have handed them out before it went down).
	QueuedAtBrokerFault int `json:"queued_at_broker_fault,omitempty"`
	// NewestAckBeforeBrokerFaultMs is how long before a broker kill or power
	// cut the broker acknowledged the newest enqueue of a job still
	// unfinished then, in milliseconds rounded up (at least 1; the least over
	// such faults; 0: none found one).
	NewestAckBeforeBrokerFaultMs int `json:"newest_ack_before_broker_fault_ms,omitempty"`
	// AckedInFlushWindow counts, at each power cut, the jobs the broker had
	// acknowledged and that were unfinished, acknowledged less than the
	// broker's flush window before the cut (the controller's note of it:
	// FlushWindowNote): the writes its configuration may not have synced
	// yet. Without a window (a broker that syncs every write before it
	// acknowledges it, or never syncs, or a history that names none) it
	// counts them all, as AtRisk does. FlushWindowMs is the window the
	// history names, in milliseconds rounded up (0: none).
	AckedInFlushWindow int `json:"acked_in_flush_window_at_power_loss,omitempty"`
	FlushWindowMs      int `json:"flush_window_ms,omitempty"`
	// What a replicated target's node faults put at risk, each counted when
	// the fault happens (a run that counts none of its contract's did not
	// exercise the claim: see each contract's Exercised).
	//
	// AtRiskAtPrimaryKill counts the jobs the broker had acknowledged and that
	// were not finished when the primary (the node the history last recorded
	// as primary, or the queue's leader) was killed, summed over such kills:
	// the acknowledged enqueues the old primary held, which a lagging replica
	// may not have.
	AtRiskAtPrimaryKill int `json:"at_risk_at_primary_kill,omitempty"`
	// LeasesAtPrimaryKill counts the deliveries held (leased and not yet
	// ended) when the primary was killed, summed over such kills: the fencing
	// tokens a failover to a lagging replica may hand out again.
	LeasesAtPrimaryKill int `json:"leases_at_primary_kill,omitempty"`
	// NewestAckBeforePrimaryKillMs is how long before the primary's kill the
	// broker acknowledged the newest enqueue of a job still unfinished then,
	// in milliseconds rounded up (at least 1; the least over such kills; 0:
	// no such kill found one). Under a replication lag of at least that, an
	// asynchronous replica had not received it yet: the kill was certain to
	// lose it unless the broker waited for the replica before acknowledging.
	NewestAckBeforePrimaryKillMs int `json:"newest_ack_before_primary_kill_ms,omitempty"`
	// EnqueuesInPartition counts the enqueues attempted (invoked) while a
	// node partition was in force (from a node_partition fault until its
	// node_heal), and AckedInPartition those of them the broker acknowledged:
	// the writes a client on the cut-off side had at risk.
	EnqueuesInPartition int `json:"enqueues_in_partition,omitempty"`
	AckedInPartition    int `json:"acked_in_partition,omitempty"`
	// PartitionMustOutlastMs is the topology's timeout the history says a
	// partition must outlast (the controller's note: OutlastNote), in
	// milliseconds rounded up (0: none), and PartitionsOutlasting counts the
	// nodes cut off at least that long (from node_partition to node_heal,
	// or to the rejoin).
	PartitionMustOutlastMs int `json:"partition_must_outlast_ms,omitempty"`
	PartitionsOutlasting   int `json:"partitions_outlasting,omitempty"`
	// SpentAttempts counts executions that spend a job's budget (the job's own
	// failures: a job error in extract, or a poison crash).
	SpentAttempts int `json:"spent_attempts"`
	// Violations counts every violation by property, including those whose
	// witnesses were omitted (at most five are kept per property).
	Violations map[string]int `json:"violations,omitempty"`
}

// Validity is a property's answer, Jepsen style.
type Validity string

const (
	Valid   Validity = "true"
	Invalid Validity = "false"
	// Unknown: the history and final state do not decide it (jobs still
	// queued, no final state).
	Unknown Validity = "unknown"
	// NotChecked: the target does not claim what the property checks (FIFO,
	// fenced acks).
	NotChecked Validity = "not_checked"
)

// Answer is one property's result under its name.
type Answer struct {
	Valid Validity `json:"valid"`
	// Count of violations found (all of them, witnesses or not).
	Count int `json:"count,omitempty"`
	// Why it is unknown or not checked.
	Reason string `json:"reason,omitempty"`
}

// Result is a whole check: every property's answer under its name, merged
// false > unknown > true, the violations with their witnesses, the stats and
// the reasons the history is undecided.
type Result struct {
	Valid      Validity            `json:"valid"`
	Properties map[Property]Answer `json:"properties"`
	Violations []Violation         `json:"violations,omitempty"`
	Stats      Stats               `json:"stats"`
	// Undecided says why the outcome is not decidable (jobs still queued at the
	// end); a history with undecided jobs is never a pass.
	Undecided []string `json:"undecided,omitempty"`
	// Ops is the number of operations observed; T0 the time of the first.
	Ops int   `json:"ops"`
	T0  int64 `json:"t0"`
}
