package contracts

import (
	"github.com/durachk/durachk/checker"
	"github.com/durachk/durachk/history"
)

// The checker lives in package checker, usable on any history; these aliases
// keep the contracts' names.
type (
	Property     = checker.Property
	Violation    = checker.Violation
	Final        = checker.Final
	CheckOptions = checker.Options
	Stats        = checker.Stats
)

// Property names, as the contracts have always called them.
const (
	PropLost              = checker.Lost
	PropMovedByBroker     = checker.MovedByBroker
	PropMultipleTerminal  = checker.MultipleTerminal
	PropDuplicateEffect   = checker.DuplicateEffect
	PropDuplicateApply    = checker.DuplicateApply
	PropUnexplainedDup    = checker.UnexplainedDuplicate
	PropPreempted         = checker.Preempted
	PropOverBudget        = checker.OverBudget
	PropHealthyDead       = checker.HealthyDeadLettered
	PropPermanentRetried  = checker.PermanentRetried
	PropAfterDeadline     = checker.AfterDeadline
	PropCancelledToDLQ    = checker.CancelledToDLQ
	PropCancelledReproc   = checker.CancelledReprocessed
	PropStaleCommit       = checker.StaleCommit
	PropStaleAck          = checker.StaleAck
	PropTenantKey         = checker.KeyWithoutTenant
	PropTenantShared      = checker.TenantsShareKey
	PropSilentReuse       = checker.SilentReuse
	PropDLQLeak           = checker.DLQLeak
	PropOutboxOrphan      = checker.OutboxOrphan
	PropEventLost         = checker.EventNotApplied
	PropReprocessAudit    = checker.ReprocessUnaudited
	PropResurrected       = checker.Resurrected
	PropOrder             = checker.OrderInversion
	PropFailedButApplied  = checker.FailedButApplied
	PropCommitLost        = checker.CommitLost
	PropAmbiguousResolved = checker.AmbiguousResolved
	PropCircuitOnHealthy  = checker.CircuitOnHealthy
)

// The controller's notes of what a fault is measured against
// (checker.FlushWindowNote, checker.OutlastNote).
var (
	FlushWindowNote = checker.FlushWindowNote
	OutlastNote     = checker.OutlastNote
)

// Check reads ops (ordered by time; for one process, by sequence) and the final
// state, and returns every violation, the stats, and the reasons the outcome is
// not decidable (jobs still queued at the end). It never returns success for an
// ambiguous outcome: an undrained job makes the outcome unknown, not a pass.
func Check(ops []history.Op, final Final, opts CheckOptions) ([]Violation, Stats, []string) {
	r := checker.Check(ops, final, opts)
	return r.Violations, r.Stats, r.Undecided
}
