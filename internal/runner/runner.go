// Package runner runs a contract against a real broker with real processes: the
// producer, the workers and the relay are child processes of durachk (the hidden
// `durachk worker` subcommand); crash points fire inside them as a real SIGKILL of
// themselves; the controller SIGKILLs workers at seeded moments, restarts them as
// a supervisor would, resumes zombies (SIGSTOP, then SIGCONT once their lease has
// expired and another worker holds the job), drains, merges the histories, reads
// the final state and tears the run's namespace down on every path.
package runner

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/internal/lazyfs"
	"github.com/durachk/durachk/internal/reaper"
	"github.com/durachk/durachk/internal/sim"
	"github.com/durachk/durachk/internal/targets"
	"github.com/durachk/durachk/pipeline"
)

// DefaultScale maps scenario time (written for the embedded target's virtual
// clock) onto wall time: a 10 s lease becomes 1 s (New stretches it on a busy
// machine: Stretch).
const DefaultScale = 0.1

// Target is a real broker run with real processes. Execute may be called
// concurrently; every call provisions its own namespace.
type Target struct {
	Spec  targets.Spec
	Scale float64
	Log   io.Writer // progress lines; nil: none
	// OnRun, if set, is told the run id and directory of every Execute as it
	// starts (tests use it to check that nothing of the run is left).
	OnRun func(runID, dir string)
	// KeepLogs, if set, is the directory a private broker's log is copied
	// into when the broker did not start (the run directory goes with the
	// teardown): the run's reason names the copy.
	KeepLogs   string
	budget     time.Duration      // set by tests: the budget of every run, instead of Budget's
	budgetAt   func(spend func()) // set by tests: hands over what makes the budget run out now
	caps       adapters.Capabilities
	measuredOn string
	durability *targets.Durability
	down       downState
	// workerSabotages: the negative controls the target's own worker
	// declares (worker.command), nil for the reference pipeline.
	workerSabotages []string
}

// OwnWorker says whether the target runs a worker of its own (the worker
// protocol) and the sabotages it declares: selftest runs those, and skips
// the reference worker's.
func (t *Target) OwnWorker() ([]string, bool) { return t.workerSabotages, targets.HasWorker(t.Spec) }

// downState is since when the target's broker has not answered, as runs of
// it found: a run that starts while it is set asks the broker with a short
// limit (downCheckLimit) and is unknown at once if it still does not answer.
// Safe for concurrent use.
type downState struct {
	mu    sync.Mutex
	since time.Time // zero: the broker answered last time a run asked
}

// markDown records that the broker did not answer from since on (the
// earliest time of the outage is kept).
func (d *downState) markDown(since time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.since.IsZero() || since.Before(d.since) {
		d.since = since
	}
}

func (d *downState) markUp() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.since = time.Time{}
}

func (d *downState) get() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.since
}

// downCheckLimit bounds the opening of a run's queue on a broker known not to
// answer: a paused one accepts connections and answers nothing.
const downCheckLimit = 3 * time.Second

// New checks that the target is reachable, reads what it is and its declared
// capabilities, and removes the probe namespace again.
func New(ctx context.Context, spec targets.Spec) (*Target, error) {
	// The private instance of the durability contracts runs with the target
	// server's own durability settings where no knob says otherwise: read once,
	// here, over the target's connection, into the spec every run starts from.
	// Bounded: a paused server accepts the connection and never answers (the
	// probe below then finds it).
	rctx, cancel := context.WithTimeout(ctx, time.Duration(float64(setupLimit)*Stretch()))
	spec, durability := targets.ReadDurability(rctx, spec)
	cancel()
	t := &Target{Spec: spec, Scale: DefaultScale * Stretch(), durability: durability} // slower on a busy machine
	probe := spec
	probe.RunID = newRunID()
	// The probe is a run too: registered, so that cleanup finds its queues if
	// durachk is killed right now.
	release, err := targets.HoldRun(ctx, probe)
	if err != nil {
		return nil, &targets.StoreError{URL: spec.StoreURL, Target: spec.Name, Err: err}
	}
	defer release()
	// The probe's namespaces go on every path, SIGINT too: with a context of
	// their own, bounded (longer on a busy machine: a loaded CI run's
	// teardown outlasted 5 s).
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(float64(15*time.Second)*Stretch()))
	defer cancel()
	if targets.PrivateOnly(spec) {
		// No broker of the user's: the probe asks a private instance, as
		// every run will.
		stop, err := probePrivate(ctx, &probe)
		if err != nil {
			_ = targets.TeardownStore(tctx, probe)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("%w: %s: the private %s broker did not start: %v", targets.ErrBadTarget, spec.Name, spec.Kind, err)
		}
		defer stop()
	}
	var q adapters.Queue
	err = tryProbe(ctx, func() (err error) {
		q, err = targets.OpenQueue(ctx, probe)
		return err
	})
	if err != nil {
		_ = targets.TeardownStore(tctx, probe)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %s: %v", targets.ErrBadTarget, spec.Name, err)
	}
	t.caps = q.Capabilities()
	if ws, ok := q.(interface{ Sabotages() []string }); ok && targets.HasWorker(spec) {
		t.workerSabotages = ws.Sabotages()
	}
	if err := targets.CanKillBroker(spec); err != nil {
		t.caps.Notes = append(t.caps.Notes, contracts.BrokerFaultsNote+err.Error())
	} else {
		t.caps.BrokerKill = true
	}
	powerLossCaps(spec, &t.caps)
	if targets.PrivateOnly(spec) {
		t.caps.Notes = append(t.caps.Notes, "the target names no broker: every contract runs on a private "+spec.Kind+" broker durachk starts for it (a child process with its own port and data directory)")
	}
	if spec.Options["transactional_ack"] == "true" {
		t.caps.Notes = append(t.caps.Notes, "transactional ack: the job's row is deleted in the effect store's commit transaction (exactly-once effect without a dedupe on redelivery)")
	}
	if v, ok := q.(interface{ ServerVersion() string }); ok {
		t.measuredOn = v.ServerVersion()
	}
	q.Close()
	if err := tryProbe(tctx, func() error { return targets.TeardownQueue(tctx, probe) }); err != nil {
		_ = targets.TeardownStore(tctx, probe)
		return nil, fmt.Errorf("%w: %s: teardown of the probe: %v", targets.ErrBadTarget, spec.Name, err)
	}
	// The store is another server: name it, not the target, when it fails.
	if err := targets.TeardownStore(tctx, probe); err != nil {
		return nil, &targets.StoreError{URL: spec.StoreURL, Target: spec.Name, Err: err}
	}
	if t.measuredOn == "" {
		t.measuredOn = spec.Kind
	}
	if t.durability != nil && t.measuredOn != spec.Kind {
		t.durability.Server = t.measuredOn
	}
	t.describeCluster()
	t.measuredOn += " (real processes)"
	return t, nil
}

