// Package nats is the NATS JetStream queue adapter, the only package that
// imports nats.go. Every run owns its streams and their consumer, all named by
// the run id: the work stream durachk-<runid> (subject durachk.<runid>.jobs)
// with the durable pull consumer "durachk", the dead-letter stream
// durachk-<runid>-dlq, and where needed the events stream
// durachk-<runid>-events; Drop deletes exactly those streams.
//
// How the port maps onto JetStream
// (https://docs.nats.io/nats-concepts/jetstream/consumers):
//
//   - Enqueue: a JetStream publish that waits for the stream's PubAck, with
//     Nats-Msg-Id set to the job id: a producer retry within the stream's
//     duplicate window is dropped by the broker (PubAck duplicate).
//   - Lease: a pull request for one message (no_wait) on the durable consumer.
//     The lease is the consumer's AckWait: JetStream has one ack wait per
//     consumer, not per delivery. With the ack_wait knob it is fixed; without
//     it the adapter sets the consumer's AckWait to the lease the workers ask
//     for (on the first Lease asking another duration, for every delivery in
//     flight).
//   - Token and attempt: the delivery's NumDelivered from its ack subject,
//     which the server counts per message and consumer (Native).
//   - Extend: InProgress (+WPI), which restarts the AckWait timer; the length
//     asked for is not used.
//   - Ack: AckSync (+ACK as a request; the server replies once it has applied
//     it). A lost reply is adapters.ErrAmbiguous, never success. The server
//     accepts an ack for a message from any of its deliveries: acks are not
//     fenced (FencedAck false); the fence is the effect store's.
//   - Nack: -NAK, with a delay NakWithDelay (-NAK {"delay": ns}), as a request.
//   - Dead letter: the adapter's own (Emulated): the job is published to the
//     run's DLQ stream, then the message is terminated (+TERM).
//   - What the broker does on its own: with max_deliver it stops delivering a
//     message after that many deliveries and emits a MAX_DELIVERIES advisory,
//     which the events stream records; the message stays in the work stream.
//     With max_msgs, max_bytes (discard old) or max_age the stream removes
//     messages whether or not they were acknowledged; for those profiles (and
//     for limits retention, where acked messages stay) the stream republishes
//     the headers of every stored message into the events stream and the
//     consumer samples every ack, so Inspect can name what the broker removed.
//   - Inspect: stream and consumer info plus the messages of the streams.
package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/durachk/durachk/adapters"
)

// Broker is the Capabilities.Broker name and the OpError target of this adapter.
const Broker = "nats"

// ConsumerName is the durable pull consumer of every run's work stream.
const ConsumerName = "durachk"

// Options configure the run's streams and consumer, with JetStream's names and
// defaults. The zero value is a file-backed R1 work-queue stream without
// limits, unlimited deliveries, and an ack wait that follows the lease.
type Options struct {
	Storage   string // "file" (default) or "memory"
	Replicas  int    // 0 means 1
	Retention string // "workqueue" (default), "limits" or "interest"
	// MaxDeliver stops delivering a message after that many deliveries (the
	// broker's MAX_DELIVERIES); 0 means unlimited.
	MaxDeliver int
	// AckWait fixes the consumer's ack wait, whatever lease the workers ask
	// for; 0: the lease of the last Lease call.
	AckWait  time.Duration
	MaxMsgs  int64  // 0: unlimited
	MaxBytes int64  // 0: unlimited
	Discard  string // "old" (default) or "new"
	// DuplicateWindow is the stream's de-duplication window for Nats-Msg-Id;
	// 0: the server's default (2 minutes).
	DuplicateWindow time.Duration
	MaxAge          time.Duration // 0: unlimited
	// RequestTimeout bounds every request without a deadline of its own; 0: 2 s.
	RequestTimeout time.Duration
	// Notes are added to the Capabilities' notes.
	Notes []string
}

// Defaults of JetStream (nats-server's stream and consumer configuration).
const (
	defaultAckWait  = 30 * time.Second
	defaultDupWin   = 2 * time.Minute
	defaultTimeout  = 2 * time.Second
	statusNoMsgs    = "404"
	statusTimeout   = "408"
	statusConflict  = "409"
	headerStatus    = "Status"
	headerDesc      = "Description"
	headerReason    = "Durachk-Reason"
	headerSeq       = "Durachk-Seq"
	headerDelivered = "Durachk-Deliveries"
)

// tracking reports whether the broker can remove messages on its own, or keeps
// acknowledged ones (limits retention): Inspect then needs the index of stored
// messages and the ack samples.
func (o Options) tracking() bool {
	return o.Retention == "limits" || o.MaxAge > 0 || ((o.MaxMsgs > 0 || o.MaxBytes > 0) && o.Discard != "new")
}

// events reports whether the run needs its events stream.
func (o Options) events() bool { return o.MaxDeliver > 0 || o.tracking() }

// limitsNote names the limits that remove messages, e.g. "max_msgs=4 discard=old".
func (o Options) limitsNote() string {
	var parts []string
	if o.MaxMsgs > 0 && o.Discard != "new" {
		parts = append(parts, "max_msgs="+strconv.FormatInt(o.MaxMsgs, 10))
	}
	if o.MaxBytes > 0 && o.Discard != "new" {
		parts = append(parts, "max_bytes="+strconv.FormatInt(o.MaxBytes, 10))
	}
	if len(parts) > 0 {
		parts = append(parts, "discard=old")
	}
	if o.MaxAge > 0 {
		parts = append(parts, "max_age="+o.MaxAge.String())
	}
	return strings.Join(parts, " ")
}

