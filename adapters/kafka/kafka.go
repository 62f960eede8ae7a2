// Package kafka is the Kafka adapter, through franz-go (kgo, kadm): the only
// package that imports them. Jobs are records of a topic of the run
// (durachk-<run>-jobs), consumed by a consumer group of the run
// (durachk-<run>): a worker process's Queue is one member of the group.
//
// A consumer group keeps no per-record state on the broker, only a committed
// offset per partition, so the adapter does what teams build on it:
//
//   - Lease hands out the next record of a partition the member owns; the
//     lease is the member's ownership of the record until its offset is
//     committed. A lease that runs out, or a Nack, makes the member deliver
//     the record again itself (a retry in place: the record keeps its place
//     and its key's order). A member that dies, or stops heartbeating for
//     session.timeout.ms, loses its partitions in a rebalance, and the member
//     that gets them starts again from the committed offset: Kafka's own lease.
//   - Ack commits the offset after the longest run of finished records from
//     the last commit (a record finished behind an unfinished one is
//     delivered again after a rebalance), with the member's id and
//     generation: the group coordinator rejects the commit of a member that
//     was fenced out of the group (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID),
//     and the ack fails with adapters.ErrLeaseLost.
//   - DeadLetter produces the record to the run's dead-letter topic
//     (durachk-<run>-jobs.dlq), then commits as Ack does.
//   - With FIFO, the records of one key (Job.Group, the record key) are
//     delivered one at a time, in offset order (order per partition key).
//
// Delivery counts and tokens are the member's own: a member that takes over a
// partition counts again from 1 (Capabilities.DeliveryCount and Token
// approximate).
package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/durachk/durachk/adapters"
)

const target = "kafka"

// Options are the adapter's knobs, named as Kafka names the client, producer,
// consumer and topic settings they are (internal/targets parses them).
type Options struct {
	// Partitions of the jobs topic (CreateTopics num.partitions; default 1).
	Partitions int
	// ReplicationFactor of the run's topics (default -1: the broker's
	// default.replication.factor).
	ReplicationFactor int
	// TopicConfigs are the jobs topic's configs (min.insync.replicas,
	// retention.ms, ...), passed to CreateTopics as given.
	TopicConfigs map[string]string
	// Acks is the producer's acks: "all" (default), "1" or "0".
	Acks string
	// NoIdempotence turns the idempotent producer off (enable.idempotence=false;
	// required with acks other than all).
	NoIdempotence bool
	// AutoOffsetReset is where a partition without a committed offset starts:
	// "earliest" (default) or "latest" (records produced before the group
	// first joined are never delivered).
	AutoOffsetReset string
	// SessionTimeout, HeartbeatInterval and RebalanceTimeout of the member
	// (session.timeout.ms, heartbeat.interval.ms, rebalance.timeout.ms).
	SessionTimeout, HeartbeatInterval, RebalanceTimeout time.Duration
	// GroupProtocol is "classic" (default: JoinGroup/SyncGroup, commits fenced
	// by generation) or "consumer" (KIP-848, commits fenced by member epoch).
	GroupProtocol string
	// SASLMechanism for a URL with credentials: SCRAM-SHA-256 (default),
	// SCRAM-SHA-512 or PLAIN.
	SASLMechanism string
	// FIFO delivers the records of one key one at a time (order.fifo).
	FIFO bool
	// BreakOrder is the negative control of order.fifo: newest first.
	BreakOrder bool
	// Share selects a share group (KIP-932) instead of a consumer group:
	// OpenShare.
	Share bool
	// ShareLock and ShareDeliveryLimit are the broker's
	// group.share.record.lock.duration.ms and group.share.delivery.count.limit
	// as the share group runs with them (0: read from the broker, else
	// Kafka's defaults, 30 s and 5).
	ShareLock          time.Duration
	ShareDeliveryLimit int
	// ConsumerDial, if set, dials the member's connections (tests: a member
	// whose connections hang, as a paused process's).
	ConsumerDial func(ctx context.Context, network, host string) (net.Conn, error)
	Notes        []string
}

