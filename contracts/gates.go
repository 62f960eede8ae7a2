package contracts

import (
	"context"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/adapters/mem"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/internal/sim"
	"github.com/durachk/durachk/pipeline"
)

// gate applies a link's faults around one call on the embedded target: a down
// link refuses the call before it is applied (a definite failure); a lost reply
// comes after it was applied (an unknown outcome). Every applied fault is recorded.
type gate struct {
	link *faults.Link
	env  *pipeline.Env
	now  func() time.Time
}

func (g gate) record(ctx context.Context, what string) {
	target := ""
	if p := sim.Current(ctx); p != nil {
		target = p.Name
	}
	g.env.Record(history.Op{Type: history.Info, F: history.Fault, Value: what, Key: g.link.Name, Target: target})
}

func (g gate) before(ctx context.Context) error {
	now := g.now()
	if g.link.Down(now) {
		g.record(ctx, "refused")
		return adapters.ErrUnavailable
	}
	if g.link.Blackhole(now) {
		// Accepted and never answered: the caller gives up after its timeout.
		g.record(ctx, "blackhole")
		_ = sim.Sleep(ctx, blackholeTimeout)
		return adapters.ErrAmbiguous
	}
	if d := g.link.Delay(now); d > 0 {
		g.record(ctx, "latency")
		_ = sim.Sleep(ctx, d)
	}
	return nil
}

// blackholeTimeout is how long a simulated caller waits on a hung link.
const blackholeTimeout = 5 * time.Second

// after applies reply loss to a call named op ("commit" for the store's commit,
// which a plan's Match may single out).
func (g gate) after(ctx context.Context, err error, op ...string) error {
	name := "call"
	if len(op) > 0 {
		name = op[0]
	}
	if err == nil && (g.link.LoseReply(g.now(), []byte(name)) || g.link.Reset(g.now())) {
		g.record(ctx, "reply_lost")
		return adapters.ErrAmbiguous
	}
	return err
}

// gatedQueue is the embedded broker behind the broker link.
type gatedQueue struct {
	*mem.Queue
	gate
}

func (q *gatedQueue) Enqueue(ctx context.Context, job adapters.Job) error {
	if err := q.before(ctx); err != nil {
		return err
	}
	return q.after(ctx, q.Queue.Enqueue(ctx, job))
}

func (q *gatedQueue) Lease(ctx context.Context, lease time.Duration) (adapters.Delivery, error) {
	if err := q.before(ctx); err != nil {
		return adapters.Delivery{}, err
	}
	d, err := q.Queue.Lease(ctx, lease)
	if err := q.after(ctx, err); err != nil {
		return adapters.Delivery{}, err
	}
	return d, nil
}

func (q *gatedQueue) Ack(ctx context.Context, d adapters.Delivery) error {
	if err := q.before(ctx); err != nil {
		return err
	}
	return q.after(ctx, q.Queue.Ack(ctx, d))
}

func (q *gatedQueue) Nack(ctx context.Context, d adapters.Delivery, delay time.Duration) error {
	if err := q.before(ctx); err != nil {
		return err
	}
	return q.after(ctx, q.Queue.Nack(ctx, d, delay))
}

func (q *gatedQueue) Extend(ctx context.Context, d adapters.Delivery, lease time.Duration) error {
	if err := q.before(ctx); err != nil {
		return err
	}
	return q.after(ctx, q.Queue.Extend(ctx, d, lease))
}

func (q *gatedQueue) DeadLetter(ctx context.Context, d adapters.Delivery, reason string) error {
	if err := q.before(ctx); err != nil {
		return err
	}
	return q.after(ctx, q.Queue.DeadLetter(ctx, d, reason))
}

// gatedStore is the effect store behind the store link.
type gatedStore struct {
	pipeline.Store
	gate
}

func (s *gatedStore) Fence(ctx context.Context, jobID string, token uint64) error {
	if err := s.before(ctx); err != nil {
		return err
	}
	return s.after(ctx, s.Store.Fence(ctx, jobID, token))
}

func (s *gatedStore) Begin(ctx context.Context, jobID string, token uint64, delivery string, attempt int) (pipeline.Ledger, error) {
	if err := s.before(ctx); err != nil {
		return pipeline.Ledger{}, err
	}
	led, err := s.Store.Begin(ctx, jobID, token, delivery, attempt)
	return led, s.after(ctx, err)
}

// Started passes a worker's start through the store link, where the store
// learns of starts (pipeline.Starts).
func (s *gatedStore) Started(ctx context.Context, process string) error {
	st, ok := s.Store.(pipeline.Starts)
	if !ok {
		return nil
	}
	if err := s.before(ctx); err != nil {
		return err
	}
	return s.after(ctx, st.Started(ctx, process))
}

func (s *gatedStore) End(ctx context.Context, jobID, delivery string, spent bool) (pipeline.Ledger, error) {
	if err := s.before(ctx); err != nil {
		return pipeline.Ledger{}, err
	}
	led, err := s.Store.End(ctx, jobID, delivery, spent)
	return led, s.after(ctx, err)
}

func (s *gatedStore) CommitResultWithEvent(ctx context.Context, req pipeline.CommitRequest) (bool, error) {
	if err := s.before(ctx); err != nil {
		return false, err
	}
	deduped, err := s.Store.CommitResultWithEvent(ctx, req)
	return deduped, s.after(ctx, err, "commit")
}

func (s *gatedStore) DeadLetter(ctx context.Context, rec pipeline.DeadLetterRecord) error {
	if err := s.before(ctx); err != nil {
		return err
	}
	return s.after(ctx, s.Store.DeadLetter(ctx, rec))
}

func (s *gatedStore) Cancel(ctx context.Context, jobID string) error {
	if err := s.before(ctx); err != nil {
		return err
	}
	return s.after(ctx, s.Store.Cancel(ctx, jobID))
}

// WriteResult and WriteEvent keep the dual-write sabotage reachable through the gate.
func (s *gatedStore) WriteResult(ctx context.Context, req pipeline.CommitRequest) (bool, error) {
	if err := s.before(ctx); err != nil {
		return false, err
	}
	deduped, err := s.Store.(pipeline.DualWriter).WriteResult(ctx, req)
	return deduped, s.after(ctx, err, "commit")
}

func (s *gatedStore) WriteEvent(ctx context.Context, req pipeline.CommitRequest) error {
	if err := s.before(ctx); err != nil {
		return err
	}
	return s.after(ctx, s.Store.(pipeline.DualWriter).WriteEvent(ctx, req))
}
