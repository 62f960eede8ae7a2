package contracts

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/pipeline"
)

// Property names a checked invariant; every violation carries one.
type Property string

const (
	PropLost             Property = "lost"              // accepted, no terminal outcome, not in the broker
	PropMultipleTerminal Property = "multiple_terminal" // committed and dead-lettered, ...
	PropDuplicateEffect  Property = "duplicate_effect"  // two new results for one key
	PropDuplicateApply   Property = "duplicate_apply"   // the consumer applied one event twice
	PropUnexplainedDup   Property = "unexplained_duplicate"
	PropPreempted        Property = "preempted" // a live, unfaulted worker lost its lease
	PropOverBudget       Property = "attempts_over_budget"
	PropPermanentRetried Property = "permanent_retried"
	PropAfterDeadline    Property = "work_after_deadline"
	PropCancelledToDLQ   Property = "cancelled_dead_lettered"
	PropCancelledReproc  Property = "cancelled_reprocessed"
	PropStaleCommit      Property = "stale_commit_accepted"
	PropStaleAck         Property = "stale_ack_accepted"
	PropTenantKey        Property = "key_without_tenant"
	PropTenantShared     Property = "tenants_share_key"
	PropSilentReuse      Property = "silent_reuse"
	PropDLQLeak          Property = "dlq_leak"
	PropOutboxOrphan     Property = "outbox_orphan" // result without event or event without result
	PropEventLost        Property = "event_not_applied"
	PropReprocessAudit   Property = "reprocess_unaudited"
	PropResurrected      Property = "dead_job_resurrected"
	PropOrder            Property = "order_inversion"
	PropFailedButApplied Property = "failed_but_applied"
	PropCommitLost       Property = "acknowledged_commit_lost"
	// PropAmbiguousResolved: an unknown commit outcome acted on as failure or success.
	PropAmbiguousResolved Property = "ambiguous_taken_as_known"
	// PropCircuitOnHealthy: the relay's breaker opened though nothing was wrong
	// with its channel (a poison event must not stop the queue).
	PropCircuitOnHealthy Property = "circuit_opened_on_healthy_channel"
)

// Violation is one broken invariant with its witness: the few history lines that
// prove it.
type Violation struct {
	Property Property     `json:"property"`
	Job      string       `json:"job,omitempty"`
	Message  string       `json:"message"`
	Witness  []history.Op `json:"witness,omitempty"`
}

// Final is the state read at the end of a run.
type Final struct {
	Store   pipeline.State     `json:"store"`
	Broker  adapters.Inventory `json:"broker"`
	Drained bool               `json:"drained"`
}

// CheckOptions say what the target claims and what the scenario planted.
type CheckOptions struct {
	FIFO      bool     // order is checked among jobs of one group
	FencedAck bool     // a stale ack accepted by the broker is a violation
	Canaries  []string // strings planted in payloads that must never reach the DLQ
	// RelayRan: events must be applied by the end.
	RelayRan bool
	// ApproximateLeases: the broker's leases are not exact (RabbitMQ returns a
	// message only when its holder's connection dies), so a second delivery to a
	// live holder is not a preemption the broker promised to avoid.
	ApproximateLeases bool
}

// Stats summarises a checked history. Counts are per job unless named otherwise.
type Stats struct {
	Accepted       int            `json:"accepted"`
	Executions     int            `json:"executions"`
	Extends        int            `json:"lease_extensions"`
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
	// AtRisk counts the jobs the broker had acknowledged and that were not
	// finished when it was killed or lost power, summed over those faults.
	AtRisk int `json:"at_risk_at_broker_fault,omitempty"`
	// Violations counts every violation by property, including those whose
	// witnesses were omitted (at most five are kept per property).
	Violations map[string]int `json:"violations,omitempty"`
}

type delivery struct {
	proc    string
	token   uint64
	lease   int32 // index of the lease ok
	ended   string
	endIdx  int32
	info    bool // an ambiguous call happened in this delivery
	faulted bool
}

