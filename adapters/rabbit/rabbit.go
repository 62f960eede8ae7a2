// Package rabbit is the RabbitMQ queue adapter (AMQP 0-9-1, amqp091-go). A run
// owns a queue and its helpers, all named durachk.<runid>…, deleted by Drop:
//
//	durachk.<runid>          the work queue (classic or quorum, the user's arguments)
//	durachk.<runid>.delay    delayed nacks: per-message TTL, dead-lettered back to the work queue
//	durachk.<runid>.dlq      dead letters (the emulated dead-letterer publishes here; a
//	                         configured x-dead-letter-exchange is declared as
//	                         durachk.<runid>.<name>, a fanout bound to it)
//	durachk.<runid>.held     never holds a message: one consumer per delivery a live
//	                         process holds unacked (in-flight accounting for Inspect)
//	durachk.<runid>.live     never holds a message: one consumer per open connection
//
// How the port maps onto RabbitMQ (https://www.rabbitmq.com/docs/confirms):
//
//   - Enqueue is basic.publish (mandatory, persistent by default) on a channel in
//     confirm mode; it returns nil once the broker confirmed it. A lost connection
//     before the confirm is adapters.ErrAmbiguous; an unroutable message
//     (basic.return, its queue missing) is adapters.ErrUnavailable; a message
//     returned although its queue exists is adapters.ErrAmbiguous.
//   - Lease is basic.get with manual acks (or, with Options.Prefetch > 0, a
//     consumer with basic.qos prefetch). RabbitMQ has no per-message lease: an
//     unacked message goes back to the queue when the channel or connection that
//     holds it closes (a SIGKILLed worker: at once; a SIGSTOPped one: after the
//     heartbeat timeout, hence the short default heartbeat), or after the
//     consumer timeout. The lease duration is honoured only by the holding
//     process itself, lazily: its next Lease returns (basic.nack requeue) each of
//     its own deliveries whose lease ran out, so that a delivery the pipeline
//     abandoned is not stuck on a live channel. There is no lease extension.
//   - The fencing token and the attempt come from the broker: quorum queues count
//     returns in the x-delivery-count header; classic queues only set the
//     redelivered flag (the token grows on the first redelivery and then stays:
//     approximate; no delivery count). A delayed nack republishes the message,
//     so the adapter carries the deliveries so far in the x-durachk-deliveries
//     header of the copy.
//   - Ack is basic.ack followed by the synchronous basic.cancel of the
//     delivery's held consumer: the cancel-ok proves the channel processed the
//     ack, so a connection lost in between is adapters.ErrAmbiguous, never a
//     silent success. A delivery tag is only valid on the channel that received
//     it: a delivery of a closed channel is adapters.ErrLeaseLost, and never sent.
package rabbit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	neturl "net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/durachk/durachk/adapters"
)

// Broker is the Capabilities.Broker name and the OpError target of this adapter.
const Broker = "rabbitmq"

// Header names the adapter reads and writes.
const (
	// DeliveriesHeader carries the number of deliveries a job had before the
	// message copy that holds it was published (by a delayed nack).
	DeliveriesHeader = "x-durachk-deliveries"
	// ReasonHeader carries the dead-letter reason code of an emulated dead letter.
	ReasonHeader = "x-durachk-reason"
	// DeliveryCountHeader is the quorum queues' own return counter.
	DeliveryCountHeader = "x-delivery-count"
)

// DefaultHeartbeat is the AMQP heartbeat durachk asks for unless told otherwise:
// a paused (SIGSTOPped) holder loses its connection, and the broker requeues its
// deliveries, after about two missed heartbeats.
const DefaultHeartbeat = time.Second

// Options configure the queue. They are read once, by Open.
type Options struct {
	// Args are the work queue's arguments (x-queue-type, x-delivery-limit, ...),
	// typed as the broker wants them (numbers as int64). A value for
	// x-dead-letter-exchange names an exchange in the run's namespace:
	// durachk.<runid>.<value>, declared as a fanout bound to the run's DLQ.
	Args map[string]any
	// Expiration is the per-message TTL of every enqueued message; 0: none.
	Expiration time.Duration
	// Prefetch 0 leases with basic.get; n > 0 with a consumer and basic.qos n.
	Prefetch int
	// NoConfirms publishes without publisher confirms: Enqueue returns once the
	// frame is written, and the queue is not Durable.
	NoConfirms bool
	// Transient publishes with delivery mode 1 (not persistent).
	Transient bool
	// Heartbeat is the AMQP heartbeat; 0: DefaultHeartbeat.
	Heartbeat time.Duration
	// DelayQueue emulates a delayed nack with the run's delay queue (republish
	// with a per-message TTL, dead-lettered back). Off (the default), Nack
	// requeues at once, as RabbitMQ does: the delay is not honoured, but a lost
	// reply can never leave two copies of a job.
	DelayQueue bool
	// Volatile is the negative control of durability.ack: a classic, non-durable
	// queue with transient messages, whatever Args say. Never set it otherwise.
	Volatile bool
	// Addrs are further nodes of a cluster (host:port), a client's node list:
	// when no connection can be made to the URL's node, the next is tried, in
	// turn, starting from the last one that answered.
	Addrs []string
}

var runIDRE = regexp.MustCompile(`^[a-z0-9]{1,40}$`)

// QueueName is the work queue of runID: durachk.<runID>.
func QueueName(runID string) string { return "durachk." + runID }

