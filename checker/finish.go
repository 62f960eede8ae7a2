package checker

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/pipeline"
)

// ReasonAgeExceeded is the dead-letter reason of a job that infrastructure
// failures held up past its age budget (pipeline.ReasonAgeExceeded).
const ReasonAgeExceeded = "age_budget_exceeded"

// reasonCodes are the valid dead-letter reasons: the pipeline's, and the age
// budget's (which the checker knows whether or not this pipeline uses it).
func reasonCodes() []string {
	if slices.Contains(pipeline.ReasonCodes, ReasonAgeExceeded) {
		return pipeline.ReasonCodes
	}
	return append(slices.Clone(pipeline.ReasonCodes), ReasonAgeExceeded)
}

func isReasonCode(s string) bool {
	return s == ReasonAgeExceeded || slices.Contains(pipeline.ReasonCodes, s)
}

// Where the checker looked for what a lost or moved job could have left.
const (
	whereAnywhere  = "the store (results, dead-letter records, cancellations) and the broker (queued, in flight, dead-letter queue, its own actions)"
	wherePipelineD = "the pipeline's dead-letters (no dead_letter ok in the history, no dead-letter record in the store)"
)

// finRef locates a job in the final state: 1-based indexes into its lists
// (0: none). It is built at Finish, for the jobs the final state names.
type finRef struct{ result, storeDead, cancelRec, moved int32 }

// finish checks the final state against what the history says happened. It
// returns why the outcome is undecided (jobs still in the broker).
func (c *Checker) finish(f Final) []string {
	c.finals = map[*job]finRef{}
	for i, r := range f.Store.Results {
		c.key(r.Key).hasResult = true
		if j, ok := c.jobs[r.JobID]; ok && c.finals[j].result == 0 {
			fr := c.finals[j]
			fr.result = int32(i + 1)
			c.finals[j] = fr
		}
	}
	for _, e := range f.Store.Events {
		c.key(e.Key).hasEvent = true
	}
	for i, d := range f.Store.DeadLetters {
		if j, ok := c.jobs[d.JobID]; ok && c.finals[j].storeDead == 0 {
			fr := c.finals[j]
			fr.storeDead = int32(i + 1)
			c.finals[j] = fr
		}
		c.checkRedacted(d)
	}
	for i, id := range f.Store.Cancelled {
		if j, ok := c.jobs[id]; ok && c.finals[j].cancelRec == 0 {
			fr := c.finals[j]
			fr.cancelRec = int32(i + 1)
			c.finals[j] = fr
		}
	}
	for _, ids := range [][]string{f.Broker.Queued, f.Broker.InFlight} {
		for _, id := range ids {
			if j, ok := c.jobs[id]; ok {
				j.inBroker = true
			}
		}
	}
	for _, id := range f.Broker.DeadLettered {
		if j, ok := c.jobs[id]; ok {
			j.brokerDLQ = true
		}
	}
	var unnamed []adapters.BrokerAction
	for i, a := range f.Broker.Moved {
		if a.Job == "" {
			unnamed = append(unnamed, a)
			continue
		}
		if j, ok := c.jobs[a.Job]; ok && c.finals[j].moved == 0 {
			fr := c.finals[j]
			fr.moved = int32(i + 1)
			c.finals[j] = fr
		}
	}
	audits := make(map[string]pipeline.Audit, len(f.Store.Audits))
	for _, a := range f.Store.Audits {
		audits[a.OldJob] = a
	}
	var undecided []string
	for _, j := range c.jobList {
		if !j.accepted {
			continue
		}
		c.finishJob(j, f, unnamed, audits, &undecided)
	}
	if c.st.NotDrained > 5 {
		undecided = append(undecided, fmt.Sprintf("%d jobs in all are still in the broker", c.st.NotDrained))
	}
	for _, k := range c.keyList {
		if k.news > 1 || k.applied > 1 {
			c.st.AppliedTwice++
		}
	}
	for _, j := range c.jobList {
		if j.news > 1 && (j.firstNew() == nil || j.firstNew().key == 0 || c.keyList[j.firstNew().key-1].news < 2) {
			c.st.AppliedTwice++
		}
	}
	c.finishResults(f)
	return undecided
}