type jobState struct {
	meta        pipeline.JobMeta
	enqIdx      int32
	enqueues    int
	accepted    bool
	acceptIdx   int32 // the broker's first acknowledgement of an enqueue
	executions  int
	permFails   int
	firstLease  int32
	terminalIdx int32
	terminalInv int32 // the invoke of the operation that made the job terminal
	deadIdx     int32
	commitIdx   int32
	committed   bool
	maxFence    uint64
	maxLeaseTok uint64
	deliveries  []delivery
	reprocessed bool
	lastExtract int32
	commitInv   int32 // first commit invoke
	fault       int32 // last fault that named this job
	// From the final state.
	hasResult, dead, cancelled, inBroker bool
}

type keyState struct {
	tenant   string
	job      string
	newIdx   int32
	news     int
	applied  int
	applyIdx int32
	// From the final state.
	hasResult, hasEvent bool
}

// Check reads ops (ordered by time; for one process, by sequence) and the final
// state, and returns every violation, the stats, and the reasons the outcome is
// not decidable (jobs still queued at the end). It never returns success for an
// ambiguous outcome: an undrained job makes the outcome unknown, not a pass.
func Check(ops []history.Op, final Final, opts CheckOptions) ([]Violation, Stats, []string) {
	c := newChecker(ops, opts)
	for i := range ops {
		c.observe(int32(i), &ops[i])
	}
	unknown := c.finish(final)
	for p, n := range c.perKind {
		if c.st.Violations == nil {
			c.st.Violations = map[string]int{}
		}
		c.st.Violations[string(p)] = n
	}
	sort.SliceStable(c.vs, func(i, j int) bool { return c.vs[i].Property < c.vs[j].Property })
	return c.vs, c.st, unknown
}

type checker struct {
	ops            []history.Op
	opts           CheckOptions
	jobs           map[string]*jobState
	order          []string // job ids in first-enqueue order
	keys           map[string]*keyState
	current        map[string]string // process → job of its open delivery
	faulted        map[string]bool   // process hit by a kill or pause
	lastOp         map[string]int32  // process → index of its previous record
	at             int32             // index of the record being observed
	channelFaulted bool              // a fault was applied to the relay's channel
	invoked        int32             // for a completion: the index of its invoke, else -1
	crashAt        int32             // index of the latest broker crash (-1: none)
	groups         map[string][]string
	vs             []Violation
	st             Stats
	perKind        map[Property]int
}

const maxPerProperty = 5

func newChecker(ops []history.Op, opts CheckOptions) *checker {
	return &checker{ops: ops, opts: opts, jobs: make(map[string]*jobState, len(ops)/8+1),
		keys: make(map[string]*keyState, len(ops)/8+1), current: map[string]string{}, faulted: map[string]bool{}, lastOp: map[string]int32{}, crashAt: -1,
		groups: map[string][]string{}, perKind: map[Property]int{},
		st: Stats{Redeliveries: map[string]int{}, Faults: map[string]int{}}}
}

func (c *checker) violate(p Property, job, msg string, idx ...int32) {
	c.perKind[p]++
	if c.perKind[p] > maxPerProperty {
		if c.perKind[p] == maxPerProperty+1 {
			c.vs = append(c.vs, Violation{Property: p, Message: "further violations of this property omitted"})
		}
		return
	}
	v := Violation{Property: p, Job: job, Message: msg}
	if j, ok := c.jobs[job]; ok {
		// Every witness names the job's acceptance and first delivery too.
		idx = append(idx, j.enqIdx, j.firstLease)
	}
	slices.Sort(idx)
	for _, i := range slices.Compact(idx) {
		if i >= 0 && int(i) < len(c.ops) {
			v.Witness = append(v.Witness, c.ops[i])
		}
	}
	c.vs = append(c.vs, v)
}

