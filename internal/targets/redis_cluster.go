package targets

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/durachk/durachk/adapters"
	rq "github.com/durachk/durachk/adapters/redis"
	"github.com/durachk/durachk/faults"
)

// Redis replication knobs, written as the user runs Redis:
//
//	private-cluster.replicas=N              replicas of the private primary (1–4, default 2)
//	private-cluster.sentinels=N             Sentinels that fail it over (0, 1, 3 or 5; default 3:
//	                                        quorum 2, down-after-milliseconds 500); 0: durachk
//	                                        promotes the most up-to-date replica itself when
//	                                        the plan says failover, and moves the address the
//	                                        clients use, as a managed failover or an operator does
//	private-cluster.min-replicas-to-write=N the nodes' min-replicas-to-write (default 0)
//	private-cluster.min-replicas-max-lag=S  the nodes' min-replicas-max-lag in seconds (default 10)
//	wait.replicas=N                         every enqueue is XADD then WAIT N (any redis target)
//	wait.timeout=DURATION|MS                the WAIT's timeout (default 1s)
//
// A Sentinel URL (go-redis's form: redis://sentinel:26379/0?master_name=NAME&addr=host:port...)
// is an existing Sentinel-managed target: the adapter follows its master.
var redisClusterKnobs = map[string]bool{
	ClusterPrefix + "replicas": true, ClusterPrefix + "sentinels": true,
	ClusterPrefix + "min-replicas-to-write": true, ClusterPrefix + "min-replicas-max-lag": true,
	"wait.replicas": true, "wait.timeout": true,
}

var redisClusterKind = &ClusterKind{Knobs: redisClusterKnobs, Check: checkRedisCluster, Can: canStartPrivateRedis, Start: startRedisCluster,
	Describe: func(s Spec) string {
		p, _ := redisClusterShape(s)
		return p.describe()
	},
	Adjust: func(_ Spec, c *adapters.Capabilities) {
		// The nodes run with the AOF on, whatever the target's own server does.
		c.Durable = true
		c.Notes = append(c.Notes, "the private cluster's nodes run with appendonly yes, appendfsync everysec (the persistence notes above are the target's own server's)")
	}}

func init() {
	for k := range redisClusterKnobs {
		redisKnobs[k] = true
	}
}

// redisSentinelMaster is the master name the private Sentinels monitor.
const redisSentinelMaster = "durachk"

type redisClusterProfile struct {
	replicas, sentinels, minReplicas, maxLag int
	writableReplicas                         bool // the negative control of partition.client
}

func redisClusterShape(s Spec) (redisClusterProfile, error) {
	p := redisClusterProfile{replicas: 2, sentinels: 3, maxLag: 10, writableReplicas: s.WritableReplicas}
	for _, k := range []struct {
		key     string
		dst     *int
		ok      func(int) bool
		allowed string
	}{
		{"replicas", &p.replicas, func(n int) bool { return n >= 1 && n <= 4 }, "1 to 4"},
		{"sentinels", &p.sentinels, func(n int) bool { return n == 0 || n == 1 || n == 3 || n == 5 }, "0, 1, 3 or 5"},
		{"min-replicas-to-write", &p.minReplicas, func(n int) bool { return n >= 0 && n <= 4 }, "0 to 4"},
		{"min-replicas-max-lag", &p.maxLag, func(n int) bool { return n >= 1 }, "a number of seconds ≥ 1"},
	} {
		v, ok := s.Options[ClusterPrefix+k.key]
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || !k.ok(n) {
			return p, fmt.Errorf("%w: %s%s=%q: want %s", ErrBadTarget, ClusterPrefix, k.key, v, k.allowed)
		}
		*k.dst = n
	}
	if p.minReplicas > p.replicas {
		return p, fmt.Errorf("%w: %smin-replicas-to-write=%d exceeds %sreplicas=%d: the primary would refuse every write", ErrBadTarget, ClusterPrefix, p.minReplicas, ClusterPrefix, p.replicas)
	}
	return p, nil
}

