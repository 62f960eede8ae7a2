package pipeline

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/durachk/durachk/adapters"
)

// arm puts the sabotages that break a worker's broker, store or policy around
// them, so that the worker has a single hook for them. Never armed otherwise.
func (s Sabotage) arm(w *Worker) {
	if s.KeyPerDelivery || s.DropFirstAck || s.OneExtraAttempt || s.OneAttemptShort || s.DeadlineSlack {
		w.Queue = sabotageQueue(w.Queue, s)
	}
	if s.TimeoutAsUnavailable || s.CommitNotDurable {
		w.Store = &sabotagedStore{Store: w.Store, s: s}
	}
	if s.RetryPermanent && w.Policy != nil {
		p := *w.Policy
		p.RetryPermanent = true
		w.Policy = &p
	}
}

// DeadlineSlack is how long after a deadline the DeadlineSlack sabotage still
// starts work: fixed, not scaled, so that on real targets (times scaled by
// 0.1) every late job within it is worked on, and on the embedded target none
// is later than it.
const DeadlineSlack = 5 * time.Second

// sabotagedQueue hands the worker deliveries whose job it altered, and gives
// the broker back the deliveries as it issued them.
type sabotagedQueue struct {
	adapters.Queue
	s    Sabotage
	mu   sync.Mutex
	orig map[string]adapters.Job // by receipt and token: the job as delivered
}

func sabotageQueue(q adapters.Queue, s Sabotage) adapters.Queue {
	sq := &sabotagedQueue{Queue: q, s: s, orig: map[string]adapters.Job{}}
	_, ext := q.(adapters.Extender)
	_, dl := q.(adapters.DeadLetterer)
	switch {
	case ext && dl:
		return struct {
			*sabotagedQueue
			extender
			deadLetterer
		}{sq, extender{sq}, deadLetterer{sq}}
	case ext:
		return struct {
			*sabotagedQueue
			extender
		}{sq, extender{sq}}
	case dl:
		return struct {
			*sabotagedQueue
			deadLetterer
		}{sq, deadLetterer{sq}}
	}
	return sq
}

func deliveryID(d adapters.Delivery) string { return d.Receipt + "#" + strconv.FormatUint(d.Token, 10) }

func (q *sabotagedQueue) Lease(ctx context.Context, lease time.Duration) (adapters.Delivery, error) {
	d, err := q.Queue.Lease(ctx, lease)
	if err != nil {
		return d, err
	}
	q.mu.Lock()
	q.orig[deliveryID(d)] = d.Job
	q.mu.Unlock()
	j := &d.Job
	if q.s.KeyPerDelivery {
		j.DocumentID += "." + strconv.FormatUint(d.Token, 10)
	}
	if q.s.OneExtraAttempt {
		j.MaxAttempts++
	}
	if q.s.OneAttemptShort && j.MaxAttempts > 1 {
		j.MaxAttempts--
	}
	if q.s.DeadlineSlack && !j.Deadline.IsZero() {
		j.Deadline = j.Deadline.Add(DeadlineSlack)
	}
	return d, nil
}

// restore gives d back its job as the broker delivered it.
func (q *sabotagedQueue) restore(d adapters.Delivery, done bool) adapters.Delivery {
	q.mu.Lock()
	defer q.mu.Unlock()
	id := deliveryID(d)
	if j, ok := q.orig[id]; ok {
		d.Job = j
		if done {
			delete(q.orig, id)
		}
	}
	return d
}

// first reports whether d is a job's first delivery.
func first(d adapters.Delivery) bool { return d.Attempt == 1 || d.Attempt == 0 && d.Token <= 1 }

func (q *sabotagedQueue) Ack(ctx context.Context, d adapters.Delivery) error {
	d = q.restore(d, true)
	if q.s.DropFirstAck && first(d) {
		return nil
	}
	return q.Queue.Ack(ctx, d)
}

func (q *sabotagedQueue) Nack(ctx context.Context, d adapters.Delivery, delay time.Duration) error {
	return q.Queue.Nack(ctx, q.restore(d, true), delay)
}

type extender struct{ q *sabotagedQueue }

func (e extender) Extend(ctx context.Context, d adapters.Delivery, lease time.Duration) error {
	return e.q.Queue.(adapters.Extender).Extend(ctx, e.q.restore(d, false), lease)
}

type deadLetterer struct{ q *sabotagedQueue }

func (x deadLetterer) DeadLetter(ctx context.Context, d adapters.Delivery, reason string) error {
	return x.q.Queue.(adapters.DeadLetterer).DeadLetter(ctx, x.q.restore(d, true), reason)
}

// sabotagedStore breaks the store client's commit.
type sabotagedStore struct {
	Store
	s Sabotage
}

func (st *sabotagedStore) CommitResultWithEvent(ctx context.Context, req CommitRequest) (bool, error) {
	if st.s.CommitNotDurable {
		return false, nil
	}
	deduped, err := st.Store.CommitResultWithEvent(ctx, req)
	if st.s.TimeoutAsUnavailable && ambiguous(err) {
		return deduped, adapters.ErrUnavailable
	}
	return deduped, err
}
