package checker

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/pipeline"
)

// Checker judges one history, operation by operation. It is not safe for
// concurrent use. Observe the operations in the history's order (by time; for
// one process, by sequence), then call Finish once with the final state.
type Checker struct {
	opts Options
	off  map[Property]bool
	weak Weakening

	n        uint32 // operations observed
	t0       int64
	jobs     map[string]*job
	jobList  []*job // in order of first appearance
	keyIdx   map[string]uint32
	keyList  []*keyState
	procs    map[string]*procState
	strs     *interner // processes, targets, error codes
	small    *interner // operation types and functions
	valIdx   map[string]uint32
	values   []string
	bigSeq   map[*rop]int64
	groups   map[string][]*job
	keyFails map[*keyState][]*rop
	execInv  map[*rop]*rop // spending executions' invokes that are not derived from their outcome
	finals   map[*job]finRef
	crashPos int64 // position of the latest broker crash (or node fault); -1: none
	// queuedAt: the jobs counted in Stats.QueuedAtBrokerFault, by the time of
	// the fault they were counted at, until their next lease.
	queuedAt map[uint32]int64
	crash    *rop // the latest broker crash or power loss, for witnesses
	// degraded: a replicated target between a node fault and its rejoin, when
	// writes may block (a synchronous standby gone) and a live holder's lease
	// may run out on it.
	degraded bool
	chanHit  bool // a fault was applied to the relay's channel
	// primary is the node the history last recorded as primary ("" before
	// any); cut the nodes a node partition holds apart until their heal.
	primary string
	cut     map[string]bool
	// cutAt: when each node cut off was cut; outlast: the timeout a
	// partition must outlast, as the history notes it (OutlastNote).
	cutAt   map[string]int64
	outlast time.Duration
	// flushWindow: the broker's flush window, as the history notes it before
	// a power cut (FlushWindowNote); 0: none noted, or none tells.
	flushWindow time.Duration
	// primaryCut: the recorded primary (or, before any is recorded, any
	// node) was partitioned and no failover has been recorded since: an ack
	// now may reach only the deposed primary, which the promoted node never
	// hears of.
	primaryCut bool
	// brokerDown: between a broker crash (or power loss) and its restart, or
	// the broker's next answer to a lease or an enqueue. An ack answered then
	// reached no broker that lives on: one that replies took it just before
	// it died, and RabbitMQ's basic.ack has no reply.
	brokerDown bool

	vs      []Violation
	perKind map[Property]int
	st      Stats
	done    bool
}

// maxPerProperty bounds the witnessed violations kept per property; the rest
// are counted.
const maxPerProperty = 5

// maxVals bounds the table of short operation values shared among stored ops.
const maxVals = 1 << 16

// valueID stores v among the values: a short one once (while the table of
// short values has room), a long one as it is.
func (c *Checker) valueID(v string) uint32 {
	if v == "" {
		return 0
	}
	if len(v) <= 32 {
		if i, ok := c.valIdx[v]; ok {
			return i
		}
		v = strings.Clone(v)
		c.values = append(c.values, v)
		i := uint32(len(c.values) - 1)
		if len(c.valIdx) < maxVals {
			c.valIdx[v] = i
		}
		return i
	}
	c.values = append(c.values, v)
	return uint32(len(c.values) - 1)
}

// shortID is the id of a short value already in the table (a value some
// stored operation holds): it never adds one.
func (c *Checker) shortID(v string) (uint32, bool) {
	if v == "" {
		return 0, true
	}
	if len(v) > 32 {
		return 0, false
	}
	i, ok := c.valIdx[v]
	return i, ok
}

func (c *Checker) val(r *rop) string {
	if r.value == metaRegen {
		return c.regenMeta(c.jobList[r.job-1], c.keyList[r.key-1].key)
	}
	return c.values[r.value]
}

func (c *Checker) setSeq(r *rop, seq int64) {
	r.seq = int32(seq)
	if int64(r.seq) != seq {
		c.bigSeq[r] = seq
	} else if len(c.bigSeq) > 0 {
		delete(c.bigSeq, r)
	}
}

func (c *Checker) seqOf(r *rop) int64 {
	if s, ok := c.bigSeq[r]; ok {
		return s
	}
	return int64(r.seq)
}

// New returns a checker for a history of a target with opts.
func New(opts Options) *Checker {
	return &Checker{opts: opts, off: disabledSet(), weak: currentWeakening(), jobs: map[string]*job{}, keyIdx: map[string]uint32{},
		procs: map[string]*procState{}, strs: newInterner(1<<16 - 1), small: newInterner(255, knownSmall...),
		valIdx: map[string]uint32{}, values: []string{""}, bigSeq: map[*rop]int64{}, groups: map[string][]*job{}, keyFails: map[*keyState][]*rop{}, execInv: map[*rop]*rop{}, crashPos: -1, perKind: map[Property]int{},
		st: Stats{Redeliveries: map[string]int{}, Faults: map[string]int{}}}
}

// Check judges a whole history held in memory with its final state.
func Check(ops []history.Op, final Final, opts Options) Result {
	c := New(opts)
	for i := range ops {
		c.observe(&ops[i])
	}
	return c.Finish(final)
}

// Observe takes in the next operation of the history.
func (c *Checker) Observe(op history.Op) { c.observe(&op) }

func (c *Checker) job(id string) *job {
	if j, ok := c.jobs[id]; ok {
		return j
	}
	j := &job{id: strings.Clone(id), idx: uint32(len(c.jobList) + 1)}
	c.jobs[j.id] = j
	c.jobList = append(c.jobList, j)
	return j
}

func (c *Checker) keyID(k string) uint32 {
	if k == "" {
		return 0
	}
	if i, ok := c.keyIdx[k]; ok {
		return i
	}
	ks := &keyState{key: strings.Clone(k)}
	c.keyList = append(c.keyList, ks)
	i := uint32(len(c.keyList))
	c.keyIdx[ks.key] = i
	return i
}

// key is the state of key k; an empty key (a final state may name one) has
// none to share: a fresh one, so that it never panics.
func (c *Checker) key(k string) *keyState {
	id := c.keyID(k)
	if id == 0 {
		return &keyState{}
	}
	return c.keyList[id-1]
}

func (c *Checker) proc(name string) *procState {
	if p, ok := c.procs[name]; ok {
		return p
	}
	p := &procState{name: strings.Clone(name)}
	p.id = uint16(c.strs.id(p.name))
	c.procs[p.name] = p
	c.restarted(p.name)
	return p
}

// restarted: a process named base.N is the N-th incarnation of base, so every
// earlier one is dead, whether or not a fault record says why: what it held
// is not held by a live worker.
func (c *Checker) restarted(name string) {
	base, n, ok := incarnation(name)
	if !ok || n < 2 {
		return
	}
	for other, q := range c.procs {
		ob, on, ok := incarnation(other)
		if !ok || ob != base || on >= n || q.faulted {
			continue
		}
		q.faulted = true
		if q.current != nil {
			if d := q.current.open(other, c); d != nil {
				d.faulted = true
			}
		}
	}
}

