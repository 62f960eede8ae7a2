package contracts

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/adapters/mem"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/internal/sim"
	"github.com/durachk/durachk/pipeline"
)

// MemTarget is the embedded target: the reference broker, the in-memory store and
// every process as a simulated process on a virtual clock. Execute may be called
// concurrently; each call is independent and, for one seed, identical.
type MemTarget struct {
	// DeliveryLimit turns on the broker's native dead-lettering.
	DeliveryLimit int
}

// Name is "mem".
func (MemTarget) Name() string { return "mem" }

// MeasuredOn says what the verdict is about.
func (MemTarget) MeasuredOn() string { return "mem (embedded reference broker, virtual clock)" }

// Capabilities of the embedded target.
func (t MemTarget) Capabilities() adapters.Capabilities {
	return mem.New(mem.Options{FIFO: true, DeliveryLimit: t.DeliveryLimit}).Capabilities()
}

// simHooks fire the plan's crash and pause points inside simulated processes.
type simHooks struct {
	points *faults.Points
	env    *pipeline.Env      // the controller's, for fault records
	paused map[*sim.Proc]bool // paused now: the run is not over until they resume (or die)
}

// pausing reports whether a live process is paused.
func (h *simHooks) pausing() bool {
	for p := range h.paused {
		if p.Alive() {
			return true
		}
	}
	return false
}

func (h *simHooks) At(ctx context.Context, p pipeline.CrashPoint, jobID string) {
	proc := sim.Current(ctx)
	if p == pipeline.Poison {
		h.env.Record(history.Op{Type: history.Info, F: history.Fault, Value: "crash", Key: string(p), Job: jobID, Target: proc.Name})
		sim.Exit(ctx)
	}
	if f, ok := h.points.Arrive(string(p)); ok {
		switch f.Kind {
		case faults.CrashAt:
			h.env.Record(history.Op{Type: history.Info, F: history.Fault, Value: "crash", Key: string(p), Job: jobID, Target: proc.Name})
			sim.Exit(ctx)
		case faults.PauseAt:
			h.env.Record(history.Op{Type: history.Info, F: history.Fault, Value: "pause", Key: string(p), Job: jobID, Target: proc.Name})
			h.paused[proc] = true
			_ = sim.Sleep(ctx, f.For)
			delete(h.paused, proc)
			h.env.Record(history.Op{Type: history.Info, F: history.Fault, Value: "resume", Key: string(p), Job: jobID, Target: proc.Name})
			return
		}
	}
	sim.Yield(ctx)
}