// Queue is one member of the run's consumer group (joined at its first
// Lease) and a producer.
type Queue struct {
	url, runID       string
	topic, dlq, grp  string
	o                Options
	caps             adapters.Capabilities
	prod             *kgo.Client
	adm              *kadm.Client
	closed           atomic.Bool
	joinOnce         sync.Once
	joinErr          error
	cons             *kgo.Client
	version          string
	topicID          [16]byte // for OffsetCommit v10+, which names topics by id
	assigned         chan struct{}
	assignedOnce     sync.Once
	pollMu           sync.Mutex // one poll at a time
	mu               sync.Mutex
	parts            map[int32]*partition
	commitsRejected  atomic.Int64
	lastRejectReason atomic.Value // string
}

// partition is what the member holds of one partition it owns: the records
// from its last commit on, in offset order.
type partition struct {
	p         int32
	committed int64 // the offset the member last committed (or started from)
	recs      []*rec
}

type rec struct {
	off       int64
	key       string
	job       adapters.Job
	raw       *kgo.Record
	token     uint64 // deliveries by this member
	leased    bool
	deadline  time.Time
	notBefore time.Time
	done      bool
}

// Topics names the run's topics and group.
func Topics(runID string) (topic, dlq, group string) {
	t := "durachk-" + runID + "-jobs"
	return t, t + ".dlq", "durachk-" + runID
}

// RunOf returns the run id of a topic or group name durachk created, or "".
func RunOf(name string) string {
	rest, ok := strings.CutPrefix(name, "durachk-")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "-")
	return id
}

// CheckURL validates a kafka://[user:password@]host:port URL.
func CheckURL(raw string) error {
	_, _, err := clientOpts(raw, "")
	return err
}

func clientOpts(raw, mech string) ([]kgo.Opt, string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "kafka" || u.Host == "" {
		return nil, "", errors.New("want kafka://[user:password@]host:port")
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return nil, "", fmt.Errorf("want host:port, got %q", u.Host)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, "", errors.New("a kafka URL has no path")
	}
	opts := []kgo.Opt{kgo.SeedBrokers(u.Host), kgo.DialTimeout(5 * time.Second), kgo.RetryTimeout(10 * time.Second)}
	if u.User != nil {
		user := u.User.Username()
		pass, _ := u.User.Password()
		switch mech {
		case "", "SCRAM-SHA-256":
			opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()))
		case "SCRAM-SHA-512":
			opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()))
		case "PLAIN":
			opts = append(opts, kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
		default:
			return nil, "", fmt.Errorf("sasl.mechanism %q: want SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN", mech)
		}
	}
	return opts, u.Host, nil
}

// Open connects to the broker and creates the run's topics (if missing). The
// member joins the group at its first Lease: a process that only produces
// never takes partitions from the workers.
func Open(ctx context.Context, raw, runID string, o Options) (*Queue, error) {
	base, _, err := clientOpts(raw, o.SASLMechanism)
	if err != nil {
		return nil, &adapters.OpError{Target: target, Op: "open", Err: err}
	}
	if o.Partitions <= 0 {
		o.Partitions = 1
	}
	if o.ReplicationFactor == 0 {
		o.ReplicationFactor = -1
	}
	prod, err := producer(base, o)
	if err != nil {
		return nil, &adapters.OpError{Target: target, Op: "open", Err: err}
	}
	topic, dlq, grp := Topics(runID)
	q := &Queue{url: raw, runID: runID, topic: topic, dlq: dlq, grp: grp, o: o, prod: prod, adm: kadm.NewClient(prod),
		assigned: make(chan struct{}), parts: map[int32]*partition{}}
	if q.topicID, err = createTopics(ctx, q.adm, o, topic, dlq); err != nil {
		prod.Close()
		return nil, &adapters.OpError{Target: target, Op: "open", Err: classify(err)}
	}
	if q.version, err = serverVersion(ctx, q.adm); err != nil {
		prod.Close()
		return nil, &adapters.OpError{Target: target, Op: "open", Err: err}
	}
	q.caps = capabilities(o)
	return q, nil
}