// Queue is a RabbitMQ adapters.Queue with DeadLetterer and Inspector. It is safe
// for concurrent use by the goroutines of one process: every broker call of a
// Queue goes through one connection, one call at a time. Any number of processes
// may open the same run's queue; deliveries are exclusive by the broker's own
// unacked-message bookkeeping, never by state in the Queue value. A Delivery is
// valid only with the Queue that leased it.
type Queue struct {
	url    string // holds credentials: never printed
	runID  string
	opts   Options
	names  names
	quorum bool
	dlx    string // the run's dead-letter exchange, "" if none is configured
	args   amqp.Table
	id     string // receipt prefix of this Queue value

	mu      sync.Mutex
	cur     *conn
	gen     uint64
	seq     uint64
	held    map[string]*holding
	lastDLQ int
	dlqIDs  []string
	moved   []adapters.BrokerAction

	caps    adapters.Capabilities
	version string
	closed  atomic.Bool
	node    atomic.Int32 // index into urls() of the node that answered last
}

type names struct{ main, delay, dlq, held, live string }

// conn is one connection with its channels. Replaced as a whole when it breaks.
type conn struct {
	gen     uint64
	c       *amqp.Connection
	ch      *amqp.Channel // get, ack, nack, held consumers
	pub     *amqp.Channel // publishing (confirm mode unless NoConfirms)
	insp    *amqp.Channel // passive declares and browsing; reopened after a failure
	returns chan amqp.Return
	work    <-chan amqp.Delivery // Prefetch > 0
	version string
	broken  atomic.Bool
}

type holding struct {
	gen     uint64
	tag     uint64
	heldTag string
	until   time.Time
	msg     amqp.Delivery
	d       adapters.Delivery
}

var (
	_ adapters.Queue        = (*Queue)(nil)
	_ adapters.DeadLetterer = (*Queue)(nil)
	_ adapters.Inspector    = (*Queue)(nil)
)

// Open connects to url (its password never appears in an error), declares the
// run's queues idempotently (several processes may do it at once) and reads the
// server's version for Capabilities. runID must match ^[a-z0-9]{1,40}$. An
// unreachable broker is an error wrapping adapters.ErrUnavailable.
func Open(ctx context.Context, url, runID string, opts Options) (*Queue, error) {
	if !runIDRE.MatchString(runID) {
		return nil, fmt.Errorf("rabbit: run id %q must match %s", runID, runIDRE)
	}
	if opts.Prefetch < 0 || opts.Expiration < 0 || opts.Heartbeat < 0 {
		return nil, errors.New("rabbit: negative prefetch, expiration or heartbeat")
	}
	if opts.Heartbeat == 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	base := QueueName(runID)
	q := &Queue{url: url, runID: runID, opts: opts, held: map[string]*holding{},
		names: names{main: base, delay: base + ".delay", dlq: base + ".dlq", held: base + ".held", live: base + ".live"}}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	q.id = hex.EncodeToString(b)
	q.args = amqp.Table{}
	for k, v := range opts.Args {
		q.args[k] = v
	}
	if opts.Volatile {
		for _, k := range []string{"x-queue-type", "x-delivery-limit", "x-dead-letter-strategy", "x-quorum-initial-group-size", "x-max-in-memory-length", "x-max-in-memory-bytes"} {
			delete(q.args, k)
		}
	}
	q.quorum = q.args["x-queue-type"] == "quorum"
	if _, q.dlx = RunNames(runID, opts); q.dlx != "" {
		q.args["x-dead-letter-exchange"] = q.dlx
	}
	q.mu.Lock()
	_, err := q.connect(ctx)
	q.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("rabbit: %w", err)
	}
	q.caps = capabilities(q.opts, q.quorum, q.dlx != "", q.version)
	return q, nil
}

// redact removes the URL's password from s.
func (q *Queue) redact(s string) string {
	if u, err := amqp.ParseURI(q.url); err == nil && u.Password != "" {
		s = strings.ReplaceAll(s, u.Password, "xxxxx")
	}
	return s
}

// unavailable wraps err as a definite failure, without credentials.
func (q *Queue) unavailable(err error) error {
	return fmt.Errorf("%w: %s", adapters.ErrUnavailable, q.redact(err.Error()))
}

// connect returns the live connection, dialling and declaring the topology if
// there is none. Callers hold q.mu.
func (q *Queue) connect(ctx context.Context) (*conn, error) {
	if q.cur != nil && !q.cur.broken.Load() && !q.cur.c.IsClosed() {
		return q.cur, nil
	}
	if q.cur != nil {
		old := q.cur
		q.cur = nil
		go old.c.CloseDeadline(time.Now().Add(200 * time.Millisecond))
	}
	type result struct {
		c   *conn
		err error
	}
	done := make(chan result, 1)
	q.gen++
	gen := q.gen
	go func() {
		c, err := q.dial(gen)
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, r.err
		}
		q.cur, q.version = r.c, r.c.version
		return r.c, nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.c != nil {
				r.c.c.Close()
			}
		}()
		return nil, fmt.Errorf("%w: connect: %v", adapters.ErrUnavailable, ctx.Err())
	}
}

// urls are the URL and, for every further node of Options.Addrs, the URL
// with that node's host:port.
func (q *Queue) urls() []string {
	out := []string{q.url}
	if len(q.opts.Addrs) == 0 {
		return out
	}
	u, err := neturl.Parse(q.url)
	if err != nil {
		return out
	}
	for _, a := range q.opts.Addrs {
		v := *u
		v.Host = a
		out = append(out, v.String())
	}
	return out
}

