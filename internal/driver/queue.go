package driver

import (
	"context"
	"fmt"
	"time"

	"github.com/durachk/durachk/adapters"
)

// Queue is a worker in the admin role as an adapters.Queue: it enqueues,
// inspects and drops the run's namespace. It leases nothing: the library's
// own worker loop does (Serve).
type Queue struct {
	p    *Proc
	name string
}

// OpenAdmin starts command in the admin role.
func OpenAdmin(ctx context.Context, command, dir string, cfg Config) (*Queue, error) {
	cfg.Role = RoleAdmin
	if cfg.Process == "" {
		cfg.Process = "admin"
	}
	p, err := Start(ctx, command, dir, cfg)
	if err != nil {
		return nil, err
	}
	go func() {
		for range p.Reports { // an admin reports nothing; drain what it sends
		}
	}()
	return &Queue{p: p, name: p.Hello.Driver}, nil
}

func (q *Queue) op(op, job string, err error) error {
	if err == nil {
		return nil
	}
	return &adapters.OpError{Target: q.name, Op: op, JobID: job, Err: err}
}

// Enqueue hands job to the library; nil once the library has it.
func (q *Queue) Enqueue(ctx context.Context, job adapters.Job) error {
	_, err := q.p.Call(ctx, Msg{Type: TypeEnqueue, Job: &job})
	return q.op("enqueue", job.ID, err)
}

// Lease is the library's: its own worker loop leases.
func (q *Queue) Lease(context.Context, time.Duration) (adapters.Delivery, error) {
	return adapters.Delivery{}, q.op("lease", "", fmt.Errorf("%w: the worker's library leases", adapters.ErrUnsupported))
}

func (q *Queue) Ack(_ context.Context, d adapters.Delivery) error {
	return q.op("ack", d.Job.ID, fmt.Errorf("%w: the worker's library acks", adapters.ErrUnsupported))
}

func (q *Queue) Nack(_ context.Context, d adapters.Delivery, _ time.Duration) error {
	return q.op("nack", d.Job.ID, fmt.Errorf("%w: the worker's library retries", adapters.ErrUnsupported))
}

// Inspect reports what the library holds of the run.
func (q *Queue) Inspect(ctx context.Context) (adapters.Inventory, error) {
	a, err := q.p.Call(ctx, Msg{Type: TypeInspect})
	if err != nil {
		return adapters.Inventory{}, q.op("inspect", "", err)
	}
	if a.Inventory == nil {
		return adapters.Inventory{}, fmt.Errorf("%w: inspect answered without an inventory", ErrProtocol)
	}
	return *a.Inventory, nil
}

// Drop removes everything of the run's namespace.
func (q *Queue) Drop(ctx context.Context) error {
	_, err := q.p.Call(ctx, Msg{Type: TypeDrop})
	return q.op("drop", "", err)
}

func (q *Queue) Capabilities() adapters.Capabilities { return q.p.Hello.Adapter() }

// Sabotages are the negative controls the worker declares (its hello).
func (q *Queue) Sabotages() []string { return q.p.Hello.Sabotages }

// ServerVersion names the library the worker runs.
func (q *Queue) ServerVersion() string {
	h := q.p.Hello
	return fmt.Sprintf("%s %s (%s, worker protocol v%d)", h.Library, h.Version, h.Driver, h.V)
}

func (q *Queue) Close() error { return q.p.Stop() }