func (o Options) check() error {
	switch {
	case !slices.Contains([]string{"", "file", "memory"}, o.Storage):
		return fmt.Errorf("storage %q: want file or memory", o.Storage)
	case !slices.Contains([]string{"", "workqueue", "limits", "interest"}, o.Retention):
		return fmt.Errorf("retention %q: want workqueue, limits or interest", o.Retention)
	case !slices.Contains([]string{"", "old", "new"}, o.Discard):
		return fmt.Errorf("discard %q: want old or new", o.Discard)
	case o.Replicas < 0 || o.MaxDeliver < 0 || o.AckWait < 0 || o.MaxMsgs < 0 || o.MaxBytes < 0 ||
		o.DuplicateWindow < 0 || o.MaxAge < 0 || o.RequestTimeout < 0:
		return errors.New("negative replicas, max_deliver, ack_wait, max_msgs, max_bytes, duplicate_window, max_age or timeout")
	case o.MaxAge > 0 && o.DuplicateWindow > o.MaxAge:
		return errors.New("duplicate_window must not exceed max_age (JetStream refuses it)")
	}
	return nil
}

var runIDRE = regexp.MustCompile(`^[a-z0-9]{1,40}$`)

// Names of a run's streams and subjects.
func StreamName(runID string) string    { return "durachk-" + runID }
func DLQStreamName(runID string) string { return "durachk-" + runID + "-dlq" }
func EventsStream(runID string) string  { return "durachk-" + runID + "-events" }
func jobsSubject(runID string) string   { return "durachk." + runID + ".jobs" }
func dlqSubject(runID string) string    { return "durachk." + runID + ".dlq" }
func indexSubject(runID string) string  { return "durachk." + runID + ".idx" }

// Advisory and metric subjects of the run's consumer
// (https://docs.nats.io/running-a-nats-service/nats_admin/monitoring/monitoring_jetstream).
func maxDeliveriesSubject(stream string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + stream + "." + ConsumerName
}
func ackMetricSubject(stream string) string {
	return "$JS.EVENT.METRIC.CONSUMER.ACK." + stream + "." + ConsumerName
}

// Queue is a JetStream adapters.Queue with Extender, DeadLetterer and
// Inspector. It is safe for concurrent use by the goroutines of one process;
// any number of processes may open the same run's queue. A delivery's receipt
// is its ack subject, so any Queue of the run may ack it.
type Queue struct {
	nc                 *natsgo.Conn
	js                 jetstream.JetStream
	runID              string
	stream, dlq, evs   string
	subj, dlqSubj, idx string
	next               string // the consumer's pull subject
	opts               Options
	caps               adapters.Capabilities
	version            string
	ackWait            atomic.Int64 // the consumer's AckWait as last set or read, ns
	epoch              atomic.Pointer[epoch]
	mu                 sync.Mutex // serialises stream and consumer changes
	closed             atomic.Bool
}

var (
	_ adapters.Queue        = (*Queue)(nil)
	_ adapters.Extender     = (*Queue)(nil)
	_ adapters.DeadLetterer = (*Queue)(nil)
	_ adapters.Inspector    = (*Queue)(nil)
)

// Open connects to url (nats://[user:password@]host:port; the password never
// appears in an error) and creates the run's streams and consumer if they do
// not exist yet (idempotent: every process of a run calls it, several at
// once; an existing consumer is adopted as it is). runID must match
// ^[a-z0-9]{1,40}$. An unreachable server is an error wrapping
// adapters.ErrUnavailable; a server without JetStream, or one that refuses
// the configuration (replicas beyond its cluster), is a plain error.
func Open(ctx context.Context, url, runID string, opts Options) (*Queue, error) {
	if !runIDRE.MatchString(runID) {
		return nil, fmt.Errorf("nats: run id %q must match %s", runID, runIDRE)
	}
	if err := opts.check(); err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	if opts.RequestTimeout == 0 {
		opts.RequestTimeout = defaultTimeout
	}
	q := &Queue{}
	q.epoch.Store(newEpoch())
	nc, err := connect(url, "durachk "+runID, natsgo.DisconnectErrHandler(func(*natsgo.Conn, error) { q.disconnected() }))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(opts.RequestTimeout), jetstream.WithPublishAsyncMaxPending(1))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: %w", err)
	}
	s := StreamName(runID)
	q.nc, q.js, q.runID, q.stream, q.dlq, q.evs = nc, js, runID, s, DLQStreamName(runID), EventsStream(runID)
	q.subj, q.dlqSubj, q.idx = jobsSubject(runID), dlqSubject(runID), indexSubject(runID)
	q.next, q.opts, q.version = "$JS.API.CONSUMER.MSG.NEXT."+s+"."+ConsumerName, opts, nc.ConnectedServerVersion()
	if err := q.ensure(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: %w", err)
	}
	q.caps = capabilities(opts, q.dlq)
	return q, nil
}

// connect dials url with the options every durachk connection uses: no
// reconnect buffer (a publish while the connection is down fails at once, as
// definitely not sent, instead of being sent later), endless reconnects, and
// pings every second so that a dead link is noticed.
func connect(url, name string, extra ...natsgo.Option) (*natsgo.Conn, error) {
	opts := append([]natsgo.Option{natsgo.Name(name), natsgo.Timeout(2 * time.Second),
		natsgo.MaxReconnects(-1), natsgo.ReconnectWait(100 * time.Millisecond), natsgo.ReconnectJitter(0, 0),
		natsgo.ReconnectBufSize(-1), natsgo.PingInterval(time.Second), natsgo.MaxPingsOutstanding(3),
		natsgo.NoCallbacksAfterClientClose()}, extra...)
	nc, err := natsgo.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats: connect to %s: %w: %s", redactURL(url), adapters.ErrUnavailable, redactErr(err, url))
	}
	return nc, nil
}