// probePrivate starts the private instance the probe of a target without a
// broker of its own asks, in a run directory of the probe's (locked and
// handed to the watchdog, as a run's), points probe at it, and returns what
// stops it and removes the directory.
func probePrivate(ctx context.Context, probe *targets.Spec) (func(), error) {
	dir, err := os.MkdirTemp("", reaper.DirPattern(probe.RunID))
	if err != nil {
		return nil, err
	}
	unlock, err := reaper.LockDir(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	reaper.Watch(reaper.KindDir, dir)
	done := func() {
		unlock()
		os.RemoveAll(dir)
		reaper.Forget(reaper.KindDir, dir)
	}
	inst, spec, err := targets.StartPrivate(ctx, *probe, dir)
	if err != nil {
		done()
		return nil, err
	}
	*probe = spec
	return func() { _ = inst.Stop(); done() }, nil
}

// probeAttempts is how often the probe opens, and tears down, its namespace
// before the target counts as bad.
const probeAttempts = 3

// tryProbe calls f until it succeeds, at most probeAttempts times, half a
// second apart, while ctx lasts; it returns f's last error. A broker starved
// of CPU may miss three heartbeats in a row, which ends the connection, not
// the broker (a loaded CI run: RabbitMQ's "i/o timeout" in the probe's
// teardown made the target bad): a fresh connection tries again.
func tryProbe(ctx context.Context, f func() error) error {
	var err error
	for i := range probeAttempts {
		if err = f(); err == nil || ctx.Err() != nil {
			return err
		}
		if i < probeAttempts-1 {
			select {
			case <-ctx.Done():
				return err
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	return err
}

func (t *Target) Name() string { return t.Spec.Name }

// Durability is the configuration of the private instance the target's
// durability contracts run on: every setting that decides what survives, with
// where it came from (the knob, the target's server, durachk's default). Nil
// when they do not run on a private instance of the target's own.
func (t *Target) Durability() *targets.Durability     { return t.durability }
func (t *Target) MeasuredOn() string                  { return t.measuredOn }
func (t *Target) Capabilities() adapters.Capabilities { return t.caps }

// selfServes is set by ServeChildIfAsked: this binary (a test binary) can act
// as `durachk worker`.
var selfServes bool

// ServeChildIfAsked lets a test binary that drives real targets be its own
// worker, watchdog and lazy file system: call it first in TestMain. When the
// binary was started as a child (`<binary> worker --config -`, `<binary>
// watchdog` or `<binary> lazyfs ...`) it runs the child and exits; otherwise it returns and the runner may re-execute the
// binary for its children.
func ServeChildIfAsked() {
	lazyfs.ServeIfAsked()
	if len(os.Args) == 2 && os.Args[1] == "watchdog" {
		if err := reaper.Watchdog(); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	if len(os.Args) == 4 && os.Args[1] == "worker" && os.Args[2] == "--config" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		err := Child(ctx, os.Args[3])
		stop()
		if err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	selfServes = true
}

// workerBinary is the program started as `worker` for every child process:
// $DURACHK_BIN, else this binary — unless it is a test binary that cannot serve
// as a worker (it would run its tests again in every child).
func workerBinary() (string, error) {
	if b := os.Getenv("DURACHK_BIN"); b != "" {
		return filepath.Abs(b) // children run in the run directory
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	if strings.HasSuffix(self, ".test") && !selfServes {
		return "", fmt.Errorf("%s is a test binary: call runner.ServeChildIfAsked in TestMain, or set DURACHK_BIN to a durachk binary", self)
	}
	return self, nil
}

func newRunID() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// logf writes one progress line of the run, naming its target and contract:
// several runs may go on at once.
func (r *run) logf(format string, args ...any) {
	if r.t.Log != nil {
		fmt.Fprintf(r.t.Log, "  %s %s: "+format+"\n", append([]any{r.t.Name(), r.rc.Contract}, args...)...)
	}
}

// child is one incarnation of a process slot.
type child struct {
	slot, name, role string
	inc              int
	cmd              *exec.Cmd
	hist             string
	done             chan error
	exited           bool
	stoppedAt        time.Time
	stoppedJob       string
	// resumedAt: a zombie was resumed and has not yet gone back to leasing:
	// the run is not over while its stale commit or ack may still come.
	resumedAt time.Time
}

type run struct {
	t        *Target
	ctx      context.Context
	rc       contracts.Run
	sc       contracts.Scenario
	spec     targets.Spec
	dir      string
	self     string
	start    time.Time
	ctl      *pipeline.Env
	ctlHist  *history.Writer
	children []*child
	slots    map[string]*child // current incarnation per slot
	pending  map[string][]faults.Fault
	hists    []string
	inst     targets.Instance // private broker instance, for broker kills
	lazy     *lazyRun         // the lazy file system under inst, for power losses
	restart  time.Time        // when the killed instance comes back
	tail     *historyTail     // what the children recorded so far
	risk     riskState        // what the tail says is at risk, for the faults held for it (risk.go)
	links    map[string]*faults.Link
	proxies  map[string]*faults.Proxy // slot/upstream → proxy
	cl       *clusterRun              // a replicated target's nodes (cluster.go)
	cgroup   string                   // the run's cgroup, "" without
	workers  string                   // the children's cgroup, "" without
	unlock   func()                   // releases the run directory's lock
	// planned is until when the broker may not answer because the plan
	// killed it: from the kill to a while after its restart.
	planned time.Time
	probe   *probe // the controller's view of the broker
	outages []outage
	// silent: the run found the target's broker not answering (at its
	// start, its end or its teardown): the teardown does not wait for it long.
	silent bool
}

// execute runs one scenario and returns the merged history and the final
// state (Execute bounds it by its budget).
func (t *Target) execute(ctx context.Context, rc contracts.Run) (ex contracts.Execution, err error) {
	r := &run{t: t, ctx: ctx, rc: rc, sc: scale(rc.Scenario, t.Scale), spec: t.Spec, slots: map[string]*child{},
		pending: map[string][]faults.Fault{}, tail: newHistoryTail()}
	r.spec.RunID = newRunID()
	ex.RunID = r.spec.RunID // on every path, errors too: what a cut-short run made is named
	if s := rc.Sabotage; s != nil {
		r.spec.NoFence, r.spec.KeyOnlyDedupe = s.Store.NoFence, s.Store.KeyOnlyDedupe
		r.spec.Volatile, r.spec.BreakOrder, r.spec.Unreplicated = s.Volatile, s.BreakOrder, s.Unreplicated
		r.spec.WritableReplicas = s.WritableReplicas
		if s.Worker != "" {
			// The target's own worker applies it (worker.sabotage).
			r.spec.Options = maps.Clone(r.spec.Options)
			r.spec.Options[targets.WorkerSabotage] = s.Worker
		}
	}
	if r.self, err = workerBinary(); err != nil {
		return ex, err
	}
	// The run is live for `durachk cleanup` from before it creates anything
	// until its teardown is done: the store lock (which also registers the
	// run) is released by the first defer, which runs last. Bounded: a paused
	// server accepts the connection and never answers.
	release, err := bounded(setupLimit, func() (func(), error) { return targets.HoldRun(ctx, r.spec) }, func(f func()) { f() })
	if err != nil {
		if ctx.Err() != nil {
			// Cancelled as it registered: the commit may have landed
			// though the client gave up on it.
			_, _ = bounded(5*time.Second, func() (struct{}, error) {
				return struct{}{}, targets.TeardownStore(context.Background(), r.spec)
			}, func(struct{}) {})
		}
		return ex, r.storeUnavailable(err)
	}
	defer release()
	if err := r.prepareDir(); err != nil {
		_ = targets.TeardownStore(context.Background(), r.spec)
		return ex, err
	}
	// Teardown on every path, with a context of its own: ctx may be cancelled.
	defer func() {
		limit := teardownLimit
		switch {
		case ex.Unavailable != "" || r.silent:
			limit = 5 * time.Second // the broker did not answer: do not wait for it long
		case r.cl != nil && targets.HasExternalCluster(r.spec):
			// The nodes the run killed start again, and a node is given its
			// control timeout to serve (a RabbitMQ node restarted beside a
			// busy CI run took longer than the teardown's 30 s, and the run
			// was lost, 2026-12-06).
			limit += r.spec.ControlTimeout()
		}
		// Bounded even where a client does not heed the teardown's context.
		type errs struct{ broker, other error }
		te, terr := bounded(limit+time.Second, func() (errs, error) {
			b, o := r.teardown(limit)
			return errs{b, o}, nil
		}, func(errs) {})
		if terr != nil {
			te.other = terr
		}
		switch {
		case te.broker == nil && te.other == nil:
		case ex.Unavailable != "" || r.silent:
			// The verdict stands (unknown); what the run left is cleanup's.
			r.logf("teardown of run %s failed, the broker being unavailable (durachk cleanup removes what it left): %v", r.spec.RunID, errors.Join(te.broker, te.other))
		case err != nil:
		case te.other == nil && r.usesTarget():
			// Once more: a broker that stopped answering fails again,
			// without an answer.
			_, again := bounded(downCheckLimit, func() (struct{}, error) {
				ctx, cancel := context.WithTimeout(context.Background(), downCheckLimit)
				defer cancel()
				return struct{}{}, targets.TeardownQueue(ctx, r.spec)
			}, func(struct{}) {})
			switch {
			case again == nil:
			case silent(te.broker) && silent(again):
				// It stopped answering after the run read its final state:
				// the verdict stands; the next runs find the outage.
				t.down.markDown(time.Now())
				r.logf("the broker does not answer the teardown of run %s (durachk cleanup removes what it left once it is back): %v", r.spec.RunID, again)
			default:
				err = fmt.Errorf("teardown of run %s: %w", r.spec.RunID, again)
			}
		default:
			err = fmt.Errorf("teardown of run %s: %w", r.spec.RunID, errors.Join(te.broker, te.other))
		}
	}()
	if t.OnRun != nil {
		t.OnRun(r.spec.RunID, r.dir)
	}
	instDir := r.dir
	if needsPowerLoss(r.sc.Plan) {
		if instDir, err = r.mountLazy(); err != nil {
			return ex, err
		}
		defer func() { // before the teardown removes the run directory
			if uerr := r.unmountLazy(); uerr != nil && err == nil {
				err = uerr
			}
		}()
	}
	if (needsBrokerKill(r.sc.Plan) || targets.PrivateOnly(r.spec)) && !targets.HasPrivateCluster(r.spec) {
		if err := r.startBroker(instDir); err != nil {
			return ex, err
		}
		r.inst = r.onLazy(r.inst)
		if targets.IsPrivate(r.inst) {
			r.logf("private %s instance at %s (run %s, %s)", r.spec.Kind, targets.Redact(r.inst.URL()), r.spec.RunID, r.dir)
		} else {
			r.logf("%s broker under control commands at %s (run %s)", r.spec.Kind, targets.Redact(r.inst.URL()), r.spec.RunID)
		}
	}
	if targets.HasPrivateCluster(r.spec) || (r.sc.Plan.NeedsNodes() && targets.HasExternalCluster(r.spec)) {
		if err := r.startCluster(); err != nil {
			if ctx.Err() != nil {
				return ex, ctx.Err()
			}
			if targets.HasPrivateCluster(r.spec) {
				// Tried twice, on fresh ports (startCluster): this contract
				// has no verdict; the others run on clusters of their own.
				return ex, fmt.Errorf("%w: the private cluster did not start (twice, on fresh ports): %v%s", contracts.ErrUnavailable, err, r.keepLogs(err, 2))
			}
			return ex, err
		}
	}
	limit := setupLimit
	if r.usesTarget() && !t.down.get().IsZero() {
		limit = downCheckLimit // an earlier run found it silent: do not wait long
	}
	q, err := bounded(limit, func() (adapters.Queue, error) { return targets.OpenQueue(ctx, r.spec) }, func(q adapters.Queue) { q.Close() })
	if err != nil {
		if ctx.Err() != nil {
			return ex, ctx.Err()
		}
		// The target answered when the run started (New): it is down now.
		if !r.usesTarget() {
			return ex, fmt.Errorf("%w: %s: %v", contracts.ErrUnavailable, r.spec.Kind, err)
		}
		r.silent = true
		t.down.markDown(time.Now())
		return ex, fmt.Errorf("%w: %s: broker unavailable since %s: %v", contracts.ErrUnavailable, r.spec.Kind, t.down.get().Format("15:04:05.0"), err)
	}
	if r.usesTarget() {
		t.down.markUp()
	}
	// A broker that stopped answering may not answer a close either.
	defer func() { closeWithin(q.Close, ex.Unavailable != "") }()
	if err := r.checkpointLazy(ctx); err != nil {
		return ex, err
	}
	store, err := bounded(setupLimit, func() (pipeline.Store, error) { return targets.OpenStore(ctx, r.spec) }, func(s pipeline.Store) { s.Close() })
	if err != nil {
		return ex, r.storeUnavailable(err)
	}
	defer func() { closeWithin(store.Close, ex.Unavailable != "") }()
	if r.ctlHist, err = history.Create(filepath.Join(r.dir, "controller.jsonl")); err != nil {
		return ex, err
	}
	r.hists = append(r.hists, filepath.Join(r.dir, "controller.jsonl"))
	defer r.ctlHist.Close()
	r.ctl = &pipeline.Env{Process: "controller", Rec: r.ctlHist, Now: time.Now, Sleep: sim.Sleep}
	defer r.tail.close()
	r.start = time.Now().Add(300 * time.Millisecond) // children start within this

	r.links = faults.Schedule(r.links, r.sc.Plan, r.start, r.rc.Seed)
	r.proxies = map[string]*faults.Proxy{}
	defer func() {
		for _, p := range r.proxies {
			p.Close()
		}
	}()
	r.assignFaults()
	if err := r.spawn("producer", RoleProducer); err != nil {
		return ex, err
	}
	for i := 1; i <= max(r.sc.Workers, 1); i++ {
		if err := r.spawn(fmt.Sprintf("w%d", i), RoleWorker); err != nil {
			return ex, err
		}
	}
	if err := r.spawn("relay", RoleRelay); err != nil {
		return ex, err
	}
	operatorDone := make(chan struct{})
	if r.sc.Operator {
		jobs := map[string]adapters.Job{}
		for _, js := range r.sc.Jobs {
			j := js.Job
			if js.Deadline > 0 {
				j.Deadline = r.start.Add(js.Deadline)
			}
			jobs[j.ID] = j
		}
		op := &pipeline.Env{Process: "operator", Rec: r.ctlHist, Now: time.Now, Sleep: sim.Sleep}
		octx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			defer close(operatorDone)
			contracts.Operate(octx, op, store, q, jobs, r.rc.Sabotage != nil && r.rc.Sabotage.Pipeline.ReprocessInPlace,
				r.sc.Lease, func() bool { return r.producerDone() && queueEmpty(octx, q) })
		}()
	} else {
		close(operatorDone)
	}
	ex.RunID = r.spec.RunID
	if in, ok := q.(adapters.Inspector); ok {
		r.probe = &probe{q: in, timeout: time.Duration(float64(probeTimeout) * Stretch())}
	}
	drained, err := r.supervise(q, store, operatorDone)
	cut := err != nil && r.overBudget() // stopped mid-run at its budget
	if err != nil && !cut {
		return ex, err
	}
	if r.unavailable() != "" || cut {
		// Children stuck on a broker that does not answer would not heed a
		// SIGTERM; their histories are on disk record by record.
		r.killAll()
	}
	r.stopAll()
	var (
		st        pipeline.State
		inv       adapters.Inventory
		unsettled string
	)
	if r.unavailable() == "" && !cut {
		if st, err = finalRead(ctx, store.Snapshot); err != nil {
			return ex, r.storeUnavailable(err)
		}
		unsettled = r.clusterUnsettled()
		if in, ok := q.(adapters.Inspector); ok {
			began := time.Now()
			// An unsettled cluster may not answer, or answer only after
			// minutes (a RabbitMQ node whose autoheal gave up): its verdict
			// is unknown anyway, and the inventory is only shown.
			ictx, cancel := ctx, context.CancelFunc(func() {})
			if unsettled != "" {
				ictx, cancel = context.WithTimeout(ctx, unsettledReadLimit)
			}
			inv, err = finalRead(ictx, in.Inspect)
			cancel()
			if err != nil && unsettled == "" {
				if ctx.Err() != nil || !brokerSilent(err) {
					return ex, err
				}
				// The broker stopped answering once the run was over: its
				// final state cannot be read, and the outage is the run's
				// last fault window.
				r.outages = append(r.outages, outage{from: began, to: time.Now(), open: true, err: err})
				r.recordAt(began, history.Op{Type: history.Info, F: history.Fault, Value: "broker_unavailable", Target: "broker", Err: errText(err)})
			}
		}
	}
	r.ctlHist.Close()
	ops, err := r.merge()
	if err != nil {
		return ex, err
	}
	if cut {
		// Execute says why; the history so far goes into the report.
		ex.Ops, ex.OverBudget = ops, "stopped"
		return ex, nil
	}
	if why := r.unavailable(); why != "" {
		// The broker's final state cannot be read: the run is unknown.
		if o := r.outages[len(r.outages)-1]; o.open && r.usesTarget() {
			// Still silent: the next runs of the target need not wait for it.
			r.silent = true
			t.down.markDown(o.from)
		}
		r.logf("%s", why)
		ex.Ops, ex.Unavailable = ops, why
		return ex, nil
	}
	caps := q.Capabilities()
	return contracts.Execution{Unsettled: unsettled, Ops: ops, Final: contracts.Final{Store: st, Broker: inv, Drained: drained},
		Check: contracts.CheckOptions{FIFO: caps.FIFO, FencedAck: caps.FencedAck, Canaries: r.sc.Canaries, RelayRan: true,
			ApproximateLeases: caps.Lease == adapters.Approximate}, RunID: r.spec.RunID}, nil
}

// startBrokerFunc starts the broker a run kills (targets.StartBroker); a
// seam for tests, which make a start fail.
var startBrokerFunc = targets.StartBroker

// startBroker starts the broker the plan kills: the target's own under its
// control commands, or a private instance. A private instance that does not
// start is started once more, on fresh ports (a port taken between its
// choice and the bind, a node too slow on a loaded machine); if that fails
// too, this contract is unknown, with the broker's last log lines in the
// reason and its logs kept (Target.KeepLogs): the run goes on.
func (r *run) startBroker(dir string) error {
	inst, spec, err := startBrokerFunc(r.ctx, r.spec, dir)
	private := !r.spec.ControlKills()
	if err != nil && private && r.ctx.Err() == nil {
		r.logf("the private %s broker did not start, once more on fresh ports: %v%s", r.spec.Kind, err, r.keepLogs(err, 1))
		inst, spec, err = startBrokerFunc(r.ctx, r.spec, dir)
		if err != nil && r.ctx.Err() == nil {
			return fmt.Errorf("%w: the private %s broker did not start (twice, on fresh ports): %v%s", contracts.ErrUnavailable, r.spec.Kind, err, r.keepLogs(err, 2))
		}
	}
	if err != nil {
		if r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		return err
	}
	r.inst, r.spec = inst, spec
	return nil
}

// keepLogs copies the logs a StartError in err carries into the target's
// KeepLogs directory, named by the run and the attempt, and returns the
// note for the message: " (its logs: a, b)", or "".
func (r *run) keepLogs(err error, attempt int) string {
	var se *targets.StartError
	if r.t.KeepLogs == "" || !errors.As(err, &se) || len(se.Logs) == 0 {
		return ""
	}
	if mkErr := os.MkdirAll(r.t.KeepLogs, 0o755); mkErr != nil {
		r.logf("logs of the broker that did not start: %v", mkErr)
		return ""
	}
	var kept []string
	for _, l := range se.Logs {
		path := filepath.Join(r.t.KeepLogs, fmt.Sprintf("%s-%s-%d-%s", r.spec.RunID, se.Name, attempt, l.Name))
		if wErr := os.WriteFile(path, l.Data, 0o644); wErr != nil {
			r.logf("logs of the broker that did not start: %v", wErr)
			continue
		}
		kept = append(kept, path)
	}
	if len(kept) == 0 {
		return ""
	}
	return " (its logs: " + strings.Join(kept, ", ") + ")"
}

// brokerSilent reports whether err says the broker did not answer (rather
// than answered with an error): refused, timed out, or cut off.
func brokerSilent(err error) bool {
	return errors.Is(err, adapters.ErrUnavailable) || errors.Is(err, adapters.ErrAmbiguous) ||
		errors.Is(err, adapters.ErrClosed) || errors.Is(err, context.DeadlineExceeded)
}

// usesTarget reports whether the run works on the target's own broker, not
// on a private instance or cluster of its own.
func (r *run) usesTarget() bool {
	if targets.HasPrivateCluster(r.t.Spec) || targets.PrivateOnly(r.t.Spec) {
		return false
	}
	return !needsBrokerKill(r.sc.Plan) || r.t.Spec.ControlKills()
}

// silent reports whether err is a broker's silence, not its answer: what
// brokerSilent says, a connection refused, reset or timed out, or a call
// given up on (bounded).
func silent(err error) bool {
	var ne net.Error
	return brokerSilent(err) || errors.Is(err, errNoAnswer) || errors.As(err, &ne) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)
}

// finalRead reads the final state, again after a failure that a reset
// connection explains (the read changes nothing): a run whose final state
// could not be read has no verdict.
func finalRead[T any](ctx context.Context, read func(context.Context) (T, error)) (T, error) {
	for try := 0; ; try++ {
		v, err := read(ctx)
		if err == nil || try == 3 || !(errors.Is(err, adapters.ErrAmbiguous) || errors.Is(err, adapters.ErrUnavailable)) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(time.Duration(try+1) * 250 * time.Millisecond):
		}
	}
}

// unsettledReadLimit bounds the final read of a cluster that did not settle.
const unsettledReadLimit = 10 * time.Second

// setupLimit bounds each step that reaches the broker or the store before a
// run starts: a paused server accepts connections and never answers.
const setupLimit = 20 * time.Second

// bounded returns what f returns, or an error once limit has passed; what f
// returns after that is handed to drop.
func bounded[T any](limit time.Duration, f func() (T, error), drop func(T)) (T, error) {
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	gaveUp := make(chan struct{})
	go func() {
		v, err := f()
		select {
		case ch <- res{v, err}:
		case <-gaveUp:
			if err == nil {
				drop(v)
			}
		}
	}()
	select {
	case x := <-ch:
		return x.v, x.err
	case <-time.After(limit):
		close(gaveUp)
		// f may have delivered just now.
		select {
		case x := <-ch:
			if x.err == nil {
				drop(x.v)
			}
		default:
		}
		var zero T
		return zero, fmt.Errorf("%w within %s", errNoAnswer, limit)
	}
}

// errNoAnswer is bounded's error once its limit has passed.
var errNoAnswer = errors.New("no answer")

// closeWithin closes a connection; when its server did not answer, it does
// not wait more than a few seconds for the close.
func closeWithin(closeFn func() error, unanswered bool) {
	if !unanswered {
		closeFn()
		return
	}
	done := make(chan struct{})
	go func() {
		closeFn()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
}

// storeUnavailable marks an effect store error as the target's outage when
// the store is the broker's own Postgres server (it answered when the run
// started); another store's error stays the harness's.
func (r *run) storeUnavailable(err error) error {
	if r.ctx.Err() != nil {
		return r.ctx.Err()
	}
	if r.spec.Kind == "postgres" && sameServer(r.spec.URL, r.spec.StoreURL) {
		return fmt.Errorf("%w: %s: %v", contracts.ErrUnavailable, r.spec.Kind, err)
	}
	return err
}

func sameServer(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	return err1 == nil && err2 == nil && ua.Host == ub.Host
}

// assignFaults hands the plan's crash and pause points to the processes: relay
// points to the relay, worker points to every worker. A fault planned for the
// n-th arrival overall fires at a worker's ceil(n/workers)-th arrival there, in
// whichever worker gets there first: the child claims the fault with a file in
// the run directory before it fires, so each fires exactly once, also across
// restarts, and none goes unfired because the jobs spread unevenly.
func (r *run) assignFaults() {
	n := max(r.sc.Workers, 1)
	for i, f := range r.sc.Plan.Faults {
		if f.Kind != faults.CrashAt && f.Kind != faults.PauseAt {
			continue
		}
		f.ID = i + 1
		if f.Point == string(pipeline.AfterPublishBeforeMark) {
			f.Nth = max(f.Nth, 1)
			r.pending["relay"] = append(r.pending["relay"], f)
			continue
		}
		f.Nth = (max(f.Nth, 1)-1)/n + 1
		r.pending["workers"] = append(r.pending["workers"], f)
	}
}

// prepareDir makes the run directory and locks it (the run is live for
// cleanup while the lock is held), hands it and the run's cgroup to the
// watchdog, and creates the cgroups where the machine has them.
func (r *run) prepareDir() error {
	dir, err := os.MkdirTemp("", reaper.DirPattern(r.spec.RunID))
	if err != nil {
		return err
	}
	unlock, err := reaper.LockDir(dir)
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	r.dir, r.unlock = dir, unlock
	if err := reaper.Start(r.self); err != nil {
		r.logf("no watchdog (%v): children still die with durachk (parent-death signal)", err)
	}
	reaper.Watch(reaper.KindDir, dir)
	if cg, err := reaper.NewCgroup(r.spec.RunID, ""); err == nil {
		r.cgroup = cg
		reaper.Watch(reaper.KindCgroup, cg)
		if w, err := reaper.NewCgroup(r.spec.RunID, "workers"); err == nil {
			r.workers = w
		}
	}
	return nil
}

// teardown ends every process of the run and removes everything it created:
// the queue namespace (with a private broker: the broker and its data), the
// cgroups, the directory, and last the store schema, which registers the run
// for cleanup until everything else is gone. It returns the error of the
// target's broker (the namespace on it) apart from the others.
func (r *run) teardown(limit time.Duration) (broker, other error) {
	r.stopAll()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var errs []error
	if r.inst != nil {
		errs = append(errs, r.inst.Stop()) // a private broker takes the queue with it
	} else if r.cl != nil && !targets.HasExternalCluster(r.spec) {
		errs = append(errs, r.stopCluster()) // and so does a private cluster
	} else {
		errs = append(errs, r.stopCluster()) // an existing cluster's killed nodes start again (no-op without one)
		broker = targets.TeardownQueue(ctx, r.spec)
	}
	if r.cgroup != "" {
		errs = append(errs, reaper.RemoveCgroup(r.cgroup))
		reaper.Forget(reaper.KindCgroup, r.cgroup)
	}
	r.unlock()
	errs = append(errs, os.RemoveAll(r.dir))
	reaper.Forget(reaper.KindDir, r.dir)
	errs = append(errs, targets.TeardownStore(ctx, r.spec))
	return broker, errors.Join(errs...)
}

func (r *run) spawn(slot, role string) error {
	prev := r.slots[slot]
	inc := 1
	if prev != nil {
		inc = prev.inc + 1
	}
	name := slot
	if inc > 1 {
		name = fmt.Sprintf("%s.%d", slot, inc)
	}
	c := &child{slot: slot, name: name, role: role, inc: inc, hist: filepath.Join(r.dir, name+".jsonl"), done: make(chan error, 1)}
	spec, err := r.proxied(slot, role)
	if err != nil {
		return err
	}
	if spec, err = r.clusterSpec(spec, role); err != nil {
		return err
	}
	cfg := ChildConfig{Role: role, Process: name, Spec: spec, History: c.hist, Seed: r.rc.Seed, Start: r.start,
		Lease: r.sc.Lease, Poll: r.sc.Poll, Backoff: max(r.sc.Poll, 20*time.Millisecond), FaultDir: r.dir}
	switch role {
	case RoleWorker:
		cfg.Faults = r.pending["workers"]
	case RoleRelay:
		cfg.Faults = r.pending["relay"]
	}
	if r.rc.Sabotage != nil {
		cfg.Sabotage = r.rc.Sabotage.Pipeline
	}
	if role == RoleProducer {
		cfg.Jobs = r.sc.Jobs
	}
	cfg.Spec.Control = nil // never needed by a child; may hold secrets
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd, err := r.startChild(b, &stderr)
	if err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	c.cmd = cmd
	go func() {
		err := cmd.Wait()
		if err != nil && stderr.Len() > 0 && !killed(err) {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
		}
		c.done <- err
	}()
	r.slots[slot] = c
	r.children = append(r.children, c)
	r.hists = append(r.hists, c.hist)
	return nil
}

// startChild starts `durachk worker --config -` with its config on stdin (a
// pipe: the target's credentials never touch the disk), in the run directory,
// in the run's worker cgroup where there is one, with a parent-death signal:
// the child dies with the controller.
func (r *run) startChild(config []byte, stderr io.Writer) (*exec.Cmd, error) {
	build := func() *exec.Cmd {
		cmd := exec.Command(r.self, "worker", "--config", "-")
		cmd.Stdin = bytes.NewReader(config)
		cmd.Stderr = stderr
		cmd.Dir = r.dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		return cmd
	}
	if r.workers != "" {
		if f, err := reaper.OpenCgroup(r.workers); err == nil {
			cmd := build()
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(f.Fd())
			err := cmd.Start()
			f.Close()
			if err == nil {
				return cmd, nil
			}
		}
	}
	cmd := build()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if r.workers != "" {
		_ = reaper.AddProcess(r.workers, cmd.Process.Pid)
	}
	return cmd, nil
}

// proxied returns the spec a child of slot uses: its broker and store
// connections go through proxies of the controller where the plan has faults on
// their link (broker: producer and workers; store: workers; channel: the
// relay's store connection, over which it publishes to the consumer).
func (r *run) proxied(slot, role string) (targets.Spec, error) {
	spec := r.spec
	if len(r.links) == 0 {
		return spec, nil
	}
	var err error
	if l := r.links[faults.LinkBroker]; l != nil && role != RoleRelay {
		if spec.URL, err = r.proxyURL(slot+"/broker", l, spec.URL); err != nil {
			return spec, err
		}
	}
	storeLink := r.links[faults.LinkStore]
	if role == RoleRelay {
		storeLink = r.links[faults.LinkChannel]
	}
	if storeLink != nil && role != RoleProducer {
		if spec.StoreURL, err = r.proxyURL(slot+"/store", storeLink, spec.StoreURL); err != nil {
			return spec, err
		}
	}
	return spec, nil
}

// proxyURL starts (once per slot and upstream) a proxy for the host:port of raw
// and returns raw pointing at it. A URL without a host is left alone.
func (r *run) proxyURL(key string, l *faults.Link, raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Port() == "" {
		return raw, nil
	}
	p := r.proxies[key]
	if p == nil {
		slot := strings.Split(key, "/")[0]
		p = &faults.Proxy{Link: l, Upstream: u.Host, OnFault: func(kind string) {
			r.ctl.Record(history.Op{Type: history.Info, F: history.Fault, Value: kind, Key: l.Name, Target: slot})
		}}
		if err := p.Start(); err != nil {
			return "", fmt.Errorf("proxy for %s: %w", key, err)
		}
		r.proxies[key] = p
	}
	u.Host = p.Addr()
	return u.String(), nil
}

func killed(err error) bool {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return true
		}
	}
	return false
}

func (r *run) producerDone() bool {
	c := r.slots["producer"]
	return c != nil && c.exited
}

func queueEmpty(ctx context.Context, q adapters.Queue) bool {
	in, ok := q.(adapters.Inspector)
	if !ok {
		return false
	}
	inv, err := in.Inspect(ctx)
	return err == nil && inv.Empty()
}

// supervise runs the fault plan and the supervisor until the run drains, hits
// its limit, or ctx ends. It reports whether the run drained.
func (r *run) supervise(q adapters.Queue, store pipeline.Store, operatorDone <-chan struct{}) (bool, error) {
	timed := r.timedFaults()
	// Children stop only themselves, at a pause point of the plan: without
	// one, none is looked at for being stopped (a read of /proc per child
	// every 20 ms).
	pauses := slices.ContainsFunc(r.sc.Plan.Faults, func(f faults.Fault) bool { return f.Kind == faults.PauseAt })
	deadline := r.start.Add(r.sc.Limit)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var lastDrainCheck, readySince time.Time
	lastWatch := time.Now()
	r.startNodeFaults()
	for {
		select {
		case <-r.ctx.Done():
			return false, r.ctx.Err()
		case <-tick.C:
		}
		now := time.Now()
		if !r.restart.IsZero() && !now.Before(r.restart) {
			r.restart = time.Time{}
			began := time.Now()
			if err := r.inst.Restart(r.ctx); err != nil {
				var se *targets.StartError
				if r.ctx.Err() == nil && targets.IsPrivate(r.inst) && errors.As(err, &se) {
					// The broker the plan killed did not come back on its
					// data: this contract has no verdict, the run goes on.
					return false, fmt.Errorf("%w: the private %s broker did not start again after the planned kill: %v%s", contracts.ErrUnavailable, r.spec.Kind, err, r.keepLogs(err, 1))
				}
				return false, fmt.Errorf("restart of the private broker: %w", err)
			}
			// A broker slow to boot (RabbitMQ on a loaded machine: tens of
			// seconds) does not eat the pipeline's time to drain.
			deadline = deadline.Add(time.Since(began))
			r.ctl.Record(history.Op{Type: history.Info, F: history.Fault, Value: "broker_restart", Target: r.spec.Kind})
			// The controller's connection comes back within a few probes.
			r.planned = time.Now().Add(plannedGrace)
		}
		if r.watchBroker(now, !readySince.IsZero()) {
			return false, nil
		}
		if err := r.reap(); err != nil {
			if r.brokerDown(time.Now()) || r.silentNow(time.Now()) {
				// A child gave up on a broker that stopped answering: that
				// is the outage, found by the probe, not the harness failing.
				r.endOutage(time.Now())
				return false, nil
			}
			return false, err
		}
		r.tail.read(r.hists)
		r.publishRisk()
		timed = r.fireTimed(timed)
		if pauses {
			r.resumeZombies()
		}
		// Faults held back for what they put at risk move the whole plan,
		// and its end, with them; so do partitions held to outlast the
		// topology's timeout.
		if now.After(deadline.Add(r.shift() + r.clusterOutlasted())) {
			r.clusterTimedOut()
			return false, nil
		}
		clusterReady, clusterFailed := r.clusterGate()
		if clusterFailed {
			return false, nil
		}
		if now.Sub(lastWatch) > time.Second {
			lastWatch = now
			if job, over := r.tail.over(); over {
				r.logf("stopping early: job %s was executed beyond its attempt budget", job)
				return false, nil
			}
		}
		ready := r.producerDone() && !r.anyStopped() && r.restart.IsZero() && clusterReady
		select {
		case <-operatorDone:
		default:
			ready = false
		}
		switch {
		case !ready:
			readySince = time.Time{}
			continue
		case readySince.IsZero():
			readySince = now
			continue
		case r.probe == nil || now.Sub(lastDrainCheck) < 200*time.Millisecond:
			continue
		}
		lastDrainCheck = now
		// Drained: a probe begun once all else was done found the broker
		// empty (the probe's Inspect: supervise never waits on the broker).
		if !r.probe.emptySince(readySince) {
			continue
		}
		pctx, cancel := context.WithTimeout(r.ctx, probeTimeout)
		ev, err := store.PendingEvents(pctx, 1)
		cancel()
		if err != nil || len(ev) > 0 {
			continue
		}
		return true, nil
	}
}

// Broker outages. The controller asks the broker over its own connection,
// every probeEvery, whether it answers (an Inspect, see probe). The plan's faults never
// touch that connection (the links it breaks are the children's, through
// proxies) except a planned broker kill, whose window is known. So a broker
// that stops answering outside that window is an outage: a fault nobody
// planned, during which the run measures nothing it claims. Its window goes
// into the history (broker_unavailable, broker_available); one that lasts
// outageLimit ends the run, which is then unknown, and lets the rest of a
// durachk run go on instead of waiting out the contract's time limit.
const (
	probeEvery   = time.Second            // while the run goes on
	drainEvery   = 250 * time.Millisecond // once all but the broker is done: the drain check reads the probe
	probeTimeout = 2 * time.Second        // a probe unanswered this long (× Stretch) counts as failed from its start
	// probeFails failed probes in a row make an outage, from the first's
	// start: one slow answer (an emulator on a busy machine took 2 s to
	// answer one Inspect) is not a broker that stopped; a stopped broker
	// refuses the next probe a second later.
	probeFails   = 2
	outageLimit  = 4 * time.Second
	plannedGrace = 3 * time.Second // after a planned restart, for the controller to reconnect
)

// probe asks the broker, one Inspect at a time, whether it answers and what
// it still holds (the drain check reads that). Every Inspect is read-only but
// not free (SQS receives its dead letters to name them), so it asks once a
// second while the run goes on, and four times a second once the run may be
// drained; a queue that can Ping is pinged meanwhile instead.
type probe struct {
	q       adapters.Inspector
	mu      sync.Mutex
	running bool
	started time.Time     // of the probe in flight, or of the last one
	timeout time.Duration // of one probe: probeTimeout, stretched on a busy machine
	failing time.Time     // start of the failed probes in a row; zero: answering
	fails   int           // how many failed in a row
	err     error         // of the last failed probe
	okAt    time.Time     // start of the last probe answered
	empty   bool          // what that probe found: nothing left in the broker
}

// emptySince reports whether a probe begun at t or later found the broker
// empty.
func (p *probe) emptySince(t time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.empty && !p.okAt.Before(t)
}

// pinger is a queue that can tell cheaply whether its broker answers.
type pinger interface {
	Ping(ctx context.Context) error
}

// tick starts a probe when it is time and none is in flight.
func (p *probe) tick(ctx context.Context, now time.Time, drain bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	every := probeEvery
	if drain {
		every = drainEvery
	}
	if p.running || now.Sub(p.started) < every {
		return
	}
	p.running, p.started = true, now
	go func() {
		pctx, cancel := context.WithTimeout(ctx, p.limit())
		var inv adapters.Inventory
		var err error
		pg, canPing := p.q.(pinger)
		if canPing && !drain {
			err = pg.Ping(pctx)
		} else {
			inv, err = p.q.Inspect(pctx)
		}
		cancel()
		p.mu.Lock()
		defer p.mu.Unlock()
		p.running = false
		switch {
		case ctx.Err() != nil:
		case err == nil:
			p.failing, p.fails = time.Time{}, 0
			if !canPing || drain {
				p.okAt, p.empty = now, inv.Empty()
			}
		case p.failing.IsZero():
			p.failing, p.err, p.fails = now, err, 1
		default:
			p.err = err
			p.fails++
		}
	}()
}

// limit is how long one probe may take.
func (p *probe) limit() time.Duration {
	if p.timeout > 0 {
		return p.timeout
	}
	return probeTimeout
}

// down returns since when the broker has not answered; zero: it answers.
func (p *probe) down(now time.Time) (time.Time, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.fails >= probeFails:
		return p.failing, p.err
	case p.fails > 0 && p.running && now.Sub(p.started) > p.limit():
		// The next probe is unanswered too.
		return p.failing, fmt.Errorf("no answer within %s", p.limit())
	}
	return time.Time{}, nil
}

// outage is a period during which the broker did not answer the controller.
type outage struct {
	from, to time.Time
	open     bool // still not answering when the run ended
	err      error
}

// unplannedSince returns since when the broker has not answered, outside the
// plan's own broker faults; zero: it answers (or is down as planned).
func (r *run) unplannedSince(now time.Time) (time.Time, error) {
	if r.probe == nil || !r.restart.IsZero() {
		return time.Time{}, nil
	}
	from, err := r.probe.down(now)
	if from.IsZero() {
		return from, nil
	}
	planned := r.planned
	if cp := r.clusterPlanned(); cp.After(planned) {
		planned = cp // a replicated target's node faults, until it settled
	}
	if from.Before(planned) {
		if now.Before(planned) {
			return time.Time{}, nil
		}
		from = planned // down as planned, then still down
	}
	return from, err
}

func (r *run) brokerDown(now time.Time) bool {
	from, _ := r.unplannedSince(now)
	return !from.IsZero()
}

// watchBroker probes the broker, records an outage's window once it is over,
// and reports whether the run must end: an outage has lasted outageLimit.
func (r *run) watchBroker(now time.Time, draining bool) bool {
	if r.probe == nil {
		return false
	}
	r.probe.tick(r.ctx, now, draining)
	from, err := r.unplannedSince(now)
	cur := len(r.outages) > 0 && r.outages[len(r.outages)-1].open
	switch {
	case from.IsZero() && cur:
		o := &r.outages[len(r.outages)-1]
		o.to, o.open = now, false
		r.recordAt(o.to, history.Op{Type: history.Info, F: history.Fault, Value: "broker_available", Target: "broker"})
		r.logf("the broker answers again after %s", fmtSecs(o.to.Sub(o.from)))
	case !from.IsZero() && !cur:
		r.outages = append(r.outages, outage{from: from, open: true, err: err})
		r.recordAt(from, history.Op{Type: history.Info, F: history.Fault, Value: "broker_unavailable", Target: "broker", Err: errText(err)})
		r.logf("the broker does not answer (since %s): %v", fmtSecs(from.Sub(r.start)), err)
	case !from.IsZero():
		r.outages[len(r.outages)-1].err = err
	}
	if !from.IsZero() && now.Sub(from) >= outageLimit {
		r.endOutage(now)
		return true
	}
	return false
}

// silentNow asks the broker at once, outside the plan's own broker faults,
// whether it answers (a child gave up on it before the probe noticed), and
// opens an outage at now if it does not.
func (r *run) silentNow(now time.Time) bool {
	if r.probe == nil || !r.restart.IsZero() || now.Before(r.planned) || now.Before(r.clusterPlanned()) {
		return false
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.probe.limit())
	defer cancel()
	var err error
	if pg, ok := r.probe.q.(pinger); ok {
		err = pg.Ping(ctx)
	} else {
		_, err = r.probe.q.Inspect(ctx)
	}
	if err == nil || r.ctx.Err() != nil {
		return false
	}
	if len(r.outages) == 0 || !r.outages[len(r.outages)-1].open {
		r.outages = append(r.outages, outage{from: now, open: true, err: err})
		r.recordAt(now, history.Op{Type: history.Info, F: history.Fault, Value: "broker_unavailable", Target: "broker", Err: errText(err)})
		r.logf("the broker does not answer (since %s): %v", fmtSecs(now.Sub(r.start)), err)
	}
	return true
}

// endOutage closes the current outage's window at now: the run ends with the
// broker still not answering.
func (r *run) endOutage(now time.Time) {
	if len(r.outages) == 0 || !r.outages[len(r.outages)-1].open {
		from, err := r.unplannedSince(now)
		if from.IsZero() {
			return
		}
		r.outages = append(r.outages, outage{from: from, open: true, err: err})
		r.recordAt(from, history.Op{Type: history.Info, F: history.Fault, Value: "broker_unavailable", Target: "broker", Err: errText(err)})
	}
	r.outages[len(r.outages)-1].to = now
}

// unavailable says why the run is unknown for an outage, or "".
func (r *run) unavailable() string {
	if len(r.outages) == 0 {
		return ""
	}
	var parts []string
	for _, o := range r.outages {
		p := fmt.Sprintf("broker unavailable for %s from %s", fmtSecs(o.to.Sub(o.from)), fmtSecs(o.from.Sub(r.start)))
		if o.open {
			p += " (still not answering when the run ended"
			if o.err != nil {
				p += ": " + o.err.Error()
			}
			p += ")"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ") + ": an outage nobody planned, so the run measured nothing it claims"
}

// recordAt writes a controller record stamped at, not now: an outage is
// known only once it has lasted a while.
func (r *run) recordAt(at time.Time, op history.Op) {
	(&pipeline.Env{Process: "controller", Rec: r.ctlHist, Now: func() time.Time { return at }}).Record(op)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func fmtSecs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

// anyStopped reports whether a worker is stopped, or was resumed and has not
// yet finished what it held (it has not leased again, bounded by ten leases).
func (r *run) anyStopped() bool {
	for _, c := range r.slots {
		if !c.stoppedAt.IsZero() {
			return true
		}
		if !c.resumedAt.IsZero() {
			if c.exited || r.tail.leasedAt[c.name] > c.resumedAt.UnixNano() || time.Since(c.resumedAt) > 10*r.sc.Lease {
				c.resumedAt = time.Time{}
				continue
			}
			return true
		}
	}
	return false
}

func (r *run) applyTimed(f faults.Fault) {
	switch f.Kind {
	case faults.Kill:
		c := r.slots[f.Process]
		if c == nil || c.exited {
			return
		}
		r.ctl.Record(history.Op{Type: history.Info, F: history.Fault, Value: "kill", Target: c.name})
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		r.logf("killed %s", c.name)
	case faults.BrokerCrash:
		if r.inst == nil {
			return
		}
		r.ctl.Record(history.Op{Type: history.Info, F: history.Fault, Value: "broker_crash", Target: r.spec.Kind})
		r.planned = time.Now().Add(f.For + plannedGrace + time.Hour) // until the restart says
		if err := r.inst.Kill(); err != nil {
			r.logf("broker kill: %v", err)
		}
		r.restart = time.Now().Add(f.For)
	case faults.PowerLoss:
		r.cutPower(f)
	}
}

// reap collects exited children and restarts workers and the relay.
func (r *run) reap() error {
	for _, c := range r.slots {
		if c.exited {
			continue
		}
		select {
		case err := <-c.done:
			c.exited = true
			r.tail.exited(c.hist) // read to its end once more, then closed
			if err != nil && !killed(err) {
				return fmt.Errorf("%s exited: %w", c.name, err)
			}
			if c.role == RoleProducer {
				continue
			}
			// Killed at a crash point or by the plan: restart, as a supervisor would.
			if err := r.spawn(c.slot, c.role); err != nil {
				return err
			}
		default:
		}
	}
	return nil
}

// resumeZombies SIGCONTs a stopped worker once another worker has leased the job
// it held and fenced the new token (its lease expired and the job moved on), or
// after ten leases.
func (r *run) resumeZombies() {
	for _, c := range r.slots {
		if c.exited || c.cmd.Process == nil {
			continue
		}
		stopped := processStopped(c.cmd.Process.Pid)
		switch {
		case stopped && c.stoppedAt.IsZero():
			c.stoppedAt = time.Now()
			c.stoppedJob = r.tail.lastFault[c.name]
			r.ctl.Record(history.Op{Type: history.Info, F: history.Fault, Value: "stopped", Job: c.stoppedJob, Target: c.name})
		case stopped:
			held := time.Since(c.stoppedAt)
			// Once another worker has fenced the job, the zombie's token is stale
			// in the store, whatever the order of the commits.
			if held > r.sc.Lease && (r.tail.fencedByOther(c.stoppedJob, c.name) || held > 10*r.sc.Lease) {
				r.ctl.Record(history.Op{Type: history.Info, F: history.Fault, Value: "continued", Job: c.stoppedJob, Target: c.name})
				_ = c.cmd.Process.Signal(syscall.SIGCONT)
				c.stoppedAt, c.resumedAt = time.Time{}, time.Now()
			}
		}
	}
}

func processStopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't')
}

// stopAll ends every child: SIGCONT for the stopped, SIGTERM, then SIGKILL.
func (r *run) stopAll() {
	var live []*child
	for _, c := range r.children {
		if c.cmd == nil || c.cmd.Process == nil || c.exited {
			continue
		}
		_ = c.cmd.Process.Signal(syscall.SIGCONT)
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		live = append(live, c)
	}
	deadline := time.After(3 * time.Second)
	for _, c := range live {
		select {
		case <-c.done:
		case <-deadline:
			_ = c.cmd.Process.Signal(syscall.SIGKILL)
			<-c.done
		}
		c.exited = true
	}
}

// killAll ends every child with SIGKILL.
func (r *run) killAll() {
	for _, c := range r.children {
		if c.cmd == nil || c.cmd.Process == nil || c.exited {
			continue
		}
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		<-c.done
		c.exited = true
	}
}

// merge reads every history file and orders the records by time; records of
// one process keep their order.
func (r *run) merge() ([]history.Op, error) {
	var all []history.Op
	for _, h := range r.hists {
		ops, err := history.ReadFile(h)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, err
		}
		all = append(all, ops...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].T < all[j].T })
	return all, nil
}

