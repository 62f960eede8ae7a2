package checker

import (
	"strconv"
	"strings"
	"time"

	"github.com/durachk/durachk/history"
)

// rop is a stored history operation, compact (48 bytes): strings that repeat
// (process, error code, type, function, short values) are interned, the job,
// key and value are indexes into the checker's tables. pos is its place in the
// stream. A sequence number beyond int32 is kept in Checker.bigSeq.
type rop struct {
	t       int64
	token   uint64
	seq     int32
	pos     uint32
	attempt int32
	job     uint32 // 1-based index into Checker.jobList; 0: none
	key     uint32 // 1-based index into Checker.keyList; 0: none
	value   uint32 // index into Checker.values
	proc    uint16
	target  uint16
	err     uint16
	typ     uint8
	f       uint8
}

// delivery is one lease of a job by one process, until it ends.
type delivery struct {
	lease   *rop
	end     *rop
	token   uint64
	proc    uint16
	ended   endKind
	info    bool // an ambiguous call happened in this delivery
	faulted bool // a fault hit its process while it was open
	// ackLate: the ack was answered after the lease may have run out
	// (mayHaveRunOut); a broker may have taken it late and deliver the job
	// again (SQS with an expired receipt handle).
	ackLate bool
	// ackCut: the ack was answered while the primary was partitioned and
	// no failover had been recorded since (Checker.primaryCut).
	ackCut bool
	// ackDown: the ack was answered while the broker was down
	// (Checker.brokerDown).
	ackDown bool
	// nackSent: a nack was invoked; its reply may come after a redelivery.
	nackSent bool
	// extended: the holder renewed the lease at least once. renewOK and
	// renewFor are the latest renewal's answer time and length (ns): the
	// lease ran out by renewOK+renewFor at the latest. leaseInvT is when the
	// lease was asked for.
	extended          bool
	renewOK, renewFor int64
	leaseInvT         int64
	// renewInvT is when the latest lease or renewal was asked for: the lease
	// ran out by renewInvT+renewFor at the earliest (its answer may come
	// late, e.g. a commit that waits for a synchronous standby through a
	// failover). extInvT is the pending renewal's invoke.
	renewInvT, extInvT int64
	// broke: a renewal was asked after the lease, counted from its latest
	// lease or renewal ask, may have run out. The broker may have queued the
	// job for redelivery by then and still answer the late renewal OK
	// (JetStream's +WPI restarts the timer of a message already waiting in
	// its redelivery queue, which hands it out at the next pull): from then
	// on, the lease is not known to be unbroken.
	broke bool
}

// renewed records a lease or extend ok of the delivery (its value is the
// lease length in ms).
func (d *delivery) renewed(op *history.Op) {
	ms, err := strconv.ParseInt(op.Value, 10, 64)
	if err != nil || ms <= 0 {
		return
	}
	inv := d.leaseInvT
	if op.F == history.Extend {
		d.extended = true
		inv = d.extInvT
	}
	if inv <= 0 || inv > op.T {
		inv = op.T // no invoke recorded: the answer's time
	}
	if op.F == history.Extend && d.mayHaveRunOut(inv) {
		d.broke = true
	}
	d.renewOK, d.renewFor, d.renewInvT = op.T, ms*int64(time.Millisecond), inv
}

// mayHaveRunOut reports whether the lease may have run out, counted from when
// it (or its latest renewal) was asked for, by a lease granted at t: then the
// broker kept the lease it gave, whatever the holder believed.
func (d *delivery) mayHaveRunOut(t int64) bool {
	return d.renewFor > 0 && t >= d.renewInvT+d.renewFor
}

// lapsed reports whether a holder that was renewing its lease had let it run
// out, by its own latest renewal, before a lease asked for at leaseInvT.
func (d *delivery) lapsed(leaseInvT int64) bool {
	return d.extended && d.ranOut(leaseInvT)
}

// ranOut reports whether the lease had run out, by the holder's latest lease
// or renewal answer, before a lease asked for at leaseInvT.
func (d *delivery) ranOut(leaseInvT int64) bool {
	return d.renewFor > 0 && leaseInvT > d.renewOK+d.renewFor
}

type endKind uint8

const (
	open endKind = iota
	endAck
	endAckFailed // an ack that failed or whose outcome is unknown
	endNack
	endDeadLetter
	endStale
	endLeaseLost
)

func (e endKind) String() string {
	return [...]string{"open", "acked", "ack failed", "nacked", "dead-lettered", "stale", "lease lost"}[e]
}

// job is what the checker keeps of one job: a few counters and the operations
// its witnesses may need, never its whole history. It is kept small (352
// bytes): memory grows with jobs.
type job struct {
	id   string
	meta jobMeta
	idx  uint32

	spent                                                        int32
	enqueues                                                     int16 // enqueue invokes
	enqOpen                                                      int16 // enqueue invokes not yet answered
	enqInfos                                                     int16
	permFails                                                    int16
	dlOpen                                                       int16 // dead_letter invokes not yet answered
	news                                                         int16
	accepted, conflict, invalidKey, permErr, brokerDLQ, inBroker bool
	leased                                                       bool // delivered at least once
	dlInfo                                                       bool // a dead_letter call's outcome was unknown
	lastLong                                                     bool // the latest operation's value was too long to keep

	maxFence, maxLeaseTok uint64

	enqInv *rop // first enqueue invoke (the metadata)
	// The first enqueue ok, kept as its time, sequence and position: the rest
	// of it is the invoke's (see Checker.enqOK); one that differs is in x.
	commitOK *rop // first commit ok
	deadOK   *rop // first pipeline dead_letter ok
	terminal *rop // first terminal operation: ack, dead_letter or cancel ok
	fenceOp  *rop // the fence (or commit) that raised maxFence

	last  rop          // the latest operation naming the job
	dels  []delivery   // its open deliveries and the latest
	spend *[]execution // spending executions
	okT   int64
	okSeq int32
	okPos uint32
	x     *jobRare
}

