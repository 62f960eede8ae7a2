package kafka

// Share groups (KIP-932, Kafka's queues). The broker keeps a state per
// record: a member's ShareFetch acquires records under a lock
// (group.share.record.lock.duration.ms) and counts the delivery; the member
// acknowledges each record with ACCEPT (done), RELEASE (deliver again) or
// REJECT (archived, never delivered again); a lock that runs out, or a
// member whose connection ends, makes the record available again; a record
// delivered group.share.delivery.count.limit times is archived by the broker
// instead.
//
// The port maps onto it directly: Lease acquires one record, Ack is ACCEPT,
// Nack is RELEASE, DeadLetter produces the record to the run's dead-letter
// topic and then REJECTs it, the token and attempt are the broker's delivery
// count. kgo's share consumer accepts every record of a poll that was not
// acknowledged when it polls again, so one client holds one lease at a time:
// a Queue keeps a pool of share consumers, each a member of the group that
// fetches one record per poll and only while it polls (strict pull), and a
// lease takes an idle one.
//
// What the broker does not tell a client is what became of a record it no
// longer delivers: acknowledged, or archived at the delivery limit. So that
// Inspect can tell the broker's archival from the pipeline's outcomes, the
// adapter notes every ACCEPT in a topic of the run before it sends it
// (durachk-<run>-jobs.acks); a record below the share-partition start offset
// that was neither accepted nor dead-lettered was archived by the broker.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/durachk/durachk/adapters"
)

// Kafka's defaults of the broker's share-group settings.
const (
	defaultShareLock  = 30 * time.Second
	defaultShareLimit = 5
)

func acksTopic(runID string) string {
	t, _, _ := Topics(runID)
	return t + ".acks"
}

// ShareQueue is a pool of members of the run's share group (each joined at
// the first lease it serves) and a producer.
type ShareQueue struct {
	url, runID            string
	topic, dlq, acks, grp string
	o                     Options
	caps                  adapters.Capabilities
	prod                  *kgo.Client
	adm                   *kadm.Client
	version               string
	lock                  time.Duration
	limit                 int
	closed                atomic.Bool

	mu   sync.Mutex
	idle []*shareClient
	all  []*shareClient
	held map[string]*shareLease // by receipt
	seq  uint64
}

// shareClient is one member: a share consumer that holds at most one
// record, and the results of its acknowledgements.
type shareClient struct {
	cl      *kgo.Client
	results chan kgo.ShareAckResults
}

type shareLease struct {
	c        *shareClient
	rec      *kgo.Record
	deadline time.Time // when the broker's lock runs out, as far as the member knows
}

// OpenShare connects to the broker, creates the run's topics (if missing)
// and sets the share group's share.auto.offset.reset to earliest (a share
// group starts at the end of a partition otherwise: jobs produced before its
// first member joined would never be delivered).
func OpenShare(ctx context.Context, raw, runID string, o Options) (*ShareQueue, error) {
	fail := func(err error) (*ShareQueue, error) {
		return nil, &adapters.OpError{Target: target, Op: "open", Err: err}
	}
	base, _, err := clientOpts(raw, o.SASLMechanism)
	if err != nil {
		return fail(err)
	}
	if o.Partitions <= 0 {
		o.Partitions = 1
	}
	if o.ReplicationFactor == 0 {
		o.ReplicationFactor = -1
	}
	prod, err := producer(base, o)
	if err != nil {
		return fail(err)
	}
	topic, dlq, grp := Topics(runID)
	q := &ShareQueue{url: raw, runID: runID, topic: topic, dlq: dlq, acks: acksTopic(runID), grp: grp, o: o,
		prod: prod, adm: kadm.NewClient(prod), held: map[string]*shareLease{}}
	if _, err := createTopics(ctx, q.adm, o, topic, dlq, q.acks); err != nil {
		prod.Close()
		return fail(classify(err))
	}
	if err := q.earliest(ctx); err != nil {
		prod.Close()
		return fail(classify(err))
	}
	if q.version, err = serverVersion(ctx, q.adm); err != nil {
		prod.Close()
		return fail(err)
	}
	q.lock, q.limit = o.ShareLock, o.ShareDeliveryLimit
	if q.lock <= 0 || q.limit <= 0 {
		lock, limit := q.brokerShareSettings(ctx)
		if q.lock <= 0 {
			q.lock = lock
		}
		if q.limit <= 0 {
			q.limit = limit
		}
	}
	q.caps = shareCapabilities(o, q.lock, q.limit)
	return q, nil
}

