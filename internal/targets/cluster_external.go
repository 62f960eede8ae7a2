package targets

import (
	"context"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/durachk/durachk/adapters/pg"
	rq "github.com/durachk/durachk/adapters/redis"
	"github.com/durachk/durachk/faults"
)

// An existing cluster: a deployment durachk did not start, named by its own
// client URL (a Sentinel URL, a multi-host Postgres URL, an AMQP node list)
// plus, for every node, the commands that kill and start it and its address:
//
//	control.<node>.kill=CMD  control.<node>.start=CMD  control.<node>.addr=HOST:PORT
//
// (control.go). Node faults go through those commands; the cluster elects its
// new primary itself (Sentinel, Patroni, Raft): durachk only watches who is
// primary, by asking the Sentinels (Redis) or every node (Redis without
// Sentinels, Postgres). durachk cannot partition an existing cluster's nodes
// or lag its replication: partition.minority is skipped there, and
// durability.failover runs without the lag. RabbitMQ's queue leader cannot be
// read over AMQP: a plan that picks "the primary" is unknown there. A node
// durachk killed is started again at the heal, and at the end of the run
// whatever happens.

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

// CanPartitionNodes reports whether runs of s can cut nodes apart: only a
// private cluster's.
func CanPartitionNodes(s Spec) bool { return HasPrivateCluster(s) && CanFaultNodes(s) == nil }

type externalCluster struct {
	s       Spec
	env     ClusterEnv
	nodes   []string
	proxies proxySet
	pinned  map[string]*faults.Proxy

	mu   sync.Mutex
	down map[string]bool
}

func attachExternalCluster(_ context.Context, s Spec, env ClusterEnv) (Cluster, Spec, error) {
	c := &externalCluster{s: s, env: env, nodes: externalNodes(s), pinned: map[string]*faults.Proxy{}, down: map[string]bool{}}
	for _, n := range c.nodes {
		p, err := c.proxies.start(&faults.Proxy{Upstream: c.addr(n)})
		if err != nil {
			c.proxies.closeAll()
			return nil, s, err
		}
		c.pinned[n] = p
	}
	return c, s, nil
}

func (c *externalCluster) addr(n string) string { return c.s.ControlCommand(n, ActionAddr) }

func (c *externalCluster) Describe() string {
	return fmt.Sprintf("existing %s cluster of %d nodes under control commands", c.s.Kind, len(c.nodes))
}
func (c *externalCluster) Nodes() []string          { return slices.Clone(c.nodes) }
func (c *externalCluster) URL() string              { return c.s.URL }
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

// Primary asks the cluster: the Sentinels, or every node.
func (c *externalCluster) Primary(ctx context.Context) (string, error) {
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
	c.mu.Lock()
	delete(c.down, n)
	c.mu.Unlock()
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

func (c *externalCluster) Partition([]string) error {
	return errors.New("durachk cannot partition the nodes of a cluster it did not start")
}

func (c *externalCluster) Heal() error { return nil }

// Settle waits until the target's URL serves requests and, where durachk can
// tell, a primary is known and up.
func (c *externalCluster) Settle(ctx context.Context) error {
	return pollUntil(ctx, 200*time.Millisecond, func() error {
		if err := Ready(ctx, c.s); err != nil {
			return fmt.Errorf("the cluster's URL: %s", scrubURL(err.Error(), c.s.URL))
		}
		if c.s.Kind == "amqp" {
			return nil
		}
		p, err := c.Primary(ctx)
		if err != nil || p == "" {
			return fmt.Errorf("no primary known: %v", err)
		}
		if c.isDown(p) {
			return fmt.Errorf("the primary %s is down", p)
		}
		return nil
	})
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

// Stop starts again every node durachk killed and left down (a cancelled
// run), and closes durachk's proxies. It never stops the cluster.
func (c *externalCluster) Stop() error {
	c.mu.Lock()
	var down []string
	for n := range c.down {
		down = append(down, n)
	}
	c.mu.Unlock()
	sort.Strings(down)
	var errs []error
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