// producer is the client that produces the jobs (and dead letters), with
// the producer knobs.
func producer(base []kgo.Opt, o Options) (*kgo.Client, error) {
	popts := append([]kgo.Opt{}, base...)
	popts = append(popts, kgo.ProducerLinger(0), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	switch o.Acks {
	case "", "all", "-1":
		popts = append(popts, kgo.RequiredAcks(kgo.AllISRAcks()))
	case "1":
		popts = append(popts, kgo.RequiredAcks(kgo.LeaderAck()))
	case "0":
		popts = append(popts, kgo.RequiredAcks(kgo.NoAck()))
	default:
		return nil, fmt.Errorf("acks %q: want all, 1 or 0", o.Acks)
	}
	if o.NoIdempotence {
		popts = append(popts, kgo.DisableIdempotentWrite())
	}
	return kgo.NewClient(popts...)
}

// createTopics creates the jobs topic (with o's partitions and configs)
// and the run's other topics (one partition each) where missing, and
// returns the jobs topic's id.
func createTopics(ctx context.Context, adm *kadm.Client, o Options, jobs string, others ...string) ([16]byte, error) {
	cfg := map[string]*string{}
	for k, v := range o.TopicConfigs {
		cfg[k] = &v
	}
	type spec struct {
		name  string
		parts int32
		cfg   map[string]*string
	}
	all := []spec{{jobs, int32(o.Partitions), cfg}}
	for _, t := range others {
		all = append(all, spec{t, 1, nil})
	}
	for _, t := range all {
		r, err := adm.CreateTopic(ctx, t.parts, int16(o.ReplicationFactor), t.cfg, t.name)
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return [16]byte{}, err
		}
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return [16]byte{}, r.Err
		}
	}
	td, err := adm.ListTopics(ctx, jobs)
	if err != nil {
		return [16]byte{}, err
	}
	d, ok := td[jobs]
	if !ok || d.Err != nil {
		return [16]byte{}, fmt.Errorf("topic %s: not in the metadata after its creation: %v", jobs, d.Err)
	}
	return d.ID, nil
}

func capabilities(o Options) adapters.Capabilities {
	notes := []string{
		"consumer group " + groupProtocol(o) + ": a lease is the member's ownership of a record until its offset is committed; Kafka's own lease is the member's session (session.timeout.ms) and poll interval: a member that misses them loses its partitions to another member, which starts again from the committed offset",
		"ack commits the offset after the finished records with the member's id and generation (epoch): the coordinator rejects a fenced member's commit (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID) and the ack fails as lease lost",
		"nack and an expired lease are retries in place (the member delivers the record again, keeping its key's order); a delay holds the record in the member; delivery counts and tokens are the member's own and start again at 1 on the member that takes the partition over",
		"dead letters are produced to the run's dead-letter topic, then committed",
	}
	if o.Partitions > 1 {
		notes = append(notes, "partitions="+strconv.Itoa(o.Partitions)+": order only per partition key")
	}
	if o.BreakOrder {
		notes = append(notes, "negative control: the member delivers the newest record first")
	}
	return adapters.Capabilities{
		Broker:         "kafka",
		Lease:          adapters.Emulated,
		LeaseExtension: adapters.Emulated,
		Token:          adapters.Approximate,
		FencedAck:      true,
		DeliveryCount:  adapters.Approximate,
		DeadLetter:     adapters.Emulated,
		DelayedNack:    adapters.Emulated,
		FIFO:           o.FIFO,
		Durable:        true,
		Notes:          append(notes, o.Notes...),
	}
}

func groupProtocol(o Options) string {
	if o.GroupProtocol == "consumer" {
		return "consumer (KIP-848)"
	}
	return "classic"
}

// ServerVersion names the broker: "kfake <version> (emulator)", or a Kafka
// by its cluster id.
func (q *Queue) ServerVersion() string { return q.version }

// Capabilities are constant for the life of the Queue.
func (q *Queue) Capabilities() adapters.Capabilities { return q.caps }

