package runner

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/internal/targets"
	"github.com/durachk/durachk/pipeline"
)

// settleTimeout bounds the wait for a replicated target to settle after its
// last fault: a primary known, every node back and following it.
const settleTimeout = 40 * time.Second

// clusterRun is the replicated topology of one run and the controller of its
// node faults: it applies them at their times, heals everything after the
// last one, lets the cluster settle, and records in the history who was
// primary when.
type clusterRun struct {
	r   *run
	cl  targets.Cluster
	ctl atomic.Pointer[pipeline.Env] // the controller's recorder, once the run starts

	pinned string // the node the producer is pinned to, if it is
	// planned is until when the broker may not answer the controller because
	// of the plan's node faults: from the first one until a while after the
	// cluster settled.
	planned time.Time
	// outlasted is how much later than planned the controller healed its
	// partitions, to outlast the topology's timeouts (outlast): the run's
	// end moves with it.
	outlasted atomic.Int64

	mu        sync.Mutex
	done      bool   // the last fault, the heal and the settle are over
	unsettled string // why the cluster did not settle, if it did not
	primary   string // as last observed
	stop      context.CancelFunc
	wg        sync.WaitGroup
}

// describeCluster declares what a target with a private cluster can do, and
// names the topology in what its verdicts are measured on.
func (t *Target) describeCluster() {
	t.caps.NodeFaults = targets.CanFaultNodes(t.Spec) == nil
	t.caps.NodePartitions = targets.CanPartitionNodes(t.Spec)
	if targets.HasPrivateCluster(t.Spec) {
		// A power cut of a whole cluster is not modelled: its nodes run on the
		// run directory's own file system.
		t.caps.PowerLoss = false
	}
	targets.AdjustForCluster(t.Spec, &t.caps)
	if targets.HasExternalCluster(t.Spec) {
		can, cannot := []string{"kill and start its nodes"}, []string(nil)
		if t.caps.NodePartitions {
			can = append(can, "partition them")
		} else {
			cannot = append(cannot, "partition them (no control.<node>.partition and .heal on every node)")
		}
		if targets.CanLagNodes(t.Spec) {
			can = append(can, "lag their replication")
		} else {
			cannot = append(cannot, "lag their replication (no control.<node>.lag and .unlag): the plans' replication lag is not applied")
		}
		note := "node faults through the control commands of an existing cluster: durachk can " + strings.Join(can, ", ")
		if len(cannot) > 0 {
			note += "; not " + strings.Join(cannot, ", nor ")
		}
		t.caps.Notes = append(t.caps.Notes, note)
	}
	if d := targets.DescribeCluster(t.Spec); d != "" {
		t.measuredOn += ", private cluster: " + d
		t.caps.Notes = append(t.caps.Notes, "every contract runs on a fresh private cluster ("+d+"); a broker kill kills every node at once")
	}
}

// clusterStarter starts a target's cluster (tests put a fake in its place).
var clusterStarter = targets.StartCluster

// startCluster starts the private cluster the target names, before the run's
// queue is opened: the run's processes then connect to it. Every contract of
// such a target runs on its own cluster; a broker crash kills every node.
func (r *run) startCluster() error {
	r.links = faults.Prepare(r.sc.Plan, r.rc.Seed)
	c := &clusterRun{r: r}
	logf := func(format string, args ...any) { r.logf(strings.TrimLeft(format, " "), args...) }
	env := targets.ClusterEnv{Dir: r.dir, RunID: r.spec.RunID, Links: r.links, Logf: logf,
		OnFault: func(kind, link string) {
			// Faults on the cluster's links count from the run's start: the
			// controller's history exists by then.
			if ctl := c.ctl.Load(); ctl != nil {
				ctl.Record(history.Op{Type: history.Info, F: history.Fault, Value: kind, Key: link})
			}
		}}
	cl, spec, err := clusterStarter(r.ctx, r.spec, env)
	if err != nil && r.ctx.Err() == nil {
		// A node that could not start (a port taken between its choice and
		// the bind, a node killed by a loaded machine) gets one more chance,
		// on fresh ports.
		r.logf("the cluster did not start, once more: %v", err)
		cl, spec, err = clusterStarter(r.ctx, r.spec, env)
	}
	if err != nil {
		return err
	}
	c.cl = cl
	r.cl = c
	r.spec = spec
	if targets.HasExternalCluster(r.spec) {
		r.logf("%s", cl.Describe())
	} else {
		r.logf("%s started and settled in %s", cl.Describe(), cl.StartTime().Round(time.Millisecond))
	}
	return nil
}