// incarnation splits "w2.3" into "w2" and 3; "w2" is incarnation 1.
func incarnation(name string) (string, int, bool) {
	i := strings.LastIndexByte(name, '.')
	if i <= 0 {
		return name, 1, true
	}
	n, err := strconv.Atoi(name[i+1:])
	if err != nil || n < 1 {
		return name, 1, true
	}
	return name[:i], n, true
}

// fill stores op into r.
func (c *Checker) fill(r *rop, op *history.Op, pos uint32, j *job) {
	*r = rop{t: op.T, token: op.Token, pos: pos, attempt: int32(op.Attempt),
		proc: uint16(c.strs.id(op.Process)), target: uint16(c.strs.id(op.Target)), err: uint16(c.strs.id(op.Err)),
		typ: uint8(c.smallID(op.Type)), f: uint8(c.fID(op.F))}
	c.setSeq(r, op.Seq)
	if j != nil {
		r.job = j.idx
	}
	if op.Key != "" {
		r.key = c.keyID(op.Key)
	}
}

// keep stores a copy of op for a witness.
func (c *Checker) keep(op *history.Op, pos uint32, j *job) *rop {
	r := new(rop)
	c.fill(r, op, pos, j)
	r.value = c.valueID(op.Value)
	return r
}

// copyOf stores a copy of an already stored operation (one that is about to
// be overwritten).
func (c *Checker) copyOf(r *rop) *rop {
	x := *r
	if s, ok := c.bigSeq[r]; ok {
		c.bigSeq[&x] = s
	}
	return &x
}

// copyLast stores a copy of j's latest operation.
func (c *Checker) copyLast(j *job) *rop {
	x := c.copyOf(&j.last)
	if j.lastLong && j.enqInv != nil && j.last.pos == j.enqInv.pos {
		x.value = j.enqInv.value
	}
	return x
}

func (c *Checker) observe(op *history.Op) {
	pos := c.n
	c.n++
	if pos == 0 {
		c.t0 = op.T
	}
	switch {
	case op.F == history.Circuit && op.Value == "open":
		c.st.CircuitOpens++
		if !c.chanHit && c.want(CircuitOnHealthy) {
			r := c.keep(op, pos, nil)
			c.report(CircuitOnHealthy, nil, "the relay's circuit opened while no fault had touched its channel", []*rop{r}, nil,
				fmt.Sprintf("%s opened the relay's circuit; no fault was applied to the channel before it: the breaker opened on a healthy channel", c.desc(r)))
		}
	case op.F == history.EventDead && op.Type == history.OK:
		c.st.EventsDeadLettered++
	}
	if op.F == history.Fault {
		c.faultOp(op, pos)
		return
	}
	if op.F == history.Node {
		switch {
		case op.Value == "primary":
			c.primary = strings.Clone(op.Target)
		case strings.HasPrefix(op.Value, flushWindowPrefix):
			if d, ok := note(op.Value, flushWindowPrefix); ok {
				c.flushWindow, c.st.FlushWindowMs = d, msUp(d)
			}
		case strings.HasPrefix(op.Value, outlastPrefix):
			if d, ok := note(op.Value, outlastPrefix); ok {
				c.outlast, c.st.PartitionMustOutlastMs = d, msUp(d)
			}
		}
	}
	if op.Type == history.OK && (op.F == history.Lease || op.F == history.Enqueue) {
		// The broker answered: it is up again, whether or not its restart was
		// recorded (the embedded broker's and a cluster's are not).
		c.brokerDown = false
	}
	p := c.proc(op.Process) // a new incarnation of a worker tells its predecessor died
	if op.Job == "" {
		if op.F == history.Lease && op.Type == history.Invoke {
			p.leaseInvT = op.T // a lease invoke names no job: the next lease ok is its answer
		}
		return
	}
	j := c.job(op.Job)
	// The invoke this completion answers, if the process's previous record on
	// the job is it.
	invPos := pos
	if p.lastJob == j && p.lastType == history.Invoke && p.lastF == op.F && op.Type != history.Invoke {
		invPos = p.lastPos
	}
	if op.Type == history.Invoke && p.lastJob == j && p.lastInfo != nil {
		c.checkAmbiguous(op, pos, j, p)
	}
	if op.Type == history.Invoke {
		p.invT = op.T
	}
	if op.Type == history.Info {
		if d := j.open(p.name, c); d != nil {
			d.info = true
		}
	}
	switch op.F {
	case history.Enqueue:
		c.enqueue(op, pos, j, p)
	case history.Lease:
		if op.Type == history.OK {
			c.lease(op, pos, j, p)
		}
	case history.Fence:
		switch op.Type {
		case history.OK:
			if op.Token > j.maxFence {
				j.maxFence, j.fenceOp = op.Token, c.keep(op, pos, j)
			}
		case history.Fail:
			c.end(j, p, endStale, op, pos)
		}
	case history.Extract:
		c.extract(op, pos, j, p)
	case history.Extend:
		switch op.Type {
		case history.Invoke:
			c.st.RenewalsTried++
			if d := j.open(p.name, c); d != nil {
				d.extInvT = op.T
			}
		case history.OK:
			c.st.Extends++
			if d := j.open(p.name, c); d != nil {
				d.renewed(op)
			}
		case history.Fail:
			c.end(j, p, endLeaseLost, op, pos)
		}
	case history.Commit:
		c.commit(op, pos, j, p)
	case history.Ack:
		c.ack(op, pos, j, p, invPos)
	case history.Nack:
		if op.Type != history.Invoke {
			c.end(j, p, endNack, op, pos)
		} else if d := j.open(p.name, c); d != nil {
			d.nackSent = true // the broker may redeliver before the reply is recorded
		}
	case history.DeadLetter:
		c.deadLetter(op, pos, j, p, invPos)
	case history.Cancel:
		if op.Type == history.OK {
			r := c.keep(op, pos, j)
			if j.rare().cancelOK == nil {
				j.rareW().cancelOK = r
			}
			c.terminal(j, r, invPos)
		}
	case history.Apply:
		if op.Type == history.OK {
			c.apply(op, pos, j)
		}
	case history.Reprocess:
		c.reprocess(op, pos, j)
	}
	if op.F == history.Settle {
		// The worker's bookkeeping of how a delivery ended is not a step on the
		// job: what follows it is still what follows the call before it.
		c.fillLast(j, p, op, pos)
		return
	}
	p.lastF, p.lastType, p.lastJob, p.lastPos = op.F, op.Type, j, pos
	p.lastInfo = nil
	if op.Type == history.Info && (op.F == history.Commit || op.F == history.Ack) {
		p.lastInfo = c.keep(op, pos, j)
	}
	c.fillLast(j, p, op, pos)
}

// fillLast stores op as j's latest operation, reusing what it already knows
// (the process's id, the job's key): this runs for every operation.
func (c *Checker) fillLast(j *job, p *procState, op *history.Op, pos uint32) {
	r := &j.last
	prev := r.key
	*r = rop{t: op.T, token: op.Token, pos: pos, attempt: int32(op.Attempt),
		proc: p.id, typ: uint8(c.smallID(op.Type)), f: uint8(c.fID(op.F)), job: j.idx}
	c.setSeq(r, op.Seq)
	// A long value (metadata, digests, event ids) of an operation that may be
	// replaced at the next one is not kept: the table would grow with ops.
	r.value, j.lastLong = 0, false
	if id, ok := c.shortID(op.Value); ok {
		r.value = id
	} else {
		j.lastLong = true
	}
	if op.Err != "" {
		r.err = uint16(c.strs.id(op.Err))
	}
	if op.Target != "" {
		r.target = uint16(c.strs.id(op.Target))
	}
	if op.Key != "" {
		if prev == 0 || c.keyList[prev-1].key != op.Key {
			prev = c.keyID(op.Key)
		}
		r.key = prev
	}
}