func (c *Checker) finishJob(j *job, f Final, unnamed []adapters.BrokerAction, audits map[string]pipeline.Audit, undecided *[]string) {
	committed := j.commitOK != nil || c.finals[j].result > 0
	// A job in the broker's dead-letter queue after a pipeline dead_letter call
	// whose outcome was unknown was moved there by the pipeline.
	dead := j.deadOK != nil || c.finals[j].storeDead > 0 || j.brokerDLQ && (j.dlInfo || j.dlOpen > 0)
	cancelled := j.rare().cancelOK != nil || c.finals[j].cancelRec > 0
	held := j.brokerDLQ || c.finals[j].moved > 0
	n := boolInt(committed) + boolInt(dead) + boolInt(cancelled)
	if committed {
		c.st.Committed++
	}
	if cancelled {
		c.st.Cancelled++
	}
	if j.commitOK != nil && j.commitOK.key > 0 {
		if k := c.keyList[j.commitOK.key-1]; !k.hasResult && c.want(CommitLost) {
			c.report(CommitLost, j, "an acknowledged commit is not in the store", []*rop{j.commitOK},
				[]Fact{{Kind: FactAbsent, Job: j.id, Key: k.key, Where: "the store's results"}},
				fmt.Sprintf("%s: the store acknowledged the commit", c.desc(j.commitOK)),
				fmt.Sprintf("at the end the store holds no result under %s: an acknowledged commit was lost", k.key))
		}
	}
	if cancelled && dead && c.want(CancelledToDLQ) {
		ops, facts, _ := c.outcome(j, f, "cancelled")
		ops2, facts2, _ := c.outcome(j, f, "dead")
		c.report(CancelledToDLQ, j, "a cancelled job is in the dead-letter queue", append(ops, ops2...), append(facts, facts2...),
			c.outcomeLine(j, f, "cancelled"), c.outcomeLine(j, f, "dead"), "a cancelled job must never be dead-lettered")
	}
	switch {
	case n > 1:
		if c.want(MultipleTerminal) {
			var ops []*rop
			var facts []Fact
			var why, names []string
			for _, o := range []struct {
				on   bool
				name string
			}{{committed, "committed"}, {dead, "dead"}, {cancelled, "cancelled"}} {
				if !o.on {
					continue
				}
				os, fs, name := c.outcome(j, f, o.name)
				ops, facts = append(ops, os...), append(facts, fs...)
				why = append(why, c.outcomeLine(j, f, o.name))
				names = append(names, name)
			}
			why = append(why, "a job has exactly one terminal outcome: contradiction")
			c.report(MultipleTerminal, j, "more than one terminal outcome: "+strings.Join(names, " and "), ops, facts, why...)
		}
	case n == 0 && (j.inBroker || f.Broker.Unnamed > 0):
		c.st.NotDrained++
		if len(*undecided) < 5 {
			where := "is still in the broker at the end"
			if !j.inBroker {
				where = fmt.Sprintf("is unfinished while the broker still holds %d messages it cannot name", f.Broker.Unnamed)
			}
			*undecided = append(*undecided, fmt.Sprintf("job %s %s", j.id, where))
		}
	case n == 0 && !held && len(unnamed) > 0:
		// Gone without an outcome while the broker removed messages it cannot
		// name: the broker's doing, as far as anyone can tell.
		c.st.MovedByBroker++
		if c.want(MovedByBroker) {
			facts := []Fact{}
			for _, a := range unnamed {
				facts = append(facts, actionFact(a))
			}
			facts = append(facts, Fact{Kind: FactAbsent, Job: j.id, Where: whereAnywhere})
			c.report(MovedByBroker, j, fmt.Sprintf("gone from the broker without an outcome while the broker removed messages on its own (%s)", actionWords(unnamed[0])),
				[]*rop{c.copyLast(j)}, facts,
				fmt.Sprintf("%s: the broker accepted %s; the last thing that happened to it: %s", c.desc(c.enqOK(j)), j.id, c.desc(&j.last)),
				fmt.Sprintf("it reached no outcome and is nowhere at the end, while %s", facts[0]),
				"nothing the broker removes on its own is a pipeline outcome")
		}
	case n == 0 && !held:
		c.st.Lost++
		if c.want(Lost) {
			because := []string{fmt.Sprintf("%s: the broker accepted %s", c.desc(c.enqOK(j)), j.id),
				fmt.Sprintf("the last thing that happened to it: %s", c.desc(&j.last)),
				"at the end no store record and no broker queue, dead-letter queue or action of its own accounts for it: it is lost"}
			crash := c.crashAfter(j)
			if crash != nil {
				because = slices.Insert(because, 1, fmt.Sprintf("%s: the broker went down after it accepted the job", c.desc(crash)))
			}
			c.report(Lost, j, "accepted by the broker, never finished, and no longer in the broker", []*rop{c.copyLast(j), j.rare().fault, crash},
				[]Fact{{Kind: FactAbsent, Job: j.id, Where: whereAnywhere}}, because...)
		}
	}
	if held && !dead {
		c.movedByBroker(j, f, committed)
	}
	switch {
	case dead:
		c.st.DeadLettered++
		if why := c.earned(j, f); why != "" {
			c.st.DeadLetteredByDesign++
		} else {
			c.st.DeadLetteredOtherwise++
			c.healthyDead(j, f)
		}
	case j.brokerDLQ:
		c.st.DeadLettered++
		c.st.DeadLetteredOtherwise++
	}
	if j.rare().reprocOK != nil {
		c.checkReprocess(j, f, cancelled, audits)
	}
}

