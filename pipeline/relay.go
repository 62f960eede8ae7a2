package pipeline

import (
	"context"
	"errors"
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
	Batch   int
	Poll    time.Duration
	// Retention of published rows; 0 means DefaultOutboxRetention.
	Retention time.Duration
	// The circuit opens after BreakAfter consecutive failed publishes; while open,
	// one probe per ProbeEvery tests the channel and the events stay parked.
	BreakAfter int
	ProbeEvery time.Duration
	// StepTimeout bounds one batch (its store and publish calls); 0: no bound.
	StepTimeout time.Duration
	failures    int
	openUntil   time.Time
}

func (r *Relay) rec(t history.Type, f history.F, e Event, err error) {
	r.Env.Record(history.Op{Type: t, F: f, Job: e.JobID, Key: e.Key, Value: e.ID, Err: ErrorCode(err)})
}

// Open reports whether the circuit is open.
func (r *Relay) Open() bool { return r.Env.Now().Before(r.openUntil) }

// Step publishes one batch; it reports how many events it published.
func (r *Relay) Step(ctx context.Context) (int, error) {
	limit := r.Batch
	if r.Open() {
		return 0, nil
	}
	if r.failures >= r.BreakAfter && r.BreakAfter > 0 {
		limit = 1 // half-open: one probe
	}
	events, err := r.Store.PendingEvents(ctx, limit)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range events {
		r.rec(history.Invoke, history.Publish, e, nil)
		err := r.Publish(ctx, e)
		switch {
		case err == nil:
			r.rec(history.OK, history.Publish, e, nil)
		case ambiguous(err):
			r.rec(history.Info, history.Publish, e, err)
		default:
			r.rec(history.Fail, history.Publish, e, err)
		}
		if err != nil {
			r.failures++
			if r.BreakAfter > 0 && r.failures >= r.BreakAfter {
				r.openUntil = r.Env.Now().Add(r.ProbeEvery)
			}
			return n, nil
		}
		r.failures = 0
		r.Hooks.At(ctx, AfterPublishBeforeMark, e.JobID)
		r.rec(history.Invoke, history.Mark, e, nil)
		err = r.Store.MarkPublished(ctx, []string{e.ID}, r.Env.Now())
		r.recMark(e, err)
		n++
	}
	return n, nil
}

func (r *Relay) recMark(e Event, err error) {
	switch {
	case err == nil:
		r.rec(history.OK, history.Mark, e, nil)
	case ambiguous(err):
		r.rec(history.Info, history.Mark, e, err)
	default:
		r.rec(history.Fail, history.Mark, e, err)
	}
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
type Consumer struct {
	Env      *Env
	Store    Store
	Sabotage Sabotage
}

// Handle applies e; a repeat is dropped and recorded as such.
func (c *Consumer) Handle(ctx context.Context, e Event) error {
	c.Env.Record(history.Op{Type: history.Invoke, F: history.Apply, Job: e.JobID, Key: e.Key, Value: e.ID})
	first, err := c.Store.ApplyEvent(ctx, e.ID)
	if err != nil {
		c.Env.Record(history.Op{Type: history.Fail, F: history.Apply, Job: e.JobID, Key: e.Key, Value: e.ID, Err: ErrorCode(err)})
		return err
	}
	outcome := "dropped"
	if first || c.Sabotage.ConsumerNoDedupe {
		outcome = "applied"
	}
	// The ok record says what happened to the effect; the event is named by its key.
	c.Env.Record(history.Op{Type: history.OK, F: history.Apply, Job: e.JobID, Key: e.Key, Value: outcome})
	return nil
}