func (q *Queue) dial(gen uint64) (*conn, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName("durachk." + q.runID)
	urls := q.urls()
	first := int(q.node.Load()) % len(urls)
	var c *amqp.Connection
	var err error
	for i := range urls {
		n := (first + i) % len(urls)
		c, err = amqp.DialConfig(urls[n], amqp.Config{Heartbeat: q.opts.Heartbeat, Properties: props,
			Dial: amqp.DefaultDial(5 * time.Second)})
		if err == nil {
			q.node.Store(int32(n))
			break
		}
	}
	if err != nil {
		return nil, q.unavailable(err)
	}
	cn := &conn{gen: gen, c: c}
	fail := func(err error) (*conn, error) {
		c.Close()
		return nil, q.unavailable(err)
	}
	v, _ := c.Properties["version"].(string)
	p, _ := c.Properties["product"].(string)
	if p == "" {
		p = "RabbitMQ"
	}
	cn.version = strings.ToLower(p) + " " + v
	if cn.ch, err = c.Channel(); err != nil {
		return fail(err)
	}
	if err := q.declare(cn.ch); err != nil {
		return fail(err)
	}
	if cn.pub, err = c.Channel(); err != nil {
		return fail(err)
	}
	if !q.opts.NoConfirms {
		if err := cn.pub.Confirm(false); err != nil {
			return fail(err)
		}
	}
	cn.returns = cn.pub.NotifyReturn(make(chan amqp.Return, 16))
	// Presence: one consumer on the live queue for the life of the connection.
	if _, err := cn.ch.Consume(q.names.live, "live", false, false, false, false, nil); err != nil {
		return fail(err)
	}
	if q.opts.Prefetch > 0 {
		if err := cn.ch.Qos(q.opts.Prefetch, 0, false); err != nil {
			return fail(err)
		}
		if cn.work, err = cn.ch.Consume(q.names.main, "work", false, false, false, false, nil); err != nil {
			return fail(err)
		}
	}
	go func() {
		<-c.NotifyClose(make(chan *amqp.Error, 1))
		cn.broken.Store(true)
	}()
	return cn, nil
}

// declare creates the run's exchange and queues if they do not exist.
func (q *Queue) declare(ch *amqp.Channel) error {
	durable := !q.opts.Volatile
	// The work queue first: the broker refuses bad or mismatched arguments
	// (PRECONDITION_FAILED) there, and a refused Open then leaves nothing
	// behind. A dead-letter exchange named before it exists is fine.
	if _, err := ch.QueueDeclare(q.names.main, durable, false, false, false, q.args); err != nil {
		return err
	}
	if q.dlx != "" {
		if err := ch.ExchangeDeclare(q.dlx, "fanout", durable, false, false, false, nil); err != nil {
			return err
		}
	}
	if _, err := ch.QueueDeclare(q.names.dlq, durable, false, false, false, nil); err != nil {
		return err
	}
	if q.dlx != "" {
		if err := ch.QueueBind(q.names.dlq, "", q.dlx, false, nil); err != nil {
			return err
		}
	}
	delayArgs := amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q.names.main}
	if _, err := ch.QueueDeclare(q.names.delay, durable, false, false, false, delayArgs); err != nil {
		return err
	}
	for _, n := range []string{q.names.held, q.names.live} {
		if _, err := ch.QueueDeclare(n, false, false, false, false, nil); err != nil {
			return err
		}
	}
	return nil
}

// do runs f on the live connection under q.mu, bounded by ctx. When ctx ends
// first, the connection is abandoned (its deliveries go back to the queue) and
// the call is adapters.ErrAmbiguous: f may or may not have reached the broker.
func (q *Queue) do(ctx context.Context, f func(c *conn) error) error {
	if q.closed.Load() {
		return adapters.ErrClosed
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	c, err := q.connect(ctx)
	if err != nil {
		return err
	}
	if ctx.Done() == nil {
		return f(c)
	}
	done := make(chan error, 1)
	go func() { done <- f(c) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		// Closing the connection fails the pending call; wait for it so that f
		// never runs without q.mu.
		c.broken.Store(true)
		go c.c.CloseDeadline(time.Now().Add(200 * time.Millisecond))
		<-done
		return fmt.Errorf("%w: %v", adapters.ErrAmbiguous, ctx.Err())
	}
}

// brokerErr maps an error of a call that cannot have been applied (it failed
// before or at sending, or the broker refused it) to ErrUnavailable.
func (q *Queue) brokerErr(c *conn, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, adapters.ErrAmbiguous) || errors.Is(err, adapters.ErrUnavailable) || errors.Is(err, adapters.ErrClosed) {
		return err
	}
	c.broken.Store(true)
	return q.unavailable(err)
}

func opErr(op string, d adapters.Delivery, err error) error {
	if err == nil {
		return nil
	}
	return &adapters.OpError{Target: Broker, Op: op, JobID: d.Job.ID, Attempt: d.Attempt, Err: err}
}

// Capabilities are fixed at Open.
func (q *Queue) Capabilities() adapters.Capabilities { return q.caps }

// ServerVersion names the broker, e.g. "rabbitmq 3.10.8".
func (q *Queue) ServerVersion() string { return q.version }

// Names lists the run's queues (work, delay, dlq, held, live).
func (q *Queue) Names() []string {
	return []string{q.names.main, q.names.delay, q.names.dlq, q.names.held, q.names.live}
}