// earliest sets the group's share.auto.offset.reset (a group config,
// IncrementalAlterConfigs on the group resource).
func (q *ShareQueue) earliest(ctx context.Context) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, q.grp
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	v := "earliest"
	c.Name, c.Op, c.Value = "share.auto.offset.reset", kmsg.IncrementalAlterConfigOpSet, &v
	r.Configs = append(r.Configs, c)
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(ctx, q.prod)
	if err != nil {
		return err
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return fmt.Errorf("share.auto.offset.reset of group %s: %w", q.grp, err)
		}
	}
	return nil
}

// brokerShareSettings reads the broker's lock duration and delivery limit,
// Kafka's defaults where it does not say.
func (q *ShareQueue) brokerShareSettings(ctx context.Context) (time.Duration, int) {
	lock, limit := defaultShareLock, defaultShareLimit
	rcs, err := q.adm.DescribeBrokerConfigs(ctx)
	if err != nil {
		return lock, limit
	}
	for _, rc := range rcs {
		for _, c := range rc.Configs {
			if c.Value == nil {
				continue
			}
			n, err := strconv.Atoi(*c.Value)
			if err != nil || n <= 0 {
				continue
			}
			switch c.Key {
			case "group.share.record.lock.duration.ms":
				lock = time.Duration(n) * time.Millisecond
			case "group.share.delivery.count.limit":
				limit = n
			}
		}
	}
	return lock, limit
}

func shareCapabilities(o Options, lock time.Duration, limit int) adapters.Capabilities {
	notes := []string{
		fmt.Sprintf("share group (KIP-932): a lease is the broker's acquisition lock (group.share.record.lock.duration.ms=%d), whatever lease the worker asks for; a member whose connection ends releases what it holds at once", lock.Milliseconds()),
		"ack is ACCEPT, nack is RELEASE (at once: a share group has no delayed release), a dead letter is produced to the run's dead-letter topic and then REJECTed (archived); the token and the attempt are the broker's delivery count",
		fmt.Sprintf("the broker archives a record delivered group.share.delivery.count.limit=%d times instead of delivering it again: reported as its own action", limit),
		"no lease extension: the lock renewal (KIP-1222) needs Kafka 4.2, and the client renews a record at most once",
		"the adapter notes every ACCEPT in a topic of the run before it sends it, so that Inspect can tell an accepted record from one the broker archived",
	}
	return adapters.Capabilities{
		Broker:         "kafka",
		Lease:          adapters.Native,
		LeaseExtension: adapters.None,
		Token:          adapters.Native,
		FencedAck:      true,
		DeliveryCount:  adapters.Native,
		DeadLetter:     adapters.Emulated,
		DelayedNack:    adapters.None,
		Durable:        true,
		Notes:          append(notes, o.Notes...),
	}
}

// ServerVersion names the broker, as Queue.ServerVersion does.
func (q *ShareQueue) ServerVersion() string { return q.version }

// Capabilities are constant for the life of the Queue.
func (q *ShareQueue) Capabilities() adapters.Capabilities { return q.caps }

// Lock is the broker's acquisition lock the queue runs with.
func (q *ShareQueue) Lock() time.Duration { return q.lock }

// Enqueue produces the job as a record keyed by its group.
func (q *ShareQueue) Enqueue(ctx context.Context, job adapters.Job) error {
	if q.closed.Load() {
		return &adapters.OpError{Target: target, Op: "enqueue", JobID: job.ID, Err: adapters.ErrClosed}
	}
	v, err := json.Marshal(job)
	if err != nil {
		return err
	}
	r := &kgo.Record{Topic: q.topic, Value: v}
	if job.Group != "" {
		r.Key = []byte(job.Group)
	}
	if err := q.prod.ProduceSync(ctx, r).FirstErr(); err != nil {
		return &adapters.OpError{Target: target, Op: "enqueue", JobID: job.ID, Err: produceErr(err)}
	}
	return nil
}