func (c *checker) job(id string) *jobState {
	j, ok := c.jobs[id]
	if !ok {
		j = &jobState{enqIdx: -1, acceptIdx: -1, firstLease: -1, terminalIdx: -1, terminalInv: -1, deadIdx: -1, commitIdx: -1, lastExtract: -1, commitInv: -1, fault: -1}
		c.jobs[id] = j
		c.order = append(c.order, id)
	}
	return j
}

func (j *jobState) open(proc string) *delivery {
	for i := len(j.deliveries) - 1; i >= 0; i-- {
		if d := &j.deliveries[i]; d.proc == proc && d.ended == "" {
			return d
		}
	}
	return nil
}

func (c *checker) end(j *jobState, proc, how string) {
	if d := j.open(proc); d != nil {
		d.ended = how
		d.endIdx = c.at
	}
	if c.current[proc] != "" {
		delete(c.current, proc)
	}
}

func (c *checker) observe(i int32, op *history.Op) {
	c.at = i
	switch {
	case op.F == history.Circuit && op.Value == "open":
		c.st.CircuitOpens++
		if !c.channelFaulted {
			c.violate(PropCircuitOnHealthy, "", "the relay's circuit opened while no fault had touched its channel", i)
		}
	case op.F == history.EventDead && op.Type == history.OK:
		c.st.EventsDeadLettered++
	}
	if op.F == history.Fault {
		if op.Value == "broker_crash" || op.Value == "power_loss" {
			c.crashAt = i
			for _, j := range c.jobs {
				if j.accepted && j.terminalIdx < 0 {
					c.st.AtRisk++
				}
			}
		}
		if op.Key == faults.LinkChannel {
			c.channelFaulted = true
		}
		if op.Job != "" {
			c.job(op.Job).fault = i
		}
		c.st.Faults[op.Value]++
		if op.Key != "" {
			c.st.Faults[op.Value+":"+op.Key]++
		}
		if op.Target == "" {
			return
		}
		if op.Value == "kill" || op.Value == "pause" || strings.HasPrefix(op.Value, "crash") {
			c.faulted[op.Target] = true
		}
		// A fault on a process (or on its slot's link: "w2" covers "w2.3")
		// explains what happens to the delivery it holds.
		for proc, jid := range c.current {
			if proc == op.Target || strings.HasPrefix(proc, op.Target+".") {
				if d := c.jobs[jid].open(proc); d != nil {
					d.faulted = true
				}
			}
		}
		return
	}
	if op.Job == "" {
		return
	}
	prev, hasPrev := c.lastOp[op.Process]
	c.lastOp[op.Process] = i
	c.invoked = -1
	if hasPrev && c.ops[prev].Type == history.Invoke && c.ops[prev].F == op.F && c.ops[prev].Job == op.Job {
		c.invoked = prev // the invoke this completion answers
	}
	j := c.job(op.Job)
	if hasPrev && op.Type == history.Invoke && (op.F == history.DeadLetter || op.F == history.Ack || op.F == history.Nack) {
		// An unknown outcome must stay unknown: after a commit or ack whose reply
		// was lost, the next step is never the one its failure (or, for a commit,
		// its success) would call for.
		p := &c.ops[prev]
		if p.Job == op.Job && p.Type == history.Info && (p.F == history.Commit || p.F == history.Ack) {
			as := "failed"
			if op.F == history.Ack {
				as = "succeeded"
			}
			c.violate(PropAmbiguousResolved, op.Job, fmt.Sprintf("%s's %s timed out (outcome unknown) and it went straight to %s, as if the %s had %s",
				op.Process, p.F, op.F, p.F, as), prev, i)
		}
	}
	if op.Type == history.Info {
		if d := j.open(op.Process); d != nil {
			d.info = true
		}
	}
	switch op.F {
	case history.Enqueue:
		c.enqueue(i, op, j)
	case history.Lease:
		if op.Type == history.OK {
			c.lease(i, op, j)
		}
	case history.Fence:
		if op.Type == history.OK && op.Token > j.maxFence {
			j.maxFence = op.Token
		}
		if op.Type == history.Fail {
			c.end(j, op.Process, "stale")
		}
	case history.Extract:
		c.extract(i, op, j)
	case history.Extend:
		if op.Type == history.OK {
			c.st.Extends++
		}
		if op.Type == history.Fail {
			c.end(j, op.Process, "lease_lost")
		}
	case history.Commit:
		c.commit(i, op, j)
	case history.Ack:
		if op.Type == history.OK && op.Value == "in_commit" {
			c.st.AcksInCommit++
		}
		if op.Type == history.OK {
			// Tokens count the deliveries of one message: with two messages of the
			// job (a producer retry) they are not comparable.
			if op.Token < j.maxLeaseTok && c.opts.FencedAck && j.enqueues == 1 {
				c.violate(PropStaleAck, op.Job, fmt.Sprintf("ack with token %d accepted after a delivery with token %d", op.Token, j.maxLeaseTok),
					j.open(op.Process).leaseIdx(), i)
			}
			if j.terminalIdx < 0 {
				j.terminalIdx, j.terminalInv = i, c.invokedOr(i)
			}
			c.end(j, op.Process, "ack")
		} else if op.Type != history.Invoke {
			if op.Type == history.Info {
				c.st.Ambiguous++
			}
			c.end(j, op.Process, "ack_"+string(op.Type))
		}
	case history.Nack:
		if op.Type != history.Invoke {
			c.end(j, op.Process, "nack")
		}
	case history.DeadLetter:
		c.deadLetter(i, op, j)
	case history.Cancel:
		if op.Type == history.OK && j.terminalIdx < 0 {
			j.terminalIdx, j.terminalInv = i, c.invokedOr(i)
		}
	case history.Apply:
		if op.Type == history.OK {
			k := c.key(op.Key)
			if op.Value == "applied" {
				k.applied++
				c.st.Applied++
				if k.applied == 2 {
					c.violate(PropDuplicateApply, op.Job, fmt.Sprintf("event of %s applied twice by the consumer", op.Key), k.applyIdx, i)
				}
				k.applyIdx = i
			} else {
				c.st.DroppedRepeats++
			}
		}
	case history.Reprocess:
		c.reprocess(i, op, j)
	}
}