// Enqueue produces the job as a record keyed by its group (no key: the
// partitioner spreads the jobs).
func (q *Queue) Enqueue(ctx context.Context, job adapters.Job) error {
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

// produceErr: an error the broker answered with means the batch was not
// appended; anything else (a timeout, a lost connection) may have been.
func produceErr(err error) error {
	var ke *kerr.Error
	if errors.As(err, &ke) && ke != kerr.RequestTimedOut && ke != kerr.NotEnoughReplicasAfterAppend {
		return fmt.Errorf("%w: %v", adapters.ErrUnavailable, err)
	}
	return fmt.Errorf("%w: %v", adapters.ErrAmbiguous, err)
}

// classify maps a client error to the port's sentinels.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %v", adapters.ErrUnavailable, err)
	}
	var ne net.Error
	var oe *net.OpError
	var eof *kgo.ErrFirstReadEOF // a connection closed at once (a partition's proxy), not a TLS broker
	if errors.As(err, &ne) || errors.As(err, &oe) || errors.As(err, &eof) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, kgo.ErrClientClosed) || strings.Contains(err.Error(), "unable to dial") {
		return fmt.Errorf("%w: %v", adapters.ErrUnavailable, err)
	}
	return err
}

// join makes this Queue a member of the group and waits for its first
// assignment.
func (q *Queue) join(ctx context.Context) error {
	q.joinOnce.Do(func() {
		base, _, _ := clientOpts(q.url, q.o.SASLMechanism)
		reset := kgo.NewOffset().AtStart()
		if q.o.AutoOffsetReset == "latest" {
			reset = kgo.NewOffset().AtEnd()
		}
		opts := append(base,
			kgo.ConsumerGroup(q.grp), kgo.ConsumeTopics(q.topic), kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(reset), kgo.FetchMaxWait(200*time.Millisecond),
			kgo.SessionTimeout(dflt(q.o.SessionTimeout, 6*time.Second)),
			kgo.HeartbeatInterval(dflt(q.o.HeartbeatInterval, 500*time.Millisecond)),
			kgo.RebalanceTimeout(dflt(q.o.RebalanceTimeout, 10*time.Second)),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, _ map[string][]int32) {
				q.assignedOnce.Do(func() { close(q.assigned) })
			}),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { q.drop(m[q.topic]) }),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { q.drop(m[q.topic]) }),
		)
		if q.o.GroupProtocol == "consumer" {
			opts = append(opts, kgo.ServerSideBalancer())
		}
		if q.o.ConsumerDial != nil {
			opts = append(opts, kgo.Dialer(q.o.ConsumerDial))
		}
		q.cons, q.joinErr = kgo.NewClient(opts...)
		if q.joinErr != nil {
			return
		}
		// The group is joined from the poll loop: poll (nothing is buffered
		// yet to lose) until the first assignment.
		wait, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		go func() {
			select {
			case <-q.assigned:
			case <-wait.Done():
			}
		}()
		for {
			select {
			case <-q.assigned:
				return
			case <-wait.Done():
				q.joinErr = fmt.Errorf("%w: no partition assigned to the member of %s within 20 s", adapters.ErrUnavailable, q.grp)
				return
			default:
			}
			pctx, pc := context.WithTimeout(wait, 100*time.Millisecond)
			q.pollMu.Lock()
			q.add(q.cons.PollFetches(pctx))
			q.pollMu.Unlock()
			pc()
		}
	})
	return q.joinErr
}

func dflt(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// drop forgets what the member held of partitions it no longer owns: their
// deliveries are lost, and whoever owns them next starts at the commit.
func (q *Queue) drop(ps []int32) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, p := range ps {
		delete(q.parts, p)
	}
}

// add buffers polled records.
func (q *Queue) add(f kgo.Fetches) {
	q.mu.Lock()
	defer q.mu.Unlock()
	f.EachRecord(func(r *kgo.Record) {
		if r.Topic != q.topic {
			return
		}
		pt := q.parts[r.Partition]
		if pt == nil {
			pt = &partition{p: r.Partition, committed: r.Offset}
			q.parts[r.Partition] = pt
		}
		if n := len(pt.recs); (n > 0 && pt.recs[n-1].off >= r.Offset) || r.Offset < pt.committed {
			// Already held, or committed past: the client fetched it again
			// (its position reset after a broker restart), and the
			// member would deliver a record it acked.
			return
		}
		var job adapters.Job
		if err := json.Unmarshal(r.Value, &job); err != nil {
			job = adapters.Job{ID: fmt.Sprintf("undecodable-%d-%d", r.Partition, r.Offset)}
		}
		pt.recs = append(pt.recs, &rec{off: r.Offset, key: string(r.Key), job: job, raw: r})
	})
}