// DeadLetterExchange is the run's dead-letter exchange, "" if none is configured.
func (q *Queue) DeadLetterExchange() string { return q.dlx }

// capabilities are RabbitMQ's documented semantics for this configuration.
func capabilities(o Options, quorum, dlx bool, version string) adapters.Capabilities {
	major, minor := parseVersion(version)
	c := adapters.Capabilities{Broker: Broker,
		// https://www.rabbitmq.com/docs/confirms#automatic-requeueing: unacked
		// deliveries are requeued when their channel or connection closes; there is
		// no per-message lease, and so nothing to extend.
		Lease: adapters.Approximate, LeaseExtension: adapters.None,
		Token: adapters.Approximate, FencedAck: true, DeliveryCount: adapters.None,
		DeadLetter: adapters.Emulated, DelayedNack: adapters.Emulated,
		Durable: !o.NoConfirms && !o.Volatile && (quorum || !o.Transient),
	}
	notes := []string{
		"measured on " + version,
		fmt.Sprintf("no per-message lease: an unacked delivery returns when its channel or connection closes (SIGKILL: at once; SIGSTOP: after the heartbeat timeout, heartbeat %s) or after the consumer timeout; the lease duration is honoured only lazily, by the holding process's next Lease; no lease extension", o.Heartbeat),
		"fenced ack: a delivery tag is valid only on the channel that received it; a delivery of a closed channel is refused (lease lost) without being sent",
		"ack is followed by a synchronous basic.cancel: a connection lost before its reply makes the ack ambiguous",
	}
	if o.DelayQueue {
		c.DelayedNack = adapters.Emulated
		notes = append(notes, "delayed nack is emulated: the job is republished to the run's delay queue with a per-message TTL and dead-lettered back (per-message TTLs expire at the head of a queue only: a retry may wait longer than its delay; a confirm lost with the connection leaves two copies of the job)")
	} else {
		c.DelayedNack = adapters.None
		notes = append(notes, "no delayed nack: basic.nack requeues at once (the retry delay is not honoured; on quorum queues every nack counts towards x-delivery-count and the delivery limit)")
	}
	if o.Prefetch > 0 {
		notes = append(notes, fmt.Sprintf("prefetch %d: deliveries buffered in a process before they are leased are unacked on the broker; their returns count as deliveries on quorum queues, and Inspect does not see them", o.Prefetch))
	} else {
		notes = append(notes, "leases with basic.get (no prefetch)")
	}
	switch {
	case o.Volatile:
		notes = append(notes, "negative control: classic non-durable queue, transient messages: a broker restart loses every message")
	case quorum:
		c.Token, c.DeliveryCount = adapters.Native, adapters.Native
		// https://www.rabbitmq.com/docs/quorum-queues#poison-message-handling
		notes = append(notes, "quorum queue: fencing token and attempt are x-delivery-count+1 (plus the deliveries carried over a delayed nack)")
		switch {
		case major > 4 || (major == 4 && minor >= 3):
			c.Token, c.DeliveryCount = adapters.Approximate, adapters.Approximate
			notes = append(notes, "RabbitMQ ≥ 4.3: x-delivery-count counts failed deliveries only; returns that are not failures do not raise it: token and attempt are approximate")
		case major == 4:
			notes = append(notes, "RabbitMQ 4.0–4.2: x-delivery-count counts returns; quorum queues have a default delivery limit of 20")
		default:
			notes = append(notes, "RabbitMQ 3.x: x-delivery-count counts every return (nack/reject with requeue, channel or connection closure); no default delivery limit")
		}
	default:
		notes = append(notes, "classic queue: only the redelivered flag: the token grows on the first redelivery and then stays (approximate); the broker does not count deliveries, so a job that kills its worker on every delivery is redelivered without bound")
	}
	var drops []string // what makes the broker remove a message on its own
	for _, k := range []string{"x-delivery-limit", "x-message-ttl", "x-max-length", "x-max-length-bytes"} {
		if _, ok := o.Args[k]; ok && !o.Volatile {
			drops = append(drops, k)
		}
	}
	if o.Expiration > 0 {
		drops = append(drops, "per-message expiration")
	}
	if dlx {
		c.DeadLetter = adapters.Native
		notes = append(notes, "dead letters: basic.reject without requeue routes through the run's dead-letter exchange to its DLQ (native; RabbitMQ dead-letters at most once by default)")
		if len(drops) > 0 {
			notes = append(notes, "what the broker dead-letters on its own ("+strings.Join(drops, ", ")+") is reported as moved by the broker, with the x-death reason (delivery_limit, expired, maxlen) and time; the pipeline's dead letters have the reason rejected")
		}
	} else {
		notes = append(notes, "dead letters: published to the run's DLQ with a confirm, then acked (emulated)")
		if len(drops) > 0 {
			notes = append(notes, "no dead-letter exchange: a message the broker removes on its own ("+strings.Join(drops, ", ")+") is dropped without a record; such a job is gone without the broker's reason")
		}
	}
	if o.NoConfirms {
		notes = append(notes, "publisher confirms off: Enqueue returns before the broker has the message: not durable")
	}
	if o.Transient && !quorum {
		notes = append(notes, "transient messages (delivery mode 1): lost when the broker restarts: not durable")
	}
	c.Notes = notes
	return c
}