func (c *checker) key(k string) *keyState {
	ks, ok := c.keys[k]
	if !ok {
		ks = &keyState{newIdx: -1, applyIdx: -1}
		c.keys[k] = ks
	}
	return ks
}

func (c *checker) enqueue(i int32, op *history.Op, j *jobState) {
	switch op.Type {
	case history.Invoke:
		j.enqueues++
		if j.enqIdx < 0 {
			j.enqIdx = i
			parseMeta(op.Value, &j.meta)
		}
	case history.OK:
		if !j.accepted {
			j.accepted, j.acceptIdx = true, i
			c.st.Accepted++
			if j.meta.Group != "" {
				c.groups[j.meta.Group] = append(c.groups[j.meta.Group], op.Job)
			}
		}
	}
}

func (c *checker) lease(i int32, op *history.Op, j *jobState) {
	if j.deadIdx >= 0 && j.enqueues < 2 {
		c.violate(PropResurrected, op.Job, "a dead-lettered job was delivered again", j.deadIdx, i)
	}
	if j.firstLease < 0 {
		j.firstLease = i
	} else {
		c.classifyRedelivery(i, op, j)
	}
	if op.Token > j.maxLeaseTok {
		j.maxLeaseTok = op.Token
	}
	if op.Attempt > c.st.MaxAttempts {
		c.st.MaxAttempts = op.Attempt
	}
	if op.Key != "" {
		c.checkKey(i, op, j)
	}
	j.deliveries = append(j.deliveries, delivery{proc: op.Process, token: op.Token, lease: i})
	c.current[op.Process] = op.Job
}