func needsBrokerKill(p faults.Plan) bool {
	for _, f := range p.Faults {
		if f.Kind == faults.BrokerCrash || f.Kind == faults.PowerLoss {
			return true
		}
	}
	return false
}

// timedFaults are the plan's faults the supervisor applies at their times:
// worker kills, and a private instance's kill and power cut, each held by
// the fault's hold (risk.go), in time order.
func (r *run) timedFaults() []*hold {
	var out []*hold
	for i, f := range r.sc.Plan.Faults {
		if f.Kind == faults.Kill || f.Kind == faults.BrokerCrash || f.Kind == faults.PowerLoss {
			out = append(out, r.newHold(i, f))
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].f.At < out[j].f.At })
	return out
}

// fireTimed applies the timed faults whose time has come (moved by how long
// faults were held back) and returns those still to come. A broker kill or
// power cut anchored to an acknowledgement waits for it (ready); one due
// before the next read of the histories is waited for here, so that it fires
// the drawn delay after the acknowledgement, not at the next tick.
func (r *run) fireTimed(timed []*hold) []*hold {
	for len(timed) > 0 && !time.Now().Before(r.start.Add(timed[0].f.At+r.shift())) {
		h := timed[0]
		if h.delay > 0 && r.inst != nil {
			fire, next := r.ready(h, time.Now())
			if !fire && next > 0 && next < riskTick {
				time.Sleep(next)
				fire, _ = r.ready(h, time.Now())
			}
			if !fire {
				return timed
			}
			r.released(h, time.Now())
		}
		r.applyTimed(h.f)
		timed = timed[1:]
	}
	return timed
}