// outcome returns the operations and facts that show one terminal outcome of
// j, and its name.
func (c *Checker) outcome(j *job, f Final, which string) ([]*rop, []Fact, string) {
	var ops []*rop
	var facts []Fact
	switch which {
	case "committed":
		ops = append(ops, j.commitOK)
		if c.finals[j].result > 0 {
			facts = append(facts, resultFact(f.Store.Results[c.finals[j].result-1]))
		}
		return ops, facts, "committed"
	case "dead":
		ops, facts = c.deadEvidence(j, f)
		return ops, facts, "dead-lettered"
	default:
		ops = append(ops, j.rare().cancelOK)
		if c.finals[j].cancelRec > 0 {
			facts = append(facts, Fact{Kind: FactCancelled, Job: j.id})
		}
		return ops, facts, "cancelled"
	}
}

// deadEvidence is what shows that the pipeline dead-lettered j: its
// dead_letter call and answer, the store's record, or the broker's
// dead-letter queue after a call whose outcome was unknown.
func (c *Checker) deadEvidence(j *job, f Final) ([]*rop, []Fact) {
	ops := []*rop{j.rare().deadInv, j.deadOK}
	var facts []Fact
	if i := c.finals[j].storeDead; i > 0 {
		facts = append(facts, deadLetterFact(f.Store.DeadLetters[i-1]))
	} else if j.deadOK == nil && j.brokerDLQ {
		ops = append(ops, j.rare().deadInfo)
		facts = append(facts, Fact{Kind: FactBrokerDLQ, Job: j.id, Mover: "pipeline"})
	}
	return ops, facts
}