// Lease hands out the next record the member can deliver: one never
// delivered, one whose lease ran out, or one nacked whose delay passed; with
// FIFO only the first unfinished record of its key.
func (q *Queue) Lease(ctx context.Context, lease time.Duration) (adapters.Delivery, error) {
	if q.closed.Load() {
		return adapters.Delivery{}, &adapters.OpError{Target: target, Op: "lease", Err: adapters.ErrClosed}
	}
	if err := q.join(ctx); err != nil {
		return adapters.Delivery{}, &adapters.OpError{Target: target, Op: "lease", Err: classify(err)}
	}
	for try := 0; ; try++ {
		if d, ok := q.pick(lease); ok {
			return d, nil
		}
		if try == 2 {
			return adapters.Delivery{}, &adapters.OpError{Target: target, Op: "lease", Err: adapters.ErrNoJob}
		}
		pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		q.pollMu.Lock()
		f := q.cons.PollFetches(pctx)
		q.pollMu.Unlock()
		cancel()
		q.add(f)
		if err := fetchErr(f); err != nil {
			return adapters.Delivery{}, &adapters.OpError{Target: target, Op: "lease", Err: err}
		}
		if q.closed.Load() {
			return adapters.Delivery{}, &adapters.OpError{Target: target, Op: "lease", Err: adapters.ErrClosed}
		}
	}
}

func fetchErr(f kgo.Fetches) error {
	var errs []error
	f.EachError(func(_ string, _ int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			errs = append(errs, err)
		}
	})
	if len(errs) > 0 {
		return fmt.Errorf("%w: %v", adapters.ErrUnavailable, errors.Join(errs...))
	}
	return nil
}

func (q *Queue) pick(lease time.Duration) (adapters.Delivery, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	ps := make([]*partition, 0, len(q.parts))
	for _, p := range q.parts {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].p < ps[j].p })
	var cands []*rec
	for _, pt := range ps {
		busy := map[string]bool{}
		recs := pt.recs
		if q.o.BreakOrder {
			// The negative control: newest first, and the newest of a key
			// is its head.
			recs = slices.Clone(recs)
			slices.Reverse(recs)
		}
		for _, r := range recs {
			if r.done {
				continue
			}
			keyed := q.o.FIFO && r.key != ""
			if keyed && busy[r.key] {
				continue
			}
			if keyed {
				busy[r.key] = true
			}
			live := r.leased && now.Before(r.deadline)
			if !live && !now.Before(r.notBefore) {
				cands = append(cands, r)
			}
		}
	}
	if len(cands) == 0 {
		return adapters.Delivery{}, false
	}
	r := cands[0]
	r.token++
	r.leased, r.deadline, r.notBefore = true, now.Add(lease), time.Time{}
	member, gen := q.cons.GroupMetadata()
	return adapters.Delivery{Job: r.job, Token: r.token, Attempt: int(r.token),
		Receipt: fmt.Sprintf("%d/%d/%d/%s", r.raw.Partition, r.off, gen, member)}, true
}

// receipt is what a delivery's Receipt says: the record's partition and
// offset, and the member and generation that leased it.
type receipt struct {
	p      int32
	off    int64
	gen    int32
	member string
}

func parseReceipt(s string) (receipt, bool) {
	f := strings.SplitN(s, "/", 4)
	if len(f) != 4 {
		return receipt{}, false
	}
	p, err1 := strconv.ParseInt(f[0], 10, 32)
	off, err2 := strconv.ParseInt(f[1], 10, 64)
	gen, err3 := strconv.ParseInt(f[2], 10, 32)
	if err1 != nil || err2 != nil || err3 != nil {
		return receipt{}, false
	}
	return receipt{p: int32(p), off: off, gen: int32(gen), member: f[3]}, true
}