// client returns an idle member, or a new one. A member whose lease the
// broker's lock has ended first releases the record (the broker may not
// have swept the lock yet: the next poll would accept it).
func (q *ShareQueue) client(ctx context.Context) (*shareClient, error) {
	q.mu.Lock()
	now := time.Now()
	var expired []*shareLease
	for r, l := range q.held {
		if now.After(l.deadline) {
			expired = append(expired, l)
			delete(q.held, r)
		}
	}
	var c *shareClient
	if n := len(q.idle); n > 0 {
		c, q.idle = q.idle[n-1], q.idle[:n-1]
	}
	q.mu.Unlock()
	for _, l := range expired {
		_, _ = q.acknowledge(ctx, l, kgo.AckRelease)
	}
	if c != nil {
		return c, nil
	}
	base, _, _ := clientOpts(q.url, q.o.SASLMechanism)
	c = &shareClient{results: make(chan kgo.ShareAckResults, 16)}
	opts := append(base, kgo.ShareGroup(q.grp), kgo.ConsumeTopics(q.topic),
		kgo.ShareMaxRecords(1), kgo.ShareMaxRecordsStrict(), kgo.FetchMaxWait(200*time.Millisecond),
		// A member holding a record does not poll: its connection must
		// outlive the lock, or the broker releases what it holds.
		kgo.ConnIdleTimeout(max(2*q.lock, time.Minute)),
		kgo.ShareAckCallback(func(_ *kgo.Client, rs kgo.ShareAckResults) {
			select {
			case c.results <- rs:
			default:
			}
		}))
	if q.o.ConsumerDial != nil {
		opts = append(opts, kgo.Dialer(q.o.ConsumerDial))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	c.cl = cl
	q.mu.Lock()
	q.all = append(q.all, c)
	q.mu.Unlock()
	return c, nil
}

func (q *ShareQueue) putIdle(c *shareClient) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() {
		return
	}
	q.idle = append(q.idle, c)
}

// Lease acquires one record through an idle member. The lease is the
// broker's lock: lease is not the broker's to choose.
func (q *ShareQueue) Lease(ctx context.Context, lease time.Duration) (adapters.Delivery, error) {
	fail := func(err error) (adapters.Delivery, error) {
		return adapters.Delivery{}, &adapters.OpError{Target: target, Op: "lease", Err: err}
	}
	if q.closed.Load() {
		return fail(adapters.ErrClosed)
	}
	c, err := q.client(ctx)
	if err != nil {
		return fail(classify(err))
	}
	// A new member joins the group within its first polls.
	pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	f := c.cl.PollRecords(pctx, 1)
	cancel()
	recs := f.Records()
	if len(recs) == 0 {
		q.putIdle(c)
		if err := fetchErr(f); err != nil {
			return fail(err)
		}
		if q.closed.Load() {
			return fail(adapters.ErrClosed)
		}
		return fail(adapters.ErrNoJob)
	}
	r := recs[0]
	for _, x := range recs[1:] { // never with ShareMaxRecordsStrict; released if ever
		x.Ack(kgo.AckRelease)
	}
	var job adapters.Job
	if err := json.Unmarshal(r.Value, &job); err != nil {
		job = adapters.Job{ID: fmt.Sprintf("undecodable-%d-%d", r.Partition, r.Offset)}
	}
	n := r.DeliveryCount()
	q.mu.Lock()
	q.seq++
	receipt := fmt.Sprintf("%d/%d/%d/%d", r.Partition, r.Offset, n, q.seq)
	q.held[receipt] = &shareLease{c: c, rec: r, deadline: time.Now().Add(q.lock)}
	q.mu.Unlock()
	return adapters.Delivery{Job: job, Token: uint64(n), Attempt: int(n), Receipt: receipt}, nil
}