// smallID and fID are the small ids of the known types and functions without
// a map lookup.
func (c *Checker) smallID(t history.Type) int {
	switch t {
	case history.Invoke:
		return sInvoke
	case history.OK:
		return sOK
	case history.Fail:
		return sFail
	case history.Info:
		return sInfo
	}
	return c.small.id(string(t))
}

func (c *Checker) fID(f history.F) int {
	switch f {
	case history.Enqueue:
		return 5
	case history.Lease:
		return 6
	case history.Fence:
		return 7
	case history.Extend:
		return 8
	case history.Extract:
		return 9
	case history.Commit:
		return 10
	case history.Ack:
		return 11
	}
	return c.small.id(string(f))
}

func (c *Checker) faultOp(op *history.Op, pos uint32) {
	// A node fault of a replicated broker may lose what the broker knew of
	// leases and acks (replicated asynchronously): like a crash of the broker,
	// it explains a redelivery of anything delivered before it.
	nodeFault := op.Value == "node_kill" || op.Value == "node_partition" || op.Value == "failover" || op.Value == "rejoin"
	if op.Value == "broker_crash" || op.Value == "power_loss" || nodeFault {
		c.crashPos = int64(pos)
		c.crash = c.keep(op, pos, nil)
	}
	if op.Value == "broker_crash" || op.Value == "power_loss" {
		c.st.AtRisk += c.unfinished()
		c.countQueued(op.T)
		c.brokerDown = true
		if acked := c.newestUnfinishedAck(); acked > 0 {
			ms := max(msUp(time.Duration(op.T-acked)), 1)
			if c.st.NewestAckBeforeBrokerFaultMs == 0 || ms < c.st.NewestAckBeforeBrokerFaultMs {
				c.st.NewestAckBeforeBrokerFaultMs = ms
			}
		}
	}
	if op.Value == "power_loss" {
		c.st.AckedInFlushWindow += c.unfinishedSince(op.T - int64(c.flushWindow))
	}
	if op.Value == "broker_restart" {
		c.brokerDown = false
	}
	if op.Value == "node_kill" && op.Target != "" && op.Target == c.primary {
		c.st.AtRiskAtPrimaryKill += c.unfinished()
		c.st.LeasesAtPrimaryKill += c.held()
		if acked := c.newestUnfinishedAck(); acked > 0 {
			ms := max(msUp(time.Duration(op.T-acked)), 1)
			if c.st.NewestAckBeforePrimaryKillMs == 0 || ms < c.st.NewestAckBeforePrimaryKillMs {
				c.st.NewestAckBeforePrimaryKillMs = ms
			}
		}
	}
	switch op.Value {
	case "node_partition":
		if c.cut == nil {
			c.cut = map[string]bool{}
		}
		c.cut[strings.Clone(op.Target)] = true
		if c.primary == "" || op.Target == c.primary {
			c.primaryCut = true
		}
		if c.cutAt == nil {
			c.cutAt = map[string]int64{}
		}
		if _, ok := c.cutAt[op.Target]; !ok {
			c.cutAt[strings.Clone(op.Target)] = op.T
		}
	case "node_heal":
		delete(c.cut, op.Target)
		c.healed(op.Target, op.T)
	case "failover", "rejoin":
		c.primaryCut = false
		if op.Value == "rejoin" {
			// The final heal ends every partition still in force.
			for n := range c.cutAt {
				c.healed(n, op.T)
			}
		}
	}
	if nodeFault {
		c.degraded = op.Value != "rejoin"
	}
	if op.Key == faults.LinkChannel {
		c.chanHit = true
	}
	c.st.Faults[op.Value]++
	if op.Key != "" {
		c.st.Faults[op.Value+":"+op.Key]++
	}
	if op.Job != "" {
		j := c.job(op.Job)
		f := c.keep(op, pos, j)
		j.rareW().fault = f
		// A job that kills its worker at the poison point spends an attempt: the
		// crash is its own doing.
		if op.Value == "crash" && op.Key == string(pipeline.Poison) {
			if p, ok := c.procs[op.Target]; ok && p.hasExtr && p.extract.job == j.idx {
				c.spendAttempt(j, c.copyOf(&p.extract), f)
				p.hasExtr = false
			}
		}
	}
	if op.Target == "" {
		return
	}
	if op.Value == "kill" || op.Value == "pause" || strings.HasPrefix(op.Value, "crash") {
		c.proc(op.Target).faulted = true
	}
	// A fault on a process (or on its slot's link: "w2" covers "w2.3")
	// explains what happens to the delivery it holds.
	deadly := (op.Value == "kill" || strings.HasPrefix(op.Value, "crash")) && op.Key != string(pipeline.Poison)
	for name, p := range c.procs {
		if p.current == nil || !(name == op.Target || strings.HasPrefix(name, op.Target+".") || nodeFault) {
			continue
		}
		if d := p.current.open(name, c); d != nil {
			d.faulted = true
			// A worker that dies holding a job looks like poison to the
			// pipeline, which must count it to bound a crash loop: keep the
			// deaths that justify a dead-letter at the budget.
			if j := p.current; deadly && len(j.rareW().deaths) <= int(j.budget()) {
				j.x.deaths = append(j.x.deaths, c.keep(op, pos, j))
			} else if op.Value == "pause" {
				j.rareW().paused = c.keep(op, pos, j)
			}
		}
	}
}

// unfinished counts the jobs the broker acknowledged that have no terminal
// outcome yet: what a broker fault puts at risk now.
func (c *Checker) unfinished() int {
	n := 0
	for _, j := range c.jobList {
		if j.accepted && j.terminal == nil {
			n++
		}
	}
	return n
}

// countQueued counts, at a broker fault at time t, the jobs the broker
// acknowledged that have no outcome and no holder a fault left alone: queued,
// or held by a worker a fault hit. Only the broker has them. A job a live
// worker holds may yet be finished by it whatever the broker forgets (a
// replay of a shrunk power loss passed so, its one job leased just before the
// cut), or be given back when a renewal finds its lease forgotten: at risk
// (AtRisk), not certainly lost.
func (c *Checker) countQueued(t int64) {
	for _, j := range c.jobList {
		if !j.accepted || j.terminal != nil {
			continue
		}
		held := false
		for i := range j.dels {
			if d := &j.dels[i]; d.ended == open && !d.faulted {
				held = true
				break
			}
		}
		if !held {
			c.st.QueuedAtBrokerFault++
			if c.queuedAt == nil {
				c.queuedAt = map[uint32]int64{}
			}
			c.queuedAt[j.idx] = t
		}
	}
}

// unfinishedSince counts the jobs the broker acknowledged after t (every one
// when no flush window is noted) that have no terminal outcome yet: what a
// power cut at t+window puts at risk in the broker's own terms.
func (c *Checker) unfinishedSince(t int64) int {
	n := 0
	for _, j := range c.jobList {
		if j.accepted && j.terminal == nil {
			if r := c.enqOK(j); c.flushWindow <= 0 || (r != nil && r.t > t) {
				n++
			}
		}
	}
	return n
}

