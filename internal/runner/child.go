package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/internal/driver"
	"github.com/durachk/durachk/internal/sim"
	"github.com/durachk/durachk/internal/targets"
	"github.com/durachk/durachk/pipeline"
)

// Roles of child processes.
const (
	RoleProducer = "producer"
	RoleWorker   = "worker"
	RoleRelay    = "relay"
)

// ChildConfig is what the controller hands a child process, as JSON on the
// child's stdin (a pipe: it holds the target URL with its credentials, which
// never touch the disk).
type ChildConfig struct {
	Role     string              `json:"role"`
	Process  string              `json:"process"`
	Spec     targets.Spec        `json:"spec"`
	History  string              `json:"history"`
	Seed     uint64              `json:"seed"`
	Start    time.Time           `json:"start"`
	Lease    time.Duration       `json:"lease"`
	Poll     time.Duration       `json:"poll"`
	Backoff  time.Duration       `json:"backoff"`
	Faults   []faults.Fault      `json:"faults,omitempty"`    // crash and pause points this process may fire
	FaultDir string              `json:"fault_dir,omitempty"` // where a fault is claimed before it fires
	Sabotage pipeline.Sabotage   `json:"sabotage,omitzero"`
	Jobs     []contracts.JobSpec `json:"jobs,omitempty"`
}

// childHooks fire crash points as a real SIGKILL of the process itself, and
// pause points as a SIGSTOP of itself that the controller ends with SIGCONT.
type childHooks struct {
	env    *pipeline.Env
	points *faults.Points
	dir    string
	// pause, if set, stops (true) and continues (false) the processes this
	// one drives: a worker under the worker protocol pauses with it.
	pause func(stop bool)
}

// claim reports whether this process is the first to fire fault f: the claim
// is a file created exclusively in the run directory.
func (h *childHooks) claim(f faults.Fault) bool {
	if f.ID == 0 || h.dir == "" {
		return true
	}
	file, err := os.OpenFile(filepath.Join(h.dir, fmt.Sprintf("fault-%d.claimed", f.ID)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return false
	}
	fmt.Fprintln(file, h.env.Process)
	file.Close()
	return true
}

func (h *childHooks) At(ctx context.Context, p pipeline.CrashPoint, jobID string) {
	if p == pipeline.Poison {
		h.die(p, jobID)
	}
	var f faults.Fault
	ok := false
	for _, c := range h.points.ArriveAll(string(p)) {
		if h.claim(c) {
			f, ok = c, true
			break
		}
	}
	if !ok {
		return
	}
	switch f.Kind {
	case faults.CrashAt:
		h.die(p, jobID)
	case faults.PauseAt:
		h.env.Record(history.Op{Type: history.Info, F: history.Fault, Value: "pause", Key: string(p), Job: jobID, Target: h.env.Process})
		// kill(SIGSTOP) returns before every thread is stopped: wait for the
		// controller's SIGCONT, so that nothing of the pipeline runs in between.
		cont := make(chan os.Signal, 1)
		signal.Notify(cont, syscall.SIGCONT)
		if h.pause != nil {
			h.pause(true)
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		<-cont
		signal.Stop(cont)
		if h.pause != nil {
			h.pause(false)
		}
		h.env.Record(history.Op{Type: history.Info, F: history.Fault, Value: "resume", Key: string(p), Job: jobID, Target: h.env.Process})
	}
}

func (h *childHooks) die(p pipeline.CrashPoint, jobID string) {
	// The record is written (one write call, no buffer) before the kill.
	h.env.Record(history.Op{Type: history.Info, F: history.Fault, Value: "crash", Key: string(p), Job: jobID, Target: h.env.Process})
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL cannot be caught; never return into the pipeline
}

// Child runs one child process from its config until ctx ends (SIGTERM) or,
// for the producer, until every job is sent. configPath "-" reads the config
// from stdin (how the runner hands it over); else it names a file.
func Child(ctx context.Context, configPath string) error {
	var b []byte
	var err error
	if configPath == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(configPath)
	}
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	var cfg ChildConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("worker: %s: %w", configPath, err)
	}
	w, err := history.Create(cfg.History)
	if err != nil {
		return err
	}
	defer w.Close()
	env := &pipeline.Env{Process: cfg.Process, Rec: w, Now: time.Now, Sleep: sim.Sleep}
	// A process restarted during an outage waits for its broker and store, as a
	// supervised worker would; anything but unavailability is fatal.
	q, err := retryUnavailable(ctx, func() (adapters.Queue, error) { return targets.OpenQueue(ctx, cfg.Spec) })
	if err != nil {
		return fmt.Errorf("worker %s: %w", cfg.Process, err)
	}
	defer q.Close()
	switch cfg.Role {
	case RoleProducer:
		return produceAll(ctx, env, q, cfg)
	}
	store, err := retryUnavailable(ctx, func() (pipeline.Store, error) { return targets.OpenStore(ctx, cfg.Spec) })
	if err != nil {
		return fmt.Errorf("worker %s: %w", cfg.Process, err)
	}
	defer store.Close()
	hooks := &childHooks{env: env, points: faults.NewPoints(faults.Plan{Faults: cfg.Faults}), dir: cfg.FaultDir}
	switch {
	case cfg.Role == RoleWorker && targets.HasWorker(cfg.Spec):
		return serveWorker(ctx, env, store, hooks, cfg)
	case cfg.Role == RoleWorker:
		wk := &pipeline.Worker{Env: env, Queue: q, Store: store, Hooks: hooks, Lease: cfg.Lease, Poll: cfg.Poll,
			Sabotage: cfg.Sabotage, CallTimeout: 3 * cfg.Lease,
			Policy: &pipeline.Policy{Base: cfg.Backoff, Max: 10 * cfg.Backoff, Unbounded: cfg.Sabotage.UnboundedRetry,
				Rand: rand.New(rand.NewPCG(cfg.Seed, hash(cfg.Process)))},
			CommitAck: targets.CommitAcker(cfg.Spec, q, store)}
		return wk.Run(ctx)
	case cfg.Role == RoleRelay:
		consumer := &pipeline.Consumer{Env: &pipeline.Env{Process: "consumer", Rec: w, Now: time.Now, Sleep: sim.Sleep}, Store: store,
			Life: cfg.Process, Sabotage: cfg.Sabotage}
		// The channel is the relay's connection to the store, where the consumer
		// applies events; the probe is a cheap read over it.
		r := &pipeline.Relay{Env: env, Store: store, Hooks: hooks, Publish: consumer.Handle, Batch: 8, Poll: cfg.Poll,
			BreakAfter: 5, ProbeEvery: 20 * cfg.Poll, StepTimeout: 3 * cfg.Lease, EventBudget: 5,
			Probe: func(ctx context.Context) error { _, err := store.PendingEvents(ctx, 1); return err }}
		r.NaiveBreaker = cfg.Sabotage.NaiveBreaker
		return r.Run(ctx)
	}
	return fmt.Errorf("worker: unknown role %q", cfg.Role)
}