// outcomeLine says how one outcome of j is known, the history's operation
// first.
func (c *Checker) outcomeLine(j *job, f Final, which string) string {
	switch which {
	case "committed":
		if j.commitOK != nil {
			return fmt.Sprintf("%s was committed: %s", j.id, c.desc(j.commitOK))
		}
		r := f.Store.Results[c.finals[j].result-1]
		return fmt.Sprintf("%s was committed: the store holds its result under %s", j.id, r.Key)
	case "dead":
		if j.deadOK != nil {
			return fmt.Sprintf("%s was dead-lettered by the pipeline: %s", j.id, c.desc(j.deadOK))
		}
		if c.finals[j].storeDead == 0 {
			return fmt.Sprintf("%s was dead-lettered by the pipeline: %s, whose outcome was unknown, and the broker's dead-letter queue holds it",
				j.id, c.desc(j.rare().deadInv))
		}
		d := f.Store.DeadLetters[c.finals[j].storeDead-1]
		return fmt.Sprintf("%s was dead-lettered by the pipeline: the store holds its dead-letter record (%s)", j.id, d.Reason)
	default:
		if j.rare().cancelOK != nil {
			return fmt.Sprintf("%s was cancelled: %s", j.id, c.desc(j.rare().cancelOK))
		}
		return fmt.Sprintf("%s was cancelled: the store records its cancellation", j.id)
	}
}

// movedByBroker: a job the broker dead-lettered or otherwise moved on its own,
// which no pipeline process dead-lettered.
func (c *Checker) movedByBroker(j *job, f Final, committed bool) {
	c.st.MovedByBroker++
	if !c.want(MovedByBroker) {
		return
	}
	var act *adapters.BrokerAction
	if c.finals[j].moved > 0 {
		act = &f.Broker.Moved[c.finals[j].moved-1]
	}
	var facts []Fact
	reason := "no reason recorded"
	if act != nil {
		reason = actionWords(*act)
	}
	if j.brokerDLQ {
		fd := Fact{Kind: FactBrokerDLQ, Job: j.id, Mover: "broker"}
		if act != nil {
			fd.Reason = act.Reason
		}
		facts = append(facts, fd)
	}
	if act != nil {
		facts = append(facts, actionFact(*act))
	}
	facts = append(facts, Fact{Kind: FactAbsent, Job: j.id, Where: wherePipelineD})
	ops := []*rop{c.copyLast(j), j.commitOK, j.rare().fault}
	var why []string
	if committed {
		cops, cfacts, _ := c.outcome(j, f, "committed")
		ops, facts = append(ops, cops...), append(facts, cfacts...)
		why = append(why, c.outcomeLine(j, f, "committed"))
	} else {
		why = append(why, fmt.Sprintf("%s: the broker accepted %s; the last thing that happened to it: %s", c.desc(c.enqOK(j)), j.id, c.desc(&j.last)))
	}
	where := "moved it on its own"
	if j.brokerDLQ {
		where = "holds it in its dead-letter queue"
	}
	// A broker that records whole seconds (RabbitMQ's x-death time) says
	// nothing finer than the history does: its time is shown only when it
	// is finer and not before the job's enqueue.
	if act != nil && !act.At.IsZero() && act.At.Nanosecond() != 0 && (j.enqInv == nil || act.At.UnixNano() >= j.enqInv.t) {
		where += ", moved at " + c.rel(act.At.UnixNano())
	}
	why = append(why, fmt.Sprintf("the broker %s (%s); no process of the pipeline dead-lettered it (no dead_letter ok in the history, no dead-letter record in the store)", where, reason),
		"nothing the broker moves on its own is a pipeline outcome")
	c.report(MovedByBroker, j, fmt.Sprintf("the broker moved the job on its own (%s); the pipeline never dead-lettered it", reason), ops, facts, why...)
}

func actionWords(a adapters.BrokerAction) string {
	s := a.Action
	if a.Reason != "" {
		s += ": " + a.Reason
	}
	if a.Deliveries > 0 {
		s += ", after " + plural(a.Deliveries, "delivery", "deliveries")
	}
	if a.Job == "" && a.Count > 1 {
		s += fmt.Sprintf(", %d messages", a.Count)
	}
	return s
}

// deadAt is when and why j was dead-lettered, as the history or the store tell.
func (c *Checker) deadAt(j *job, f Final) (int64, string) {
	var t int64
	reason := ""
	switch {
	case j.deadOK != nil:
		t, reason = j.deadOK.t, c.val(j.deadOK)
	case j.rare().deadInv != nil:
		t, reason = j.rare().deadInv.t, c.val(j.rare().deadInv)
	}
	if c.finals[j].storeDead > 0 {
		d := f.Store.DeadLetters[c.finals[j].storeDead-1]
		if t == 0 && !d.At.IsZero() {
			t = d.At.UnixNano()
		}
		if reason == "" {
			reason = d.Reason
		}
	}
	return t, reason
}