// classifyRedelivery explains a delivery of a job that was delivered before.
func (c *checker) classifyRedelivery(i int32, op *history.Op, j *jobState) {
	prev := &j.deliveries[len(j.deliveries)-1]
	why := ""
	switch {
	case prev.ended == "nack":
		c.st.Redeliveries["retry"]++
		return
	case prev.faulted:
		why = "fault"
	case prev.info || strings.HasPrefix(prev.ended, "ack_"):
		why = "lost_reply"
	case prev.ended == "ack" && c.crashAt > prev.endIdx:
		// The broker was killed after the ack: a broker that writes acks lazily
		// delivers the job again after its restart. The pipeline must dedupe it.
		why = "broker_restart"
	case prev.ended == "ack" || prev.ended == "dead_letter" || prev.ended == "cancel":
		if j.enqueues > 1 {
			why = "duplicate_enqueue"
		}
	case prev.ended == "stale" || prev.ended == "lease_lost" || prev.ended == "abandoned":
		why = "lease_expiry"
	case prev.ended == "" && j.enqueues > 1:
		why = "duplicate_enqueue" // another message of the same job
	case prev.ended == "":
		why = "lease_expiry"
		if !c.faulted[prev.proc] && !c.opts.ApproximateLeases {
			c.violate(PropPreempted, op.Job, fmt.Sprintf("%s leased the job while %s, alive and unfaulted, still held it", op.Process, prev.proc), prev.lease, i)
		}
	default:
		why = "lease_expiry"
	}
	if why == "" {
		c.st.Unexplained++
		c.violate(PropUnexplainedDup, op.Job, "delivered again after it was "+prev.ended+" with no fault, lost reply or duplicate enqueue to explain it", prev.lease, i)
		return
	}
	c.st.Explained++
	c.st.Redeliveries[why]++
}

func (c *checker) checkKey(i int32, op *history.Op, j *jobState) {
	tenant, ok := pipeline.KeyTenant(op.Key)
	if !ok || (j.meta.Tenant != "" && tenant != j.meta.Tenant) {
		c.violate(PropTenantKey, op.Job, fmt.Sprintf("key %q does not carry the job's tenant %q", op.Key, j.meta.Tenant), j.enqIdx, i)
	}
	k := c.key(op.Key)
	if k.tenant == "" {
		k.tenant, k.job = j.meta.Tenant, op.Job
	} else if j.meta.Tenant != "" && k.tenant != j.meta.Tenant {
		c.violate(PropTenantShared, op.Job, fmt.Sprintf("tenants %q and %q share key %q", k.tenant, j.meta.Tenant, op.Key), c.jobs[k.job].enqIdx, j.enqIdx, i)
	}
}

func (c *checker) extract(i int32, op *history.Op, j *jobState) {
	switch op.Type {
	case history.Invoke:
		j.executions++
		c.st.Executions++
		// Each message of the job has its own budget: a producer that sent twice
		// doubles it.
		if budget := j.meta.MaxAttempts * max(j.enqueues, 1); j.meta.MaxAttempts > 0 && j.executions == budget+1 {
			c.violate(PropOverBudget, op.Job, fmt.Sprintf("executed %d times, budget %d", j.executions, budget), j.enqIdx, i)
		}
		if j.meta.Deadline > 0 && op.T > j.meta.Deadline {
			c.violate(PropAfterDeadline, op.Job, "work started after the job's deadline", j.enqIdx, i)
		}
		j.lastExtract = i
	case history.Fail:
		if op.Err == "permanent" && j.enqueues < 2 {
			j.permFails++
			if j.permFails == 2 {
				c.violate(PropPermanentRetried, op.Job, "a permanent error was retried", j.lastExtract, i)
			}
		}
	}
}