func (q *Queue) storage() jetstream.StorageType {
	if q.opts.Storage == "memory" {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

func (q *Queue) replicas() int { return max(q.opts.Replicas, 1) }

// workConfig is the work stream's configuration, JetStream's defaults where
// the options leave it.
func (q *Queue) workConfig() jetstream.StreamConfig {
	c := jetstream.StreamConfig{Name: q.stream, Subjects: []string{q.subj}, Storage: q.storage(), Replicas: q.replicas(),
		Retention: jetstream.WorkQueuePolicy, MaxMsgs: -1, MaxBytes: -1, MaxAge: q.opts.MaxAge, Discard: jetstream.DiscardOld,
		Duplicates: q.opts.DuplicateWindow /* 0: the server's default */, MaxMsgsPerSubject: -1, MaxConsumers: -1}
	switch q.opts.Retention {
	case "limits":
		c.Retention = jetstream.LimitsPolicy
	case "interest":
		c.Retention = jetstream.InterestPolicy
	}
	if q.opts.MaxMsgs > 0 {
		c.MaxMsgs = q.opts.MaxMsgs
	}
	if q.opts.MaxBytes > 0 {
		c.MaxBytes = q.opts.MaxBytes
	}
	if q.opts.Discard == "new" {
		c.Discard = jetstream.DiscardNew
	}
	if q.opts.tracking() {
		c.RePublish = &jetstream.RePublish{Source: q.subj, Destination: q.idx, HeadersOnly: true}
	}
	return c
}

func (q *Queue) consumerConfig(ackWait time.Duration) jetstream.ConsumerConfig {
	c := jetstream.ConsumerConfig{Durable: ConsumerName, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
		DeliverPolicy: jetstream.DeliverAllPolicy, MaxDeliver: -1}
	if q.opts.MaxDeliver > 0 {
		c.MaxDeliver = q.opts.MaxDeliver
	}
	if q.opts.tracking() {
		c.SampleFrequency = "100%"
	}
	return c
}

// ensure creates what the run needs and does not have yet: after a restart of
// a server without persistence the streams are gone, and the first process to
// notice re-creates them. It is idempotent: a failure for want of the server
// (down, or the connection lost with a request in flight) is
// adapters.ErrUnavailable, which callers retry.
func (q *Queue) ensure(ctx context.Context) error {
	err := q.ensureOnce(ctx)
	if errors.Is(err, adapters.ErrAmbiguous) && !errors.Is(err, adapters.ErrUnavailable) {
		return fmt.Errorf("%w: %w", adapters.ErrUnavailable, err)
	}
	return err
}

func (q *Queue) ensureOnce(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	ctx, cancel := q.callCtx(ctx, 3*q.opts.RequestTimeout) // up to six requests
	defer cancel()
	aux := jetstream.StreamConfig{Storage: q.storage(), Replicas: q.replicas(), Retention: jetstream.LimitsPolicy,
		MaxMsgs: -1, MaxBytes: -1, MaxMsgsPerSubject: -1, MaxConsumers: -1, Discard: jetstream.DiscardOld}
	if q.opts.events() {
		ev := aux
		ev.Name, ev.Subjects = q.evs, []string{maxDeliveriesSubject(q.stream)}
		if q.opts.tracking() {
			ev.Subjects = append(ev.Subjects, ackMetricSubject(q.stream), q.idx)
		}
		if _, err := q.js.CreateOrUpdateStream(ctx, ev); err != nil {
			return classify(lostConn(ctx, err))
		}
	}
	dl := aux
	dl.Name, dl.Subjects, dl.Duplicates = q.dlq, []string{q.dlqSubj}, defaultDupWin
	if _, err := q.js.CreateOrUpdateStream(ctx, dl); err != nil {
		return classify(lostConn(ctx, err))
	}
	if _, err := q.js.CreateOrUpdateStream(ctx, q.workConfig()); err != nil {
		return classify(lostConn(ctx, err))
	}
	c, err := q.js.Consumer(ctx, q.stream, ConsumerName)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		wait := q.opts.AckWait
		if wait == 0 {
			wait = time.Duration(q.ackWait.Load())
		}
		if wait == 0 {
			wait = defaultAckWait
		}
		c, err = q.js.CreateOrUpdateConsumer(ctx, q.stream, q.consumerConfig(wait))
	}
	if err != nil {
		return classify(lostConn(ctx, err))
	}
	q.ackWait.Store(int64(c.CachedInfo().Config.AckWait))
	if q.opts.AckWait > 0 && c.CachedInfo().Config.AckWait != q.opts.AckWait {
		return q.setAckWait(ctx, q.opts.AckWait)
	}
	return nil
}

// setAckWait updates the consumer's AckWait (mu held).
func (q *Queue) setAckWait(ctx context.Context, d time.Duration) error {
	if _, err := q.js.UpdateConsumer(ctx, q.stream, q.consumerConfig(d)); err != nil {
		return classify(lostConn(ctx, err))
	}
	q.ackWait.Store(int64(d))
	return nil
}

// followLease makes the consumer's AckWait the lease asked for, where no
// ack_wait is configured.
func (q *Queue) followLease(ctx context.Context, lease time.Duration) error {
	if q.opts.AckWait > 0 || lease <= 0 || time.Duration(q.ackWait.Load()) == lease {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if time.Duration(q.ackWait.Load()) == lease {
		return nil
	}
	ctx, cancel := q.reqCtx(ctx)
	defer cancel()
	return q.setAckWait(ctx, lease)
}

// errConnLost ends a request that was in flight when the connection broke:
// it may or may not have been applied.
var errConnLost = fmt.Errorf("%w: the connection to the server broke with the request in flight", adapters.ErrAmbiguous)

// epoch is the life of one connection to the server: it ends when the
// connection breaks, and with it every request then in flight. nats.go itself
// lets such a request wait for its timeout, although its reply can no longer
// come (a reconnect does not resend it); ending it at once says sooner that
// its outcome is unknown.
type epoch struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newEpoch() *epoch {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &epoch{ctx, cancel}
}

// disconnected ends the current epoch (nats.go's disconnect callback).
func (q *Queue) disconnected() {
	q.epoch.Swap(newEpoch()).cancel(errConnLost)
}

// reqCtx bounds a request: by the caller's deadline and the request timeout,
// whichever comes first, and by the connection it is sent on.
func (q *Queue) reqCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return q.callCtx(ctx, q.opts.RequestTimeout)
}

// callCtx is reqCtx for a call of several requests that may take up to d.
func (q *Queue) callCtx(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, stopT := context.WithTimeout(ctx, d)
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(q.epoch.Load().ctx, func() { cancel(errConnLost) })
	return ctx, func() { stop(); cancel(nil); stopT() }
}

// lostConn is errConnLost where err ended a request whose connection broke.
func lostConn(ctx context.Context, err error) error {
	if err != nil && errors.Is(context.Cause(ctx), errConnLost) {
		return errConnLost
	}
	return err
}

// capabilities are the documented semantics of JetStream with opts.
func capabilities(opts Options, dlq string) adapters.Capabilities {
	storage := cmpOr(opts.Storage, "file")
	notes := []string{
		"lease = the consumer's AckWait (" + ackWaitNote(opts) + "); an expired delivery is redelivered to the next pull; extend = InProgress (+WPI), which restarts the AckWait timer (the length asked for is not used)",
		"fencing token and attempt = the delivery's NumDelivered (the server's count of deliveries of the message to the consumer, from its ack subject)",
		"acks are not fenced: the server applies an ack, nak, term or in-progress from any delivery of a message still held, so a superseded holder's ack removes the message; the effect store's fence check is what stops a zombie",
		"ack = AckSync (+ACK as a request): a lost reply is an unknown outcome, never success; nack with delay = NakWithDelay",
		"dead letter = the adapter's own: the job is published to the run's stream " + dlq + ", then the message is terminated (+TERM)",
		"enqueue sets Nats-Msg-Id to the job id: a producer retry within the stream's duplicate_window (" + dupNote(opts) + ") is dropped by the broker",
		"no FIFO: a redelivered message comes after newer ones",
		fmt.Sprintf("stream: storage=%s replicas=%d retention=%s", storage, max(opts.Replicas, 1), cmpOr(opts.Retention, "workqueue")),
	}
	if storage == "file" {
		notes = append(notes, "file storage: an acknowledged publish is written to the store file before the PubAck (R1) and survives a kill of the server; it is fsynced every sync_interval (default 2 min; always: before the PubAck), so a power loss can lose it")
	} else {
		notes = append(notes, "memory storage: the stream lives in the server's memory; a restart of the server loses every message and the stream itself: not durable")
	}
	if opts.MaxDeliver > 0 {
		notes = append(notes, fmt.Sprintf("max_deliver=%d: the broker stops delivering a message after %d deliveries and emits a MAX_DELIVERIES advisory, recorded in the run's events stream; the message stays in the stream, and Inspect lists it as dead-lettered by the broker", opts.MaxDeliver, opts.MaxDeliver))
	}
	if l := opts.limitsNote(); l != "" {
		notes = append(notes, "stream limits "+l+": the stream removes messages whether or not they were acknowledged, so jobs can be lost; the stream republishes the headers of every stored message into the events stream and the consumer samples every ack (sample_freq 100%), so Inspect names the removed jobs (moved by the broker)")
	}
	if (opts.MaxMsgs > 0 || opts.MaxBytes > 0) && opts.Discard == "new" {
		notes = append(notes, "discard=new: a publish to a full stream is refused (an enqueue error, definitely not stored)")
	}
	notes = append(notes, opts.Notes...)
	dead := adapters.Emulated
	if opts.MaxDeliver > 0 {
		dead = adapters.Native
	}
	return adapters.Capabilities{
		Broker: Broker, Lease: adapters.Native, LeaseExtension: adapters.Native,
		Token: adapters.Native, FencedAck: false, DeliveryCount: adapters.Native,
		DeadLetter: dead, DelayedNack: adapters.Native, FIFO: false,
		Durable: storage == "file", BrokerKill: false, Notes: notes,
	}
}

func cmpOr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func ackWaitNote(opts Options) string {
	if opts.AckWait > 0 {
		return "ack_wait " + opts.AckWait.String() + ", whatever lease the workers ask for"
	}
	return "set to the lease the workers ask for"
}

func dupNote(opts Options) string {
	if opts.DuplicateWindow > 0 {
		return opts.DuplicateWindow.String()
	}
	return "default 2m"
}

// Capabilities are fixed at Open.
func (q *Queue) Capabilities() adapters.Capabilities { return q.caps }

// ServerVersion names the server, e.g. "nats-server 2.9.10".
func (q *Queue) ServerVersion() string { return "nats-server " + q.version }

// Streams are the names of the run's streams.
func (q *Queue) Streams() []string { return []string{q.stream, q.dlq, q.evs} }

// Conn is the underlying connection (for tests and benchmarks).
func (q *Queue) Conn() *natsgo.Conn { return q.nc }

// Close closes the connection; later calls fail with adapters.ErrClosed. Idempotent.
func (q *Queue) Close() error {
	if !q.closed.Swap(true) {
		q.nc.Close()
	}
	return nil
}

// Drop deletes the run's streams (the consumer goes with the work stream) and
// nothing else. Call it before Close.
func (q *Queue) Drop(ctx context.Context) error {
	if q.closed.Load() {
		return fmt.Errorf("nats: drop %s: %w", q.stream, adapters.ErrClosed)
	}
	return deleteStreams(ctx, q.js, q.Streams())
}

func deleteStreams(ctx context.Context, js jetstream.JetStream, names []string) error {
	var errs []error
	for _, n := range names {
		if err := js.DeleteStream(ctx, n); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, fmt.Errorf("nats: delete stream %s: %w", n, classify(err)))
		}
	}
	return errors.Join(errs...)
}