func parseVersion(v string) (int, int) {
	_, v, _ = strings.Cut(v, " ")
	parts := strings.SplitN(v, ".", 3)
	major, _ := strconv.Atoi(parts[0])
	minor := 0
	if len(parts) > 1 {
		minor, _ = strconv.Atoi(parts[1])
	}
	return major, minor
}

// Close closes the connection; later calls fail with adapters.ErrClosed.
// Deliveries still held go back to the queue. Idempotent.
func (q *Queue) Close() error {
	if q.closed.Swap(true) {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cur != nil {
		q.cur.c.CloseDeadline(time.Now().Add(time.Second))
		q.cur = nil
	}
	return nil
}

// Drop deletes the run's queues and exchange. Call it before Close.
func (q *Queue) Drop(ctx context.Context) error {
	var errs []error
	err := q.do(ctx, func(c *conn) error {
		for _, n := range q.Names() {
			if _, err := c.ch.QueueDelete(n, false, false, false); err != nil {
				errs = append(errs, fmt.Errorf("delete queue %s: %w", n, err))
				if c.ch, err = c.c.Channel(); err != nil {
					return err
				}
			}
		}
		if q.dlx != "" {
			if err := c.ch.ExchangeDelete(q.dlx, false, false); err != nil {
				errs = append(errs, fmt.Errorf("delete exchange %s: %w", q.dlx, err))
			}
		}
		c.broken.Store(true) // the live and held queues are gone
		return nil
	})
	if err != nil {
		return fmt.Errorf("rabbit: drop: %w", err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("rabbit: drop: %s", q.redact(errors.Join(errs...).Error()))
	}
	return nil
}

func (q *Queue) persistence() uint8 {
	if q.opts.Transient || q.opts.Volatile {
		return amqp.Transient
	}
	return amqp.Persistent
}

// publish sends one message to the default exchange with routing key queue and
// waits for its confirm. Callers hold q.mu (inside do).
func (q *Queue) publish(ctx context.Context, c *conn, queue string, msg amqp.Publishing) error {
	drainReturns(c.returns)
	if q.opts.NoConfirms {
		return q.brokerErr(c, c.pub.PublishWithContext(ctx, "", queue, true, false, msg))
	}
	dc, err := c.pub.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, msg)
	if err != nil {
		return q.brokerErr(c, err)
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		c.broken.Store(true)
		return fmt.Errorf("%w: no confirm: %s", adapters.ErrAmbiguous, q.redact(err.Error()))
	}
	if c.c.IsClosed() && !acked {
		c.broken.Store(true)
		return fmt.Errorf("%w: connection lost before the confirm", adapters.ErrAmbiguous)
	}
	select {
	case r := <-c.returns:
		// A return precedes the confirm on the channel. It is definite only
		// when routing found no queue: RabbitMQ also returns a mandatory
		// message whose queue went down before confirming it (the channel's
		// handling of a publishing queue's exit), and such a message may be
		// in the queue after all (seen on a quorum queue under a partition:
		// a job delivered after its only enqueue was returned).
		if queueMissing(c, queue) {
			return fmt.Errorf("%w: unroutable (%d %s)", adapters.ErrUnavailable, r.ReplyCode, r.ReplyText)
		}
		c.broken.Store(true)
		return fmt.Errorf("%w: returned (%d %s) although its queue exists: its queue may have gone down holding it", adapters.ErrAmbiguous, r.ReplyCode, r.ReplyText)
	default:
	}
	if !acked {
		return fmt.Errorf("%w: the broker nacked the publish", adapters.ErrAmbiguous)
	}
	return nil
}

func drainReturns(rs chan amqp.Return) {
	for {
		select { // returns of earlier publishes, whose confirms were not awaited
		case <-rs:
		default:
			return
		}
	}
}

// Enqueue publishes job persistently and waits for the broker's confirm.
func (q *Queue) Enqueue(ctx context.Context, job adapters.Job) error {
	d := adapters.Delivery{Job: job}
	body, err := json.Marshal(job)
	if err != nil {
		return opErr("enqueue", d, err)
	}
	msg := amqp.Publishing{ContentType: "application/json", DeliveryMode: q.persistence(), MessageId: job.ID, Body: body}
	if q.opts.Expiration > 0 {
		msg.Expiration = strconv.FormatInt(q.opts.Expiration.Milliseconds(), 10)
	}
	return opErr("enqueue", d, q.do(ctx, func(c *conn) error { return q.publish(ctx, c, q.names.main, msg) }))
}

// Lease takes the next ready message (basic.get, or the consumer's buffer with a
// prefetch), or returns adapters.ErrNoJob. It first returns to the queue every
// delivery of this Queue whose lease ran out. The lease is otherwise the
// broker's: the message is unacked until Ack, Nack or DeadLetter, or until this
// process's connection closes.
func (q *Queue) Lease(ctx context.Context, lease time.Duration) (adapters.Delivery, error) {
	var d adapters.Delivery
	err := q.do(ctx, func(c *conn) error {
		if err := q.expire(c); err != nil {
			return err
		}
		q.seq++
		heldTag := "held." + strconv.FormatUint(q.seq, 10)
		var m amqp.Delivery
		if c.work == nil {
			// The held consumer is registered before the get, on the same
			// channel: Inspect never sees a leased message neither ready nor held.
			if _, err := c.ch.Consume(q.names.held, heldTag, false, false, false, true, nil); err != nil {
				return q.brokerErr(c, err)
			}
			got, ok, err := c.ch.Get(q.names.main, false)
			if err != nil {
				c.broken.Store(true)
				return fmt.Errorf("%w: get: %s", adapters.ErrAmbiguous, q.redact(err.Error()))
			}
			if !ok {
				if err := c.ch.Cancel(heldTag, true); err != nil {
					return q.brokerErr(c, err)
				}
				return adapters.ErrNoJob
			}
			m = got
		} else {
			select {
			case got, ok := <-c.work:
				if !ok {
					c.broken.Store(true)
					return fmt.Errorf("%w: consumer closed", adapters.ErrUnavailable)
				}
				m = got
			case <-time.After(5 * time.Millisecond):
				return adapters.ErrNoJob
			}
			if _, err := c.ch.Consume(q.names.held, heldTag, false, false, false, true, nil); err != nil {
				return q.brokerErr(c, err)
			}
		}
		d = q.delivery(m)
		d.Receipt = q.id + ":" + strconv.FormatUint(c.gen, 10) + ":" + strconv.FormatUint(m.DeliveryTag, 10)
		q.held[d.Receipt] = &holding{gen: c.gen, tag: m.DeliveryTag, heldTag: heldTag, until: time.Now().Add(lease), msg: m, d: d}
		return nil
	})
	if err != nil {
		if errors.Is(err, adapters.ErrNoJob) {
			return adapters.Delivery{}, err
		}
		return adapters.Delivery{}, opErr("lease", adapters.Delivery{}, err)
	}
	return d, nil
}

// delivery builds the port's delivery from a message: the job from the body, the
// token and attempt from the broker's counters.
func (q *Queue) delivery(m amqp.Delivery) adapters.Delivery {
	var d adapters.Delivery
	if err := json.Unmarshal(m.Body, &d.Job); err != nil || d.Job.ID == "" {
		// Not a job of durachk's: hand it over as it is; the pipeline dead-letters it.
		d.Job = adapters.Job{ID: m.MessageId, Payload: m.Body}
	}
	before := headerInt(m.Headers, DeliveriesHeader)
	if q.quorum && !q.opts.Volatile {
		n := before + headerInt(m.Headers, DeliveryCountHeader) + 1
		d.Attempt, d.Token = int(n), uint64(n)
		return d
	}
	n := before + 1
	if m.Redelivered {
		n++
	}
	d.Token = uint64(n)
	return d
}

func headerInt(h amqp.Table, key string) int64 {
	switch v := h[key].(type) {
	case int:
		return int64(v)
	case int8:
		return int64(v)
	case int16:
		return int64(v)
	case int32:
		return int64(v)
	case int64:
		return v
	case uint8:
		return int64(v)
	case uint16:
		return int64(v)
	case uint32:
		return int64(v)
	case uint64:
		return int64(v)
	case float64:
		return int64(v)
	}
	return 0
}

// expire returns to the queue each delivery of this Queue, on c, whose lease ran
// out, and forgets the deliveries of closed connections (the broker has
// requeued them). Callers hold q.mu.
func (q *Queue) expire(c *conn) error {
	now := time.Now()
	for r, h := range q.held {
		switch {
		case h.gen != c.gen:
			delete(q.held, r)
		case now.After(h.until):
			if err := c.ch.Nack(h.tag, false, true); err != nil {
				return q.brokerErr(c, err)
			}
			if err := c.ch.Cancel(h.heldTag, true); err != nil {
				return q.brokerErr(c, err)
			}
			delete(q.held, r)
		}
	}
	return nil
}

// current finds the holding of d on the live connection c; ErrLeaseLost if d
// is not held here any more (settled, expired, or its channel closed).
func (q *Queue) current(c *conn, d adapters.Delivery) (*holding, error) {
	h, ok := q.held[d.Receipt]
	if !ok {
		return nil, adapters.ErrLeaseLost
	}
	if h.gen != c.gen {
		delete(q.held, d.Receipt)
		return nil, adapters.ErrLeaseLost
	}
	return h, nil
}

// settle runs the settling method of h (ack, nack or reject), then cancels its
// held consumer and waits for the cancel-ok, which proves the channel processed
// the settlement.
func (q *Queue) settle(c *conn, h *holding, receipt string, f func() error) error {
	if err := f(); err != nil {
		// Not sent: the channel is closed, and the broker requeued the message.
		c.broken.Store(true)
		delete(q.held, receipt)
		return fmt.Errorf("%w: %s", adapters.ErrLeaseLost, q.redact(err.Error()))
	}
	delete(q.held, receipt)
	if err := c.ch.Cancel(h.heldTag, false); err != nil {
		c.broken.Store(true)
		return fmt.Errorf("%w: connection lost after the settlement was sent: %s", adapters.ErrAmbiguous, q.redact(err.Error()))
	}
	return nil
}

// Ack removes the delivered message (basic.ack).
func (q *Queue) Ack(ctx context.Context, d adapters.Delivery) error {
	return opErr("ack", d, q.do(ctx, func(c *conn) error {
		h, err := q.current(c, d)
		if err != nil {
			return err
		}
		return q.settle(c, h, d.Receipt, func() error { return c.ch.Ack(h.tag, false) })
	}))
}

// copyOf is the message h holds, republished with the deliveries so far.
func (q *Queue) copyOf(h *holding, headers amqp.Table) amqp.Publishing {
	hd := amqp.Table{}
	for k, v := range h.msg.Headers {
		if k != DeliveryCountHeader && k != "x-death" && k != "x-first-death-exchange" && k != "x-first-death-queue" && k != "x-first-death-reason" {
			hd[k] = v
		}
	}
	deliveries := int64(h.d.Token)
	if h.d.Attempt > 0 {
		deliveries = int64(h.d.Attempt)
	}
	hd[DeliveriesHeader] = deliveries
	for k, v := range headers {
		hd[k] = v
	}
	return amqp.Publishing{ContentType: h.msg.ContentType, DeliveryMode: q.persistence(), MessageId: h.msg.MessageId,
		Headers: hd, Body: h.msg.Body}
}

// Nack returns the job to the queue: at once (basic.nack with requeue; the
// delay is not honoured) unless Options.DelayQueue is set and delay > 0: then by
// republishing it to the run's delay queue with a per-message TTL of delay and
// acking the delivery (emulated; a lost confirm followed by a lost connection
// leaves two copies of the job).
func (q *Queue) Nack(ctx context.Context, d adapters.Delivery, delay time.Duration) error {
	return opErr("nack", d, q.do(ctx, func(c *conn) error {
		h, err := q.current(c, d)
		if err != nil {
			return err
		}
		if delay <= 0 || !q.opts.DelayQueue {
			return q.settle(c, h, d.Receipt, func() error { return c.ch.Nack(h.tag, false, true) })
		}
		msg := q.copyOf(h, nil)
		msg.Expiration = strconv.FormatInt(max(delay.Milliseconds(), 1), 10)
		if err := q.publish(ctx, c, q.names.delay, msg); err != nil {
			return err // the delivery is still held
		}
		return q.settle(c, h, d.Receipt, func() error { return c.ch.Ack(h.tag, false) })
	}))
}

// DeadLetter removes the job to the dead-letter queue: natively through the
// configured dead-letter exchange (basic.reject without requeue), else by
// publishing it to the run's DLQ and acking it (emulated). reason must be a
// reason code: it travels in a header.
func (q *Queue) DeadLetter(ctx context.Context, d adapters.Delivery, reason string) error {
	return opErr("dead letter", d, q.do(ctx, func(c *conn) error {
		h, err := q.current(c, d)
		if err != nil {
			return err
		}
		if q.dlx != "" {
			return q.settle(c, h, d.Receipt, func() error { return c.ch.Reject(h.tag, false) })
		}
		if err := q.publish(ctx, c, q.names.dlq, q.copyOf(h, amqp.Table{ReasonHeader: reason})); err != nil {
			return err
		}
		return q.settle(c, h, d.Receipt, func() error { return c.ch.Ack(h.tag, false) })
	}))
}

// Inspect reports what is left. Counts come from passive declares (ready
// messages of the work and delay queues, consumers of the held queue = deliveries
// held by live processes, DLQ messages). AMQP cannot name a message without
// delivering it, and a delivery counts on a quorum queue: the ready messages are
// named by browsing (basic.get, then closing the channel, which requeues them)
// only when no other process of the run has a connection open, i.e. at the end of
// a run; until then they are listed as "ready#n" placeholders, and held
// deliveries always as "unacked#n". Dead letters are named by browsing the DLQ
// (nobody consumes it) whenever its count changed; those the broker moved
// there on its own are in Moved (see brokerAction).
func (q *Queue) Inspect(ctx context.Context) (adapters.Inventory, error) {
	var inv adapters.Inventory
	err := q.do(ctx, func(c *conn) error {
		var ready, delayed, held, others, dead int
		count := func() error {
			var err error
			var n, cons int
			if n, _, err = q.passive(c, q.names.main); err != nil {
				return err
			}
			ready = n
			if delayed, _, err = q.passive(c, q.names.delay); err != nil {
				return err
			}
			if _, held, err = q.passive(c, q.names.held); err != nil {
				return err
			}
			if _, cons, err = q.passive(c, q.names.live); err != nil {
				return err
			}
			others = cons - 1 // this connection's own presence
			dead, _, err = q.passive(c, q.names.dlq)
			return err
		}
		if err := count(); err != nil {
			return err
		}
		// Connections of processes that just exited may still be closing; a
		// process that lost its connection (broker restart) may be reconnecting.
		for i := 0; i < 3 && others > 0 && ready+delayed+held > 0; i++ {
			time.Sleep(20 * time.Millisecond)
			if err := count(); err != nil {
				return err
			}
		}
		for i := 0; i < 6 && others == 0 && ready+delayed > 0; i++ {
			time.Sleep(50 * time.Millisecond)
			if err := count(); err != nil {
				return err
			}
		}
		if q.quorum && ready == 0 {
			// A quorum queue without a leader (just after a node restart) reports
			// 0 messages: only a basic.get answered by the leader proves it empty.
			m, ok, err := c.insp.Get(q.names.main, false)
			if err != nil {
				c.insp = nil
				return q.unavailable(err)
			}
			if ok {
				ready = 1
				if err := c.insp.Reject(m.DeliveryTag, true); err != nil {
					c.insp = nil
				}
			}
		}
		for i := range held {
			inv.InFlight = append(inv.InFlight, "unacked#"+strconv.Itoa(i+1))
		}
		if ready+delayed > 0 {
			if others > 0 {
				for i := range ready + delayed {
					inv.Queued = append(inv.Queued, "ready#"+strconv.Itoa(i+1))
				}
			} else {
				for _, n := range []string{q.names.main, q.names.delay} {
					ids, err := q.browse(c, n)
					if err != nil {
						return err
					}
					inv.Queued = append(inv.Queued, ids...)
				}
			}
		}
		if dead != q.lastDLQ {
			var moved []adapters.BrokerAction
			ids, err := q.browseMessages(c, q.names.dlq, func(id string, m amqp.Delivery) {
				if a, ok := q.brokerAction(id, m); ok {
					moved = append(moved, a)
				}
			})
			if err != nil {
				return err
			}
			q.lastDLQ, q.dlqIDs, q.moved = dead, ids, moved
		}
		inv.DeadLettered = append([]string(nil), q.dlqIDs...)
		inv.Moved = append([]adapters.BrokerAction(nil), q.moved...)
		return nil
	})
	if err != nil {
		return adapters.Inventory{}, opErr("inspect", adapters.Delivery{}, err)
	}
	return inv, nil
}

// Ping reports whether the broker answers, touching no message: a passive
// declare of the work queue. A liveness probe that called Inspect instead
// would, while no other process of the run is connected, browse the queue:
// every message got and requeued counts as a delivery on a RabbitMQ 3.x
// quorum queue (x-delivery-count), and enough of them make a healthy job
// look like a crash loop to the pipeline.
func (q *Queue) Ping(ctx context.Context) error {
	err := q.do(ctx, func(c *conn) error {
		_, _, err := q.passive(c, q.names.main)
		return err
	})
	return opErr("ping", adapters.Delivery{}, err)
}

// passive returns the ready messages and consumers of queue.
func (q *Queue) passive(c *conn, queue string) (int, int, error) {
	if c.insp == nil || c.insp.IsClosed() {
		ch, err := c.c.Channel()
		if err != nil {
			return 0, 0, q.brokerErr(c, err)
		}
		c.insp = ch
	}
	st, err := c.insp.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		c.insp = nil
		return 0, 0, q.unavailable(err)
	}
	return st.Messages, st.Consumers, nil
}

