package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/history"
)

// Relay moves pending outbox events to the consumer and marks them published.
// A relay killed between publish and mark publishes again: the consumer dedupes.
// Not safe for concurrent use; run one Relay per process.
type Relay struct {
	Env     *Env
	Store   Store
	Hooks   Hooks
	Publish func(ctx context.Context, e Event) error
	// Probe, if set, is a cheap test of the channel (no event sent). Without it
	// the breaker cannot tell a dead channel from a bad event, and treats every
	// failure streak as a dead channel.
	Probe func(ctx context.Context) error
	Batch int
	Poll  time.Duration
	// Retention of published rows; 0 means DefaultOutboxRetention.
	Retention time.Duration
	// After BreakAfter consecutive failed publishes the relay probes the channel;
	// if the probe fails too, the circuit opens: events stay parked in the outbox
	// and one probe per ProbeEvery tests the channel until it answers, then the
	// backlog drains in acceptance order.
	BreakAfter int
	ProbeEvery time.Duration
	// EventBudget is how often one event may be rejected by the consumer on a
	// healthy channel before it is dead-lettered (parked for good), so that a
	// poison event holds up the events behind it for no longer than that. 0: 5.
	EventBudget int
	// StepTimeout bounds one batch (its store and publish calls); 0: no bound.
	StepTimeout time.Duration
	// NaiveBreaker counts every failure, a rejection too, as the channel's and
	// never probes: the negative control of the poison-event scenario. Never set
	// it otherwise.
	NaiveBreaker bool
	failures     int
	open         bool
	nextProbe    time.Time
	rejected     map[string]int
}

func (r *Relay) rec(t history.Type, f history.F, e Event, err error) {
	r.Env.Record(history.Op{Type: t, F: f, Job: e.JobID, Key: e.Key, Value: e.ID, Err: ErrorCode(err)})
}

// Open reports whether the circuit is open.
func (r *Relay) Open() bool { return r.open }

// ErrRejected marks an event the consumer refused: the channel works, the event
// does not.
var ErrRejected = errors.New("event rejected by the consumer")

func (r *Relay) setOpen(open bool) {
	if r.open == open {
		return
	}
	r.open = open
	state := "closed"
	if open {
		state = "open"
	}
	r.Env.Record(history.Op{Type: history.Info, F: history.Circuit, Value: state})
}

// probe tests the channel; no Probe means "assume it is down".
func (r *Relay) probe(ctx context.Context) bool {
	if r.Probe == nil || r.NaiveBreaker {
		return false
	}
	r.Env.Record(history.Op{Type: history.Invoke, F: history.Probe})
	err := r.Probe(ctx)
	r.Env.Record(history.Op{Type: RecordType(err), F: history.Probe, Err: ErrorCode(err)})
	return err == nil
}

// Step publishes one batch; it reports how many events it published.
func (r *Relay) Step(ctx context.Context) (int, error) {
	if r.open {
		if r.Env.Now().Before(r.nextProbe) {
			return 0, nil
		}
		if !r.probe(ctx) {
			r.nextProbe = r.Env.Now().Add(r.ProbeEvery)
			return 0, nil
		}
		r.setOpen(false)
		r.failures = 0
	}
	events, err := r.Store.PendingEvents(ctx, r.Batch)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range events {
		r.rec(history.Invoke, history.Publish, e, nil)
		err := r.Publish(ctx, e)
		r.rec(RecordType(err), history.Publish, e, err)
		if err != nil {
			return n, r.failed(ctx, e, err)
		}
		r.failures = 0
		delete(r.rejected, e.ID)
		r.Hooks.At(ctx, AfterPublishBeforeMark, e.JobID)
		r.rec(history.Invoke, history.Mark, e, nil)
		err = r.Store.MarkPublished(ctx, []string{e.ID}, r.Env.Now())
		r.rec(RecordType(err), history.Mark, e, err)
		n++
	}
	return n, nil
}