// serveWorker runs the target's own worker (the worker protocol) in place of
// the reference pipeline's: this process records its reports, runs the
// effects through the store and fires the crash points; a kill of this
// process kills the worker with it (parent-death signal), a pause stops both.
func serveWorker(ctx context.Context, env *pipeline.Env, store pipeline.Store, hooks *childHooks, cfg ChildConfig) error {
	command, dc := targets.WorkerConfig(cfg.Spec, driver.RoleWorker, cfg.Process)
	dc.Seed, dc.LeaseMS, dc.PollMS = cfg.Seed, cfg.Lease.Milliseconds(), cfg.Poll.Milliseconds()
	p, err := retryUnavailable(ctx, func() (*driver.Proc, error) { return driver.Start(ctx, command, "", dc) })
	if err != nil {
		return fmt.Errorf("worker %s: %w", cfg.Process, err)
	}
	defer p.Stop()
	hooks.pause = func(stop bool) {
		if stop {
			p.Signal(syscall.SIGSTOP)
		} else {
			p.Signal(syscall.SIGCONT)
		}
	}
	s := &driver.Server{Env: env, Store: store, Hooks: hooks, Sabotage: cfg.Sabotage, CallTimeout: 3 * cfg.Lease, Backoff: cfg.Backoff}
	return s.Serve(ctx, p)
}

func produceAll(ctx context.Context, env *pipeline.Env, q adapters.Queue, cfg ChildConfig) error {
	contracts.Produce(ctx, env, boundedEnqueue{q, 3 * cfg.Lease}, cfg.Jobs, cfg.Start, nil)
	return ctx.Err()
}

// retryUnavailable calls open until it succeeds, fails otherwise than with
// adapters.ErrUnavailable or adapters.ErrAmbiguous, or ctx ends.
func retryUnavailable[T any](ctx context.Context, open func() (T, error)) (T, error) {
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		v, err := open()
		if err == nil || !(errors.Is(err, adapters.ErrUnavailable) || errors.Is(err, adapters.ErrAmbiguous)) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(wait):
		}
	}
}

func hash(s string) uint64 {
	var h uint64 = 14695981039346656037
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