func checkRedisCluster(s Spec) error {
	if _, err := redisClusterShape(s); err != nil {
		return err
	}
	if v, ok := s.Options["wait.replicas"]; ok {
		if n, err := strconv.Atoi(v); err != nil || n < 0 {
			return fmt.Errorf("%w: wait.replicas=%q: want a number ≥ 0", ErrBadTarget, v)
		}
	}
	if v, ok := s.Options["wait.timeout"]; ok {
		if d, err := knobDuration(v); err != nil || d <= 0 || d > 10*time.Second {
			return fmt.Errorf("%w: wait.timeout=%q: want a duration such as 500ms (at most 10s) or a number of milliseconds", ErrBadTarget, v)
		}
	}
	if rq.IsSentinelURL(s.URL) && HasPrivateCluster(s) {
		return fmt.Errorf("%w: a Sentinel URL names an existing cluster: %s* knobs shape a private one", ErrBadTarget, ClusterPrefix)
	}
	return nil
}

// applyRedisWait sets the adapter's WAIT from the wait.* knobs.
func applyRedisWait(s Spec, o *rq.Options) {
	o.WaitReplicas, _ = strconv.Atoi(s.Options["wait.replicas"])
	if v := s.Options["wait.timeout"]; v != "" {
		o.WaitTimeout, _ = knobDuration(v)
	}
	if s.Unreplicated {
		o.WaitReplicas = 0
	}
}

type redisNode struct {
	name, ip string
	port     int
	dir      string
	conf     string
	proc     PrivateProcess
	link     *faults.Link  // cut while the node is partitioned
	front    *faults.Proxy // every client and Sentinel → the node (its announced address)
	pinned   *faults.Proxy // a client pinned to the node: never cut
	repl     *faults.Proxy // this replica → its primary, lagged by the replication link
	down     bool
}

func (n *redisNode) addr() string { return net.JoinHostPort(n.ip, strconv.Itoa(n.port)) }

type redisSentinel struct {
	ip   string
	port int
	id   string
	proc PrivateProcess
}

func (s *redisSentinel) addr() string { return net.JoinHostPort(s.ip, strconv.Itoa(s.port)) }

// redisCluster is a primary with replicas, every node a redis-server of its
// own on its own loopback address, optionally watched by Sentinels.
//
// Links: every client and every Sentinel reaches node i through its front
// proxy (the address the node announces: replica-announce-ip/port); each
// replica reaches its first primary through a replication proxy that the
// plan's replication link lags or stalls. A partition of a node cuts its front
// proxy and every replication proxy at either end. After a Sentinel failover
// the Sentinels point the replicas at the new primary's front proxy: from then
// on replication is no longer lagged (without Sentinels durachk moves the
// replicas itself, through new replication proxies). Sentinels would put a
// replica that follows a proxy back on the announced address after
// failover-timeout; it is set to 60 s, beyond a run, so that they do not.
//
// Every node and Sentinel takes a password of the run (the config files,
// mode 0600, are in the run directory): nothing reaches them without it,
// not even through a proxy.
type redisCluster struct {
	clusterNodes[*redisNode]
	claim     *blockClaim // the run's loopback block, held until Stop
	env       ClusterEnv
	prof      redisClusterProfile
	server    string
	sentinels []*redisSentinel
	vip       *faults.Proxy // without Sentinels: the address that follows the primary
	proxies   proxySet
	// password is every node's requirepass and masterauth (any node may
	// become the primary); sentinelPassword is the Sentinels' own
	// requirepass and sentinel-pass.
	password, sentinelPassword string

	mu      sync.Mutex
	primary string // durachk's own view, without Sentinels
	stopped bool
}