// classify maps a nats.go error onto the port's sentinels: a request that
// could not be sent (connection down, closed, no stream or consumer to answer)
// is adapters.ErrUnavailable, definite; a request sent and not answered in
// time is adapters.ErrAmbiguous; a JetStream API error is returned as it is.
func classify(err error) error {
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errConnLost):
		return err
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, natsgo.ErrConnectionClosed):
		return fmt.Errorf("%w: %w", adapters.ErrClosed, err)
	case errors.Is(err, natsgo.ErrReconnectBufExceeded), errors.Is(err, natsgo.ErrConnectionReconnecting),
		errors.Is(err, natsgo.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, natsgo.ErrNoServers), errors.Is(err, natsgo.ErrDisconnected):
		return fmt.Errorf("%w: %w", adapters.ErrUnavailable, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, natsgo.ErrTimeout):
		return fmt.Errorf("%w: %w", adapters.ErrAmbiguous, err)
	case errors.As(err, &apiErr):
		return err
	}
	return fmt.Errorf("%w: %w", adapters.ErrAmbiguous, err)
}

// missing reports whether err says the run's stream or consumer does not exist.
func missing(err error) bool {
	return errors.Is(err, natsgo.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound)
}

// opErr wraps err of op on delivery d (zero for Enqueue, Lease and Inspect).
func opErr(op string, d adapters.Delivery, err error) error {
	if err == nil {
		return nil
	}
	return &adapters.OpError{Target: Broker, Op: op, JobID: d.Job.ID, Attempt: d.Attempt, Err: err}
}