// queueMissing reports whether the broker answered a passive declare of queue
// with 404 NOT_FOUND, on a channel of its own (the 404 closes it). Any other
// answer, a failure included, is not proof that the queue is missing.
func queueMissing(c *conn, queue string) bool {
	ch, err := c.c.Channel()
	if err != nil {
		return false
	}
	defer ch.Close()
	_, err = ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	var e *amqp.Error
	return errors.As(err, &e) && e.Code == amqp.NotFound
}

// browse names the ready messages of queue by taking them all on a channel of
// its own and closing it, which puts them back.
func (q *Queue) browse(c *conn, queue string) ([]string, error) {
	return q.browseMessages(c, queue, nil)
}

// browseMessages is browse that also hands each message to see, if not nil.
func (q *Queue) browseMessages(c *conn, queue string, see func(id string, m amqp.Delivery)) ([]string, error) {
	ch, err := c.c.Channel()
	if err != nil {
		return nil, q.brokerErr(c, err)
	}
	defer ch.Close()
	var ids []string
	for {
		m, ok, err := ch.Get(queue, false)
		if err != nil {
			return nil, q.unavailable(err)
		}
		if !ok {
			break
		}
		id := m.MessageId
		if id == "" {
			var j adapters.Job
			if json.Unmarshal(m.Body, &j) == nil {
				id = j.ID
			}
		}
		ids = append(ids, id)
		if see != nil {
			see(id, m)
		}
	}
	return ids, nil
}

