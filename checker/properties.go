package checker

import (
	"sync"
)

// Spec describes one property as a small named unit: what it claims, how the
// checker detects it, what its witness holds, and the negative control that
// must raise it (a contract's sabotage, declared there with Raises).
type Spec struct {
	Name      Property
	Claim     string
	Detection string
	Witness   string
	// Sabotage names the negative control (contract/sabotage) that raises it.
	Sabotage string
	// FinalState: the property rests on the final state, so it is unknown when
	// there is none (Options.HistoryOnly).
	FinalState bool
}

// Properties lists every property the checker knows, in report order.
var Properties = []Spec{
	{Name: Lost, FinalState: true,
		Claim:     "a job the broker accepted (enqueue ok) reaches a terminal outcome or is still in the broker at the end",
		Detection: "an accepted job with no commit, pipeline dead-letter or cancellation (history or store), not queued, in flight or in any dead-letter queue, and with no broker action that could account for it",
		Witness:   "the enqueue invoke and ok, the last operation on the job, the broker crash or power loss after the ok; the fact that neither store nor broker holds it",
		Sabotage:  "lease.redelivery/ack-before-commit, durability.ack/no-persistence, durability.power-loss/no-persistence, durability.power-loss/fsync-ignored, durability.failover/unreplicated, partition.minority/unreplicated, partition.client/writable-replica, fencing.failover/unreplicated (the last four on replicated targets only)"},
	{Name: MovedByBroker, FinalState: true,
		Claim:     "nothing the broker moves on its own (dead-lettering at a delivery limit, expiry, trimming, overflow, redrive) is a pipeline outcome",
		Detection: "a job in the broker's dead-letter queue or in its list of own actions (Inventory.Moved) that no pipeline process dead-lettered (no dead_letter ok, no store dead-letter record), or a job gone without an outcome while the broker removed messages it cannot name",
		Witness:   "the enqueue invoke and ok, the job's commit if any, its last operation; the broker's DLQ entry and action with its reason; the absence of a pipeline dead-letter",
		Sabotage:  "lease.redelivery/broker-delivery-limit (mem?delivery_limit=1)"},
	{Name: MultipleTerminal, FinalState: true,
		Claim:     "a job has exactly one terminal outcome: committed, dead-lettered by the pipeline, or cancelled",
		Detection: "two of: commit ok or a store result; pipeline dead_letter ok or a store dead-letter record; cancel ok or a store cancellation",
		Witness:   "the enqueue invoke and ok and each outcome, as an operation where the history shows it and as a store fact where the store holds it",
		Sabotage:  "partition.ambiguous/timeout-as-failure"},
	{Name: DuplicateEffect,
		Claim:     "an effect is committed once: one new result per idempotency key and per job",
		Detection: "a second commit ok with value new for one key, or for one job under another key",
		Witness:   "both commit ok operations",
		Sabotage:  "outbox.atomic/key-per-delivery"},
	{Name: DuplicateApply,
		Claim:     "the consumer applies each outbox event once",
		Detection: "a second apply ok with value applied for one event",
		Witness:   "both apply operations",
		Sabotage:  "outbox.relay/consumer-no-dedupe"},
	{Name: UnexplainedDuplicate,
		Claim:     "a job is delivered again only for a reason: a fault, a lost reply, a nack, an expired lease, a broker restart or a second enqueue",
		Detection: "a lease ok of a job whose previous delivery ended in an ack, dead-letter or cancellation, with none of those reasons (an ack answered after its lease may have run out, counted from the lease's ask, or after a renewal that came once it may have run out, may have reached the broker late: the broker may ignore it and deliver the job again; an ack answered between a broker crash and its restart, or its next answer to a lease or enqueue, is the crash's: no broker that lives on took it; one answered while the primary was partitioned, before a failover was recorded, is the partition's: the deposed primary may have taken it alone; a lease with an older token than the previous delivery's was granted before it and reached its holder late: no redelivery)",
		Witness:   "the previous delivery's lease and end, the new lease",
		Sabotage:  "lease.redelivery/ack-dropped"},
	{Name: Preempted,
		Claim:     "a live, unfaulted holder keeps its lease: the broker never hands its job to another worker",
		Detection: "a lease ok of a job whose previous delivery is still open, with a token no older than that delivery's (an older one was granted first and reached its holder late), its holder neither killed, paused nor crashed, granted before that delivery's lease could have run out counted from when its lease or latest renewal was asked for (a holder that renewed only after its lease could have run out, counted so, may have lost it before the renewal: a broker may answer such a renewal OK with the job already queued for redelivery), or after it ran out while the holder still works a slow step without renewing (a job whose metadata says quick, no slow step, is never renewed during its work: a holder found in it past its lease was stalled) (not checked on brokers with approximate leases)",
		Witness:   "both lease operations",
		Sabotage:  "lease.heartbeat/no-heartbeat"},
	{Name: OverBudget,
		Claim:     "a job spends at most max attempts per message on its own failures",
		Detection: "more job-attributable executions than the budget: an extract that failed with a job error (transient, permanent) or crashed at the poison point; an execution whose extract succeeded, or that an infrastructure failure cut short, does not spend",
		Witness:   "the enqueue invoke (the budget) and every spending execution: its extract invoke and its failure or crash",
		Sabotage:  "retry.bounded/unbounded-retry, retry.bounded/one-extra-attempt"},
	{Name: HealthyDeadLettered, FinalState: true,
		Claim:     "only a job that earned it is dead-lettered: poison, stubborn, permanent, past its deadline or age budget, or refused for a reason the history proves",
		Detection: "a pipeline dead-letter of a job whose metadata says none of poison, stubborn (or fail_transient ≥ max), permanent; not past its deadline; not past its age budget (reason age_budget_exceeded, age measured from its enqueue); no idempotency conflict, invalid key or permanent error in the history; fewer spending executions than its budget",
		Witness:   "the enqueue invoke (the metadata) and ok, the spending executions, the dead-letter; the store's dead-letter record",
		Sabotage:  "retry.bounded/one-attempt-short"},
	{Name: PermanentRetried,
		Claim:     "a permanent error is not retried",
		Detection: "a second extract failing with a permanent error on a job enqueued once",
		Witness:   "both failures",
		Sabotage:  "retry.bounded/permanent-retried"},
	{Name: AfterDeadline,
		Claim:     "no work starts after a job's deadline",
		Detection: "an extract invoke later than the deadline in the job's metadata",
		Witness:   "the enqueue invoke (the deadline) and the extract invoke",
		Sabotage:  "cancel.terminal/deadline-ignored, cancel.terminal/deadline-slack"},
	{Name: CancelledToDLQ, FinalState: true,
		Claim:     "a job past its deadline is cancelled, never dead-lettered",
		Detection: "a pipeline dead-letter of a delivery leased after the deadline, or a job both cancelled and dead-lettered",
		Witness:   "the enqueue invoke, the late lease and the dead-letter; or the cancellation and the dead-letter",
		Sabotage:  "cancel.terminal/cancel-into-dlq"},
	{Name: CancelledReprocessed, FinalState: true,
		Claim:     "a cancelled job is never reprocessed",
		Detection: "a reprocess ok of a job that was cancelled (cancel ok, or a store cancellation)",
		Witness:   "the cancellation and the reprocess",
		Sabotage:  "dlq.reprocess/reprocess-in-place"},
	{Name: StaleCommit,
		Claim:     "a commit with a stale fencing token is rejected once a newer token has reached the store",
		Detection: "a commit ok whose token is below a token another delivery of the same message fenced before the commit was sent",
		Witness:   "the stale holder's lease, the newer fence, the stale commit",
		Sabotage:  "fencing.zombie/no-fence-check"},
	{Name: StaleAck,
		Claim:     "where the broker claims fenced acks, an ack with a stale token is rejected",
		Detection: "an ack ok whose token is below the newest the broker handed out for the same message",
		Witness:   "the stale holder's lease, the newer lease, the stale ack",
		Sabotage:  "fencing.zombie/unfenced-ack"},
	{Name: KeyWithoutTenant,
		Claim:     "every idempotency key carries the job's valid tenant",
		Detection: "a lease ok whose key BuildKey could not have produced, or whose tenant is not the job's",
		Witness:   "the enqueue invoke (the tenant) and the lease with the key",
		Sabotage:  "tenant.isolation/key-without-tenant"},
	{Name: TenantsShareKey,
		Claim:     "two tenants never share a key",
		Detection: "leases of jobs of two tenants under one key",
		Witness:   "both jobs' enqueue invokes and the second lease",
		Sabotage:  "tenant.isolation/key-without-tenant"},
	{Name: SilentReuse,
		Claim:     "a key reused with another payload is an explicit conflict, never a silently reused result; a result is stored under its own tenant's key",
		Detection: "a commit deduped onto a result committed new for another payload hash; or a store result whose tenant is not the key's",
		Witness:   "both jobs' enqueue invokes (the hashes) and both commits; or the lease that set the key's tenant and the store's result",
		Sabotage:  "idempotency.conflict/key-only-dedupe"},
	{Name: DLQLeak,
		Claim:     "a dead-letter record holds a reason code, never error text or payload",
		Detection: "a dead-letter reason that is not a reason code, or a planted canary in a store dead-letter record",
		Witness:   "the dead-letter invoke; the store's dead-letter record",
		Sabotage:  "dlq.redacted/raw-error-in-dlq"},
	{Name: OutboxOrphan, FinalState: true,
		Claim:     "result and outbox event exist together or not at all",
		Detection: "a store result naming an event the store does not hold (and the consumer never applied), or an event without its result",
		Witness:   "the job's commit and the fault that cut it; the store's result or event",
		Sabotage:  "outbox.atomic/dual-write"},
	{Name: EventNotApplied, FinalState: true,
		Claim:     "where the relay ran and the run drained, every outbox event not parked for good was applied",
		Detection: "a store event, not dead, with no apply ok in the history",
		Witness:   "the job's commit; the store's event and the drained run",
		Sabotage:  "outbox.relay/consumer-drops-events"},
	{Name: ReprocessUnaudited, FinalState: true,
		Claim:     "reprocessing needs an operator, makes a new job at version+1 and is audited",
		Detection: "a reprocess ok without an audit entry naming an operator, or whose new job is not at version+1",
		Witness:   "the dead-letter and the reprocess (and the new job's enqueue); the audit entry or its absence",
		Sabotage:  "dlq.reprocess/reprocess-in-place"},
	{Name: Resurrected,
		Claim:     "a dead-lettered job is never delivered or put back as it was",
		Detection: "a lease ok after the job's pipeline dead-letter (one enqueue), or a reprocess that re-enqueued the dead job itself",
		Witness:   "the dead-letter and the lease or reprocess",
		Sabotage:  "dlq.reprocess/reprocess-in-place"},
	{Name: OrderInversion,
		Claim:     "where the target claims FIFO, a job of a group starts only after the job accepted before it finished",
		Detection: "a first lease of a job earlier than the first lease, or the terminal call, of the job accepted before it in its group",
		Witness:   "both enqueues, the early lease, the earlier job's lease and terminal operation",
		Sabotage:  "order.fifo/break-order"},
	{Name: FailedButApplied,
		Claim:     "a call recorded as failed (definitely not applied) left no effect",
		Detection: "a result for a key whose every earlier commit failed (shown by a later deduped commit or the store's result), or a delivery of a job whose every enqueue failed",
		Witness:   "the failed calls and the operation or fact that shows their effect",
		Sabotage:  "partition.ambiguous/timeout-as-unavailable"},
	{Name: CommitLost, FinalState: true,
		Claim:     "an acknowledged commit is in the store at the end",
		Detection: "a commit ok whose key has no result in the store",
		Witness:   "the commit ok; the absence of its result",
		Sabotage:  "outbox.atomic/commit-not-durable"},
	{Name: AmbiguousResolved,
		Claim:     "a commit or ack whose outcome is unknown stays unknown: the next step is never the one its failure (or success) would call for",
		Detection: "right after a commit or ack info, the same process dead-letters or nacks the job (as if it failed), or acks it after a commit info (as if it succeeded)",
		Witness:   "the info and the next invoke",
		Sabotage:  "partition.ambiguous/timeout-as-failure"},
	{Name: CircuitOnHealthy,
		Claim:     "the relay's breaker opens only when its channel was faulted",
		Detection: "a circuit open with no fault applied to the channel before it",
		Witness:   "the circuit operation",
		Sabotage:  "scenario/poison-event/naive-breaker"},
}

