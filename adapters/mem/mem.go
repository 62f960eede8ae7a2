// Package mem is the embedded reference broker: a queue on an injected clock
// (virtual in the embedded target) with the four clocks of a job kept apart
// (created-at, visible-at, lease-until, deadline), a fencing token bumped by every
// lease, heartbeats, acks and nacks accepted only with the current token, a
// delivery counter and native dead-lettering. It holds no goroutines and draws no
// randomness, so a run driven by a seeded scheduler is identical every time.
package mem

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/durachk/durachk/adapters"
)

// Options configure the broker. The zero value is a durable, unordered broker
// without a delivery limit, on the wall clock.
type Options struct {
	Now func() time.Time
	// DeliveryLimit dead-letters a message natively when it would be delivered for
	// the (limit+1)-th time. 0: no limit.
	DeliveryLimit int
	// FIFO delivers the jobs of one group in acceptance order, one at a time.
	FIFO bool
	// Volatile loses every message on Crash, as a broker without persistence does.
	Volatile bool
	// Unsynced acknowledges enqueues before they are on disk: a PowerLoss loses
	// every message, a Crash none (the machine's page cache still has them).
	Unsynced bool
	// BreakOrder is a deliberately broken FIFO (newest first) that still claims
	// FIFO: the negative control of order.fifo. Never set it otherwise.
	BreakOrder bool
	// UnfencedAck accepts acks (and nacks, extensions, dead-letters) with a
	// stale token, even of a message acked since (as SQS deletes with an old
	// receipt handle), while still claiming fenced acks: the negative control
	// of stale_ack_accepted. Never set it otherwise.
	UnfencedAck bool
}

type message struct {
	id         int64
	job        adapters.Job
	visibleAt  time.Time
	leaseUntil time.Time // zero: not in flight
	token      uint64
	deliveries int
	gone       bool // acked or dead-lettered
	// byBroker: dead-lettered by the broker itself, at the delivery limit, at
	// deadAt (not by the pipeline's DeadLetter).
	byBroker bool
	deadAt   time.Time
}

// Queue is safe for concurrent use.
type Queue struct {
	opts      Options
	mu        sync.Mutex
	nextID    int64
	msgs      []*message         // acceptance order; compact drops the finished prefix
	byID      map[int64]*message // every message accepted, finished ones too
	dead      []*message
	downUntil time.Time
	closed    bool
	live      int
}

var (
	_ adapters.Queue        = (*Queue)(nil)
	_ adapters.Extender     = (*Queue)(nil)
	_ adapters.DeadLetterer = (*Queue)(nil)
	_ adapters.Inspector    = (*Queue)(nil)
)

// New returns an empty broker.
func New(opts Options) *Queue {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Queue{opts: opts, byID: map[int64]*message{}}
}

// Capabilities of the reference broker follow its options.
func (q *Queue) Capabilities() adapters.Capabilities {
	dl := adapters.Emulated
	if q.opts.DeliveryLimit > 0 {
		dl = adapters.Native
	}
	c := adapters.Capabilities{
		Broker: "mem", Lease: adapters.Native, LeaseExtension: adapters.Native,
		Token: adapters.Native, FencedAck: true, DeliveryCount: adapters.Native,
		DeadLetter: dl, DelayedNack: adapters.Native, FIFO: q.opts.FIFO || q.opts.BreakOrder,
		Durable: !q.opts.Volatile, BrokerKill: true, PowerLoss: true,
		Notes: []string{"embedded reference broker on a virtual clock; its verdicts are about durachk's reference semantics, not a real broker"},
	}
	return c
}

func (q *Queue) check() error {
	if q.closed {
		return adapters.ErrClosed
	}
	if q.opts.Now().Before(q.downUntil) {
		return adapters.ErrUnavailable
	}
	return nil
}

// Enqueue accepts job at once; it is visible immediately.
func (q *Queue) Enqueue(ctx context.Context, job adapters.Job) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.check(); err != nil {
		return err
	}
	q.nextID++
	q.live++
	m := &message{id: q.nextID, job: job, visibleAt: q.opts.Now()}
	q.msgs = append(q.msgs, m)
	q.byID[m.id] = m
	return nil
}

// Lease delivers the first visible message in acceptance order (for FIFO, the
// oldest live message of its group, and only while no other message of the group
// is in flight). A message past the delivery limit is dead-lettered instead.
func (q *Queue) Lease(ctx context.Context, lease time.Duration) (adapters.Delivery, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.check(); err != nil {
		return adapters.Delivery{}, err
	}
	now := q.opts.Now()
	q.compact()
	blocked := map[string]bool{}
	pick := func(m *message) (adapters.Delivery, bool) {
		inFlight := !m.leaseUntil.IsZero() && now.Before(m.leaseUntil)
		if q.opts.FIFO && m.job.Group != "" {
			if blocked[m.job.Group] {
				return adapters.Delivery{}, false
			}
			blocked[m.job.Group] = true
		}
		if inFlight || now.Before(m.visibleAt) {
			return adapters.Delivery{}, false
		}
		if q.opts.DeliveryLimit > 0 && m.deliveries >= q.opts.DeliveryLimit {
			q.remove(m)
			m.byBroker, m.deadAt = true, now
			q.dead = append(q.dead, m)
			delete(blocked, m.job.Group)
			return adapters.Delivery{}, false
		}
		m.deliveries++
		m.token++
		m.leaseUntil = now.Add(lease)
		return adapters.Delivery{Job: m.job, Token: m.token, Attempt: m.deliveries, Receipt: receipt(m)}, true
	}
	if q.opts.BreakOrder {
		for i := len(q.msgs) - 1; i >= 0; i-- {
			if m := q.msgs[i]; !m.gone {
				if d, ok := pick(m); ok {
					return d, nil
				}
			}
		}
		return adapters.Delivery{}, adapters.ErrNoJob
	}
	for _, m := range q.msgs {
		if m.gone {
			continue
		}
		if d, ok := pick(m); ok {
			return d, nil
		}
	}
	return adapters.Delivery{}, adapters.ErrNoJob
}