// healed ends node's partition at t: one that lasted the timeout the history
// says it must outlast counts.
func (c *Checker) healed(node string, t int64) {
	from, ok := c.cutAt[node]
	if !ok {
		return
	}
	delete(c.cutAt, node)
	if c.outlast > 0 && time.Duration(t-from) >= c.outlast {
		c.st.PartitionsOutlasting++
	}
}

// newestUnfinishedAck is the time of the newest acknowledgement of an
// enqueue whose job has no outcome yet (0: none).
func (c *Checker) newestUnfinishedAck() int64 {
	var t int64
	for _, j := range c.jobList {
		if j.accepted && j.terminal == nil {
			if r := c.enqOK(j); r != nil {
				t = max(t, r.t)
			}
		}
	}
	return t
}

// held counts the jobs with a delivery leased and not yet ended: the leases
// (and fencing tokens) a node fault puts at risk now.
func (c *Checker) held() int {
	n := 0
	for _, j := range c.jobList {
		for i := range j.dels {
			if j.dels[i].ended == open {
				n++
				break
			}
		}
	}
	return n
}

// open returns the open delivery of j held by process proc.
func (j *job) open(proc string, c *Checker) *delivery {
	if len(j.dels) == 0 {
		return nil
	}
	var id uint16
	if p, ok := c.procs[proc]; ok {
		id = p.id
	} else {
		id = uint16(c.strs.id(proc))
	}
	for i := len(j.dels) - 1; i >= 0; i-- {
		if d := &j.dels[i]; d.proc == id && d.ended == open {
			return d
		}
	}
	return nil
}

func (c *Checker) end(j *job, p *procState, how endKind, op *history.Op, pos uint32) {
	if d := j.open(p.name, c); d != nil {
		d.ended = how
		d.end = c.keep(op, pos, j)
	}
	if p.current == j {
		p.current = nil
	}
}

// endWith is end with the operation already stored.
func (c *Checker) endWith(j *job, p *procState, how endKind, r *rop) {
	if d := j.open(p.name, c); d != nil {
		d.ended = how
		d.end = r
	}
	if p.current == j {
		p.current = nil
	}
}

func (c *Checker) terminal(j *job, r *rop, invPos uint32) {
	if j.terminal == nil {
		j.terminal = r
		if j.x != nil && j.x.firstLease != nil {
			j.x.termInv = invPos
		}
	}
}

func (c *Checker) enqueue(op *history.Op, pos uint32, j *job, p *procState) {
	switch op.Type {
	case history.Invoke:
		inc16(&j.enqueues)
		inc16(&j.enqOpen)
		p.enqCut = len(c.cut) > 0
		if p.enqCut {
			c.st.EnqueuesInPartition++
		}
		if j.enqInv == nil {
			var m pipeline.JobMeta
			parseMeta(op.Value, &m)
			r := new(rop)
			c.fill(r, op, pos, j)
			if c.setMeta(j, m, op.Value, op.Key) {
				r.value = metaRegen
			} else {
				r.value = c.valueID(op.Value)
			}
			j.enqInv = r
		}
	case history.OK:
		dec16(&j.enqOpen)
		if p.enqCut {
			c.st.AckedInPartition++
			p.enqCut = false
		}
		if !j.accepted {
			j.accepted = true
			c.setEnqOK(j, op, pos)
			c.st.Accepted++
			if g := c.group(j); g != "" {
				c.groups[g] = append(c.groups[g], j)
			}
		}
	case history.Fail:
		dec16(&j.enqOpen)
		p.enqCut = false
		if !j.accepted && len(j.rare().enqFails) < 4 {
			x := j.rareW()
			x.enqFails = append(x.enqFails, c.keep(op, pos, j))
		}
	case history.Info:
		dec16(&j.enqOpen)
		p.enqCut = false
		inc16(&j.enqInfos)
	}
}

func (c *Checker) lease(op *history.Op, pos uint32, j *job, p *procState) {
	r := c.keep(op, pos, j)
	if j.deadOK != nil && j.enqueues < 2 && c.want(Resurrected) {
		c.report(Resurrected, j, "a dead-lettered job was delivered again", []*rop{j.deadOK, r}, nil,
			fmt.Sprintf("%s dead-lettered %s; %s delivered it again; it was enqueued once: a dead job came back", c.desc(j.deadOK), j.id, c.desc(r)))
	}
	if t, ok := c.queuedAt[j.idx]; ok {
		// Asked for before the fault and answered after it: the broker may
		// have handed the job out before it went down, to a live worker.
		if p.leaseInvT < t {
			c.st.QueuedAtBrokerFault--
		}
		delete(c.queuedAt, j.idx)
	}
	if !j.leased {
		j.leased = true
		if c.opts.FIFO && c.group(j) != "" {
			j.rareW().firstLease = r
		}
		c.checkEnqueueFailed(j, r)
	} else {
		c.classifyRedelivery(r, j, p)
	}
	j.maxLeaseTok = max(j.maxLeaseTok, op.Token)
	c.st.MaxAttempts = max(c.st.MaxAttempts, op.Attempt)
	c.checkKey(op, r, j)
	// Keep the open deliveries and this one: the next lease is explained by
	// this one, a commit or ack by its own process's.
	kept := j.dels[:0]
	for _, d := range j.dels {
		if d.ended == open {
			kept = append(kept, d)
		}
	}
	j.dels = append(kept, delivery{proc: r.proc, token: op.Token, lease: r, leaseInvT: p.leaseInvT})
	j.dels[len(j.dels)-1].renewed(op)
	if p.current != nil && p.current != j {
		// The process moved on: whatever it held before is abandoned.
		if d := p.current.open(p.name, c); d != nil && d.ended == open {
			d.ended = endLeaseLost
		}
	}
	p.current = j
}

// inExtract reports whether proc is running j's work now.
func (c *Checker) inExtract(proc string, j *job) bool {
	p, ok := c.procs[proc]
	return ok && p.hasExtr && p.extract.job == j.idx
}