// clusterSpec points a pinned producer straight at its node.
func (r *run) clusterSpec(spec targets.Spec, role string) (targets.Spec, error) {
	if r.cl == nil || role != RoleProducer || r.sc.Plan.PinProducer == "" {
		return spec, nil
	}
	primary := r.cl.observed()
	if primary == "" {
		primary, _ = r.cl.cl.Primary(r.ctx)
	}
	nodes, err := faults.SelectNodes(r.sc.Plan.PinProducer, r.cl.cl.Nodes(), primary, rand.New(rand.NewPCG(r.rc.Seed, 0x9e11)))
	if err != nil {
		return spec, err
	}
	if spec.URL, err = r.cl.cl.NodeURL(nodes[0]); err != nil {
		return spec, err
	}
	r.cl.pinned = nodes[0]
	r.ctl.Record(history.Op{Type: history.Info, F: history.Node, Value: "producer pinned", Target: nodes[0]})
	return spec, nil
}

// stopCluster ends the controller and the cluster (the run's queue goes with it).
func (r *run) stopCluster() error {
	if r.cl == nil {
		return nil
	}
	if r.cl.stop != nil {
		r.cl.stop()
	}
	r.cl.wg.Wait()
	return r.cl.cl.Stop()
}

// clusterGate says whether the run may drain (no cluster, or its faults are
// over and it settled) and whether it must end (it did not settle).
func (r *run) clusterGate() (ready, failed bool) {
	if r.cl == nil {
		return true, false
	}
	r.cl.mu.Lock()
	defer r.cl.mu.Unlock()
	return r.cl.done && r.cl.unsettled == "", r.cl.done && r.cl.unsettled != ""
}

// clusterTimedOut marks a cluster still busy with its faults or its settle
// when the run's time limit passed.
func (r *run) clusterTimedOut() {
	if r.cl == nil {
		return
	}
	r.cl.mu.Lock()
	defer r.cl.mu.Unlock()
	if !r.cl.done {
		r.cl.done, r.cl.unsettled = true, "the run's time limit passed before the cluster settled after its last fault"
	}
}

// clusterPlanned is until when the broker may not answer because of the
// plan's node faults (zero without a cluster or before its first fault).
func (r *run) clusterPlanned() time.Time {
	if r.cl == nil {
		return time.Time{}
	}
	r.cl.mu.Lock()
	defer r.cl.mu.Unlock()
	return r.cl.planned
}

// clusterOutlasted is how much later than planned the controller healed its
// partitions (outlast).
func (r *run) clusterOutlasted() time.Duration {
	if r.cl == nil {
		return 0
	}
	return time.Duration(r.cl.outlasted.Load())
}

func (c *clusterRun) plan(until time.Time) {
	c.mu.Lock()
	c.planned = until
	c.mu.Unlock()
}

// clusterUnsettled is why the cluster did not settle, or "".
func (r *run) clusterUnsettled() string {
	if r.cl == nil {
		return ""
	}
	r.cl.mu.Lock()
	defer r.cl.mu.Unlock()
	return r.cl.unsettled
}

func (c *clusterRun) observed() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.primary
}

func (c *clusterRun) record(f history.F, value, node string) {
	c.r.ctl.Record(history.Op{Type: history.Info, F: f, Value: value, Target: node})
}

// startNodeFaults starts the controller once the run's start is known.
func (r *run) startNodeFaults() {
	if r.cl == nil || r.cl.stop != nil {
		return
	}
	c := r.cl
	ctx, cancel := context.WithCancel(r.ctx)
	c.stop = cancel
	c.ctl.Store(r.ctl)
	if targets.HasExternalCluster(r.spec) {
		c.record(history.Node, "attached: "+c.cl.Describe(), "")
	} else {
		c.record(history.Node, fmt.Sprintf("started in %s: %s", c.cl.StartTime().Round(time.Millisecond), c.cl.Describe()), "")
	}
	c.watchPrimary(ctx) // the first observation, before any fault
	c.wg.Add(2)
	go func() {
		defer c.wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			c.watchPrimary(ctx)
		}
	}()
	go func() {
		defer c.wg.Done()
		c.control(ctx)
	}()
}