// find returns the record of d and its partition, or an error: lost where the
// member no longer holds it (finished, or its partition gone), stale where it
// was delivered again since.
func (q *Queue) find(op string, d adapters.Delivery) (*partition, *rec, error) {
	fail := func(err error) error {
		return &adapters.OpError{Target: target, Op: op, JobID: d.Job.ID, Attempt: d.Attempt, Err: err}
	}
	rc, ok := parseReceipt(d.Receipt)
	if !ok {
		return nil, nil, fail(fmt.Errorf("bad receipt %q", d.Receipt))
	}
	p, off := rc.p, rc.off
	pt := q.parts[p]
	if pt == nil {
		return nil, nil, fail(fmt.Errorf("%w: partition %d is not this member's", adapters.ErrLeaseLost, p))
	}
	i := sort.Search(len(pt.recs), func(i int) bool { return pt.recs[i].off >= off })
	if i == len(pt.recs) || pt.recs[i].off != off || pt.recs[i].done {
		return nil, nil, fail(fmt.Errorf("%w: offset %d of partition %d is finished", adapters.ErrLeaseLost, off, p))
	}
	r := pt.recs[i]
	if r.token != d.Token {
		return nil, nil, fail(fmt.Errorf("%w: delivery %d, the member delivered it again (%d)", adapters.ErrStaleToken, d.Token, r.token))
	}
	return pt, r, nil
}

// Ack finishes the record and commits the offset after the finished run.
func (q *Queue) Ack(ctx context.Context, d adapters.Delivery) error {
	return q.finish(ctx, "ack", d, nil)
}

func (q *Queue) finish(ctx context.Context, op string, d adapters.Delivery, before func(*rec) error) error {
	if q.closed.Load() {
		return &adapters.OpError{Target: target, Op: op, JobID: d.Job.ID, Attempt: d.Attempt, Err: adapters.ErrClosed}
	}
	q.mu.Lock()
	pt, r, err := q.find(op, d)
	if err != nil {
		q.mu.Unlock()
		return err
	}
	if before != nil {
		// The dead letter is produced first: a crash in between leaves the
		// record uncommitted (delivered again), never lost.
		q.mu.Unlock()
		if err := before(r); err != nil {
			return &adapters.OpError{Target: target, Op: op, JobID: d.Job.ID, Attempt: d.Attempt, Err: err}
		}
		q.mu.Lock()
		if pt, r, err = q.find(op, d); err != nil {
			q.mu.Unlock()
			return err
		}
	}
	r.done = true
	next := pt.committed
	for _, x := range pt.recs {
		if x.off >= next && !x.done {
			break
		}
		next = x.off + 1
	}
	p := pt.p
	q.mu.Unlock()
	rc, _ := parseReceipt(d.Receipt)
	if err := q.commit(ctx, p, next, rc.member, rc.gen); err != nil {
		q.mu.Lock()
		if r2 := q.holds(p, r); r2 {
			// Unfinished again, but still leased until its deadline: the
			// holder may try again, and delivering it at once to another
			// worker of this member preempted a live holder (a commit
			// refused during a rebalance, then the record leased again
			// 5 ms later; CI, idempotency.conflict on kafka://).
			r.done = false
		}
		q.mu.Unlock()
		return &adapters.OpError{Target: target, Op: op, JobID: d.Job.ID, Attempt: d.Attempt, Err: err}
	}
	q.mu.Lock()
	if pt := q.parts[p]; pt != nil && next > pt.committed {
		pt.committed = next
		i := sort.Search(len(pt.recs), func(i int) bool { return pt.recs[i].off >= next })
		pt.recs = append([]*rec(nil), pt.recs[i:]...)
	}
	q.mu.Unlock()
	return nil
}

func (q *Queue) holds(p int32, r *rec) bool {
	pt := q.parts[p]
	if pt == nil {
		return false
	}
	for _, x := range pt.recs {
		if x == r {
			return true
		}
	}
	return false
}