func startRedisCluster(ctx context.Context, s Spec, env ClusterEnv) (Cluster, Spec, error) {
	begin := time.Now()
	prof, err := redisClusterShape(s)
	if err != nil {
		return nil, s, err
	}
	server, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, s, canStartPrivateRedis()
	}
	c := &redisCluster{clusterNodes: clusterNodes[*redisNode]{kind: "redis cluster"}, env: env, prof: prof, server: server, primary: "n1", password: Secret(16)}
	ok := false
	defer func() {
		if !ok {
			_ = c.Stop()
		}
	}()
	if c.claim, err = claimLoopbackBlock(env.RunID); err != nil {
		return nil, s, err
	}
	block := c.claim.block
	for i, name := range nodeNames(1 + prof.replicas) {
		n := &redisNode{name: name, ip: fmt.Sprintf("%s.%d", block, 11+i), link: faults.NodeLink(name),
			dir: filepath.Join(env.Dir, "redis-"+name)}
		if n.port, err = FreePortOn(n.ip); err != nil {
			return nil, s, err
		}
		if err := os.MkdirAll(n.dir, 0o700); err != nil {
			return nil, s, err
		}
		n.conf = filepath.Join(n.dir, "redis.conf")
		if n.front, err = c.proxies.start(&faults.Proxy{Upstream: n.addr(), Also: []*faults.Link{n.link}, OnFault: c.onFault("front:" + name)}); err != nil {
			return nil, s, err
		}
		if n.pinned, err = c.proxies.start(&faults.Proxy{Upstream: n.addr()}); err != nil {
			return nil, s, err
		}
		addr := n.addr()
		n.proc = PrivateProcess{Addr: addr, RunID: env.RunID, Name: "redis-" + name,
			Command: func() *exec.Cmd {
				cmd := exec.Command(server, n.conf)
				cmd.Dir = n.dir
				return cmd
			},
			Ready: func(ctx context.Context) error { return rq.NodeReady(ctx, addr, c.password) }}
		c.nodes = append(c.nodes, n)
	}
	primary := c.nodes[0]
	for _, n := range c.nodes[1:] {
		if err := c.throughProxy(n, primary); err != nil {
			return nil, s, err
		}
	}
	for _, n := range c.nodes {
		if err := c.writeConf(n); err != nil {
			return nil, s, err
		}
	}
	if err := startAll(c.nodes, func(n *redisNode) error { return n.proc.Start(ctx) }); err != nil {
		return nil, s, fmt.Errorf("private redis cluster: %w", err)
	}
	if prof.sentinels > 0 {
		if err := c.startSentinels(ctx, block); err != nil {
			return nil, s, err
		}
		var q []string
		for _, st := range c.sentinels[1:] {
			q = append(q, "addr="+st.addr())
		}
		// go-redis's form: the Sentinels' password in the user info, the
		// nodes' in the password parameter.
		c.url = fmt.Sprintf("redis://:%s@%s/0?master_name=%s&%s&password=%s", c.sentinelPassword, c.sentinels[0].addr(), redisSentinelMaster, strings.Join(q, "&"), c.password)
	} else {
		if c.vip, err = c.proxies.start(&faults.Proxy{Upstream: primary.addr(), Also: []*faults.Link{primary.link}, OnFault: c.onFault("primary-address")}); err != nil {
			return nil, s, err
		}
		c.url = c.nodeURL(c.vip.Addr())
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := c.Settle(sctx); err != nil {
		return nil, s, fmt.Errorf("private redis cluster did not settle after its start: %w", err)
	}
	c.took = time.Since(begin)
	ok = true
	u := s
	u.URL = c.url
	return c, u, nil
}

func (c *redisCluster) onFault(link string) func(string) {
	return func(kind string) {
		if c.env.OnFault != nil {
			c.env.OnFault(kind, link)
		}
	}
}