// brokerAction says whether the dead letter m (job id) was moved there by the
// broker on its own, and how, from the x-death entry of the work queue that
// RabbitMQ adds when it dead-letters a message
// (https://www.rabbitmq.com/docs/dlx#effects): the most recent entry for the
// work queue comes first, its reason is "rejected" for a basic.reject or
// basic.nack without requeue — the adapter's DeadLetter, the only place it
// rejects without requeue — and "expired", "maxlen" or "delivery_limit" for the
// broker's own actions. A message the adapter published to the DLQ itself
// (emulated DeadLetter, x-durachk-reason) has no x-death entry of the work
// queue: copyOf leaves the earlier ones out.
func (q *Queue) brokerAction(id string, m amqp.Delivery) (adapters.BrokerAction, bool) {
	deaths, _ := m.Headers["x-death"].([]any)
	for _, d := range deaths {
		t, ok := d.(amqp.Table)
		if !ok || t["queue"] != q.names.main {
			continue
		}
		reason, _ := t["reason"].(string)
		if reason == "rejected" {
			return adapters.BrokerAction{}, false
		}
		a := adapters.BrokerAction{Job: id, Action: adapters.ActionDeadLettered, Reason: reason}
		switch reason {
		case "expired":
			a.Action = adapters.ActionExpired
		case "maxlen":
			a.Action = adapters.ActionDropped
		}
		if at, ok := t["time"].(time.Time); ok {
			a.At = at.UTC() // whole seconds: an AMQP timestamp
		}
		before := headerInt(m.Headers, DeliveriesHeader)
		switch n := headerInt(m.Headers, DeliveryCountHeader); {
		case n > 0:
			a.Deliveries = int(before + n + 1)
		case reason == "delivery_limit" && q.quorum:
			// RabbitMQ 3.x removes x-delivery-count from the dead letter; it
			// dead-letters a message whose return count exceeds the limit, so
			// it had limit+1 deliveries (plus those before a delayed nack).
			if limit := headerInt(amqp.Table(q.args), "x-delivery-limit"); limit >= 0 && q.args["x-delivery-limit"] != nil {
				a.Deliveries = int(before + limit + 1)
			}
		}
		return a, true
	}
	return adapters.BrokerAction{}, false
}