// failed handles a failed publish of e. The batch stops there, so that the
// events behind e wait: acceptance order is kept. Only the consumer's rejection
// on a working channel spends e's budget; a failing channel (a refused call, a
// lost reply, a timeout) never does: a streak of them opens the circuit if the
// channel fails its probe too, and e stays parked in the outbox until the
// channel answers again, however long that takes. It is never dead-lettered
// for the channel's sake.
func (r *Relay) failed(ctx context.Context, e Event, err error) error {
	if !errors.Is(err, ErrRejected) || r.NaiveBreaker {
		r.failures++
		if r.BreakAfter <= 0 || r.failures < r.BreakAfter {
			return nil
		}
		if !r.probe(ctx) {
			r.setOpen(true)
			r.nextProbe = r.Env.Now().Add(r.ProbeEvery)
			return nil
		}
		// The channel answers its probe: the streak was its flakiness, not e's.
		r.failures = 0
		return nil
	}
	if r.rejected == nil {
		r.rejected = map[string]int{}
	}
	r.rejected[e.ID]++
	budget := r.EventBudget
	if budget <= 0 {
		budget = 5
	}
	if r.rejected[e.ID] < budget {
		return nil
	}
	r.rec(history.Invoke, history.EventDead, e, nil)
	derr := r.Store.DeadLetterEvent(ctx, e.ID, ReasonRejectedEvent)
	r.rec(RecordType(derr), history.EventDead, e, derr)
	if derr == nil {
		delete(r.rejected, e.ID)
	}
	return nil
}

// Run relays until ctx ends, purging published rows past their retention.
func (r *Relay) Run(ctx context.Context) error {
	retention := r.Retention
	if retention == 0 {
		retention = DefaultOutboxRetention
	}
	for ctx.Err() == nil {
		sctx, cancel := ctx, context.CancelFunc(func() {})
		if r.StepTimeout > 0 {
			sctx, cancel = context.WithTimeout(ctx, r.StepTimeout)
		}
		n, err := r.Step(sctx)
		cancel()
		if err != nil && !ambiguous(err) && !isUnavailable(err) {
			return err
		}
		if n == 0 {
			if _, err := r.Store.PurgePublished(ctx, r.Env.Now().Add(-retention)); err != nil && !isUnavailable(err) && !ambiguous(err) {
				return err
			}
			if r.Env.Sleep(ctx, r.Poll) != nil {
				return nil
			}
		}
	}
	return nil
}

func isUnavailable(err error) bool { return err != nil && errors.Is(err, adapters.ErrUnavailable) }

// Consumer applies each event id at most once, using the store's dedupe table.
// Not safe for concurrent use: one relay drives it.
type Consumer struct {
	Env   *Env
	Store Store
	// Life tells this consumer apart from earlier ones of the same name
	// (Env.Process): the process it runs in, where that restarts (the
	// runner restarts a crashed relay as relay.2, its consumer with it).
	// Each application is named
	// after both, and a restarted consumer counting its applications from 1
	// again must not take an earlier life's for its own: it did, and called
	// a republished event's repeat a first application (a false
	// duplicate_apply on nats-jetstream outbox.relay beside two busy loops).
	Life     string
	Sabotage Sabotage
	seq      int
	// unknown holds, per event, the application whose reply was lost: the next
	// delivery of the event asks under the same name, and the store's answer
	// says whether that application was the one that took.
	unknown map[string]string
}

// Handle applies e; a repeat is dropped and recorded as such.
func (c *Consumer) Handle(ctx context.Context, e Event) error {
	c.Env.Record(history.Op{Type: history.Invoke, F: history.Apply, Job: e.JobID, Key: e.Key, Value: e.ID})
	if c.Sabotage.DropEvents {
		return nil
	}
	if strings.HasPrefix(e.Body, PoisonEventPrefix) {
		c.Env.Record(history.Op{Type: history.Fail, F: history.Apply, Job: e.JobID, Key: e.Key, Value: e.ID, Err: "rejected"})
		return fmt.Errorf("%w: %s", ErrRejected, e.ID)
	}
	by, again := c.unknown[e.ID]
	if !again {
		c.seq++
		by = c.Env.Process
		if c.Life != "" {
			by += "@" + c.Life
		}
		by += "/" + strconv.Itoa(c.seq)
	}
	first, err := c.Store.ApplyEvent(ctx, e.ID, by)
	if err != nil {
		if ambiguous(err) {
			if c.unknown == nil {
				c.unknown = map[string]string{}
			}
			c.unknown[e.ID] = by
		}
		c.Env.Record(history.Op{Type: RecordType(err), F: history.Apply, Job: e.JobID, Key: e.Key, Value: e.ID, Err: ErrorCode(err)})
		return err
	}
	delete(c.unknown, e.ID)
	outcome := "dropped"
	if first || c.Sabotage.ConsumerNoDedupe {
		outcome = "applied"
	}
	// The ok record says what happened to the effect; the event is named by its key.
	c.Env.Record(history.Op{Type: history.OK, F: history.Apply, Job: e.JobID, Key: e.Key, Value: outcome})
	return nil
}