// throughProxy makes n's replication go to primary through a proxy of its own
// on the replication link (replacing n's previous one).
func (c *redisCluster) throughProxy(n, primary *redisNode) error {
	if n.repl != nil {
		c.proxies.close(n.repl)
	}
	p, err := c.proxies.start(&faults.Proxy{Link: c.env.Links[faults.LinkReplication], Upstream: primary.addr(),
		Also: []*faults.Link{n.link, primary.link}, OnFault: c.onFault(faults.LinkReplication + ":" + n.name + "->" + primary.name)})
	if err != nil {
		return err
	}
	n.repl = p
	return nil
}

func (c *redisCluster) writeConf(n *redisNode) error {
	_, fport, _ := net.SplitHostPort(n.front.Addr())
	lines := []string{
		"requirepass " + c.password,
		"masterauth " + c.password,
		"bind " + n.ip,
		"port " + strconv.Itoa(n.port),
		"protected-mode no",
		"daemonize no",
		"dir " + quoteConf(n.dir),
		"logfile " + quoteConf(filepath.Join(n.dir, "redis.log")),
		"appendonly yes",
		"appendfsync everysec",
		`save ""`,
		"repl-diskless-sync yes",
		"repl-diskless-sync-delay 0",
		"replica-announce-ip 127.0.0.1",
		"replica-announce-port " + fport,
		"min-replicas-to-write " + strconv.Itoa(c.prof.minReplicas),
		"min-replicas-max-lag " + strconv.Itoa(c.prof.maxLag),
		"maxmemory 64mb",
		"io-threads 1",
	}
	if c.prof.writableReplicas {
		lines = append(lines, "replica-read-only no")
	}
	if n.repl != nil && n.name != c.currentPrimary() {
		_, rport, _ := net.SplitHostPort(n.repl.Addr())
		lines = append(lines, "replicaof 127.0.0.1 "+rport)
	}
	return os.WriteFile(n.conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
}

func (c *redisCluster) currentPrimary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.primary
}

func (c *redisCluster) startSentinels(ctx context.Context, block string) error {
	c.sentinelPassword = Secret(16)
	for j := 0; j < c.prof.sentinels; j++ {
		st := &redisSentinel{ip: fmt.Sprintf("%s.%d", block, 21+j)}
		var err error
		if st.port, err = FreePortOn(st.ip); err != nil {
			return err
		}
		b := make([]byte, 20)
		_, _ = rand.Read(b)
		st.id = hex.EncodeToString(b)
		c.sentinels = append(c.sentinels, st)
	}
	quorum := c.prof.sentinels/2 + 1
	_, p1, _ := net.SplitHostPort(c.nodes[0].front.Addr())
	for j, st := range c.sentinels {
		dir := filepath.Join(c.env.Dir, fmt.Sprintf("sentinel-%d", j+1))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		lines := []string{
			"requirepass " + c.sentinelPassword,
			"bind " + st.ip,
			"port " + strconv.Itoa(st.port),
			"protected-mode no",
			"daemonize no",
			"dir " + quoteConf(dir),
			"logfile " + quoteConf(filepath.Join(dir, "sentinel.log")),
			"sentinel myid " + st.id,
			"sentinel announce-ip " + st.ip,
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %s %d", redisSentinelMaster, p1, quorum),
			"sentinel down-after-milliseconds " + redisSentinelMaster + " 500",
			"sentinel failover-timeout " + redisSentinelMaster + " 60000",
			"sentinel parallel-syncs " + redisSentinelMaster + " 4",
			"sentinel auth-pass " + redisSentinelMaster + " " + c.password,
			// What a Sentinel tells the others (votes, hellos) needs their password.
			"sentinel sentinel-pass " + c.sentinelPassword,
		}
		// Known from the start, so that a failover can be voted on at once
		// instead of after the hello messages (every 2 s).
		for _, other := range c.sentinels {
			if other != st {
				lines = append(lines, fmt.Sprintf("sentinel known-sentinel %s %s %d %s", redisSentinelMaster, other.ip, other.port, other.id))
			}
		}
		for _, n := range c.nodes[1:] {
			_, fp, _ := net.SplitHostPort(n.front.Addr())
			lines = append(lines, fmt.Sprintf("sentinel known-replica %s 127.0.0.1 %s", redisSentinelMaster, fp))
		}
		conf := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			return err
		}
		addr := st.addr()
		st.proc = PrivateProcess{Addr: addr, RunID: c.env.RunID, Name: fmt.Sprintf("sentinel-%d", j+1),
			Command: func() *exec.Cmd {
				cmd := exec.Command(c.server, conf, "--sentinel")
				cmd.Dir = dir
				return cmd
			}}
	}
	if err := startAll(c.sentinels, func(st *redisSentinel) error { return st.proc.Start(ctx) }); err != nil {
		return fmt.Errorf("private redis sentinels: %w", err)
	}
	return nil
}