// classifyRedelivery explains a delivery of a job that was delivered before.
func (c *Checker) classifyRedelivery(r *rop, j *job, p *procState) {
	prev := &j.dels[len(j.dels)-1]
	why := ""
	switch {
	case r.token != 0 && r.token < prev.token:
		// A lower token than the previous delivery's: the broker granted this
		// one first, and it reached its holder late (a JetStream message
		// delivered to an earlier pull, a worker starved past its ack wait:
		// gate runs under load, the newer delivery still open or already
		// acked). It is no redelivery after prev, and when the broker granted
		// it is not in the history, so no preemption can be shown; the
		// holder's fence stops its commit.
		why = "lease_expiry"
	case prev.ended == endNack || prev.nackSent:
		c.st.Redeliveries["retry"]++
		return
	case prev.faulted:
		why = "fault"
		// The holder was paused and its delivery is still open: to the
		// pipeline its attempt died (Ledger.Crashed), as under a kill.
		if x := j.rare(); prev.ended == open && x.paused != nil && len(x.deaths) <= int(j.budget()) {
			j.x.deaths = append(j.x.deaths, x.paused)
			j.x.paused = nil
		}
	case prev.info || prev.ended == endAckFailed:
		why = "lost_reply"
	case prev.ended == endAck && prev.end != nil && c.crashPos > int64(prev.end.pos):
		// The broker was killed after the ack: a broker that writes acks lazily
		// delivers the job again after its restart. The pipeline must dedupe it.
		why = "broker_restart"
	case prev.ended == endAck && prev.ackDown:
		// Acked between the broker's crash and its restart (a gate run on
		// RabbitMQ: the ack 2 ms after the crash was recorded, the job
		// delivered again after the restart).
		why = "broker_restart"
	case prev.ended == endAck && prev.ackCut:
		// Acked while the primary was cut off, before the failover was
		// recorded: the deposed primary may have taken the ack alone, and the
		// promoted node delivers the job again (seen on existing clusters,
		// where the new primary delivers before durachk sees it lead).
		why = "failover"
	case prev.ended == endAck && prev.ackLate:
		// Acked after its lease may have run out (the ack answered after
		// the lease, counted from its ask): the broker may have handed the
		// job out again meanwhile, or ignore the ack (seen on SQS FIFO, a
		// loaded machine). The fence and the idempotency key must absorb it.
		why = "lease_expiry"
	case prev.ended == endAck || prev.ended == endDeadLetter:
		if j.enqueues > 1 {
			why = "duplicate_enqueue"
		}
	case prev.ended == endStale || prev.ended == endLeaseLost:
		why = "lease_expiry"
	case prev.ended == open && j.enqueues > 1:
		why = "duplicate_enqueue" // another message of the same job
	case prev.ended == open && c.crashPos > int64(prev.lease.pos):
		// The broker was killed while the job was held: a restarted broker may
		// forget the lease (JetStream writes consumer state lazily).
		why = "broker_restart"
	case prev.ended == open && c.degraded:
		why = "failover" // the holder's calls blocked on a degraded cluster
	case prev.ended == open && prev.broke:
		// The holder renewed its lease only after it may have run out (its
		// lease answer or a store call came late on a loaded machine): the
		// broker may have queued the job for redelivery before the renewal
		// and answered it OK all the same (JetStream, beside two busy loops:
		// a 1 s lease answered 1.05 s after its ask, renewed 0.4 s later,
		// the job handed to another worker 6 ms after that). Late, not
		// preempted.
		why = "lease_expiry"
	case prev.ended == open && prev.lapsed(p.leaseInvT):
		// The holder was renewing its lease, and its own last renewal had
		// definitely run out when this lease was asked for: late, not preempted.
		why = "lease_expiry"
	case prev.ended == open && prev.ranOut(p.leaseInvT) && (!c.inExtract(c.strs.str(int(prev.proc)), j) || j.meta.Quick):
		// Its lease had run out while the holder was outside the work (a
		// store call slow on a loaded machine, seen in the gate), or inside
		// the work of a job with no slow step (a worker starved past its
		// lease: the gate beside two busy loops): the pipeline renews only
		// during a slow step, and its fence makes the late commit fail.
		// Late, not preempted; a holder working a slow step past its lease
		// without renewing it is (the no-heartbeat sabotage).
		why = "lease_expiry"
	case prev.ended == open && !prev.ranOut(p.leaseInvT) && prev.renewInvT < prev.renewOK && prev.mayHaveRunOut(r.t):
		// The holder's lease answer came so late (seen: 2.4 s on a
		// synchronous standby's failover, for a 2.3 s lease) that, counted
		// from when it asked, the lease may have run out before this one was
		// granted: the broker kept its lease; the holder held on to one it no
		// longer had, and its fence must stop its commit. Only where the
		// history holds the ask (a witness replayed alone has answers only).
		why = "lease_expiry"
	case prev.ended == open:
		why = "lease_expiry"
		holder := c.strs.str(int(prev.proc))
		if hp, ok := c.procs[holder]; (!ok || !hp.faulted) && !c.opts.ApproximateLeases && c.want(Preempted) {
			c.report(Preempted, j, fmt.Sprintf("%s leased the job while %s, alive and unfaulted, still held it", p.name, holder),
				[]*rop{prev.lease, r}, nil,
				fmt.Sprintf("%s leased %s (token %d) and never ended that delivery; no fault hit %s", c.desc(prev.lease), j.id, prev.token, holder),
				fmt.Sprintf("%s leased it again (token %d) while %s still held it: the broker preempted a live holder", c.desc(r), r.token, holder))
		}
	default:
		why = "lease_expiry"
	}
	if why == "" {
		c.st.Unexplained++
		if c.want(UnexplainedDuplicate) {
			c.report(UnexplainedDuplicate, j, "delivered again after it was "+prev.ended.String()+" with no fault, lost reply or duplicate enqueue to explain it",
				[]*rop{prev.lease, prev.end, r}, nil,
				fmt.Sprintf("%s leased %s and %s ended that delivery (%s); no fault, lost reply, broker restart or second enqueue followed", c.desc(prev.lease), j.id, c.desc(prev.end), prev.ended),
				fmt.Sprintf("%s delivered it again: nothing explains the duplicate", c.desc(r)))
		}
		return
	}
	c.st.Explained++
	c.st.Redeliveries[why]++
}

func (c *Checker) checkKey(op *history.Op, r *rop, j *job) {
	if op.Key == "" {
		j.invalidKey = true // the worker could not build a key
		return
	}
	tenant, ok := pipeline.KeyTenant(op.Key)
	if !ok {
		j.invalidKey = true
	}
	jt := c.tenant(j)
	if (!ok || (jt != "" && tenant != jt)) && c.want(KeyWithoutTenant) {
		c.report(KeyWithoutTenant, j, fmt.Sprintf("key %q does not carry the job's tenant %q", op.Key, jt), []*rop{r}, nil,
			fmt.Sprintf("%s was enqueued for tenant %q; %s used key %q, which names no valid tenant or another one", j.id, jt, c.desc(r), op.Key))
	}
	k := c.keyList[r.key-1]
	switch {
	case k.owner == nil:
		k.owner, k.tenantLease = j, r
	case jt != "" && c.tenant(k.owner) != jt && c.want(TenantsShareKey):
		o := k.owner
		c.report(TenantsShareKey, j, fmt.Sprintf("tenants %q and %q share key %q", c.tenant(o), jt, op.Key),
			[]*rop{o.enqInv, c.enqOK(o), k.tenantLease, r}, nil,
			fmt.Sprintf("%s (tenant %q) was leased under key %q by %s", o.id, c.tenant(o), op.Key, c.desc(k.tenantLease)),
			fmt.Sprintf("%s (tenant %q) was leased under the same key by %s: two tenants share a key", j.id, jt, c.desc(r)))
	}
}