func (c *checker) commit(i int32, op *history.Op, j *jobState) {
	switch op.Type {
	case history.Invoke:
		if j.commitInv < 0 {
			j.commitInv = i
		}
	case history.OK:
		if op.Token < j.maxFence {
			c.violate(PropStaleCommit, op.Job, fmt.Sprintf("commit with token %d accepted after token %d was fenced", op.Token, j.maxFence), j.open(op.Process).leaseIdx(), i)
		}
		k := c.key(op.Key)
		if op.Value == "new" {
			k.news++
			if k.news == 2 {
				c.violate(PropDuplicateEffect, op.Job, fmt.Sprintf("two new results for key %s", op.Key), k.newIdx, i)
			}
			k.newIdx = i
		} else {
			c.st.Deduped++
		}
		if !j.committed {
			j.committed = true
			j.commitIdx = i
		}
		if op.Token > j.maxFence {
			j.maxFence = op.Token
		}
	case history.Fail:
		switch op.Err {
		case "stale_token":
			c.st.StaleRejected++
			c.end(j, op.Process, "stale")
		case pipeline.ReasonIdempotencyConflict:
			c.st.Conflicts++
		}
	case history.Info:
		c.st.Ambiguous++
		if d := j.open(op.Process); d != nil {
			d.info = true
		}
	}
}

// invokedOr is the invoke of the completion being observed, or i.
func (c *checker) invokedOr(i int32) int32 {
	if c.invoked >= 0 {
		return c.invoked
	}
	return i
}

func (d *delivery) leaseIdx() int32 {
	if d == nil {
		return -1
	}
	return d.lease
}

func (c *checker) deadLetter(i int32, op *history.Op, j *jobState) {
	switch op.Type {
	case history.Invoke:
		if !slices.Contains(pipeline.ReasonCodes, op.Value) {
			c.violate(PropDLQLeak, op.Job, "a dead-letter reason that is not a reason code", i)
		}
	case history.OK:
		if j.deadIdx < 0 {
			j.deadIdx = i
		}
		if j.terminalIdx < 0 {
			j.terminalIdx, j.terminalInv = i, c.invokedOr(i)
		}
		if d := j.open(op.Process); d != nil && j.meta.Deadline > 0 && c.ops[d.lease].T > j.meta.Deadline {
			c.violate(PropCancelledToDLQ, op.Job, "a job leased after its deadline was dead-lettered instead of cancelled", j.enqIdx, d.lease, i)
		}
		c.end(j, op.Process, "dead_letter")
	}
}

func (c *checker) reprocess(i int32, op *history.Op, j *jobState) {
	switch op.Type {
	case history.OK:
		j.reprocessed = true
		c.st.Reprocessed++
		if op.Value == op.Job {
			c.violate(PropResurrected, op.Job, "reprocessed in place: the dead job itself was put back", j.deadIdx, i)
		}
	case history.Fail:
		c.st.ReprocessDenied++
	}
}