// failover asks the topology to promote a replica, for up to 10 s: a loaded
// replica may not answer its first question in time.
func (c *clusterRun) failover(ctx context.Context) (string, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := c.cl.Failover(ctx)
		if err == nil || errors.Is(err, targets.ErrAutomaticFailover) || ctx.Err() != nil || time.Now().After(deadline) {
			return p, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// primaryNow is the primary as last observed, or, if none was, as the
// topology says within 10 s (a loaded node's API may be slow to answer).
func (c *clusterRun) primaryNow(ctx context.Context) string {
	if p := c.observed(); p != "" {
		return p
	}
	deadline := time.Now().Add(10 * time.Second)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		c.watchPrimary(ctx)
		if p := c.observed(); p != "" {
			return p
		}
		time.Sleep(100 * time.Millisecond)
	}
	return ""
}

// watchPrimary records the primary when it changes: a failover, whoever made it.
func (c *clusterRun) watchPrimary(ctx context.Context) {
	qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	p, err := c.cl.Primary(qctx)
	if err != nil || p == "" {
		return
	}
	c.mu.Lock()
	prev := c.primary
	c.primary = p
	c.mu.Unlock()
	if p == prev {
		return
	}
	c.record(history.Node, "primary", p)
	if prev != "" {
		c.record(history.Fault, "failover", p)
		c.r.logf("%s is the primary now (was %s)", p, prev)
	}
}

type nodeEvent struct {
	at    time.Duration
	f     faults.Fault
	nodes []string // resolved: restarts and heals of earlier faults
	kind  string   // "fault", "restart", "heal", "lag", "unlag"
	i     int      // a fault's index in the plan
}

// lagEvents are the lag and its end of each latency on the replication
// link, for a cluster that lags its replication by commands (targets.Lagger);
// a private cluster's proxies follow the link's windows themselves.
func lagEvents(cl targets.Cluster, plan faults.Plan) []nodeEvent {
	if _, ok := cl.(targets.Lagger); !ok {
		return nil
	}
	var out []nodeEvent
	for _, f := range plan.Faults {
		if f.Link == faults.LinkReplication && f.Kind == faults.Latency {
			out = append(out, nodeEvent{at: f.At, f: f, kind: "lag"})
			if f.For > 0 {
				out = append(out, nodeEvent{at: f.At + f.For, f: f, kind: "unlag"})
			}
		}
	}
	return out
}

// maxOutlast bounds how long a partition is held to outlast a timeout of the
// topology (a semi-synchronous timeout set to an hour is not crossed: the
// history says so).
const maxOutlast = 30 * time.Second

// outlastMargin is how long past the topology's timeout a partition lasts, at
// DefaultScale, for the clients on the cut-off side to act on what the
// timeout changed (a producer's next enqueue acknowledged without a replica);
// it stretches with the run's clock, as the clients do.
const outlastMargin = 2 * time.Second

// outlast is called as a partition is cut: the earliest its heal may come
// (from the run's start, before the plan's shift) to outlast the topology's
// timeout by outlastMargin (targets.PartitionTimer), and whether there is
// one to outlast. It says in the history which timeout the partition must
// outlast (the checker counts the partitions that did: a partition contract
// run whose partition did not is not exercised), or why it does not.
func (c *clusterRun) outlast() (time.Duration, bool) {
	pt, ok := c.cl.(targets.PartitionTimer)
	if !ok {
		return 0, false
	}
	need, why := pt.PartitionTimeout()
	if need <= 0 {
		return 0, false
	}
	if need > maxOutlast {
		msg := fmt.Sprintf("the partition does not outlast %s: %s is longer than a run holds a partition (%s)", need, why, maxOutlast)
		c.record(history.Node, msg, "")
		c.r.logf("%s", msg)
		return 0, false
	}
	c.record(history.Node, contracts.OutlastNote(need, why), "")
	margin := time.Duration(float64(outlastMargin) * c.r.t.Scale / DefaultScale)
	return time.Since(c.r.start) - c.r.shift() + need + margin, true
}

// control applies the plan's node faults at their times, then heals, restarts
// what is down, and waits for the cluster to settle.
func (c *clusterRun) control(ctx context.Context) {
	r := c.r
	rng := rand.New(rand.NewPCG(r.rc.Seed, 0x90de))
	var events []nodeEvent
	var last time.Duration
	for i, f := range r.sc.Plan.Faults {
		last = max(last, f.At+f.For)
		if faults.IsNodeFault(f.Kind) || f.Kind == faults.BrokerCrash {
			events = append(events, nodeEvent{at: f.At, f: f, kind: "fault", i: i})
		}
	}
	events = append(events, lagEvents(c.cl, r.sc.Plan)...)
	if targets.HasExternalCluster(r.spec) {
		// An existing cluster's replication goes through no proxy of durachk:
		// only a latency, and only with lag commands, is applied to it.
		_, lags := c.cl.(targets.Lagger)
		for _, f := range r.sc.Plan.Faults {
			if f.Link == faults.LinkReplication && (f.Kind != faults.Latency || !lags) {
				msg := fmt.Sprintf("not applied: %s on the replication link of an existing cluster (only a latency, through control.<node>.lag)", f.Kind)
				c.record(history.Node, msg, "")
				r.logf("%s", msg)
			}
		}
	}
	down := map[string]bool{}
	fail := func(why string) {
		c.mu.Lock()
		c.done, c.unsettled = true, why
		c.planned = time.Now().Add(plannedGrace)
		c.mu.Unlock()
		r.logf("cluster: %s", why)
	}
	for len(events) > 0 {
		sort.SliceStable(events, func(i, j int) bool { return events[i].at < events[j].at })
		ev := events[0]
		events = events[1:]
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(r.start.Add(ev.at + r.shift()))):
		}
		if ev.kind == "fault" {
			r.holdFor(ctx, r.newHold(ev.i, ev.f))
		}
		// From the first node fault until the cluster settles, the broker may
		// not answer the controller: that is the plan, not an outage.
		c.plan(time.Now().Add(24 * time.Hour))
		switch ev.kind {
		case "restart":
			for _, n := range ev.nodes {
				if err := c.cl.Restart(ctx, n); err != nil {
					fail(fmt.Sprintf("restart of %s: %v", n, err))
					return
				}
				delete(down, n)
				c.record(history.Fault, "node_restart", n)
			}
			continue
		case "heal":
			_ = c.cl.Heal()
			for _, n := range ev.nodes {
				c.record(history.Fault, "node_heal", n)
			}
			continue
		case "lag":
			nodes, err := c.cl.(targets.Lagger).Lag(ctx, ev.f.Delay, ev.f.Jitter)
			for _, n := range nodes {
				// As a private cluster's proxy records a delay on a node's
				// replication link.
				c.r.ctl.Record(history.Op{Type: history.Info, F: history.Fault, Value: string(faults.Latency), Key: faults.LinkReplication + ":" + n, Target: n})
			}
			if err != nil {
				fail(fmt.Sprintf("replication lag: %v", err))
				return
			}
			r.logf("replication lagged on %v", nodes)
			continue
		case "unlag":
			if err := c.cl.(targets.Lagger).Unlag(ctx); err != nil {
				fail(fmt.Sprintf("ending the replication lag: %v", err))
				return
			}
			c.record(history.Node, "replication lag ended", "")
			continue
		}
		f := ev.f
		if f.Kind == faults.Failover {
			p, err := c.failover(ctx)
			switch {
			case errors.Is(err, targets.ErrAutomaticFailover):
				r.logf("failover: left to the topology")
			case err != nil:
				fail(fmt.Sprintf("failover: %v", err))
				return
			default:
				r.logf("promoted %s", p)
				c.watchPrimary(ctx)
			}
			continue
		}
		sel := f.Node
		if f.Kind == faults.BrokerCrash {
			// The whole broker: every node at once.
			sel = faults.SelAll
			c.record(history.Fault, "broker_crash", r.spec.Kind)
		}
		if sel == faults.SelPinned {
			sel = c.pinned
		}
		nodes, err := faults.SelectNodes(sel, c.cl.Nodes(), c.primaryNow(ctx), rng)
		if err != nil {
			fail(err.Error())
			return
		}
		switch f.Kind {
		case faults.NodeKill, faults.BrokerCrash:
			for _, n := range nodes {
				c.record(history.Fault, "node_kill", n)
				if err := c.cl.Kill(n); err != nil {
					fail(fmt.Sprintf("kill of %s: %v", n, err))
					return
				}
				down[n] = true
				r.logf("killed node %s", n)
			}
			if f.For > 0 {
				events = append(events, nodeEvent{at: f.At + f.For, nodes: nodes, kind: "restart"})
			}
		case faults.NodePartition:
			for _, n := range nodes {
				c.record(history.Fault, "node_partition", n)
			}
			if err := c.cl.Partition(nodes); err != nil {
				fail(fmt.Sprintf("partition of %v: %v", nodes, err))
				return
			}
			r.logf("partitioned %v from the other nodes", nodes)
			heal := f.At + f.For
			if earliest, ok := c.outlast(); ok {
				// Past its planned end, the partition lasts until the
				// topology's timeout is over; the final heal and the run's
				// end move with it.
				c.outlasted.Store(max(c.outlasted.Load(), int64(earliest-heal)))
				heal = max(heal, earliest)
				last = max(last, heal)
			}
			if f.For > 0 {
				events = append(events, nodeEvent{at: heal, nodes: nodes, kind: "heal"})
			}
		}
	}
	// After the last fault (and the end of every link window): heal, bring
	// back what is down, and wait for one primary that every node follows.
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Until(r.start.Add(last + r.shift()))):
	}
	_ = c.cl.Heal()
	if lg, ok := c.cl.(targets.Lagger); ok {
		if err := lg.Unlag(ctx); err != nil {
			fail(fmt.Sprintf("ending the replication lag at the heal: %v", err))
			return
		}
	}
	for n := range down {
		if err := c.cl.Restart(ctx, n); err != nil {
			fail(fmt.Sprintf("restart of %s at the heal: %v", n, err))
			return
		}
		c.record(history.Fault, "node_restart", n)
	}
	if p, err := c.cl.Primary(ctx); err != nil || p == "" {
		if _, err := c.failover(ctx); err != nil && !errors.Is(err, targets.ErrAutomaticFailover) {
			fail(fmt.Sprintf("failover at the heal: %v", err))
			return
		}
	}
	sctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	begin := time.Now()
	if err := c.cl.Settle(sctx); err != nil {
		if ctx.Err() != nil {
			return
		}
		fail(fmt.Sprintf("not settled %s after the heal: %v", settleTimeout, err))
		return
	}
	c.watchPrimary(ctx)
	// Every node follows the primary again: what a deposed primary took after
	// it was cut off (an ack held by a stalled link and delivered at the heal)
	// is gone now. The checker counts it as a fault that explains a redelivery.
	c.record(history.Fault, "rejoin", "")
	if r.sc.Plan.PinProducer != "" {
		if err := c.cl.Unpin(ctx); err != nil {
			fail(fmt.Sprintf("moving the pinned producer to the primary: %v", err))
			return
		}
		c.record(history.Node, "producer unpinned", c.observed())
	}
	c.record(history.Node, fmt.Sprintf("settled in %s", time.Since(begin).Round(time.Millisecond)), c.observed())
	r.logf("cluster settled in %s after the last fault, primary %s", time.Since(begin).Round(time.Millisecond), c.observed())
	c.mu.Lock()
	c.done = true
	c.planned = time.Now().Add(plannedGrace) // the controller's connection comes back within a few probes
	c.mu.Unlock()
}

// boundedEnqueue bounds every Enqueue, as a producer with a request timeout
// does: a commit that waits for a synchronous standby cut off by a partition
// waits forever (Postgres's SyncRep wait ignores statement_timeout), and the
// producer must give up on it as an ambiguous enqueue.
type boundedEnqueue struct {
	adapters.Queue
	d time.Duration
}

func (b boundedEnqueue) Enqueue(ctx context.Context, job adapters.Job) error {
	if b.d <= 0 {
		return b.Queue.Enqueue(ctx, job)
	}
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.Queue.Enqueue(ctx, job)
}