func (c *Checker) extract(op *history.Op, pos uint32, j *job, p *procState) {
	switch op.Type {
	case history.Invoke:
		c.st.Executions++
		c.fill(&p.extract, op, pos, j)
		p.extract.value, _ = c.shortID(op.Value)
		p.hasExtr = true
		if j.meta.Deadline > 0 && op.T > j.meta.Deadline+c.weak.DeadlineSlack && c.want(AfterDeadline) {
			r := c.keep(op, pos, j)
			c.report(AfterDeadline, j, "work started after the job's deadline", []*rop{r}, nil,
				fmt.Sprintf("%s's deadline is %s (enqueue metadata); %s started work on it %s after it",
					j.id, c.rel(j.meta.Deadline), c.desc(r), fmtDur(op.T-j.meta.Deadline)))
		}
	case history.Fail:
		// Only the job's own failures spend its budget: a transient or
		// permanent error of the work itself. An infrastructure failure (the
		// lease lost, the channel down) is not the job's doing.
		var fail *rop
		if op.Err == pipeline.Transient.String() || op.Err == pipeline.Permanent.String() {
			fail = c.keep(op, pos, j)
			var inv *rop
			if p.hasExtr && p.extract.job == j.idx {
				inv = c.copyOf(&p.extract)
			}
			c.spendAttempt(j, inv, fail)
		}
		if op.Err == pipeline.Permanent.String() {
			j.permErr = true
			// A retry is a delivery leased after the first permanent error: a
			// holder that leased the job before it (a zombie resumed after a
			// pause, a second copy) ran it without knowing (found by explore).
			retried := true
			if first := j.rare().permFail; first != nil {
				if d := j.open(p.name, c); d != nil && d.lease != nil && d.lease.pos < first.pos {
					retried = false
				}
				// The first failure's holder was killed, crashed or paused
				// before it could dead-letter the job: what it learnt died with
				// it, and the next holder runs the job afresh. Its failure is
				// the one a later run must not repeat.
				if hp, ok := c.procs[c.strs.str(int(first.proc))]; ok && hp.faulted && j.deadOK == nil {
					j.x.permFail, retried = fail, false
				}
			}
			if j.enqueues < 2 && retried {
				inc16(&j.permFails)
				switch {
				case j.permFails == 1:
					j.rareW().permFail = fail
				case j.permFails == 2 && c.want(PermanentRetried):
					first := j.rare().permFail
					c.report(PermanentRetried, j, "a permanent error was retried", []*rop{first, fail}, nil,
						fmt.Sprintf("%s failed with a permanent error", c.desc(first)),
						fmt.Sprintf("%s ran it again and it failed again: a permanent error was retried (%s was enqueued once)", c.desc(fail), j.id))
				}
			}
		}
		p.hasExtr = false
	case history.OK:
		p.hasExtr = false
	}
}

// setEnqOK stores j's first enqueue ok: as its time, sequence and position
// when the rest of it is its invoke's, else whole.
func (c *Checker) setEnqOK(j *job, op *history.Op, pos uint32) {
	inv := j.enqInv
	if inv != nil && op.Token == 0 && op.Attempt == 0 && op.Value == "" && op.Err == "" && op.Target == "" &&
		int64(int32(op.Seq)) == op.Seq && c.strs.str(int(inv.proc)) == op.Process &&
		(inv.key == 0 && op.Key == "" || inv.key > 0 && c.keyList[inv.key-1].key == op.Key) {
		j.okT, j.okSeq, j.okPos = op.T, int32(op.Seq), pos
		return
	}
	j.rareW().enqOK = c.keep(op, pos, j)
}

// enqOK is j's first enqueue ok as a stored operation, or nil.
func (c *Checker) enqOK(j *job) *rop {
	if !j.accepted {
		return nil
	}
	if x := j.rare().enqOK; x != nil {
		return x
	}
	inv := j.enqInv
	return &rop{t: j.okT, seq: j.okSeq, pos: j.okPos, job: j.idx, key: inv.key, proc: inv.proc, typ: sOK, f: uint8(c.fID(history.Enqueue))}
}

// spends returns j's spending executions as operations: each extract invoke,
// then its failure or crash.
func (c *Checker) spends(j *job) []*rop {
	if j.spend == nil {
		return nil
	}
	out := make([]*rop, 0, 2*len(*j.spend))
	for i := range *j.spend {
		e := &(*j.spend)[i]
		inv, ok := c.execInv[e.out]
		switch {
		case ok && inv == nil:
			out = append(out, e.out)
			continue
		case !ok:
			o := e.out
			inv = &rop{t: e.invT, seq: e.invSeq, pos: e.invPos, job: o.job, key: o.key, proc: o.proc, token: o.token, attempt: o.attempt,
				typ: sInvoke, f: o.f}
		}
		out = append(out, inv, e.out)
	}
	return out
}

// firstNew is j's first commit ok with value new.
func (j *job) firstNew() *rop {
	if x := j.rare().newCommit; x != nil {
		return x
	}
	return j.commitOK
}

// budget is how many executions the job may spend: each message of the job
// has its own, so a producer that sent twice doubles it.
func (j *job) budget() int32 { return j.meta.MaxAttempts * int32(max(j.enqueues, 1)) }

func (c *Checker) spendAttempt(j *job, inv, outcome *rop) {
	j.spent++
	c.st.SpentAttempts++
	b := j.budget() + c.weak.BudgetSlack
	if j.meta.MaxAttempts <= 0 || j.spent <= b+1 {
		// Every spending execution up to one past the budget: the witness of
		// an overrun holds them all.
		if j.spend == nil {
			j.spend = new([]execution)
		}
		e := execution{out: outcome}
		if inv == nil {
			c.execInv[outcome] = nil // no invoke seen: the outcome alone
		} else {
			e.invT, e.invSeq, e.invPos = inv.t, inv.seq, inv.pos
			_, big := c.bigSeq[inv]
			if big || inv.value != 0 || inv.err != 0 || inv.target != 0 || inv.proc != outcome.proc || inv.job != outcome.job ||
				inv.key != outcome.key || inv.token != outcome.token || inv.attempt != outcome.attempt || inv.f != outcome.f {
				c.execInv[outcome] = inv
			}
		}
		*j.spend = append(*j.spend, e)
	}
	if j.meta.MaxAttempts > 0 && j.spent == b+1 && c.want(OverBudget) {
		why := []string{fmt.Sprintf("%s may spend %s (max %d per message, %s)", j.id, plural(int(b), "attempt", "attempts"), j.meta.MaxAttempts, plural(int(max(j.enqueues, 1)), "message", "messages"))}
		sp := c.spends(j)
		for i := 0; i+1 < len(sp); i += 2 {
			why = append(why, fmt.Sprintf("execution %d: %s, then %s", i/2+1, c.desc(sp[i]), c.desc(sp[i+1])))
		}
		why = append(why, fmt.Sprintf("%d executions failed on the job's own account: one more than its budget", j.spent))
		c.report(OverBudget, j, fmt.Sprintf("executed %d times on its own account, budget %d", j.spent, b), sp, nil, why...)
	}
}