// commit sends an OffsetCommit of offset for partition p with the id and
// generation of the member when it leased the record, so that the
// coordinator judges whether that member still belongs to the group in that
// generation. It goes over the producer's connection: a member whose own
// connections hang (a paused process) is judged all the same.
func (q *Queue) commit(ctx context.Context, p int32, offset int64, member string, gen int32) error {
	if member == "" || gen < 0 {
		// An OffsetCommit without a member is an administrative commit,
		// which no coordinator fences: never send one for a delivery.
		return fmt.Errorf("%w: the record was leased while the member was not in the group", adapters.ErrLeaseLost)
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.MemberID, req.Generation = q.grp, member, gen
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic, t.TopicID = q.topic, q.topicID
	pp := kmsg.NewOffsetCommitRequestTopicPartition()
	pp.Partition, pp.Offset, pp.LeaderEpoch = p, offset, -1
	t.Partitions = append(t.Partitions, pp)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, q.prod)
	if err != nil {
		return fmt.Errorf("%w: commit: %v", adapters.ErrAmbiguous, err)
	}
	for _, t := range resp.Topics {
		for _, rp := range t.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				switch err {
				case kerr.IllegalGeneration, kerr.UnknownMemberID, kerr.RebalanceInProgress, kerr.FencedInstanceID, kerr.StaleMemberEpoch:
					q.commitsRejected.Add(1)
					reason := fmt.Sprintf("the coordinator rejected the commit of member %s generation %d: %v", member, gen, err)
					q.lastRejectReason.Store(reason)
					return fmt.Errorf("%w: %s", adapters.ErrLeaseLost, reason)
				}
				return fmt.Errorf("%w: commit: %v", adapters.ErrUnavailable, err)
			}
		}
	}
	return nil
}

// CommitsRejected counts the commits the coordinator rejected as a fenced
// member's, with the last one's reason.
func (q *Queue) CommitsRejected() (int64, string) {
	s, _ := q.lastRejectReason.Load().(string)
	return q.commitsRejected.Load(), s
}

// Nack makes the member deliver the record again after delay (a retry in
// place: nothing goes to the broker).
func (q *Queue) Nack(ctx context.Context, d adapters.Delivery, delay time.Duration) error {
	if q.closed.Load() {
		return &adapters.OpError{Target: target, Op: "nack", JobID: d.Job.ID, Attempt: d.Attempt, Err: adapters.ErrClosed}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	_, r, err := q.find("nack", d)
	if err != nil {
		return err
	}
	r.leased, r.notBefore = false, time.Now().Add(delay)
	return nil
}

// Extend renews a live lease; one that ran out is lost.
func (q *Queue) Extend(ctx context.Context, d adapters.Delivery, lease time.Duration) error {
	if q.closed.Load() {
		return &adapters.OpError{Target: target, Op: "extend", JobID: d.Job.ID, Attempt: d.Attempt, Err: adapters.ErrClosed}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	_, r, err := q.find("extend", d)
	if err != nil {
		return err
	}
	if !r.leased || !time.Now().Before(r.deadline) {
		return &adapters.OpError{Target: target, Op: "extend", JobID: d.Job.ID, Attempt: d.Attempt, Err: adapters.ErrLeaseLost}
	}
	r.deadline = time.Now().Add(lease)
	return nil
}

// DeadLetter produces the record to the dead-letter topic, then finishes it
// as Ack does.
func (q *Queue) DeadLetter(ctx context.Context, d adapters.Delivery, reason string) error {
	return q.finish(ctx, "dead-letter", d, func(r *rec) error {
		return produce(ctx, q.prod, deadLetterRecord(q.dlq, r.raw, reason))
	})
}

// deadLetterRecord is r as the dead-letter topic dlq keeps it: its key and
// value, the pipeline's reason and where it came from.
func deadLetterRecord(dlq string, r *kgo.Record, reason string) *kgo.Record {
	return &kgo.Record{Topic: dlq, Key: r.Key, Value: r.Value, Headers: []kgo.RecordHeader{
		{Key: "durachk.reason", Value: []byte(reason)},
		{Key: "durachk.source", Value: []byte(source(r))},
	}}
}

// produce writes rec and waits for the broker's acknowledgement.
func produce(ctx context.Context, prod *kgo.Client, rec *kgo.Record) error {
	if err := prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return produceErr(err)
	}
	return nil
}

// Inspect reads what the broker holds: the jobs topic from the group's
// committed offsets on (queued, or in flight where this member holds a live
// lease; records this member finished but has not committed past are left
// out), and the dead-letter topic.
func (q *Queue) Inspect(ctx context.Context) (adapters.Inventory, error) {
	inv := adapters.Inventory{Queued: []string{}, InFlight: []string{}, DeadLettered: []string{}}
	if q.closed.Load() {
		return inv, &adapters.OpError{Target: target, Op: "inspect", Err: adapters.ErrClosed}
	}
	fail := func(err error) (adapters.Inventory, error) {
		return inv, &adapters.OpError{Target: target, Op: "inspect", Err: classify(err)}
	}
	committed, err := q.adm.FetchOffsets(ctx, q.grp)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return fail(err)
	}
	jobs, err := q.read(ctx, q.topic, func(p int32) int64 {
		if o, ok := committed.Lookup(q.topic, p); ok && o.Err == nil && o.At >= 0 {
			return o.At
		}
		return 0
	})
	if err != nil {
		return fail(err)
	}
	dead, err := q.read(ctx, q.dlq, func(int32) int64 { return 0 })
	if err != nil {
		return fail(err)
	}
	q.mu.Lock()
	now := time.Now()
	for _, r := range jobs {
		var held *rec
		if pt := q.parts[r.Partition]; pt != nil {
			for _, x := range pt.recs {
				if x.off == r.Offset {
					held = x
				}
			}
		}
		id := jobID(r)
		switch {
		case held != nil && held.done:
		case held != nil && held.leased && now.Before(held.deadline):
			inv.InFlight = append(inv.InFlight, id)
		default:
			inv.Queued = append(inv.Queued, id)
		}
	}
	q.mu.Unlock()
	for _, r := range dead {
		inv.DeadLettered = append(inv.DeadLettered, jobID(r))
	}
	return inv, nil
}