// created is when j was created: its metadata's creation time, else its
// first enqueue.
func (c *Checker) created(j *job) int64 {
	if j.meta.Created > 0 {
		return j.meta.Created
	}
	if j.enqInv != nil {
		return j.enqInv.t
	}
	return 0
}

// earned says why j's dead-lettering is by design, or "" if nothing the job
// itself or the history shows justifies it.
func (c *Checker) earned(j *job, f Final) string {
	m := j.meta
	t, reason := c.deadAt(j, f)
	switch {
	case m.Poison:
		return "poison"
	case m.Stubborn || m.FailTransient > 0 && m.FailTransient >= m.MaxAttempts:
		return "stubborn"
	case m.Permanent || j.permErr:
		return "permanent"
	case m.Deadline > 0 && t > m.Deadline:
		return "past its deadline"
	case reason == ReasonAgeExceeded && m.AgeBudget > 0 && t-c.created(j) > m.AgeBudget:
		return "past its age budget"
	case reason == pipeline.ReasonIdempotencyConflict && j.conflict:
		return "refused: idempotency conflict"
	case reason == pipeline.ReasonInvalidJob && j.invalidKey:
		return "refused: invalid job"
	// The pipeline's budget is the job's, whatever number of copies the broker
	// holds (the store's ledger counts every copy's failures): copies of a job
	// whose enqueue reply was lost, run at once, spend it together.
	case m.MaxAttempts > 0 && j.spent >= m.MaxAttempts:
		return "spent its attempts on its own failures"
	case m.MaxAttempts > 0 && reason == pipeline.ReasonMaxAttempts && j.spent+c.deaths(j) >= m.MaxAttempts:
		return "its attempts went to its own failures and to workers that died holding it (a crash cannot be told from poison)"
	}
	return ""
}

// deaths is how many processes died holding j (kills and crashes outside the
// poison point, and pauses that outlasted the delivery: see jobRare.paused).
func (c *Checker) deaths(j *job) int32 {
	if j.x == nil {
		return 0
	}
	return int32(len(j.x.deaths))
}

func (c *Checker) healthyDead(j *job, f Final) {
	if !c.want(HealthyDeadLettered) {
		return
	}
	m := j.meta
	t, reason := c.deadAt(j, f)
	dops, facts := c.deadEvidence(j, f)
	ops := append(c.spends(j), dops...)
	if j.x != nil {
		ops = append(ops, j.x.deaths...)
	}
	notes := []string{"not poison", "not stubborn", "not permanent"}
	if m.FailTransient > 0 {
		notes[1] = fmt.Sprintf("fails only %d of its %d attempts", m.FailTransient, m.MaxAttempts)
	}
	switch {
	case m.Deadline > 0:
		notes = append(notes, "dead-lettered before its deadline")
	default:
		notes = append(notes, "no deadline")
	}
	switch {
	case reason == ReasonAgeExceeded && m.AgeBudget > 0:
		notes = append(notes, fmt.Sprintf("%s old at the dead-letter, within its age budget of %s", fmtDur(t-c.created(j)), fmtDur(m.AgeBudget)))
	case reason == ReasonAgeExceeded:
		notes = append(notes, "no age budget")
	}
	why := []string{
		fmt.Sprintf("%s's enqueue metadata: %s", j.id, strings.Join(notes, ", ")),
		fmt.Sprintf("it spent %d of its %d attempts on its own failures, and %d of its holders died holding it (or were paused until it was delivered again); the history shows no idempotency conflict, invalid key or permanent error", j.spent, j.meta.MaxAttempts, c.deaths(j)),
	}
	how := fmt.Sprintf("the store holds its dead-letter record (reason %s)", reason)
	if j.deadOK != nil {
		how = c.desc(j.deadOK)
	} else if j.rare().deadInv != nil {
		how = c.desc(j.rare().deadInv)
	}
	why = append(why, fmt.Sprintf("yet it was dead-lettered: %s: a healthy job was dead-lettered", how))
	c.report(HealthyDeadLettered, j, fmt.Sprintf("dead-lettered (%s) though neither poison, stubborn, permanent, past its deadline or age budget, nor refused for a proven reason", reason), ops, facts, why...)
}