// Lookup returns the spec of p.
func Lookup(p Property) (Spec, bool) {
	for _, s := range Properties {
		if s.Name == p {
			return s, true
		}
	}
	return Spec{}, false
}

// disabled is the mutation tests' switch: a disabled property never fires.
var (
	disabledMu sync.RWMutex
	disabled   map[Property]bool
)

// DisableForTest turns the properties off until restore is called. It exists
// for mutation tests, which show that selftest fails naming each property
// when that property cannot fire; never call it outside a test.
func DisableForTest(ps ...Property) (restore func()) {
	disabledMu.Lock()
	prev := disabled
	disabled = map[Property]bool{}
	for p := range prev {
		disabled[p] = true
	}
	for _, p := range ps {
		disabled[p] = true
	}
	disabledMu.Unlock()
	return func() {
		disabledMu.Lock()
		disabled = prev
		disabledMu.Unlock()
	}
}

func disabledSet() map[Property]bool {
	disabledMu.RLock()
	defer disabledMu.RUnlock()
	if len(disabled) == 0 {
		return nil
	}
	out := make(map[Property]bool, len(disabled))
	for p := range disabled {
		out[p] = true
	}
	return out
}

// Weakening loosens two detections at their boundary, for mutation tests
// that show the boundary sabotages (one attempt over budget, work just past
// the deadline) are load-bearing: a checker that allows one attempt more, or
// a slack on deadlines, must let selftest fail.
type Weakening struct {
	BudgetSlack   int32 // attempts allowed beyond the budget
	DeadlineSlack int64 // ns allowed past a deadline
}

var weakening Weakening

// WeakenForTest applies w until restore is called. Never call it outside a
// test.
func WeakenForTest(w Weakening) (restore func()) {
	disabledMu.Lock()
	prev := weakening
	weakening = w
	disabledMu.Unlock()
	return func() {
		disabledMu.Lock()
		weakening = prev
		disabledMu.Unlock()
	}
}

func currentWeakening() Weakening {
	disabledMu.RLock()
	defer disabledMu.RUnlock()
	return weakening
}