// execution is one spending execution: the failure or crash that ended it,
// and its extract invoke, kept as its time, sequence and position when the
// rest of it is the failure's (else whole, in Checker.execInv).
type execution struct {
	invT   int64
	out    *rop
	invSeq int32
	invPos uint32
}

// jobRare holds what few jobs need.
type jobRare struct {
	enqFails  []*rop // failed enqueues before any ok (failed_but_applied)
	permFail  *rop
	newCommit *rop // first commit ok with value new
	deadInv   *rop // first dead_letter invoke (its reason)
	deadInfo  *rop // a dead_letter call whose outcome was unknown
	cancelOK  *rop
	reprocOK  *rop
	fault     *rop // the latest fault that named the job
	// deaths are the kills and crashes (not at the poison point) of processes
	// while they held the job, up to one past its budget.
	deaths []*rop
	// paused: the pause of a process while it held the job; it becomes a
	// death when the job is delivered again before that delivery ended (a
	// zombie whose lease lapsed looks dead to the pipeline, as a kill does).
	paused *rop
	enqOK  *rop // the first enqueue ok, when it is not derived from the invoke
	// For grouped jobs of a FIFO target: the first lease, and the position of
	// the invoke of the terminal operation.
	firstLease *rop
	termInv    uint32
	// Metadata strings that did not fit the compact form.
	tenant, group, hash string
}

var noRare jobRare

// inc16 counts up to the counter's limit.
func inc16(n *int16) {
	if *n < 1<<15-1 {
		*n++
	}
}

func dec16(n *int16) {
	if *n > -(1 << 15) {
		*n--
	}
}

// rare returns j's rare part for reading.
func (j *job) rare() *jobRare {
	if j.x == nil {
		return &noRare
	}
	return j.x
}

// rareW returns j's rare part for writing.
func (j *job) rareW() *jobRare {
	if j.x == nil {
		j.x = &jobRare{}
	}
	return j.x
}

type keyState struct {
	key         string
	owner       *job // the job whose lease first named the key (its tenant is the key's)
	tenantLease *rop // that lease
	newOp       *rop // first commit ok with value new
	applyOp     *rop // first apply ok with value applied
	news        int16
	applied     int16
	open        int16 // commit invokes not yet answered
	nfails      int16 // commits that failed while none had succeeded or was unknown (in Checker.keyFails)
	uncertain   bool  // a commit of the key was answered info
	committed   bool  // a commit of the key was answered ok
	// From the final state.
	hasResult, hasEvent bool
}

// procState is what the checker keeps per process: its previous operation on a
// job, its open extract and its current delivery.
type procState struct {
	name     string
	id       uint16 // name's id among the interned strings
	lastF    history.F
	lastType history.Type
	lastJob  *job
	lastPos  uint32
	lastInfo *rop // the previous operation, when it was a commit or ack info
	extract  rop  // its latest extract invoke
	hasExtr  bool
	current  *job
	faulted  bool
	// leaseInvT is the time of its latest lease invoke; invT of its latest
	// invoke on a job.
	leaseInvT, invT int64
	// commitInv is 1 + the position of its latest commit invoke (0: none).
	commitInv uint32
	// enqCut: its latest enqueue invoke came while a node partition was in
	// force (Stats.AckedInPartition counts the acknowledgement).
	enqCut bool
}

// interner hands out small ids for strings that repeat; id 0 is "". A full
// table (more distinct strings than the id type holds) maps the rest to 0.
type interner struct {
	idx  map[string]int
	strs []string
	max  int
}

func newInterner(max int, seed ...string) *interner {
	in := &interner{idx: map[string]int{}, strs: []string{""}, max: max}
	for _, s := range seed {
		in.id(s)
	}
	return in
}

func (in *interner) id(s string) int {
	if s == "" {
		return 0
	}
	if i, ok := in.idx[s]; ok {
		return i
	}
	if len(in.strs) > in.max {
		return 0
	}
	s = strings.Clone(s)
	in.strs = append(in.strs, s)
	in.idx[s] = len(in.strs) - 1
	return len(in.strs) - 1
}

func (in *interner) str(i int) string {
	if i < len(in.strs) {
		return in.strs[i]
	}
	return ""
}

// Operation types and functions get fixed small ids, known ones first.
var knownSmall = []string{
	string(history.Invoke), string(history.OK), string(history.Fail), string(history.Info),
	string(history.Enqueue), string(history.Lease), string(history.Fence), string(history.Extend),
	string(history.Extract), string(history.Commit), string(history.Ack), string(history.Nack),
	string(history.DeadLetter), string(history.Cancel), string(history.Publish), string(history.Mark),
	string(history.Apply), string(history.Reprocess), string(history.Fault), string(history.Probe),
	string(history.Circuit), string(history.EventDead),
}

const (
	sInvoke = 1 + iota
	sOK
	sFail
	sInfo
)