func (c *Checker) checkReprocess(j *job, f Final, cancelled bool, audits map[string]pipeline.Audit) {
	if cancelled && c.want(CancelledReprocessed) {
		ops, facts, _ := c.outcome(j, f, "cancelled")
		c.report(CancelledReprocessed, j, "a cancelled job was reprocessed", append(ops, j.rare().reprocOK), facts,
			c.outcomeLine(j, f, "cancelled"),
			fmt.Sprintf("%s reprocessed it: a cancelled job has no reprocess path", c.desc(j.rare().reprocOK)))
	}
	a, ok := audits[j.id]
	switch {
	case !ok || a.Operator == "":
		if !c.want(ReprocessUnaudited) {
			return
		}
		fact := Fact{Kind: FactAbsent, Job: j.id, Where: "the store's audit entries (no entry naming an operator)"}
		why := "the store holds no audit entry for it"
		if ok {
			fact = Fact{Kind: FactAudit, Job: a.OldJob, NewJob: a.NewJob, Operator: a.Operator, At: a.At}
			why = "its audit entry names no operator"
		}
		c.report(ReprocessUnaudited, j, "reprocessed without an audit entry naming the operator", []*rop{j.deadOK, j.rare().reprocOK}, []Fact{fact},
			fmt.Sprintf("%s reprocessed %s", c.desc(j.rare().reprocOK), j.id),
			why+": reprocessing must be audited with the operator who asked")
	default:
		nj, known := c.jobs[a.NewJob]
		if known && nj.meta.Version == j.meta.Version+1 && a.NewJob != j.id {
			return
		}
		if !c.want(ReprocessUnaudited) {
			return
		}
		ops := []*rop{j.deadOK, j.rare().reprocOK}
		what := fmt.Sprintf("%s was never enqueued", a.NewJob)
		if known {
			ops = append(ops, nj.enqInv, c.enqOK(nj))
			what = fmt.Sprintf("%s is at version %d, not %d", a.NewJob, nj.meta.Version, j.meta.Version+1)
		}
		if a.NewJob == j.id {
			what = "the new job is the dead job itself"
		}
		c.report(ReprocessUnaudited, j, "the reprocessed job is not a new job at version+1", ops,
			[]Fact{{Kind: FactAudit, Job: a.OldJob, NewJob: a.NewJob, Operator: a.Operator, At: a.At}},
			fmt.Sprintf("%s reprocessed %s (version %d) as %s", c.desc(j.rare().reprocOK), j.id, j.meta.Version, a.NewJob),
			what+": a reprocessed job must be a new job at version+1")
	}
}