// finish checks the final state against what the history says happened.
func (c *checker) finish(f Final) []string {
	// Mark the final state on the per-job and per-key state the history built,
	// instead of indexing it again: one map lookup per row.
	for _, r := range f.Store.Results {
		c.key(r.Key).hasResult = true
		if j, ok := c.jobs[r.JobID]; ok {
			j.hasResult = true
		}
	}
	for _, e := range f.Store.Events {
		c.key(e.Key).hasEvent = true
	}
	for _, d := range f.Store.DeadLetters {
		if j, ok := c.jobs[d.JobID]; ok {
			j.dead = true
		}
		c.checkRedacted(d)
	}
	mark := func(ids []string, set func(j *jobState)) {
		for _, id := range ids {
			if j, ok := c.jobs[id]; ok {
				set(j)
			}
		}
	}
	mark(f.Broker.DeadLettered, func(j *jobState) { j.dead = true })
	mark(f.Store.Cancelled, func(j *jobState) { j.cancelled = true })
	mark(f.Broker.Queued, func(j *jobState) { j.inBroker = true })
	mark(f.Broker.InFlight, func(j *jobState) { j.inBroker = true })
	audits := make(map[string]pipeline.Audit, len(f.Store.Audits))
	for _, a := range f.Store.Audits {
		audits[a.OldJob] = a
	}
	var unknown []string
	for _, id := range c.order {
		j := c.jobs[id]
		if !j.accepted {
			continue
		}
		isDead, isCancelled := j.dead, j.cancelled
		// A result written by a worker that died before recording its commit still counts.
		committed := j.committed || j.hasResult
		n := boolInt(committed) + boolInt(isDead) + boolInt(isCancelled)
		if committed {
			c.st.Committed++
		}
		if j.committed {
			if k := c.keys[c.ops[j.commitIdx].Key]; k == nil || !k.hasResult {
				c.violate(PropCommitLost, id, "an acknowledged commit is not in the store", j.commitIdx)
			}
		}
		if isDead {
			c.st.DeadLettered++
		}
		if isCancelled {
			c.st.Cancelled++
			if isDead {
				c.violate(PropCancelledToDLQ, id, "a cancelled job is in the dead-letter queue", j.terminalIdx)
			}
		}
		switch {
		case n > 1:
			var outs []string
			for _, o := range []struct {
				b    bool
				name string
			}{{committed, "committed"}, {isDead, "dead-lettered"}, {isCancelled, "cancelled"}} {
				if o.b {
					outs = append(outs, o.name)
				}
			}
			c.violate(PropMultipleTerminal, id, "more than one terminal outcome: "+strings.Join(outs, " and "), j.enqIdx, j.commitIdx, j.deadIdx, j.terminalIdx)
		case n == 0 && (j.inBroker || f.Broker.Unnamed > 0):
			c.st.NotDrained++
			if len(unknown) < 5 {
				where := "is still in the broker at the end"
				if !j.inBroker {
					where = fmt.Sprintf("is unfinished while the broker still holds %d messages it cannot name", f.Broker.Unnamed)
				}
				unknown = append(unknown, fmt.Sprintf("job %s %s", id, where))
			}
		case n == 0:
			// The witness: the broker's acknowledgement and the broker fault after it.
			crash := int32(-1)
			if c.crashAt > j.acceptIdx {
				crash = c.crashAt
			}
			c.violate(PropLost, id, "accepted by the broker, never finished, and no longer in the broker", j.enqIdx, j.acceptIdx, crash, j.firstLease, j.terminalIdx)
		}
		if j.reprocessed {
			a, ok := audits[id]
			switch {
			case !ok || a.Operator == "":
				c.violate(PropReprocessAudit, id, "reprocessed without an audit entry naming the operator", j.deadIdx)
			case isCancelled:
				c.violate(PropCancelledReproc, id, "a cancelled job was reprocessed", j.terminalIdx)
			default:
				if nj, ok := c.jobs[a.NewJob]; !ok || nj.meta.Version != j.meta.Version+1 || a.NewJob == id {
					c.violate(PropReprocessAudit, id, "the reprocessed job is not a new job at version+1", j.deadIdx)
				}
			}
		}
	}
	if c.st.NotDrained > 5 {
		unknown = append(unknown, fmt.Sprintf("%d jobs in all are still in the broker", c.st.NotDrained))
	}
	for _, r := range f.Store.Results {
		key := r.Key
		if !c.keys[key].hasEvent && r.EventID != "" {
			if e, ok := c.keys[key]; !ok || e.applied == 0 {
				w := []int32{c.keys[key].idx()}
				if j := c.jobs[r.JobID]; j != nil {
					w = append(w, j.enqIdx, j.commitInv, j.fault, j.commitIdx)
				}
				c.violate(PropOutboxOrphan, r.JobID, "a result without its outbox event: "+key, w...)
			}
		}
		if k := c.keys[key]; k != nil && k.tenant != "" && r.Tenant != k.tenant {
			c.violate(PropSilentReuse, r.JobID, "result of one tenant stored under another's key", k.newIdx)
		}
	}
	for _, e := range f.Store.Events {
		key := e.Key
		if !c.keys[key].hasResult {
			c.violate(PropOutboxOrphan, e.JobID, "an outbox event without its result: "+key)
		}
	}
	for _, e := range f.Store.Events {
		k := c.keys[e.Key]
		if c.opts.RelayRan && f.Drained && !e.Dead && (k == nil || k.applied == 0) {
			c.violate(PropEventLost, e.JobID, "the event was never applied by the consumer: "+e.Key, k.idx())
		}
	}
	c.checkSilentReuse()
	c.checkOrder()
	return unknown
}