func (c *redisCluster) Describe() string { return c.prof.describe() }

// PartitionTimeout: a primary cut off from its Sentinels is marked down after
// their down-after-milliseconds (500) and replaced; one cut off from its
// replicas refuses writes only once they have not acknowledged for
// min-replicas-max-lag (where min-replicas-to-write is set). Both are Redis's
// wall-clock timers, so a partition outlasts them rather than stretching them
// with the load: the lag is the user's setting under test, and the Sentinels'
// 500 ms only makes the failover come early.
func (c *redisCluster) PartitionTimeout() (time.Duration, string) {
	var d time.Duration
	var what string
	if c.prof.sentinels > 0 {
		d, what = 500*time.Millisecond, "the Sentinels' down-after-milliseconds 500"
	}
	if lag := time.Duration(c.prof.maxLag) * time.Second; c.prof.minReplicas > 0 && lag > d {
		d, what = lag, fmt.Sprintf("min-replicas-max-lag %d s (after it a primary cut off from its replicas refuses writes)", c.prof.maxLag)
	}
	return d, what
}

func (p redisClusterProfile) describe() string {
	d := fmt.Sprintf("redis primary + %d replicas", p.replicas)
	if p.sentinels > 0 {
		d += fmt.Sprintf(" + %d sentinels (quorum %d, down-after 500 ms)", p.sentinels, p.sentinels/2+1)
	} else {
		d += " (failover by durachk)"
	}
	if p.minReplicas > 0 {
		d += fmt.Sprintf(", min-replicas-to-write %d, min-replicas-max-lag %d", p.minReplicas, p.maxLag)
	}
	return d
}

func (c *redisCluster) NodeURL(name string) (string, error) {
	n, err := c.node(name)
	if err != nil {
		return "", err
	}
	return c.nodeURL(n.pinned.Addr()), nil
}

// nodeURL is a plain client URL of addr with the nodes' password.
func (c *redisCluster) nodeURL(addr string) string {
	return "redis://:" + c.password + "@" + addr + "/0"
}

// byAnnounced maps an address a node announces (its front proxy) to the node.
func (c *redisCluster) byAnnounced(addr string) string {
	for _, n := range c.nodes {
		if n.front.Addr() == addr {
			return n.name
		}
	}
	return ""
}

// upstreamOf names the node an address a replica follows leads to: a front
// or a replication proxy.
func (c *redisCluster) upstreamOf(addr string) string {
	if name := c.byAnnounced(addr); name != "" {
		return name
	}
	for _, n := range c.nodes {
		if n.repl != nil && n.repl.Addr() == addr {
			for _, m := range c.nodes {
				if m.addr() == n.repl.UpstreamAddr() {
					return m.name
				}
			}
		}
	}
	return ""
}

// Primary is what the Sentinels say (the first that answers), or durachk's own
// choice without them.
func (c *redisCluster) Primary(ctx context.Context) (string, error) {
	if len(c.sentinels) == 0 {
		return c.currentPrimary(), nil
	}
	var errs []error
	for _, st := range c.sentinels {
		v, err := rq.Sentinel(ctx, st.addr(), c.sentinelPassword, redisSentinelMaster)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return c.byAnnounced(v.Master), nil
	}
	return "", errors.Join(errs...)
}