// Enqueue publishes job to the work stream and waits for the PubAck; a
// duplicate (the same job id within the duplicate window) is acknowledged
// without a second message. A publish the stream refuses (discard=new on a
// full stream) is adapters.ErrUnavailable; a lost PubAck is
// adapters.ErrAmbiguous (a retry is deduplicated within the window).
func (q *Queue) Enqueue(ctx context.Context, job adapters.Job) error {
	d := adapters.Delivery{Job: job}
	if q.closed.Load() {
		return opErr("enqueue", d, adapters.ErrClosed)
	}
	b, err := json.Marshal(job)
	if err != nil {
		return opErr("enqueue", d, err)
	}
	err = q.publish(ctx, job.ID, b)
	if missing(err) {
		if err = q.ensure(ctx); err == nil {
			err = q.publish(ctx, job.ID, b)
		}
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		// The stream refused the message: it is not stored.
		return opErr("enqueue", d, fmt.Errorf("%w: %w", adapters.ErrUnavailable, err))
	}
	return opErr("enqueue", d, classify(err))
}

func (q *Queue) publish(ctx context.Context, id string, body []byte) error {
	ctx, cancel := q.reqCtx(ctx)
	defer cancel()
	m := &natsgo.Msg{Subject: q.subj, Data: body, Header: natsgo.Header{"Nats-Msg-Id": []string{id}}}
	_, err := q.js.PublishMsg(ctx, m, jetstream.WithRetryAttempts(0))
	return lostConn(ctx, err)
}

// pullRequest asks for one message, no_wait, with a short expiry: with
// expires set, no_wait waits up to that long for a message and answers 408
// after, so a Lease may wait pullExpiry for a job that becomes visible (from
// 2.10 on, a consumer learns of a new message asynchronously: a bare no_wait
// right after the PubAck may answer 404).
var pullRequest = fmt.Appendf(nil, `{"batch":1,"no_wait":true,"expires":%d}`, pullExpiry.Nanoseconds())

const pullExpiry = 20 * time.Millisecond