func jobID(r *kgo.Record) string {
	var j adapters.Job
	if err := json.Unmarshal(r.Value, &j); err != nil || j.ID == "" {
		return fmt.Sprintf("undecodable-%d-%d", r.Partition, r.Offset)
	}
	return j.ID
}

// read returns the records of topic from from(partition) to the end of each
// partition, in partition then offset order.
func (q *Queue) read(ctx context.Context, topic string, from func(int32) int64) ([]*kgo.Record, error) {
	ends, err := q.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	if err := ends.Error(); err != nil {
		return nil, err
	}
	want := map[int32]int64{}
	start := map[string]map[int32]kgo.Offset{topic: {}}
	ends.Each(func(o kadm.ListedOffset) {
		if f := from(o.Partition); f < o.Offset {
			want[o.Partition] = o.Offset
			start[topic][o.Partition] = kgo.NewOffset().At(f)
		}
	})
	if len(want) == 0 {
		return nil, nil
	}
	base, _, _ := clientOpts(q.url, q.o.SASLMechanism)
	c, err := kgo.NewClient(append(base, kgo.ConsumePartitions(start), kgo.FetchMaxWait(100*time.Millisecond))...)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(want) > 0 {
		f := c.PollFetches(rctx)
		if rctx.Err() != nil {
			return nil, fmt.Errorf("reading %s: %w", topic, rctx.Err())
		}
		if err := fetchErr(f); err != nil {
			return nil, err
		}
		f.EachRecord(func(r *kgo.Record) {
			if end, ok := want[r.Partition]; ok {
				if r.Offset < end {
					out = append(out, r)
				}
				if r.Offset >= end-1 {
					delete(want, r.Partition)
				}
			}
		})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].Offset < out[j].Offset
	})
	return out, nil
}

// Close leaves the group (its partitions move at once) and closes the
// connections; later calls fail with adapters.ErrClosed. Idempotent.
func (q *Queue) Close() error {
	if q.closed.Swap(true) {
		return nil
	}
	q.joinOnce.Do(func() { q.joinErr = adapters.ErrClosed })
	if q.cons != nil {
		q.cons.Close()
	}
	q.prod.Close()
	return nil
}

// Drop deletes the run's topics and group. Call it before Close.
func (q *Queue) Drop(ctx context.Context) error {
	if q.closed.Load() {
		return &adapters.OpError{Target: target, Op: "drop", Err: adapters.ErrClosed}
	}
	if q.cons != nil {
		q.cons.LeaveGroup()
	}
	_, err := deleteRun(ctx, q.adm, q.runID)
	return err
}