func (c *redisCluster) Kill(name string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	n.down = true
	c.mu.Unlock()
	// The node fails as a host does: what it sent and nobody received yet is
	// gone with it, in flight to its replicas or its clients.
	c.proxies.cutTo(n.addr(), n.repl)
	return n.proc.Kill()
}

// Restart starts a killed node on its own data. With Sentinels it comes back
// as it was and the Sentinels turn a deposed primary into a replica; without
// them durachk restarts it as a replica of the current primary.
func (c *redisCluster) Restart(ctx context.Context, name string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	if len(c.sentinels) == 0 {
		if p := c.currentPrimary(); p != name {
			pn, err := c.node(p)
			if err != nil {
				return err
			}
			if err := c.throughProxy(n, pn); err != nil {
				return err
			}
			if err := c.writeConf(n); err != nil {
				return err
			}
		}
	}
	if err := n.proc.Start(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	n.down = false
	c.mu.Unlock()
	return nil
}

// Failover promotes the live replica with the largest replication offset
// (REPLICAOF NO ONE), points the other live replicas at it through new
// replication proxies and moves the clients' address. With Sentinels it is
// theirs to do.
func (c *redisCluster) Failover(ctx context.Context) (string, error) {
	if len(c.sentinels) > 0 {
		return "", ErrAutomaticFailover
	}
	old := c.currentPrimary()
	var best *redisNode
	var bestOff int64 = -1
	for _, n := range c.nodes {
		if n.name == old || c.isDown(n) || n.link.IsCut() {
			continue
		}
		r, err := rq.NodeReplication(ctx, n.addr(), c.password)
		if err != nil {
			continue
		}
		if r.Offset > bestOff {
			best, bestOff = n, r.Offset
		}
	}
	if best == nil {
		return "", errors.New("redis cluster: no live replica to promote")
	}
	if err := rq.ReplicaOf(ctx, best.addr(), c.password, ""); err != nil {
		return "", fmt.Errorf("promote %s: %w", best.name, err)
	}
	if best.repl != nil {
		c.proxies.close(best.repl)
		best.repl = nil
	}
	c.mu.Lock()
	c.primary = best.name
	c.mu.Unlock()
	for _, n := range c.nodes {
		if n == best || c.isDown(n) || n.name == old {
			continue
		}
		if err := c.follow(ctx, n, best); err != nil {
			return best.name, err
		}
	}
	c.vip.SetUpstream(best.addr(), best.link)
	return best.name, nil
}

// follow points replica n at primary through a new replication proxy.
func (c *redisCluster) follow(ctx context.Context, n, primary *redisNode) error {
	if err := c.throughProxy(n, primary); err != nil {
		return err
	}
	if err := rq.ReplicaOf(ctx, n.addr(), c.password, n.repl.Addr()); err != nil {
		return fmt.Errorf("%s follows %s: %w", n.name, primary.name, err)
	}
	return c.writeConf(n)
}

func (c *redisCluster) isDown(n *redisNode) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return n.down
}

func (c *redisCluster) Partition(names []string) error {
	for _, name := range names {
		n, err := c.node(name)
		if err != nil {
			return err
		}
		n.link.Cut(true)
	}
	return nil
}

func (c *redisCluster) Heal() error {
	for _, n := range c.nodes {
		n.link.Cut(false)
	}
	return nil
}