func (c *Checker) commit(op *history.Op, pos uint32, j *job, p *procState) {
	var k *keyState
	if op.Key != "" {
		k = c.key(op.Key)
	}
	switch op.Type {
	case history.Invoke:
		if k != nil {
			k.open++
		}
		p.commitInv = pos + 1
	case history.OK:
		r := c.keep(op, pos, j)
		if k != nil {
			k.open--
		}
		c.checkStaleCommit(op, r, j, p)
		if op.Value == "new" {
			inc16(&j.news)
			if j.news == 1 && j.commitOK != nil {
				j.rareW().newCommit = r // else it is commitOK
			}
			if k != nil {
				k.news++
				if k.newOp == nil {
					k.newOp = r
				}
			}
			switch {
			case k != nil && k.news == 2 && c.want(DuplicateEffect):
				c.report(DuplicateEffect, j, fmt.Sprintf("two new results for key %s", op.Key), []*rop{k.newOp, r}, nil,
					fmt.Sprintf("%s wrote a new result under %s", c.desc(k.newOp), op.Key),
					fmt.Sprintf("%s wrote a new result under the same key: the effect was applied twice", c.desc(r)))
			case j.news == 2 && (k == nil || k.news < 2) && c.want(DuplicateEffect):
				first := j.firstNew()
				c.report(DuplicateEffect, j, fmt.Sprintf("two new results for job %s under different keys", j.id), []*rop{first, r}, nil,
					fmt.Sprintf("%s wrote a new result for %s", c.desc(first), j.id),
					fmt.Sprintf("%s wrote another new result for the same job: the effect was applied twice", c.desc(r)))
			}
		} else {
			c.st.Deduped++
			if k != nil && !k.committed && !k.uncertain && k.open <= 0 && k.nfails > 0 && c.want(FailedButApplied) {
				fails := c.keyFails[k]
				why := []string{}
				for _, f := range fails {
					why = append(why, fmt.Sprintf("%s: definitely not applied", c.desc(f)))
				}
				why = append(why, fmt.Sprintf("%s found the result already there (deduped); no commit of %s had succeeded or was unknown before: a failed commit was applied", c.desc(r), op.Key))
				c.report(FailedButApplied, j, "a commit recorded as failed was applied: the next commit of the key deduped", append(slices.Clone(fails), r), nil, why...)
			}
		}
		if k != nil {
			k.committed = true
		}
		if j.commitOK == nil {
			j.commitOK = r
		}
		if op.Token > j.maxFence {
			j.maxFence, j.fenceOp = op.Token, r
		}
	case history.Fail:
		if k != nil {
			k.open--
			if !k.committed && !k.uncertain && k.nfails < 4 {
				k.nfails++
				c.keyFails[k] = append(c.keyFails[k], c.keep(op, pos, j))
			}
		}
		switch op.Err {
		case "stale_token":
			c.st.StaleRejected++
			c.end(j, p, endStale, op, pos)
		case pipeline.ReasonIdempotencyConflict:
			c.st.Conflicts++
			j.conflict = true
		}
	case history.Info:
		if k != nil {
			k.open--
			k.uncertain = true
		}
		c.st.Ambiguous++
	}
}

// checkStaleCommit: a commit accepted with a token below one that another
// delivery of the same message fenced before this commit was sent. Comparing
// with the fence that completed before the commit's invoke (not merely one
// recorded before its ok) makes the order certain: the store saw the newer
// token first, whatever the order the records reached the history in.
func (c *Checker) checkStaleCommit(op *history.Op, r *rop, j *job, p *procState) {
	if j.enqueues > 1 || j.fenceOp == nil || op.Token >= j.maxFence {
		return
	}
	// The commit's own invoke: its process's previous record on the job.
	invPos := r.pos
	if p.lastJob == j && p.lastType == history.Invoke && p.lastF == history.Commit {
		invPos = p.lastPos
	}
	if j.fenceOp.pos > invPos || !c.want(StaleCommit) {
		return
	}
	d := j.open(p.name, c)
	var lease *rop
	if d != nil {
		lease = d.lease
	}
	why := []string{fmt.Sprintf("%s fenced %s with token %d", c.desc(j.fenceOp), j.id, j.maxFence)}
	if lease != nil {
		why = append([]string{fmt.Sprintf("%s leased %s with token %d", c.desc(lease), j.id, lease.token)}, why...)
	}
	why = append(why, fmt.Sprintf("after that, %s was accepted with token %d < %d: a stale token committed", c.desc(r), op.Token, j.maxFence))
	c.report(StaleCommit, j, fmt.Sprintf("commit with token %d accepted after token %d was fenced", op.Token, j.maxFence), []*rop{lease, j.fenceOp, r}, nil, why...)
}

func (c *Checker) ack(op *history.Op, pos uint32, j *job, p *procState, invPos uint32) {
	switch op.Type {
	case history.Invoke:
		return
	case history.OK:
		r := c.keep(op, pos, j)
		if op.Value == "in_commit" {
			c.st.AcksInCommit++
			// The ack was part of the commit: its call was the commit's, sent
			// before the ack's records, which follow the commit's answer.
			if p.commitInv > 0 {
				invPos = p.commitInv - 1
			}
		}
		// Tokens count the deliveries of one message: with two messages of the
		// job (a producer retry) they are not comparable.
		if op.Token < j.maxLeaseTok && c.opts.FencedAck && j.enqueues == 1 && c.want(StaleAck) {
			var lease, newest *rop
			if d := j.open(p.name, c); d != nil {
				lease = d.lease
			}
			for _, d := range j.dels {
				if d.token == j.maxLeaseTok {
					newest = d.lease
				}
			}
			c.report(StaleAck, j, fmt.Sprintf("ack with token %d accepted after a delivery with token %d", op.Token, j.maxLeaseTok),
				[]*rop{lease, newest, r}, nil,
				fmt.Sprintf("%s handed %s out with token %d", c.desc(newest), j.id, j.maxLeaseTok),
				fmt.Sprintf("%s was accepted with token %d; the broker claims fenced acks: it accepted a stale ack", c.desc(r), op.Token))
		}
		c.terminal(j, r, invPos)
		if d := j.open(p.name, c); d != nil {
			// Late when the broker may have taken it after the lease ran out:
			// its answer came after the lease, counted from the lease's ask,
			// may have run out (seen on the SQS emulator beside two busy
			// loops: a delete asked within the lease, answered OK 1.6 s after
			// it ran out, the job handed out again), or after a renewal that
			// came too late to keep it (broke: JetStream had handed the job
			// out again before the ack).
			d.ackLate = d.ackLate || d.broke || d.mayHaveRunOut(op.T)
			d.ackCut = d.ackCut || c.primaryCut
			d.ackDown = d.ackDown || c.brokerDown
		}
		c.endWith(j, p, endAck, r)
	case history.Fail, history.Info:
		if op.Type == history.Info {
			c.st.Ambiguous++
		}
		c.end(j, p, endAckFailed, op, pos)
	}
}

// checkAmbiguous: after a commit or ack whose outcome is unknown, the next step
// of the process on the job is never the one its failure (or, for a commit,
// its success) would call for.
func (c *Checker) checkAmbiguous(op *history.Op, pos uint32, j *job, p *procState) {
	prev := p.lastInfo
	prevF := history.F(c.small.str(int(prev.f)))
	as := ""
	switch {
	case op.F == history.DeadLetter || op.F == history.Nack:
		as = "failed"
	case op.F == history.Ack && prevF == history.Commit:
		as = "succeeded"
	}
	if as == "" || !c.want(AmbiguousResolved) {
		return
	}
	r := c.keep(op, pos, j)
	c.report(AmbiguousResolved, j, fmt.Sprintf("%s's %s timed out (outcome unknown) and it went straight to %s, as if the %s had %s",
		op.Process, prevF, op.F, prevF, as), []*rop{prev, r}, nil,
		fmt.Sprintf("%s: the outcome is unknown", c.desc(prev)),
		fmt.Sprintf("the next thing %s did with %s was %s: it acted as if the %s had %s", op.Process, j.id, c.desc(r), prevF, as))
}