// scale maps a scenario's times onto wall time.
func scale(sc contracts.Scenario, k float64) contracts.Scenario {
	d := func(x time.Duration) time.Duration { return time.Duration(float64(x) * k) }
	out := sc
	out.Lease, out.Poll = d(sc.Lease), max(d(sc.Poll), 10*time.Millisecond)
	out.Limit = min(d(sc.Limit), 2*time.Minute)
	out.Jobs = make([]contracts.JobSpec, len(sc.Jobs))
	for i, js := range sc.Jobs {
		js.At, js.Deadline = d(js.At), d(js.Deadline)
		if js.Deadline == 0 && sc.Jobs[i].Deadline > 0 {
			js.Deadline = 1
		}
		if p, err := pipeline.DecodePayload(js.Job.Payload); err == nil {
			// The age budget is scenario time too: a job that names none gets
			// the default, scaled.
			if p.AgeBudget == 0 {
				p.AgeBudget = pipeline.DefaultAgeBudget
			}
			p.Slow, p.AgeBudget = d(p.Slow), d(p.AgeBudget)
			js.Job.Payload = p.Encode()
		}
		out.Jobs[i] = js
	}
	out.Plan.Faults = make([]faults.Fault, len(sc.Plan.Faults))
	for i, f := range sc.Plan.Faults {
		f.At, f.For = d(f.At), d(f.For)
		out.Plan.Faults[i] = f
	}
	return out
}