// Lease pulls the next message for the consumer (a pull request for one
// message, no_wait), after making the consumer's AckWait the lease where no
// ack_wait is configured. adapters.ErrNoJob if there is none. A lost reply is
// adapters.ErrAmbiguous: a message may have been delivered to nobody, and is
// redelivered after its ack wait.
func (q *Queue) Lease(ctx context.Context, lease time.Duration) (adapters.Delivery, error) {
	var none adapters.Delivery
	if q.closed.Load() {
		return none, opErr("lease", none, adapters.ErrClosed)
	}
	if err := q.followLease(ctx, lease); err != nil {
		if missing(err) {
			return none, opErr("lease", none, q.recreate(ctx))
		}
		return none, opErr("lease", none, err)
	}
	m, err := q.pull(ctx)
	if missing(err) {
		return none, opErr("lease", none, q.recreate(ctx))
	}
	if err != nil {
		return none, opErr("lease", none, classify(err))
	}
	if st := m.Header.Get(headerStatus); st != "" && len(m.Data) == 0 {
		switch st {
		case statusNoMsgs, statusTimeout:
			return none, adapters.ErrNoJob
		}
		return none, opErr("lease", none, fmt.Errorf("%w: pull status %s %s", adapters.ErrUnavailable, st, m.Header.Get(headerDesc)))
	}
	meta, err := parseAck(m.Reply)
	if err != nil {
		return none, opErr("lease", none, err)
	}
	var d adapters.Delivery
	if err := json.Unmarshal(m.Data, &d.Job); err != nil {
		return none, opErr("lease", adapters.Delivery{Job: adapters.Job{ID: m.Header.Get("Nats-Msg-Id")}},
			fmt.Errorf("nats: malformed message %d: %v", meta.streamSeq, err))
	}
	d.Token, d.Attempt, d.Receipt = meta.delivered, int(meta.delivered), m.Reply
	return d, nil
}

// pull sends a pull request and waits for its answer: a message, or a
// status saying there is none. A request the server leaves unanswered past
// its expiry is sent again: nats-server 2.9 drops a pull request, unanswered,
// that expired as a message nacked with a delay came due (docs/nats.md).
//
// The pulls of one Lease reply to a subscription of that Lease alone, ended
// when it returns: the server delivers a pulled message under the message's
// own subject, so only the subscription tells which Lease asked for it. A
// message that answers a pull after its Lease gave up reaches nobody (the
// client has no subscription for it) and the server delivers it again after
// its ack wait, as when a pull's reply is lost. So every message a Lease
// returns was delivered after that Lease was asked for, and its lease,
// counted from the ask, is not longer than the server's. Taking such a late
// message in the next Lease instead (until 2026-12-06, with +WPI to restart
// its ack wait) gave a lease that had begun before it was asked for and that
// the server might already have handed to another worker (its ack wait ran
// out while the message waited for a Lease, and +WPI then restarted the other
// worker's): preempted and unexplained_duplicate, beside two busy loops.
func (q *Queue) pull(ctx context.Context) (*natsgo.Msg, error) {
	ctx, cancel := q.reqCtx(ctx)
	defer cancel()
	inbox := q.nc.NewInbox()
	answers := make(chan *natsgo.Msg, pullAnswers)
	sub, err := q.nc.ChanSubscribe(inbox+".*", answers)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	resend := time.NewTimer(time.Hour)
	defer resend.Stop()
	for n := 1; ; n++ {
		reply := inbox + "." + strconv.Itoa(n)
		if err := q.nc.PublishRequest(q.next, reply, pullRequest); err != nil {
			return nil, err
		}
		resend.Reset(pullExpiry + pullGrace)
	wait:
		for {
			select {
			case m := <-answers:
				if m.Header.Get(headerStatus) == "" || len(m.Data) > 0 {
					return m, nil // a message: this Lease's, whichever of its pulls it answers
				}
				if m.Subject != reply {
					continue // the status of a pull sent again since: it says nothing now
				}
				if m.Header.Get(headerStatus) == "503" {
					return nil, natsgo.ErrNoResponders
				}
				return m, nil
			case <-resend.C:
				break wait
			case <-ctx.Done():
				return nil, lostConn(ctx, ctx.Err())
			}
		}
	}
}

// pullGrace is how long past its expiry a pull request's answer may take
// before the request is sent again.
const pullGrace = 250 * time.Millisecond

// pullAnswers bounds the answers a Lease's subscription holds unread: one
// per pull it sent, each answered once (a message or a status); the client
// drops what does not fit, and a dropped message comes again after its ack
// wait.
const pullAnswers = 64

// recreate re-creates the run's streams and consumer when they are gone (a
// restarted server without persistence): the lease finds nothing this time.
func (q *Queue) recreate(ctx context.Context) error {
	q.ackWait.Store(0)
	if err := q.ensure(ctx); err != nil {
		return err
	}
	return adapters.ErrNoJob
}

// ackMeta is what an ack subject says of a delivery.
type ackMeta struct {
	stream, consumer     string
	delivered, streamSeq uint64
}

// parseAck reads an ack subject, in the form of the server's
// $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ts>.<pending>
// or the newer one with domain and account hash after $JS.ACK.
func parseAck(reply string) (ackMeta, error) {
	t := strings.Split(reply, ".")
	if len(t) < 9 || t[0] != "$JS" || t[1] != "ACK" {
		return ackMeta{}, fmt.Errorf("nats: not an ack subject: %q", reply)
	}
	off := 2
	if len(t) >= 11 {
		off = 4
	}
	dc, err1 := strconv.ParseUint(t[off+2], 10, 64)
	seq, err2 := strconv.ParseUint(t[off+3], 10, 64)
	if err1 != nil || err2 != nil || dc == 0 {
		return ackMeta{}, fmt.Errorf("nats: malformed ack subject %q", reply)
	}
	return ackMeta{stream: t[off], consumer: t[off+1], delivered: dc, streamSeq: seq}, nil
}