func (c *Checker) deadLetter(op *history.Op, pos uint32, j *job, p *procState, invPos uint32) {
	switch op.Type {
	case history.Invoke:
		inc16(&j.dlOpen)
		r := c.keep(op, pos, j)
		if j.rare().deadInv == nil {
			j.rareW().deadInv = r
		}
		if !isReasonCode(op.Value) && c.want(DLQLeak) {
			c.report(DLQLeak, j, "a dead-letter reason that is not a reason code", []*rop{r}, nil,
				fmt.Sprintf("%s gave a reason of %d characters that is none of the reason codes (%s): text reached the dead-letter queue",
					c.desc(r), len(op.Value), strings.Join(reasonCodes(), ", ")))
		}
	case history.OK:
		dec16(&j.dlOpen)
		r := c.keep(op, pos, j)
		if j.deadOK == nil {
			j.deadOK = r
		}
		c.terminal(j, r, invPos)
		if d := j.open(p.name, c); d != nil && j.meta.Deadline > 0 && d.lease.t > j.meta.Deadline && c.want(CancelledToDLQ) {
			c.report(CancelledToDLQ, j, "a job leased after its deadline was dead-lettered instead of cancelled", []*rop{d.lease, r}, nil,
				fmt.Sprintf("%s's deadline is %s; %s leased it after that", j.id, c.rel(j.meta.Deadline), c.desc(d.lease)),
				fmt.Sprintf("%s dead-lettered it: a job past its deadline must be cancelled", c.desc(r)))
		}
		c.endWith(j, p, endDeadLetter, r)
	case history.Fail:
		dec16(&j.dlOpen)
	case history.Info:
		dec16(&j.dlOpen)
		j.dlInfo = true
		if j.rare().deadInfo == nil {
			j.rareW().deadInfo = c.keep(op, pos, j)
		}
	}
}

func (c *Checker) apply(op *history.Op, pos uint32, j *job) {
	k := c.key(op.Key)
	if op.Value != "applied" {
		c.st.DroppedRepeats++
		return
	}
	r := c.keep(op, pos, j)
	k.applied++
	c.st.Applied++
	if k.applied == 1 {
		k.applyOp = r
	}
	if k.applied == 2 && c.want(DuplicateApply) {
		c.report(DuplicateApply, j, fmt.Sprintf("event of %s applied twice by the consumer", op.Key), []*rop{k.applyOp, r}, nil,
			fmt.Sprintf("%s applied the event of %s", c.desc(k.applyOp), op.Key),
			fmt.Sprintf("%s applied it again: the consumer applied one event twice", c.desc(r)))
	}
}

func (c *Checker) reprocess(op *history.Op, pos uint32, j *job) {
	switch op.Type {
	case history.OK:
		r := c.keep(op, pos, j)
		if j.rare().reprocOK == nil {
			j.rareW().reprocOK = r
		}
		c.st.Reprocessed++
		if op.Value == op.Job && c.want(Resurrected) {
			c.report(Resurrected, j, "reprocessed in place: the dead job itself was put back", []*rop{j.deadOK, r}, nil,
				fmt.Sprintf("%s reprocessed %s as %s: the dead job itself, not a new job", c.desc(r), j.id, op.Value))
		}
	case history.Fail:
		c.st.ReprocessDenied++
	}
}

// checkEnqueueFailed: a job delivered although every enqueue of it failed.
func (c *Checker) checkEnqueueFailed(j *job, lease *rop) {
	fails := j.rare().enqFails
	if j.accepted || j.enqInfos > 0 || j.enqOpen > 0 || len(fails) == 0 || !c.want(FailedButApplied) {
		return
	}
	why := []string{}
	for _, f := range fails {
		why = append(why, fmt.Sprintf("%s: definitely not applied", c.desc(f)))
	}
	why = append(why, fmt.Sprintf("yet %s delivered %s: a failed enqueue was applied", c.desc(lease), j.id))
	c.report(FailedButApplied, j, "delivered although every enqueue of the job failed", append(slices.Clone(fails), lease), nil, why...)
}

// Finish checks the final state against what the history says happened and
// returns the result. Call it once, after the last Observe.
func (c *Checker) Finish(f Final) Result {
	if c.done {
		panic("checker: Finish called twice")
	}
	c.done = true
	var undecided []string
	if !c.opts.HistoryOnly {
		undecided = c.finish(f)
	}
	if c.opts.FIFO {
		c.checkOrder()
	}
	c.checkSilentReuse()
	for p, n := range c.perKind {
		if c.st.Violations == nil {
			c.st.Violations = map[string]int{}
		}
		c.st.Violations[string(p)] = n
	}
	c.st.RepeatsDropped = c.st.Deduped + c.st.DroppedRepeats
	sort.SliceStable(c.vs, func(i, j int) bool { return c.vs[i].Property < c.vs[j].Property })
	res := Result{Violations: c.vs, Stats: c.st, Undecided: undecided, Ops: int(c.n), T0: c.t0, Properties: map[Property]Answer{}}
	for _, s := range Properties {
		a := Answer{Valid: Valid, Count: c.perKind[s.Name]}
		switch {
		case a.Count > 0:
			a.Valid = Invalid
		case s.FinalState && c.opts.HistoryOnly:
			a.Valid, a.Reason = Unknown, "no final state"
		case s.Name == OrderInversion && !c.opts.FIFO:
			a.Valid, a.Reason = NotChecked, "the target does not claim FIFO"
		case s.Name == StaleAck && !c.opts.FencedAck:
			a.Valid, a.Reason = NotChecked, "the target does not claim fenced acks"
		case s.Name == Preempted && c.opts.ApproximateLeases:
			a.Valid, a.Reason = NotChecked, "the target's leases are approximate"
		case s.Name == EventNotApplied && !c.opts.RelayRan:
			a.Valid, a.Reason = NotChecked, "no relay ran"
		case (s.Name == Lost || s.Name == MovedByBroker) && len(undecided) > 0:
			a.Valid, a.Reason = Unknown, "jobs still in the broker at the end"
		case s.Name == EventNotApplied && !f.Drained:
			a.Valid, a.Reason = Unknown, "the run did not drain"
		}
		res.Properties[s.Name] = a
	}
	res.Valid = merge(res.Properties)
	if res.Valid == Valid && len(undecided) > 0 {
		res.Valid = Unknown
	}
	return res
}

// merge combines the answers of every property (mergeAnswers).
func merge(as map[Property]Answer) Validity {
	vs := make([]Validity, 0, len(as))
	for _, s := range Properties {
		if a, ok := as[s.Name]; ok {
			vs = append(vs, a.Valid)
		}
	}
	return mergeAnswers(vs...)
}

// mergeAnswers combines answers: false > unknown > true, whatever their
// order; not_checked counts as true.
func mergeAnswers(vs ...Validity) Validity {
	v := Valid
	for _, a := range vs {
		switch a {
		case Invalid:
			return Invalid
		case Unknown:
			v = Unknown
		}
	}
	return v
}