// take removes d's lease from the held ones: a delivery this queue no
// longer holds (finished, taken back at its lock's end, another process's)
// is lost.
func (q *ShareQueue) take(op string, d adapters.Delivery) (*shareLease, error) {
	if q.closed.Load() {
		return nil, &adapters.OpError{Target: target, Op: op, JobID: d.Job.ID, Attempt: d.Attempt, Err: adapters.ErrClosed}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	l, ok := q.held[d.Receipt]
	if !ok {
		return nil, &adapters.OpError{Target: target, Op: op, JobID: d.Job.ID, Attempt: d.Attempt,
			Err: fmt.Errorf("%w: delivery %d is not held by this member", adapters.ErrLeaseLost, d.Token)}
	}
	delete(q.held, d.Receipt)
	return l, nil
}

// acknowledge sends status for l's record and returns the member to the
// pool. The broker refuses the acknowledgement of a record whose
// acquisition ended (its lock ran out, it was delivered again):
// INVALID_RECORD_STATE, a lost lease.
func (q *ShareQueue) acknowledge(ctx context.Context, l *shareLease, status kgo.AckStatus) (bool, error) {
	for len(l.c.results) > 0 {
		<-l.c.results
	}
	l.rec.Ack(status)
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := l.c.cl.FlushAcks(fctx)
	cancel()
	if err != nil {
		// The member may still send it: not reused.
		return false, fmt.Errorf("%w: %s: %v", adapters.ErrAmbiguous, status, err)
	}
	var rs kgo.ShareAckResults
	select {
	case rs = <-l.c.results:
	case <-time.After(time.Second):
		q.putIdle(l.c)
		return false, fmt.Errorf("%w: %s: the broker's answer did not come", adapters.ErrAmbiguous, status)
	}
	q.putIdle(l.c)
	if err := rs.Error(); err != nil {
		if errors.Is(err, kerr.InvalidRecordState) || errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.ShareSessionNotFound) || errors.Is(err, kerr.InvalidShareSessionEpoch) {
			return false, fmt.Errorf("%w: the broker refused %s: %v", adapters.ErrLeaseLost, status, err)
		}
		if strings.Contains(err.Error(), "left") { // the member left the group
			return false, fmt.Errorf("%w: %s: %v", adapters.ErrLeaseLost, status, err)
		}
		return false, fmt.Errorf("%w: %s: %v", adapters.ErrAmbiguous, status, err)
	}
	return true, nil
}

func (q *ShareQueue) finish(ctx context.Context, op string, d adapters.Delivery, status kgo.AckStatus, before func(*kgo.Record) error) error {
	l, err := q.take(op, d)
	if err != nil {
		return err
	}
	wrap := func(err error) error {
		return &adapters.OpError{Target: target, Op: op, JobID: d.Job.ID, Attempt: d.Attempt, Err: err}
	}
	if before != nil {
		if err := before(l.rec); err != nil {
			q.mu.Lock()
			q.held[d.Receipt] = l // still held: the caller may try again
			q.mu.Unlock()
			return wrap(err)
		}
	}
	if _, err := q.acknowledge(ctx, l, status); err != nil {
		return wrap(err)
	}
	return nil
}

func source(r *kgo.Record) string { return fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset) }

// Ack notes the ACCEPT in the run's acks topic, then sends it.
func (q *ShareQueue) Ack(ctx context.Context, d adapters.Delivery) error {
	return q.finish(ctx, "ack", d, kgo.AckAccept, func(r *kgo.Record) error {
		note := &kgo.Record{Topic: q.acks, Key: []byte(source(r)), Value: []byte(strconv.Itoa(int(r.DeliveryCount())))}
		return produce(ctx, q.prod, note)
	})
}

// Nack RELEASEs the record: available again at once (the delay is not the
// broker's: DelayedNack none).
func (q *ShareQueue) Nack(ctx context.Context, d adapters.Delivery, _ time.Duration) error {
	return q.finish(ctx, "nack", d, kgo.AckRelease, nil)
}

// DeadLetter produces the record to the dead-letter topic, then REJECTs it.
func (q *ShareQueue) DeadLetter(ctx context.Context, d adapters.Delivery, reason string) error {
	return q.finish(ctx, "dead-letter", d, kgo.AckReject, func(r *kgo.Record) error {
		return produce(ctx, q.prod, deadLetterRecord(q.dlq, r, reason))
	})
}