// Settle waits until the primary is known and says so itself, every live node
// follows it with its link up, every Sentinel names it, and a client of URL
// reaches it. Without Sentinels a deposed primary that came back as a primary
// is made to follow the current one.
func (c *redisCluster) Settle(ctx context.Context) error {
	return pollUntil(ctx, 100*time.Millisecond, func() error {
		var gone []string
		for _, n := range c.nodes {
			if !c.isDown(n) && n.proc.gone() {
				gone = append(gone, n.name)
			}
		}
		for j, st := range c.sentinels {
			if st.proc.gone() {
				gone = append(gone, fmt.Sprintf("sentinel-%d", j+1))
			}
		}
		if len(gone) > 0 {
			return fmt.Errorf("processes durachk did not kill are gone (killed from outside the run?): %s", strings.Join(gone, ", "))
		}
		p, err := c.Primary(ctx)
		if err != nil || p == "" {
			return fmt.Errorf("no primary known: %v", err)
		}
		pn, _ := c.node(p)
		if c.isDown(pn) {
			return fmt.Errorf("the primary %s is down", p)
		}
		r, err := rq.NodeReplication(ctx, pn.addr(), c.password)
		if err != nil {
			return fmt.Errorf("primary %s: %w", p, err)
		}
		if r.Role != "master" {
			return fmt.Errorf("%s is named primary but its role is %s", p, r.Role)
		}
		for _, n := range c.nodes {
			if n == pn || c.isDown(n) {
				continue
			}
			r, err := rq.NodeReplication(ctx, n.addr(), c.password)
			if err != nil {
				return fmt.Errorf("replica %s: %w", n.name, err)
			}
			if r.Role == "master" && len(c.sentinels) == 0 {
				_ = c.follow(ctx, n, pn)
				return fmt.Errorf("%s was still a primary: made it follow %s", n.name, p)
			}
			if r.Role != "slave" || !r.LinkUp || c.upstreamOf(r.MasterAddr) != p {
				return fmt.Errorf("replica %s: role %s, link up %v, follows %s (%s), not %s", n.name, r.Role, r.LinkUp, r.MasterAddr, c.upstreamOf(r.MasterAddr), p)
			}
		}
		for _, st := range c.sentinels {
			v, err := rq.Sentinel(ctx, st.addr(), c.sentinelPassword, redisSentinelMaster)
			if err != nil {
				return fmt.Errorf("sentinel %s: %w", st.addr(), err)
			}
			if got := c.byAnnounced(v.Master); got != p {
				return fmt.Errorf("sentinel %s names %s as primary, not %s", st.addr(), got, p)
			}
			if v.Sentinels != len(c.sentinels)-1 {
				return fmt.Errorf("sentinel %s knows %d other sentinels of %d", st.addr(), v.Sentinels, len(c.sentinels)-1)
			}
		}
		if _, err := rq.ServerVersion(ctx, c.url); err != nil {
			return fmt.Errorf("a client of %s: %w", Redact(c.url), err)
		}
		return nil
	})
}

func (c *redisCluster) Stop() error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	c.mu.Unlock()
	var errs []error
	for _, st := range c.sentinels {
		errs = append(errs, st.proc.Kill())
	}
	for _, n := range c.nodes {
		errs = append(errs, n.proc.Kill())
	}
	c.proxies.closeAll()
	for _, n := range c.nodes {
		errs = append(errs, os.RemoveAll(n.dir))
	}
	for j := range c.sentinels {
		errs = append(errs, os.RemoveAll(filepath.Join(c.env.Dir, fmt.Sprintf("sentinel-%d", j+1))))
	}
	c.claim.release()
	return errors.Join(errs...)
}

// Unpin points every pinned client's proxy at the current primary.
func (c *redisCluster) Unpin(ctx context.Context) error {
	p, err := c.Primary(ctx)
	if err != nil || p == "" {
		return fmt.Errorf("no primary to move pinned clients to: %v", err)
	}
	pn, err := c.node(p)
	if err != nil {
		return err
	}
	for _, n := range c.nodes {
		if n.pinned.UpstreamAddr() != pn.addr() {
			n.pinned.SetUpstream(pn.addr())
		}
	}
	return nil
}