// respond sends body to d's ack subject as a request and waits for the
// server's reply: no reply in time is adapters.ErrAmbiguous; no consumer to
// answer (the stream is gone) is adapters.ErrLeaseLost.
func (q *Queue) respond(ctx context.Context, op string, d adapters.Delivery, body []byte) error {
	if q.closed.Load() {
		return opErr(op, d, adapters.ErrClosed)
	}
	meta, err := parseAck(d.Receipt)
	if err != nil {
		return opErr(op, d, err)
	}
	if meta.stream != q.stream {
		return opErr(op, d, fmt.Errorf("nats: receipt of stream %s, not %s", meta.stream, q.stream))
	}
	rctx, cancel := q.reqCtx(ctx)
	defer cancel()
	_, err = q.nc.RequestWithContext(rctx, d.Receipt, body)
	err = lostConn(rctx, err)
	if errors.Is(err, natsgo.ErrNoResponders) {
		return opErr(op, d, fmt.Errorf("%w: the consumer is gone", adapters.ErrLeaseLost))
	}
	err = classify(err)
	if errors.Is(err, adapters.ErrAmbiguous) && !errors.Is(err, errConnLost) && q.forgotten(ctx, meta) {
		return opErr(op, d, fmt.Errorf("%w: the consumer no longer knows this delivery (stream sequence %d is past what it has delivered: its state went back, e.g. in a server restart) and ignores calls on it; the message will be delivered again", adapters.ErrLeaseLost, meta.streamSeq))
	}
	return opErr(op, d, err)
}

// forgotten reports whether the consumer's delivered pointer is below the
// delivery's stream sequence: a server whose consumer state went back (a
// restart loses up to 100 ms of it) drops an ack, nak or term "above its
// pointer" without applying it and without a reply (nats-server 2.10+), and
// delivers the message again.
func (q *Queue) forgotten(ctx context.Context, meta ackMeta) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.opts.RequestTimeout/2)
	defer cancel()
	c, err := q.js.Consumer(ctx, q.stream, ConsumerName)
	return err == nil && c.CachedInfo().Delivered.Stream < meta.streamSeq
}

// Ack is AckSync: +ACK as a request, answered once the server applied it. The
// server accepts it from any delivery of a message it still holds, and
// answers alike for a message already gone: no stale or lost is reported.
func (q *Queue) Ack(ctx context.Context, d adapters.Delivery) error {
	return q.respond(ctx, "ack", d, []byte("+ACK"))
}

// Nack makes the message visible again: -NAK, or NakWithDelay's
// -NAK {"delay": ns}; the redelivery comes after the delay (server clock).
func (q *Queue) Nack(ctx context.Context, d adapters.Delivery, delay time.Duration) error {
	body := []byte("-NAK")
	if delay > 0 {
		body = fmt.Appendf(nil, `-NAK {"delay": %d}`, delay.Nanoseconds())
	}
	return q.respond(ctx, "nack", d, body)
}

// Extend is InProgress (+WPI): the server restarts the delivery's AckWait
// timer. The length asked for is not used: it is the consumer's AckWait.
func (q *Queue) Extend(ctx context.Context, d adapters.Delivery, lease time.Duration) error {
	return q.respond(ctx, "extend", d, []byte("+WPI"))
}

// DeadLetter publishes the job to the run's DLQ stream (with reason, stream
// sequence and deliveries as headers, de-duplicated per message), then
// terminates the message (+TERM as a request).
func (q *Queue) DeadLetter(ctx context.Context, d adapters.Delivery, reason string) error {
	if q.closed.Load() {
		return opErr("dead letter", d, adapters.ErrClosed)
	}
	meta, err := parseAck(d.Receipt)
	if err != nil {
		return opErr("dead letter", d, err)
	}
	b, err := json.Marshal(d.Job)
	if err != nil {
		return opErr("dead letter", d, err)
	}
	seq := strconv.FormatUint(meta.streamSeq, 10)
	m := &natsgo.Msg{Subject: q.dlqSubj, Data: b, Header: natsgo.Header{
		"Nats-Msg-Id": []string{d.Job.ID + "@" + seq}, headerReason: []string{reason}, headerSeq: []string{seq},
		headerDelivered: []string{strconv.FormatUint(meta.delivered, 10)}}}
	rctx, cancel := q.reqCtx(ctx)
	_, err = q.js.PublishMsg(rctx, m, jetstream.WithRetryAttempts(0))
	err = lostConn(rctx, err)
	cancel()
	if err != nil {
		return opErr("dead letter", d, classify(err))
	}
	return q.respond(ctx, "dead letter", d, []byte("+TERM"))
}