// Inspect reads the jobs topic, the acks and dead-letter topics and the
// share-partition start offsets: a record accepted or dead-lettered is an
// outcome of the pipeline; one below its partition's start offset that is
// neither was archived by the broker (its delivery limit); the others are
// queued, or in flight where this queue holds a live lease on them.
func (q *ShareQueue) Inspect(ctx context.Context) (adapters.Inventory, error) {
	inv := adapters.Inventory{Queued: []string{}, InFlight: []string{}, DeadLettered: []string{}}
	if q.closed.Load() {
		return inv, &adapters.OpError{Target: target, Op: "inspect", Err: adapters.ErrClosed}
	}
	fail := func(err error) (adapters.Inventory, error) {
		return inv, &adapters.OpError{Target: target, Op: "inspect", Err: classify(err)}
	}
	offs, err := q.adm.DescribeShareGroupOffsets(ctx, q.grp)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return fail(err)
	}
	start := func(p int32) int64 {
		if o, ok := offs[q.grp].Offsets.Lookup(q.topic, p); ok && o.Err == nil && o.StartOffset >= 0 {
			return o.StartOffset
		}
		return 0
	}
	zero := func(int32) int64 { return 0 }
	reader := &Queue{url: q.url, o: q.o, adm: q.adm}
	jobs, err := reader.read(ctx, q.topic, zero)
	if err != nil {
		return fail(err)
	}
	notes, err := reader.read(ctx, q.acks, zero)
	if err != nil {
		return fail(err)
	}
	dead, err := reader.read(ctx, q.dlq, zero)
	if err != nil {
		return fail(err)
	}
	accepted := map[string]bool{}
	for _, r := range notes {
		accepted[string(r.Key)] = true
	}
	deadSrc := map[string]bool{}
	for _, r := range dead {
		inv.DeadLettered = append(inv.DeadLettered, jobID(r))
		for _, h := range r.Headers {
			if h.Key == "durachk.source" {
				deadSrc[string(h.Value)] = true
			}
		}
	}
	q.mu.Lock()
	live := map[string]bool{}
	now := time.Now()
	for _, l := range q.held {
		if now.Before(l.deadline) {
			live[source(l.rec)] = true
		}
	}
	q.mu.Unlock()
	for _, r := range jobs {
		src, id := source(r), jobID(r)
		switch {
		case accepted[src] || deadSrc[src]:
		case live[src]:
			inv.InFlight = append(inv.InFlight, id)
		case r.Offset < start(r.Partition):
			inv.Moved = append(inv.Moved, adapters.BrokerAction{Job: id, Action: adapters.ActionDeadLettered,
				Reason: fmt.Sprintf("archived at group.share.delivery.count.limit=%d, or skipped by the share-partition start offset: below it, never accepted nor dead-lettered", q.limit)})
		default:
			inv.Queued = append(inv.Queued, id)
		}
	}
	return inv, nil
}

// Close leaves the group with every member (what they hold is released at
// once) and closes the connections; later calls fail with
// adapters.ErrClosed. Idempotent.
func (q *ShareQueue) Close() error {
	if q.closed.Swap(true) {
		return nil
	}
	q.mu.Lock()
	all := q.all
	q.all, q.idle = nil, nil
	q.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range all {
		wg.Add(1)
		go func() { defer wg.Done(); c.cl.Close() }()
	}
	wg.Wait()
	q.prod.Close()
	return nil
}

// Drop deletes the run's topics and group. Call it before Close.
func (q *ShareQueue) Drop(ctx context.Context) error {
	if q.closed.Load() {
		return &adapters.OpError{Target: target, Op: "drop", Err: adapters.ErrClosed}
	}
	q.mu.Lock()
	all := q.all
	q.all, q.idle, q.held = nil, nil, map[string]*shareLease{}
	q.mu.Unlock()
	for _, c := range all {
		c.cl.Close() // a group with members cannot be deleted
	}
	_, err := deleteRun(ctx, q.adm, q.runID)
	return err
}

var _ interface {
	adapters.Queue
	adapters.DeadLetterer
	adapters.Inspector
} = (*ShareQueue)(nil)
