package targets

import (
	"context"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/durachk/durachk/adapters/pg"
	"github.com/durachk/durachk/adapters/rabbit"
	rq "github.com/durachk/durachk/adapters/redis"
	"github.com/durachk/durachk/faults"
)

// An existing cluster: a deployment durachk did not start, named by its own
// client URL (a Sentinel URL, a multi-host Postgres URL, an AMQP node list)
// plus, for every node, the commands that kill and start it and its address:
//
//	control.<node>.kill=CMD  control.<node>.start=CMD  control.<node>.addr=HOST:PORT
//
// and, where the deployment's fault engine can, the commands that cut a node
// off and delay its replication (control.<node>.partition / .heal and
// control.<node>.lag / .unlag) and the one that says who leads
// (control.status; control.go). Node faults go through those commands: the
// runner kills, partitions and lags through them at the plan's times, as it
// does a private cluster's nodes through its processes, proxies and nftables,
// and records the same fault windows. The cluster elects its new primary
// itself (Sentinel, Patroni, Raft): durachk only watches who is primary, by
// control.status, or else by asking the Sentinels (Redis) or every node
// (Redis without Sentinels, Postgres). Without partition commands on every
// node partition.minority and partition.client are skipped; without lag
// commands durability.failover and fencing.failover run without the lag.
// Without control.status a RabbitMQ queue's leader is unknown: a plan that
// picks "the primary" is unknown there. A node durachk killed is started
// again, and a node it cut off or lagged is healed, at the heal and at the end
// of the run whatever happens; a run killed before that left a record of
// what to undo, which durachk cleanup undoes (restore.go).