// Execute runs the scenario to drain or to its limit.
func (t MemTarget) Execute(ctx context.Context, run Run) (Execution, error) {
	sc := run.Scenario
	sab := run.Sabotage
	if sab == nil {
		sab = &Sabotage{}
	}
	s := sim.New(run.Seed)
	start := s.Now()
	log := &history.Log{}
	newEnv := func(name string) *pipeline.Env {
		return &pipeline.Env{Process: name, Rec: log, Now: s.Now, Sleep: sim.Sleep}
	}
	ctl := newEnv("controller")
	q := mem.New(mem.Options{Now: s.Now, FIFO: !sab.BreakOrder, DeliveryLimit: max(t.DeliveryLimit, sab.DeliveryLimit), Volatile: sab.Volatile,
		Unsynced: sab.FsyncIgnored, BreakOrder: sab.BreakOrder, UnfencedAck: sab.UnfencedAck})
	store := pipeline.NewMemStore(sab.Store)
	links := faults.Links(sc.Plan, start, run.Seed)
	gq := &gatedQueue{Queue: q, gate: gate{link: links[faults.LinkBroker], env: ctl, now: s.Now}}
	gs := &gatedStore{Store: store, gate: gate{link: links[faults.LinkStore], env: ctl, now: s.Now}}
	hooks := &simHooks{points: faults.NewPoints(sc.Plan), env: ctl, paused: map[*sim.Proc]bool{}}
	consumer := &pipeline.Consumer{Env: newEnv("consumer"), Store: store, Sabotage: sab.Pipeline}
	channel := links[faults.LinkChannel]
	publish := func(ctx context.Context, e pipeline.Event) error {
		if channel.Down(s.Now()) {
			ctl.Record(history.Op{Type: history.Info, F: history.Fault, Value: "refused", Key: faults.LinkChannel, Target: sim.Current(ctx).Name})
			return adapters.ErrUnavailable
		}
		if err := consumer.Handle(ctx, e); err != nil {
			return err
		}
		if channel.LoseReply(s.Now(), []byte("publish")) {
			ctl.Record(history.Op{Type: history.Info, F: history.Fault, Value: "reply_lost", Key: faults.LinkChannel, Target: sim.Current(ctx).Name})
			return adapters.ErrAmbiguous
		}
		return nil
	}

	producerDone, operatorDone := false, !sc.Operator
	byID := map[string]adapters.Job{}
	s.Spawn(ctx, "producer", func(ctx context.Context) {
		Produce(ctx, newEnv("producer"), gq, sc.Jobs, start, func(job adapters.Job) { byID[job.ID] = job })
		producerDone = true
	})
	// One supervisor per worker slot restarts its worker after a crash.
	workers := map[string]*sim.Proc{}
	for i := 1; i <= max(sc.Workers, 1); i++ {
		slot := fmt.Sprintf("w%d", i)
		s.Spawn(ctx, "supervisor-"+slot, func(ctx context.Context) {
			for inc := 1; ; inc++ {
				name := slot
				if inc > 1 {
					name = fmt.Sprintf("%s.%d", slot, inc)
				}
				w := &pipeline.Worker{Env: newEnv(name), Queue: gq, Store: gs, Hooks: hooks, Lease: sc.Lease, Poll: sc.Poll,
					Sabotage: sab.Pipeline,
					Policy: &pipeline.Policy{Base: 500 * time.Millisecond, Max: 5 * time.Second, Unbounded: sab.Pipeline.UnboundedRetry,
						Rand: rand.New(rand.NewPCG(run.Seed, uint64(i*1000+inc)))}}
				p := s.Spawn(ctx, name, func(ctx context.Context) { _ = w.Run(ctx) })
				workers[slot] = p
				for p.Alive() {
					_ = sim.Sleep(ctx, time.Second)
				}
			}
		})
	}
	s.Spawn(ctx, "supervisor-relay", func(ctx context.Context) {
		for inc := 1; ; inc++ {
			name := "relay"
			if inc > 1 {
				name = fmt.Sprintf("relay.%d", inc)
			}
			r := &pipeline.Relay{Env: newEnv(name), Store: gs, Hooks: hooks, Publish: publish, Batch: 8, Poll: sc.Poll,
				BreakAfter: 5, ProbeEvery: 2 * time.Second, EventBudget: 5,
				Probe: func(ctx context.Context) error {
					if channel.Down(s.Now()) {
						return adapters.ErrUnavailable
					}
					return nil
				}}
			r.NaiveBreaker = sab.Pipeline.NaiveBreaker
			p := s.Spawn(ctx, name, func(ctx context.Context) { _ = r.Run(ctx) })
			for p.Alive() {
				_ = sim.Sleep(ctx, time.Second)
			}
		}
	})
	s.Spawn(ctx, "controller", func(ctx context.Context) {
		for _, f := range timed(sc.Plan) {
			if wait := start.Add(f.At).Sub(s.Now()); wait > 0 {
				_ = sim.Sleep(ctx, wait)
			}
			switch f.Kind {
			case faults.Kill:
				if p := workers[f.Process]; p != nil && p.Alive() {
					ctl.Record(history.Op{Type: history.Info, F: history.Fault, Value: "kill", Target: p.Name})
					s.Kill(p)
				}
			case faults.BrokerCrash:
				ctl.Record(history.Op{Type: history.Info, F: history.Fault, Value: "broker_crash"})
				q.Crash(f.For)
			case faults.PowerLoss:
				ctl.Record(history.Op{Type: history.Info, F: history.Fault, Value: "power_loss"})
				q.PowerLoss(f.For)
			}
		}
	})
	if sc.Operator {
		s.Spawn(ctx, "operator", func(ctx context.Context) {
			Operate(ctx, newEnv("operator"), store, gq, byID, sab.Pipeline.ReprocessInPlace, 2*time.Second, func() bool { return producerDone && q.Live() == 0 })
			operatorDone = true
		})
	}
	drained := func() bool {
		return producerDone && operatorDone && !hooks.pausing() && q.Live() == 0 && store.PendingCount() == 0
	}
	// A signal ends the simulation within a few thousand steps (milliseconds),
	// however long its scenario time.
	steps := 0
	s.Run(start.Add(sc.Limit), func() bool {
		if steps++; steps%1024 == 0 && ctx.Err() != nil {
			return true
		}
		return drained()
	})
	if err := ctx.Err(); err != nil {
		return Execution{}, err
	}
	st, err := store.Snapshot(ctx)
	if err != nil {
		return Execution{}, err
	}
	inv, err := q.Inspect(ctx)
	if err != nil {
		return Execution{}, err
	}
	return Execution{Ops: log.Ops(), Final: Final{Store: st, Broker: inv, Drained: drained()},
		Check: CheckOptions{FIFO: q.Capabilities().FIFO, FencedAck: true, Canaries: sc.Canaries, RelayRan: true}}, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Produce sends every job at its offset from start (deadlines likewise relative
// to start), calling sent for each before it is sent.
func Produce(ctx context.Context, env *pipeline.Env, q adapters.Queue, jobs []JobSpec, start time.Time, sent func(adapters.Job)) {
	for _, js := range jobs {
		if wait := start.Add(js.At).Sub(env.Now()); wait > 0 {
			if env.Sleep(ctx, wait) != nil {
				return
			}
		}
		job := js.Job
		job.CreatedAt = env.Now()
		if js.Deadline > 0 {
			job.Deadline = start.Add(js.Deadline)
		}
		if sent != nil {
			sent(job)
		}
		for range 1 + boolInt(js.Twice) {
			produce(ctx, env, q, job)
		}
	}
}

// produce sends job, retrying while the outcome is unknown or the broker is down:
// enqueue is at-least-once, the store dedupes.
func produce(ctx context.Context, env *pipeline.Env, q adapters.Queue, job adapters.Job) {
	for try := 0; try < 20 && ctx.Err() == nil; try++ {
		err := pipeline.Enqueue(ctx, env, q, job)
		if err == nil {
			return
		}
		_ = env.Sleep(ctx, time.Duration(try+1)*500*time.Millisecond)
	}
}

// Operate is the operator of dlq.reprocess: it tries the two refused paths once
// (no operator id; a cancelled job), then reprocesses every dead-lettered job of
// version 1 as operator "op-alice", until quiet reports the queue is empty and
// nothing is left to reprocess. jobs maps job ids to the jobs the producer sent;
// Operate adds the new jobs to it. It returns when ctx ends.
func Operate(ctx context.Context, env *pipeline.Env, store pipeline.Store, q adapters.Queue, jobs map[string]adapters.Job, inPlace bool, every time.Duration, quiet func() bool) {
	done := map[string]bool{}
	refused := false
	for ctx.Err() == nil {
		_ = env.Sleep(ctx, every)
		st, err := store.Snapshot(ctx)
		if err != nil {
			continue
		}
		if !refused && len(st.DeadLetters) > 0 && len(st.Cancelled) > 0 {
			refused = true
			dead := jobs[st.DeadLetters[0].JobID]
			_, _ = pipeline.Reprocess(ctx, env, store, q, dead, "", inPlace)
			_, _ = pipeline.Reprocess(ctx, env, store, q, jobs[st.Cancelled[0]], "op-alice", inPlace)
		}
		n := 0
		for _, d := range st.DeadLetters {
			if done[d.JobID] || d.Reprocessed {
				continue
			}
			job, ok := jobs[d.JobID]
			if !ok || job.Version > 1 {
				continue // reprocess once: a successor that dies again stays dead
			}
			done[d.JobID] = true
			if nj, err := pipeline.Reprocess(ctx, env, store, q, job, "op-alice", inPlace); err == nil {
				jobs[nj.ID] = nj
			}
			n++
		}
		// Quiet: no job will be dead-lettered or cancelled any more, so the
		// refused paths above were tried if the run gave them a chance (a
		// workload without a cancelled job never does; waiting for one kept
		// such runs from draining, found by explore).
		if n == 0 && quiet() {
			return
		}
	}
}

// timed returns the plan's time-triggered faults in time order.
func timed(p faults.Plan) []faults.Fault {
	var out []faults.Fault
	for _, f := range p.Faults {
		if f.Kind == faults.Kill || f.Kind == faults.BrokerCrash || f.Kind == faults.PowerLoss {
			out = append(out, f)
		}
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].At < out[j-1].At; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