func receipt(m *message) string {
	return strconv.FormatInt(m.id, 10) + ":" + strconv.FormatUint(m.token, 10)
}

// current finds the live message of d; ErrStaleToken once a newer delivery exists.
func (q *Queue) current(d adapters.Delivery) (*message, error) {
	idStr, _, ok := strings.Cut(d.Receipt, ":")
	id, err := strconv.ParseInt(idStr, 10, 64)
	if !ok || err != nil {
		return nil, fmt.Errorf("mem: bad receipt %q", d.Receipt)
	}
	// By id, not a scan of the queue (an ack per job made large runs
	// quadratic), and whatever compact dropped since: an unfenced broker
	// still takes the handle of a message acked long ago.
	m, found := q.byID[id]
	if !found {
		return nil, adapters.ErrLeaseLost
	}
	if q.opts.UnfencedAck {
		return m, nil // whatever became of it: the handle is all it checks
	}
	if m.gone {
		return nil, adapters.ErrLeaseLost
	}
	if m.token != d.Token {
		return nil, adapters.ErrStaleToken
	}
	return m, nil
}

// onCurrent runs f on d's message under the lock, once the broker is up and d
// is the message's current delivery.
func (q *Queue) onCurrent(d adapters.Delivery, f func(m *message) error) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.check(); err != nil {
		return err
	}
	m, err := q.current(d)
	if err != nil {
		return err
	}
	return f(m)
}

// Ack removes the message if d is its current delivery.
func (q *Queue) Ack(ctx context.Context, d adapters.Delivery) error {
	return q.onCurrent(d, func(m *message) error {
		q.remove(m)
		return nil
	})
}

func (q *Queue) remove(m *message) {
	if !m.gone {
		m.gone = true
		q.live--
	}
}

// Live is the number of messages queued or in flight.
func (q *Queue) Live() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.live
}

// Nack makes the message visible again after delay.
func (q *Queue) Nack(ctx context.Context, d adapters.Delivery, delay time.Duration) error {
	return q.onCurrent(d, func(m *message) error {
		m.leaseUntil = time.Time{}
		m.visibleAt = q.opts.Now().Add(delay)
		return nil
	})
}

// Extend moves the lease end of a live delivery; ErrLeaseLost once it expired.
func (q *Queue) Extend(ctx context.Context, d adapters.Delivery, lease time.Duration) error {
	return q.onCurrent(d, func(m *message) error {
		now := q.opts.Now()
		if !now.Before(m.leaseUntil) {
			return adapters.ErrLeaseLost
		}
		m.leaseUntil = now.Add(lease)
		return nil
	})
}

// DeadLetter moves the current delivery's message to the dead-letter list.
func (q *Queue) DeadLetter(ctx context.Context, d adapters.Delivery, reason string) error {
	return q.onCurrent(d, func(m *message) error {
		q.remove(m)
		q.dead = append(q.dead, m)
		return nil
	})
}

// DeliveryLimitReason is the reason Inspect gives for a job the broker
// dead-lettered at its delivery limit.
const DeliveryLimitReason = "delivery_limit"

// Inspect lists what is left, by job id, and in Moved the jobs the broker
// dead-lettered on its own at the delivery limit (never those the pipeline
// dead-lettered).
func (q *Queue) Inspect(ctx context.Context) (adapters.Inventory, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.opts.Now()
	var inv adapters.Inventory
	for _, m := range q.msgs {
		switch {
		case m.gone:
		case !m.leaseUntil.IsZero() && now.Before(m.leaseUntil):
			inv.InFlight = append(inv.InFlight, m.job.ID)
		default:
			inv.Queued = append(inv.Queued, m.job.ID)
		}
	}
	for _, m := range q.dead {
		inv.DeadLettered = append(inv.DeadLettered, m.job.ID)
		if m.byBroker {
			inv.Moved = append(inv.Moved, adapters.BrokerAction{Job: m.job.ID, Action: adapters.ActionDeadLettered,
				Reason: DeliveryLimitReason, Deliveries: m.deliveries, At: m.deadAt})
		}
	}
	return inv, nil
}

// Crash kills the broker for down: calls fail with ErrUnavailable until then. A
// volatile broker comes back empty; a durable one keeps every accepted message.
func (q *Queue) Crash(down time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.downUntil = q.opts.Now().Add(down)
	if q.opts.Volatile {
		q.msgs, q.dead, q.live = nil, nil, 0
		clear(q.byID)
	}
}

// PowerLoss cuts the broker's power for down: like Crash, and a broker that
// acknowledged before syncing (Unsynced) comes back empty too.
func (q *Queue) PowerLoss(down time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.downUntil = q.opts.Now().Add(down)
	if q.opts.Volatile || q.opts.Unsynced {
		q.msgs, q.dead, q.live = nil, nil, 0
		clear(q.byID)
	}
}

// compact drops the finished prefix so that Lease stays fast on long runs.
func (q *Queue) compact() {
	i := 0
	for i < len(q.msgs) && q.msgs[i].gone {
		i++
	}
	if i > 64 {
		q.msgs = append([]*message(nil), q.msgs[i:]...)
	}
}

// Close makes later calls fail with ErrClosed. It is idempotent.
func (q *Queue) Close() error {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	return nil
}