// externalNodes lists the nodes of s that have a kill, a start and an address.
func externalNodes(s Spec) []string {
	var out []string
	for _, n := range controlNodes(s.Control) {
		if n != "" && s.ControlCommand(n, ActionKill) != "" && s.ControlCommand(n, ActionStart) != "" && s.ControlCommand(n, ActionAddr) != "" {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// HasExternalCluster reports whether s names an existing cluster whose nodes
// durachk can kill and start (at least two).
func HasExternalCluster(s Spec) bool { return !HasPrivateCluster(s) && len(externalNodes(s)) >= 2 }

// CanPartitionNodes reports whether runs of s can cut nodes apart: a private
// cluster's, or an existing cluster's with partition and heal commands for
// every node.
func CanPartitionNodes(s Spec) bool {
	if CanFaultNodes(s) != nil {
		return false
	}
	if HasPrivateCluster(s) {
		return true
	}
	return len(externalNodesWith(s, ActionPartition, ActionHeal)) == len(externalNodes(s))
}

// CanLagNodes reports whether runs of s lag an existing cluster's
// replication through its control.<node>.lag commands.
func CanLagNodes(s Spec) bool {
	return HasExternalCluster(s) && len(externalNodesWith(s, ActionLag, ActionUnlag)) > 0
}

// externalNodesWith lists the existing cluster's nodes that have commands for
// every one of actions.
func externalNodesWith(s Spec, actions ...string) []string {
	var out []string
	for _, n := range externalNodes(s) {
		ok := true
		for _, a := range actions {
			ok = ok && s.ControlCommand(n, a) != ""
		}
		if ok {
			out = append(out, n)
		}
	}
	return out
}

// Lagger is a Cluster whose replication the run lags itself, at the planned
// times of a latency on faults.LinkReplication, with commands (an existing
// cluster's control.<node>.lag): a private cluster's proxies lag it from the
// run's link windows instead.
type Lagger interface {
	// Lag delays the replication of every node it can, by about delay (plus
	// up to jitter), and returns those nodes.
	Lag(ctx context.Context, delay, jitter time.Duration) ([]string, error)
	// Unlag ends every delay Lag began. Idempotent.
	Unlag(ctx context.Context) error
}

type externalCluster struct {
	s       Spec
	env     ClusterEnv
	nodes   []string
	proxies proxySet
	pinned  map[string]*faults.Proxy
	// front is the link of each node's client proxy, where the run's clients
	// reach the node through durachk (a Postgres multi-host URL's hosts), and
	// url the target's URL through those proxies: a partition cuts the
	// clients outside the minority there, whatever the command cuts.
	front map[string]*faults.Link
	url   string

	mu     sync.Mutex
	down   map[string]bool
	cut    []string // nodes partitioned by control.<node>.partition, not healed yet
	lagged []string // nodes lagged by control.<node>.lag, not unlagged yet
}

// laggingExternal is an existing cluster with lag commands: a Lagger.
type laggingExternal struct{ *externalCluster }

var _ Lagger = laggingExternal{}

func attachExternalCluster(_ context.Context, s Spec, env ClusterEnv) (Cluster, Spec, error) {
	s.RunID = env.RunID
	c := &externalCluster{s: s, env: env, nodes: externalNodes(s), pinned: map[string]*faults.Proxy{}, down: map[string]bool{}}
	for _, n := range c.nodes {
		p, err := c.proxies.start(&faults.Proxy{Upstream: c.addr(n)})
		if err != nil {
			c.proxies.closeAll()
			return nil, s, err
		}
		c.pinned[n] = p
	}
	c.url = s.URL
	if s.Kind == "postgres" && CanPartitionNodes(s) {
		url, err := c.frontURL()
		if err != nil {
			c.proxies.closeAll()
			return nil, s, err
		}
		c.url, s.URL = url, url
	}
	if s.Kind == "redis" && CanPartitionNodes(s) {
		through, err := c.frontDial()
		if err != nil {
			c.proxies.closeAll()
			return nil, s, err
		}
		s.DialThrough = through
	}
	if CanLagNodes(s) {
		return laggingExternal{c}, s, nil
	}
	return c, s, nil
}

func (c *externalCluster) addr(n string) string { return c.s.ControlCommand(n, ActionAddr) }

func (c *externalCluster) Describe() string {
	return fmt.Sprintf("existing %s cluster of %d nodes under control commands", c.s.Kind, len(c.nodes))
}
func (c *externalCluster) Nodes() []string          { return slices.Clone(c.nodes) }
func (c *externalCluster) URL() string              { return c.url }
func (c *externalCluster) StartTime() time.Duration { return 0 }

// directURL is the target's URL for the one node at hostport.
func (c *externalCluster) directURL(hostport string) (string, error) {
	switch c.s.Kind {
	case "redis":
		if rq.IsSentinelURL(c.s.URL) {
			_, _, _, plain, err := rq.SentinelURL(c.s.URL)
			if err != nil {
				return "", err
			}
			return plain(hostport), nil
		}
	}
	u, err := neturl.Parse(c.s.URL)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Del("addr")
	q.Del("target_session_attrs")
	u.RawQuery, u.Host = q.Encode(), hostport
	return u.String(), nil
}

// frontURL puts a client proxy of durachk's in front of every host of the
// multi-host URL that is a node's address, and returns the URL through them.
// The clients of a Postgres pair all reach the nodes from one place, so the
// command that cuts a node off cannot tell the pinned producer (which stays
// with the minority) from the workers (which must lose it, as on a private
// cluster): durachk cuts its own proxy instead. A host that names no node is
// left as it is.
func (c *externalCluster) frontURL() (string, error) {
	u, err := neturl.Parse(c.s.URL)
	if err != nil {
		return "", err
	}
	hosts := strings.Split(u.Host, ",")
	for i, h := range hosts {
		n := c.byAddr(h)
		if n == "" {
			continue
		}
		if hosts[i], err = c.frontOf(n); err != nil {
			return "", err
		}
	}
	u.Host = strings.Join(hosts, ",")
	return u.String(), nil
}

// frontDial puts a client proxy of durachk's in front of every node and
// returns the node addresses mapped to them (Spec.DialThrough): the clients
// of an existing Redis cluster reach its nodes at the addresses the
// Sentinels give, all from where durachk runs, so (as for Postgres) a
// command cannot cut the workers off a partitioned primary and leave the
// pinned producer on it. They stayed with the deposed primary and finished
// what the producer wrote there: partition.minority passed on 3 seeds of 4
// (2026-12-06).
func (c *externalCluster) frontDial() (map[string]string, error) {
	through := map[string]string{}
	for _, n := range c.nodes {
		a, err := c.frontOf(n)
		if err != nil {
			return nil, err
		}
		through[c.addr(n)] = a
	}
	return through, nil
}

// frontOf starts the client proxy of node n, which Partition cuts, and
// returns its address.
func (c *externalCluster) frontOf(n string) (string, error) {
	if c.front == nil {
		c.front = map[string]*faults.Link{}
	}
	l := faults.NodeLink(n)
	p, err := c.proxies.start(&faults.Proxy{Upstream: c.addr(n), Also: []*faults.Link{l}})
	if err != nil {
		return "", err
	}
	c.front[n] = l
	return p.Addr(), nil
}

func (c *externalCluster) NodeURL(n string) (string, error) {
	p, ok := c.pinned[n]
	if !ok {
		return "", fmt.Errorf("existing cluster: no node %q", n)
	}
	return c.directURL(p.Addr())
}

func (c *externalCluster) byAddr(addr string) string {
	for _, n := range c.nodes {
		if c.addr(n) == addr {
			return n
		}
	}
	return ""
}

// Primary asks control.status, or else the cluster: the Sentinels, or every
// node.
func (c *externalCluster) Primary(ctx context.Context) (string, error) {
	if c.s.ControlCommand("", ActionStatus) != "" {
		var env []string
		if c.s.Kind == "amqp" {
			env = append(env, "DURACHK_QUEUE="+rabbit.QueueName(c.env.RunID))
		}
		n, err := ControlLeader(ctx, c.s, env...)
		if err != nil || n == "" {
			return "", err
		}
		if !slices.Contains(c.nodes, n) {
			return "", fmt.Errorf("control.status names %q as leader, which is no node with control commands (%v)", n, c.nodes)
		}
		return n, nil
	}
	switch c.s.Kind {
	case "redis":
		if rq.IsSentinelURL(c.s.URL) {
			sentinels, pw, master, _, err := rq.SentinelURL(c.s.URL)
			if err != nil {
				return "", err
			}
			var errs []error
			for _, a := range sentinels {
				v, err := rq.Sentinel(ctx, a, pw, master)
				if err == nil {
					if n := c.byAddr(v.Master); n != "" {
						return n, nil
					}
					return "", fmt.Errorf("the Sentinels name %s as master, which is no node's control.<node>.addr", v.Master)
				}
				errs = append(errs, err)
			}
			return "", errors.Join(errs...)
		}
		for _, n := range c.nodes {
			if c.isDown(n) {
				continue
			}
			r, err := rq.NodeReplication(ctx, c.addr(n), rq.URLPassword(c.s.URL))
			if err == nil && r.Role == "master" {
				return n, nil
			}
		}
		return "", nil
	case "postgres":
		for _, n := range c.nodes {
			if c.isDown(n) {
				continue
			}
			u, err := c.directURL(c.addr(n))
			if err != nil {
				return "", err
			}
			if st, err := pg.State(ctx, u); err == nil && !st.InRecovery {
				return n, nil
			}
		}
		return "", nil
	}
	return "", nil // RabbitMQ: the queue's leader is not to be read over AMQP
}

func (c *externalCluster) isDown(n string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.down[n]
}

func dialable(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// Kill runs control.<node>.kill and waits until the node stops accepting
// connections: a kill that kills nothing would make every write survive.
func (c *externalCluster) Kill(n string) error {
	if !slices.Contains(c.nodes, n) {
		return fmt.Errorf("existing cluster: no node %q", n)
	}
	if err := noteFault(c.s.RunID, n, ActionStart); err != nil {
		return err
	}
	if err := RunControl(context.Background(), c.s, n, ActionKill); err != nil {
		return err
	}
	c.mu.Lock()
	c.down[n] = true
	c.mu.Unlock()
	deadline := time.Now().Add(c.s.ControlTimeout())
	for dialable(c.addr(n)) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: control.%s.kill succeeded but %s still accepts connections", ErrControl, n, c.addr(n))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// Restart runs control.<node>.start and waits until the node accepts connections.
func (c *externalCluster) Restart(ctx context.Context, n string) error {
	if err := RunControl(ctx, c.s, n, ActionStart); err != nil {
		return err
	}
	if err := c.awaitServing(ctx, n); err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.down, n)
	c.mu.Unlock()
	noteUndone(c.s.RunID, n, ActionStart)
	return nil
}

// awaitServing waits, up to the control timeout, until node n, just started,
// serves its protocol.
func (c *externalCluster) awaitServing(ctx context.Context, n string) error {
	deadline := time.Now().Add(c.s.ControlTimeout())
	for {
		err := c.nodeReady(ctx, n)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s is not serving %s after control.%s.start: %s", ErrControl, c.addr(n), c.s.ControlTimeout(), n, scrubURL(err.Error(), c.s.URL))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// nodeReady says whether node n serves its protocol: an open port alone is
// not enough (Docker's proxy accepts on a published port before the broker in
// the container has booted).
func (c *externalCluster) nodeReady(ctx context.Context, n string) error {
	if !dialable(c.addr(n)) {
		return errors.New("accepts no connection")
	}
	u, err := c.directURL(c.addr(n))
	if err != nil {
		return err
	}
	ns := c.s
	ns.URL = u
	return Ready(ctx, ns)
}

func (c *externalCluster) Failover(context.Context) (string, error) { return "", ErrAutomaticFailover }

// Partition runs control.<node>.partition for each of nodes.
func (c *externalCluster) Partition(nodes []string) error {
	for _, n := range nodes {
		if c.s.ControlCommand(n, ActionPartition) == "" {
			return fmt.Errorf("existing cluster: node %s has no control.%s.partition", n, n)
		}
	}
	for _, n := range nodes {
		if err := noteFault(c.s.RunID, n, ActionHeal); err != nil {
			return err
		}
		c.mu.Lock()
		if !slices.Contains(c.cut, n) {
			c.cut = append(c.cut, n)
		}
		c.mu.Unlock()
		if l := c.front[n]; l != nil {
			l.Cut(true)
		}
		if err := RunControl(context.Background(), c.s, n, ActionPartition); err != nil {
			return err
		}
	}
	return nil
}

// Heal runs control.<node>.heal for every node Partition cut off.
func (c *externalCluster) Heal() error {
	c.mu.Lock()
	cut := c.cut
	c.cut = nil
	c.mu.Unlock()
	var errs []error
	for _, n := range cut {
		err := RunControl(context.Background(), c.s, n, ActionHeal)
		if err == nil {
			noteUndone(c.s.RunID, n, ActionHeal)
		}
		errs = append(errs, err)
		if l := c.front[n]; l != nil {
			l.Cut(false)
		}
	}
	return errors.Join(errs...)
}

// Lag runs control.<node>.lag on every node that has one, with the planned
// delay in its environment.
func (c laggingExternal) Lag(ctx context.Context, delay, jitter time.Duration) ([]string, error) {
	env := []string{fmt.Sprintf("DURACHK_LAG_DELAY_MS=%d", delay.Milliseconds()), fmt.Sprintf("DURACHK_LAG_JITTER_MS=%d", jitter.Milliseconds())}
	var done []string
	for _, n := range externalNodesWith(c.s, ActionLag, ActionUnlag) {
		if err := noteFault(c.s.RunID, n, ActionUnlag); err != nil {
			return done, err
		}
		c.mu.Lock()
		if !slices.Contains(c.lagged, n) {
			c.lagged = append(c.lagged, n)
		}
		c.mu.Unlock()
		if err := runControl(ctx, c.s, n, ActionLag, env, nil); err != nil {
			return done, err
		}
		done = append(done, n)
	}
	return done, nil
}

// Unlag runs control.<node>.unlag for every node Lag lagged.
func (c laggingExternal) Unlag(ctx context.Context) error { return c.unlag(ctx) }

func (c *externalCluster) unlag(ctx context.Context) error {
	c.mu.Lock()
	lagged := c.lagged
	c.lagged = nil
	c.mu.Unlock()
	var errs []error
	for _, n := range lagged {
		err := RunControl(ctx, c.s, n, ActionUnlag)
		if err == nil {
			noteUndone(c.s.RunID, n, ActionUnlag)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Settle waits until the target's URL serves requests and, where durachk can
// tell, a primary is known and up and every other live node follows it (a
// Redis replica in sync, a Postgres node in recovery): until then a deposed
// primary may still take acks that its demotion throws away, and the run
// records the rejoin that explains the redeliveries once Settle returns.
func (c *externalCluster) Settle(ctx context.Context) error {
	return pollUntil(ctx, 200*time.Millisecond, func() error {
		if err := Ready(ctx, c.s); err != nil {
			return fmt.Errorf("the cluster's URL: %s", scrubURL(err.Error(), c.s.URL))
		}
		if c.s.Kind == "amqp" && c.s.ControlCommand("", ActionStatus) == "" {
			return nil
		}
		p, err := c.Primary(ctx)
		if err != nil || p == "" {
			return fmt.Errorf("no primary known: %v", err)
		}
		if c.isDown(p) {
			return fmt.Errorf("the primary %s is down", p)
		}
		for _, n := range c.nodes {
			if n == p || c.isDown(n) {
				continue
			}
			if err := c.follows(ctx, n); err != nil {
				return fmt.Errorf("node %s does not follow the primary %s yet: %v", n, p, err)
			}
		}
		return nil
	})
}

// follows says whether node n, not the primary, follows one: a Redis replica
// with its link up, a Postgres server in recovery. Other kinds: nil.
func (c *externalCluster) follows(ctx context.Context, n string) error {
	if c.s.Kind != "redis" && c.s.Kind != "postgres" {
		return nil
	}
	// The node's own URL: a Sentinel URL's password is the nodes' only there.
	u, err := c.directURL(c.addr(n))
	if err != nil {
		return err
	}
	switch c.s.Kind {
	case "redis":
		r, err := rq.NodeReplication(ctx, c.addr(n), rq.URLPassword(u))
		if err != nil {
			return err
		}
		if r.Role != "slave" || !r.LinkUp {
			return fmt.Errorf("role %s, link up %t", r.Role, r.LinkUp)
		}
	case "postgres":
		st, err := pg.State(ctx, u)
		if err != nil {
			return errors.New(scrubURL(err.Error(), c.s.URL))
		}
		if !st.InRecovery {
			return errors.New("it takes writes")
		}
	}
	return nil
}

func (c *externalCluster) Unpin(ctx context.Context) error {
	p, err := c.Primary(ctx)
	if err != nil || p == "" {
		return fmt.Errorf("no primary to move pinned clients to: %v", err)
	}
	for _, px := range c.pinned {
		px.SetUpstream(c.addr(p))
	}
	return nil
}

// Stop heals and unlags what durachk cut off or lagged, starts again every
// node it killed and left down (a cancelled run), and closes durachk's
// proxies. It never stops the cluster.
func (c *externalCluster) Stop() error {
	var errs []error
	if err := c.Heal(); err != nil {
		errs = append(errs, fmt.Errorf("healing the nodes the run cut off: %w", err))
	}
	if err := c.unlag(context.Background()); err != nil {
		errs = append(errs, fmt.Errorf("ending the run's replication lag: %w", err))
	}
	c.mu.Lock()
	var down []string
	for n := range c.down {
		down = append(down, n)
	}
	c.mu.Unlock()
	sort.Strings(down)
	for _, n := range down {
		if err := c.Restart(context.Background(), n); err != nil {
			errs = append(errs, fmt.Errorf("node %s, killed by the run, could not be started again: %w", n, err))
		}
	}
	c.proxies.closeAll()
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return nil
}