// Inspect lists what is left, by job id: queued (messages the consumer never
// delivered), in flight (delivered and not acknowledged: a live lease, or a
// delivery waiting for its redelivery after an expiry or a nack — JetStream
// holds both alike as ack pending), and dead letters (the run's DLQ stream,
// and messages the broker stopped delivering at max_deliver), in the order
// they were dead-lettered. Moved lists what the broker did on its own: the
// MAX_DELIVERIES advisories, and with stream limits the jobs it removed (from
// the index of stored messages, less those acked or dead-lettered). A run
// whose streams are gone (a restarted server without persistence) has
// nothing left.
func (q *Queue) Inspect(ctx context.Context) (adapters.Inventory, error) {
	inv := adapters.Inventory{Queued: []string{}, InFlight: []string{}, DeadLettered: []string{}}
	var none adapters.Delivery
	if q.closed.Load() {
		return inv, opErr("inspect", none, adapters.ErrClosed)
	}
	ctx, cancel := q.callCtx(ctx, 10*q.opts.RequestTimeout) // one request per message left
	defer cancel()
	present, err := q.read(ctx, q.stream, q.subj)
	if err != nil {
		return inv, opErr("inspect", none, err)
	}
	var delivered uint64
	if len(present) > 0 {
		c, err := q.js.Consumer(ctx, q.stream, ConsumerName)
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
		case err != nil:
			return inv, opErr("inspect", none, classify(lostConn(ctx, err)))
		default:
			delivered = c.CachedInfo().Delivered.Stream
		}
	}
	dead, err := q.read(ctx, q.dlq, q.dlqSubj)
	if err != nil {
		return inv, opErr("inspect", none, err)
	}
	ev := events{acked: map[uint64]bool{}, maxed: map[uint64]advisory{}}
	if q.opts.events() {
		if ev, err = q.readEvents(ctx); err != nil {
			return inv, opErr("inspect", none, err)
		}
	}
	type deadAt struct {
		at  time.Time
		job string
	}
	var deads []deadAt
	termed := map[uint64]bool{}
	for _, m := range dead {
		if s, err := strconv.ParseUint(m.Header.Get(headerSeq), 10, 64); err == nil {
			termed[s] = true
		}
		deads = append(deads, deadAt{m.Time, jobOf(m)})
	}
	isPresent := map[uint64]bool{}
	for _, m := range present {
		isPresent[m.Sequence] = true
		id := jobOf(m)
		switch a, maxed := ev.maxed[m.Sequence]; {
		case ev.acked[m.Sequence] || termed[m.Sequence]:
			// Kept by limits retention after the pipeline's ack or term.
		case maxed:
			deads = append(deads, deadAt{a.Time, id})
			inv.Moved = append(inv.Moved, adapters.BrokerAction{Job: id, Action: adapters.ActionDeadLettered,
				Reason: fmt.Sprintf("max_deliver %d (MAX_DELIVERIES advisory)", q.opts.MaxDeliver), Deliveries: int(a.Deliveries), At: a.Time})
		case m.Sequence > delivered:
			inv.Queued = append(inv.Queued, id)
		default:
			inv.InFlight = append(inv.InFlight, id)
		}
	}
	slices.SortStableFunc(deads, func(a, b deadAt) int { return a.at.Compare(b.at) })
	for _, d := range deads {
		inv.DeadLettered = append(inv.DeadLettered, d.job)
	}
	action := adapters.ActionTrimmed
	if q.opts.MaxAge > 0 && q.opts.limitsNote() == "max_age="+q.opts.MaxAge.String() {
		action = adapters.ActionExpired
	}
	for _, e := range ev.index {
		if isPresent[e.seq] || ev.acked[e.seq] || termed[e.seq] {
			continue
		}
		inv.Moved = append(inv.Moved, adapters.BrokerAction{Job: e.job, Action: action, Reason: q.opts.limitsNote()})
	}
	return inv, nil
}

func jobOf(m *jetstream.RawStreamMsg) string {
	if id := m.Header.Get("Nats-Msg-Id"); id != "" && !strings.Contains(id, "@") {
		return id
	}
	var j struct{ ID string }
	_ = json.Unmarshal(m.Data, &j)
	return j.ID
}

// read returns the messages of subject in stream, in stream order; none if
// the stream does not exist.
func (q *Queue) read(ctx context.Context, stream, subject string) ([]*jetstream.RawStreamMsg, error) {
	s, err := q.js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, classify(lostConn(ctx, err))
	}
	st := s.CachedInfo().State
	if st.Msgs == 0 {
		return nil, nil
	}
	var out []*jetstream.RawStreamMsg
	for seq := st.FirstSeq; seq <= st.LastSeq; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, classify(lostConn(ctx, err))
		}
		out = append(out, m)
		seq = m.Sequence + 1
	}
	return out, nil
}

type advisory struct {
	StreamSeq  uint64    `json:"stream_seq"`
	Deliveries uint64    `json:"deliveries"`
	Time       time.Time `json:"timestamp"`
}

type indexed struct {
	seq uint64
	job string
}

// events is what the events stream recorded: the MAX_DELIVERIES advisories by
// stream sequence, the sampled acks, and the index of stored messages.
type events struct {
	maxed map[uint64]advisory
	acked map[uint64]bool
	index []indexed
}

func (q *Queue) readEvents(ctx context.Context) (events, error) {
	ev := events{acked: map[uint64]bool{}, maxed: map[uint64]advisory{}}
	ms, err := q.read(ctx, q.evs, maxDeliveriesSubject(q.stream))
	if err != nil {
		return ev, err
	}
	for _, m := range ms {
		var a advisory
		if json.Unmarshal(m.Data, &a) == nil && a.StreamSeq > 0 {
			if _, seen := ev.maxed[a.StreamSeq]; !seen {
				ev.maxed[a.StreamSeq] = a
			}
		}
	}
	if !q.opts.tracking() {
		return ev, nil
	}
	if ms, err = q.read(ctx, q.evs, ackMetricSubject(q.stream)); err != nil {
		return ev, err
	}
	for _, m := range ms {
		var a advisory
		if json.Unmarshal(m.Data, &a) == nil && a.StreamSeq > 0 {
			ev.acked[a.StreamSeq] = true
		}
	}
	if ms, err = q.read(ctx, q.evs, q.idx); err != nil {
		return ev, err
	}
	for _, m := range ms {
		seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		if err == nil && m.Header.Get("Nats-Stream") == q.stream {
			ev.index = append(ev.index, indexed{seq, m.Header.Get("Nats-Msg-Id")})
		}
	}
	return ev, nil
}