func (c *Checker) finishResults(f Final) {
	for _, r := range f.Store.Results {
		k := c.key(r.Key)
		j := c.jobs[r.JobID]
		if !k.hasEvent && r.EventID != "" && k.applied == 0 && c.want(OutboxOrphan) {
			var ops []*rop
			why := fmt.Sprintf("the store holds the result of %s under %s naming event %s", r.JobID, r.Key, r.EventID)
			if j != nil {
				ops = append(ops, j.commitOK, j.rare().fault)
				if j.rare().fault != nil {
					why = fmt.Sprintf("%s hit %s while it committed; ", c.desc(j.rare().fault), r.JobID) + why
				}
			}
			c.report(OutboxOrphan, j, "a result without its outbox event: "+r.Key, ops,
				[]Fact{resultFact(r), {Kind: FactAbsent, Key: r.Key, Event: r.EventID, Where: "the store's outbox (and the consumer never applied it)"}},
				why, "the outbox holds no such event and the consumer never applied it: result and event were not written together")
		}
		if k.owner != nil && c.tenant(k.owner) != "" && r.Tenant != c.tenant(k.owner) && c.want(SilentReuse) {
			o := k.owner
			c.report(SilentReuse, o, "result of one tenant stored under another's key", []*rop{k.tenantLease}, []Fact{resultFact(r)},
				fmt.Sprintf("%s (tenant %q) was leased under key %s: %s", o.id, c.tenant(o), r.Key, c.desc(k.tenantLease)),
				fmt.Sprintf("the store holds a result of tenant %q under that key: one tenant's result under another's key", r.Tenant))
		}
		if !k.committed && !k.uncertain && k.open <= 0 && k.nfails > 0 && c.want(FailedButApplied) {
			var why []string
			fails := c.keyFails[k]
			for _, x := range fails {
				why = append(why, fmt.Sprintf("%s: definitely not applied", c.desc(x)))
			}
			why = append(why, fmt.Sprintf("yet the store holds a result under %s, and no commit of it succeeded or was unknown: a failed commit was applied", r.Key))
			c.report(FailedButApplied, j, "a commit recorded as failed left its result in the store", fails, []Fact{resultFact(r)}, why...)
		}
	}
	for _, e := range f.Store.Events {
		k := c.key(e.Key)
		j := c.jobs[e.JobID]
		if !k.hasResult && c.want(OutboxOrphan) {
			c.report(OutboxOrphan, j, "an outbox event without its result: "+e.Key, nil,
				[]Fact{eventFact(e), {Kind: FactAbsent, Key: e.Key, Where: "the store's results"}},
				fmt.Sprintf("the outbox holds event %s of %s under %s, and the store holds no result under that key: result and event were not written together", e.ID, e.JobID, e.Key))
		}
		if c.opts.RelayRan && f.Drained && !e.Dead && k.applied == 0 && c.want(EventNotApplied) {
			var ops []*rop
			if j != nil {
				ops = append(ops, j.commitOK)
			}
			c.report(EventNotApplied, j, "the event was never applied by the consumer: "+e.Key, ops,
				[]Fact{eventFact(e), {Kind: FactDrained}, {Kind: FactAbsent, Event: e.ID, Where: "the history's applications (no apply ok)"}},
				fmt.Sprintf("the outbox holds event %s of %s, not parked; the relay ran and the run drained", e.ID, e.JobID),
				"the consumer never applied it: an event was lost between the outbox and the consumer")
		}
	}
}