func (k *keyState) idx() int32 {
	if k == nil {
		return -1
	}
	return k.newIdx
}

// checkSilentReuse: a job whose payload differs from the stored result's for the
// same key must not report a successful commit.
func (c *checker) checkSilentReuse() {
	byKey := map[string]string{} // key → hash of the job whose commit was new
	for _, id := range c.order {
		j := c.jobs[id]
		if j.commitIdx >= 0 && c.ops[j.commitIdx].Value == "new" {
			byKey[c.ops[j.commitIdx].Key] = j.meta.Hash
		}
	}
	for _, id := range c.order {
		j := c.jobs[id]
		if j.commitIdx < 0 || c.ops[j.commitIdx].Value != "deduped" {
			continue
		}
		if h, ok := byKey[c.ops[j.commitIdx].Key]; ok && h != j.meta.Hash && j.meta.Hash != "" {
			c.violate(PropSilentReuse, id, "a different payload under the same key was silently deduped instead of rejected as a conflict", j.enqIdx, j.commitIdx)
		}
	}
}

func (c *checker) checkRedacted(d pipeline.DeadLetterRecord) {
	if !slices.Contains(pipeline.ReasonCodes, d.Reason) {
		c.violate(PropDLQLeak, d.JobID, fmt.Sprintf("dead-letter record holds %d characters of text instead of a reason code", len(d.Reason)), c.jobIdx(d.JobID))
		return
	}
	for _, canary := range c.opts.Canaries {
		if strings.Contains(d.Reason, canary) || strings.Contains(d.Key, canary) {
			c.violate(PropDLQLeak, d.JobID, "a planted canary reached the dead-letter record", c.jobIdx(d.JobID))
		}
	}
}

func (c *checker) jobIdx(id string) int32 {
	if j, ok := c.jobs[id]; ok {
		return j.deadIdx
	}
	return -1
}

// checkOrder: in a FIFO target no job of a group starts before the previous one
// of the group (by acceptance) has finished.
func (c *checker) checkOrder() {
	if !c.opts.FIFO {
		return
	}
	names := make([]string, 0, len(c.groups))
	for g := range c.groups {
		names = append(names, g)
	}
	sort.Strings(names)
	for _, g := range names {
		ids := c.groups[g]
		for n := 1; n < len(ids); n++ {
			prev, next := c.jobs[ids[n-1]], c.jobs[ids[n]]
			if next.firstLease < 0 {
				continue
			}
			// Records of different processes are ordered by their clocks: the
			// earliest instant prev was finished is when its terminal call was
			// sent, so a lease answered before that is an inversion.
			if prev.firstLease < 0 || next.firstLease < prev.firstLease || (prev.terminalInv >= 0 && next.firstLease < prev.terminalInv) {
				c.violate(PropOrder, ids[n], fmt.Sprintf("group %s: %s started before %s, accepted earlier, finished", g, ids[n], ids[n-1]), prev.enqIdx, next.enqIdx, next.firstLease, prev.terminalIdx)
			}
		}
	}
}