// checkSilentReuse: a job whose payload differs from the stored result's for
// the same key must not report a successful commit.
func (c *Checker) checkSilentReuse() {
	byKey := map[uint32]*job{} // key → the job whose commit was new
	for _, j := range c.jobList {
		if j.commitOK != nil && c.val(j.commitOK) == "new" && j.commitOK.key > 0 {
			if _, ok := byKey[j.commitOK.key]; !ok {
				byKey[j.commitOK.key] = j
			}
		}
	}
	for _, j := range c.jobList {
		if j.commitOK == nil || c.val(j.commitOK) != "deduped" {
			continue
		}
		o, ok := byKey[j.commitOK.key]
		if !ok || !c.hasHash(j) || !c.hasHash(o) || c.sameHash(o, j) || !c.want(SilentReuse) {
			continue
		}
		key := c.keyList[j.commitOK.key-1].key
		c.report(SilentReuse, j, "a different payload under the same key was silently deduped instead of rejected as a conflict",
			[]*rop{o.enqInv, c.enqOK(o), o.commitOK, j.commitOK}, nil,
			fmt.Sprintf("%s (payload hash %s) committed a new result under %s: %s", o.id, short(c.hash(o)), key, c.desc(o.commitOK)),
			fmt.Sprintf("%s (payload hash %s) committed under the same key and was told deduped: %s", j.id, short(c.hash(j)), c.desc(j.commitOK)),
			"another payload under one key must be a conflict, never a silently reused result")
	}
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

func (c *Checker) checkRedacted(d pipeline.DeadLetterRecord) {
	j := c.jobs[d.JobID]
	var ops []*rop
	if j != nil {
		ops = append(ops, j.rare().deadInv, j.deadOK)
	}
	if !isReasonCode(d.Reason) {
		if c.want(DLQLeak) {
			c.report(DLQLeak, j, fmt.Sprintf("dead-letter record holds %d characters of text instead of a reason code", len(d.Reason)), ops, []Fact{deadLetterFact(d)},
				fmt.Sprintf("the store's dead-letter record of %s holds a reason of %d characters that is none of the reason codes (%s): text reached the dead-letter queue",
					d.JobID, len(d.Reason), strings.Join(reasonCodes(), ", ")))
		}
		return
	}
	for _, canary := range c.opts.Canaries {
		if (strings.Contains(d.Reason, canary) || strings.Contains(d.Key, canary)) && c.want(DLQLeak) {
			c.report(DLQLeak, j, "a planted canary reached the dead-letter record", ops, []Fact{deadLetterFact(d)},
				fmt.Sprintf("the store's dead-letter record of %s holds the canary planted in its payload", d.JobID))
		}
	}
}

// checkOrder: in a FIFO target no job of a group starts before the one of the
// group accepted before it was sent has finished.
func (c *Checker) checkOrder() {
	names := make([]string, 0, len(c.groups))
	for g := range c.groups {
		names = append(names, g)
	}
	sort.Strings(names)
	for _, g := range names {
		js := c.groups[g]
		for n := 1; n < len(js); n++ {
			next := js[n]
			if next.rare().firstLease == nil {
				continue
			}
			// prev: the latest job of the group accepted before next was first
			// sent. Enqueues that overlap (a lost reply retried while another
			// process sent) have no order the broker must keep: acknowledged
			// first is not received first.
			var prev *job
			for m := n - 1; m >= 0; m-- {
				if next.enqInv != nil && js[m].okPos < next.enqInv.pos {
					prev = js[m]
					break
				}
			}
			if prev == nil {
				continue
			}
			// Records of different processes are ordered by their clocks: the
			// earliest instant prev was finished is when its terminal call was
			// sent, so a lease answered before that is an inversion.
			if prev.rare().firstLease != nil && next.rare().firstLease.pos >= prev.rare().firstLease.pos && (prev.terminal == nil || next.rare().firstLease.pos >= prev.rare().termInv) {
				continue
			}
			if !c.want(OrderInversion) {
				continue
			}
			why := []string{fmt.Sprintf("in group %s, %s was accepted before %s was sent (%s, then %s)", g, prev.id, next.id, c.desc(c.enqOK(prev)), c.desc(next.enqInv))}
			switch {
			case prev.rare().firstLease == nil:
				why = append(why, fmt.Sprintf("%s was never leased", prev.id))
			case next.rare().firstLease.pos < prev.rare().firstLease.pos:
				why = append(why, fmt.Sprintf("%s was first leased by %s", prev.id, c.desc(prev.rare().firstLease)))
			default:
				why = append(why, fmt.Sprintf("%s finished with %s", prev.id, c.desc(prev.terminal)))
			}
			why = append(why, fmt.Sprintf("%s started before that: %s: acceptance order broken", next.id, c.desc(next.rare().firstLease)))
			c.report(OrderInversion, next, fmt.Sprintf("group %s: %s started before %s, accepted earlier, finished", g, next.id, prev.id),
				[]*rop{prev.enqInv, c.enqOK(prev), next.enqInv, next.rare().firstLease, prev.rare().firstLease, prev.terminal}, nil, why...)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// crashAfter is the latest broker crash or power loss if it came after the
// broker accepted j, else nil: a lost job's witness shows it.
func (c *Checker) crashAfter(j *job) *rop {
	if c.crash == nil || !j.accepted || c.crash.pos < j.okPos {
		return nil
	}
	return c.crash
}
