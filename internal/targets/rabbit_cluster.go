package targets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/durachk/durachk/adapters/rabbit"
	"github.com/durachk/durachk/faults"
)

// RabbitMQ cluster knobs, written as the user runs RabbitMQ:
//
//	private-cluster.nodes=N                           nodes of the private cluster (3 or 5, default 3)
//	private-cluster.cluster_partition_handling=M      ignore (RabbitMQ's default), pause_minority or autoheal
//	queue-arguments.x-queue-type=quorum|classic       as before; a quorum queue is replicated by Raft
//	queue-arguments.x-quorum-initial-group-size=N     as before: how many nodes hold the quorum queue
//
// Every node is a rabbitmq-server of its own (the server script run directly as
// the rabbitmq user, with an empty RABBITMQ_CONF_ENV_FILE and a private HOME
// with a fresh Erlang cookie), named rabbit-nI@<its loopback address> (long
// names), bound to that address for AMQP, management and Erlang distribution
// (inet_dist_use_interface, inet_dist_connect_options), registered with one
// private epmd (-start_epmd false). They form the cluster at boot through
// classic peer discovery. Clients use a node list through a proxy per node; a
// partition cuts a node's proxy and, in the kernel, its distribution traffic
// (nft.go). A leader is elected by Raft: Failover only waits for it. With
// cluster_partition_handling=ignore the cluster stays split after the network
// heals, as documented; durachk then restarts the nodes of the minority side,
// the documented recovery, and says so in the history.
//
// An AMQP node list of an existing cluster is the URL plus addr=host:port
// parameters, one per further node: the adapter tries them in turn.
var rabbitClusterKnobs = map[string]bool{
	ClusterPrefix + "nodes": true, ClusterPrefix + "cluster_partition_handling": true,
}

var rabbitClusterKind = &ClusterKind{Knobs: rabbitClusterKnobs, Check: checkRabbitCluster, Can: canStartPrivateRabbit, Start: startRabbitCluster,
	Describe: func(s Spec) string { return rabbitClusterShape(s).describe() }}

func init() {
	for k := range rabbitClusterKnobs {
		rabbitKnobs[k] = true
	}
}

// rabbitNetTicktime is the nodes' net_ticktime (s): a partition is detected
// after about 1–1.25 of it (RabbitMQ's default, 60, outlasts a run).
const rabbitNetTicktime = 5

type rabbitClusterProfile struct {
	nodes     int
	handling  string
	queueType string
}

func rabbitClusterShape(s Spec) rabbitClusterProfile {
	p := rabbitClusterProfile{nodes: 3, handling: "ignore", queueType: "classic"}
	if n, err := strconv.Atoi(s.Options[ClusterPrefix+"nodes"]); err == nil {
		p.nodes = n
	}
	if v := s.Options[ClusterPrefix+"cluster_partition_handling"]; v != "" {
		p.handling = v
	}
	if v := s.Options[rabbitArgPrefix+"x-queue-type"]; v != "" {
		p.queueType = v
	}
	if s.Unreplicated || s.Volatile {
		p.queueType = "classic"
	}
	return p
}

func (p rabbitClusterProfile) describe() string {
	return fmt.Sprintf("rabbitmq cluster of %d nodes (cluster_partition_handling %s, net_ticktime %d s), %s queue", p.nodes, p.handling, rabbitNetTicktime, p.queueType)
}

func checkRabbitCluster(s Spec) error {
	if !HasPrivateCluster(s) {
		return nil
	}
	if v, ok := s.Options[ClusterPrefix+"nodes"]; ok && v != "3" && v != "5" {
		return fmt.Errorf("%w: %snodes=%q: want 3 or 5", ErrBadTarget, ClusterPrefix, v)
	}
	if v, ok := s.Options[ClusterPrefix+"cluster_partition_handling"]; ok && !oneOf(v, "ignore", "pause_minority", "autoheal") {
		return fmt.Errorf("%w: %scluster_partition_handling=%q: want ignore, pause_minority or autoheal", ErrBadTarget, ClusterPrefix, v)
	}
	if v, ok := s.Options[rabbitArgPrefix+"x-quorum-initial-group-size"]; ok {
		n, err := strconv.Atoi(v)
		nodes := rabbitClusterShape(s).nodes
		if err != nil || n < 1 || n > nodes {
			return fmt.Errorf("%w: x-quorum-initial-group-size=%q: want 1 to %d (the cluster's nodes)", ErrBadTarget, v, nodes)
		}
	}
	return nil
}

type rabbitNode struct {
	name, ip         string
	amqp, dist, mgmt int
	dir              string
	proc             PrivateProcess
	link             *faults.Link
	front, pinned    *faults.Proxy
	down             bool
	erlName          string // rabbit-nI@<ip>
	wasCut           bool   // partitioned away since the cluster last settled
}

func (n *rabbitNode) amqpAddr() string { return net.JoinHostPort(n.ip, strconv.Itoa(n.amqp)) }

type rabbitCluster struct {
	clusterNodes[*rabbitNode]
	claim  *blockClaim // the run's loopback block, held until Stop
	env    ClusterEnv
	prof   rabbitClusterProfile
	spec   Spec // for declaring the run's queues
	server string
	// install holds only the applications the nodes need (rabbitInstall);
	// installEnv makes the server script use it.
	install    string
	installEnv []string
	epmd       PrivateProcess
	home       string
	password   string // rabbitUser's, the cluster's only user (no guest): AMQP and the management API
	proxies    proxySet
	nft        *nftTable
	queue      string
	client     *http.Client
	mu         sync.Mutex
	cut        []string // nodes partitioned away, until the heal
	stopped    bool
	declared   bool
}

func startRabbitCluster(ctx context.Context, s Spec, env ClusterEnv) (Cluster, Spec, error) {
	begin := time.Now()
	server, err := rabbitServer()
	if err != nil {
		return nil, s, err
	}
	epmdPath, err := epmdBin()
	if err != nil {
		return nil, s, err
	}
	install := filepath.Join(env.Dir, "rabbitmq-install")
	server, installEnv, err := rabbitInstall(server, install, "rabbitmq_management")
	if err != nil {
		return nil, s, err
	}
	cred, err := Credential("rabbitmq")
	if err != nil {
		return nil, s, err
	}
	user := ""
	if cred != nil {
		user = "rabbitmq"
		_ = os.Chmod(env.Dir, 0o711)
	}
	c := &rabbitCluster{clusterNodes: clusterNodes[*rabbitNode]{kind: "rabbitmq cluster"}, env: env, prof: rabbitClusterShape(s), spec: s, server: server, install: install, installEnv: installEnv, nft: newNFTTable(env.RunID),
		queue: rabbit.QueueName(env.RunID), client: &http.Client{Timeout: 2 * time.Second}}
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
	// One private epmd for the cluster, listening on every node's address: a
	// node registers with it on 127.0.0.1 and its peers look it up on the
	// node's own address (the host part of its name).
	c.home = filepath.Join(env.Dir, "rabbit-home")
	if err := os.MkdirAll(c.home, 0o700); err != nil {
		return nil, s, err
	}
	// Erlang distribution between the nodes (and any rabbitmqctl) needs the
	// run's cookie.
	if err := os.WriteFile(filepath.Join(c.home, ".erlang.cookie"), []byte(strings.ToUpper(Secret(20))), 0o400); err != nil {
		return nil, s, err
	}
	c.password = Secret(16)
	epmdPort, err := FreePort()
	if err != nil {
		return nil, s, err
	}
	ips := []string{"127.0.0.1"}
	for i := range c.prof.nodes {
		ips = append(ips, fmt.Sprintf("%s.%d", block, 11+i))
	}
	var peers []string
	for i, name := range nodeNames(c.prof.nodes) {
		n := &rabbitNode{name: name, ip: ips[i+1], link: faults.NodeLink(name), dir: filepath.Join(env.Dir, "rabbit-"+name)}
		n.erlName = "rabbit-" + name + "@" + n.ip
		for _, p := range []*int{&n.amqp, &n.dist, &n.mgmt} {
			if *p, err = FreePortOn(n.ip); err != nil {
				return nil, s, err
			}
		}
		if n.front, err = c.proxies.start(&faults.Proxy{Upstream: n.amqpAddr(), Also: []*faults.Link{n.link}, OnFault: c.onFault("front:" + name)}); err != nil {
			return nil, s, err
		}
		if n.pinned, err = c.proxies.start(&faults.Proxy{Upstream: n.amqpAddr()}); err != nil {
			return nil, s, err
		}
		peers = append(peers, n.erlName)
		c.nodes = append(c.nodes, n)
	}
	for i, n := range c.nodes {
		if err := c.writeNodeFiles(n, peers, i); err != nil {
			return nil, s, err
		}
	}
	if cred != nil {
		for _, d := range append([]string{c.home}, dirsOf(c.nodes)...) {
			if err := chownR(d, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, s, err
			}
		}
	}
	c.epmd = PrivateProcess{Addr: "127.0.0.1:" + strconv.Itoa(epmdPort), User: user, RunID: env.RunID, Name: "epmd",
		Command: func() *exec.Cmd {
			cmd := exec.Command(epmdPath, "-port", strconv.Itoa(epmdPort), "-address", strings.Join(ips, ","))
			cmd.Env = []string{"HOME=" + c.home, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
			cmd.Dir = c.home
			return cmd
		}}
	if err := c.epmd.Start(ctx); err != nil {
		return nil, s, fmt.Errorf("private epmd: %w", err)
	}
	for _, n := range c.nodes {
		n.proc = PrivateProcess{Addr: n.amqpAddr(), User: user, RunID: env.RunID, Name: "rabbit-" + n.name, Command: c.command(n, epmdPort),
			Ready: func(ctx context.Context) error { return rabbit.Ready(c.nodeURL(n.amqpAddr())) }}
	}
	// The seed first, then the others together: a node that joins takes the
	// peer discovery lock, a global lock the seed needs too for its own boot,
	// and holds it while it waits for the seed (writeNodeFiles).
	start := func(n *rabbitNode) error {
		if err := n.proc.Start(ctx); err != nil {
			return fmt.Errorf("private rabbitmq %s: %w: %s", n.name, err, n.logTail())
		}
		return nil
	}
	if err := start(c.nodes[0]); err != nil {
		return nil, s, err
	}
	if err := startAll(c.nodes[1:], start); err != nil {
		return nil, s, err
	}
	var addrs []string
	for _, n := range c.nodes[1:] {
		addrs = append(addrs, "addr="+neturl.QueryEscape(n.front.Addr()))
	}
	c.url = c.nodeURL(c.nodes[0].front.Addr())
	if strings.Contains(c.url, "?") {
		c.url += "&" + strings.Join(addrs, "&")
	} else {
		c.url += "?" + strings.Join(addrs, "&")
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := c.Settle(sctx); err != nil {
		return nil, s, fmt.Errorf("private rabbitmq cluster did not settle after its start: %w", err)
	}
	u := s
	u.URL = c.url
	if err := c.declare(ctx, u); err != nil {
		return nil, s, err
	}
	c.took = time.Since(begin)
	ok = true
	return c, u, nil
}

// declare creates the run's queues through the node list, lets them settle
// (rabbitSettle: a quorum queue declared less than about a second before its
// node is killed comes back empty on 3.10) and waits for the work queue's
// leader.
func (c *rabbitCluster) declare(ctx context.Context, s Spec) error {
	if err := settleRabbitQueues(ctx, s); err != nil {
		return err
	}
	c.declared = true
	return pollUntil(ctx, 100*time.Millisecond, func() error {
		p, err := c.Primary(ctx)
		if err == nil && p == "" {
			err = fmt.Errorf("queue %s has no leader yet", c.queue)
		}
		return err
	})
}

func dirsOf(ns []*rabbitNode) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.dir)
	}
	return out
}

func chownR(dir string, uid, gid int) error {
	return filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(path, uid, gid)
	})
}

// nodeURL is the target's URL (its knobs) with addr as its host, the
// cluster's own user and password and the vhost /.
func (c *rabbitCluster) nodeURL(addr string) string {
	u := &neturl.URL{Scheme: "amqp", Path: "/"}
	if orig, err := neturl.Parse(c.spec.URL); err == nil {
		q := orig.Query()
		q.Del("addr")
		u.RawQuery = q.Encode()
	}
	u.User = neturl.UserPassword(rabbitUser, c.password)
	u.Host = addr
	return u.String()
}

func (c *rabbitCluster) onFault(link string) func(string) {
	return func(kind string) {
		if c.env.OnFault != nil {
			c.env.OnFault(kind, link)
		}
	}
}

func (c *rabbitCluster) writeNodeFiles(n *rabbitNode, peers []string, i int) error {
	for _, d := range []string{n.dir, filepath.Join(n.dir, "mnesia"), filepath.Join(n.dir, "log"), filepath.Join(n.dir, "plugins")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	conf := []string{
		fmt.Sprintf("listeners.tcp.1 = %s", n.amqpAddr()),
		"loopback_users.guest = true",
		// The run's user instead of guest (created on the seed's first boot;
		// the others join its database): every address is loopback here, where
		// guest/guest would be let in.
		"default_user = " + rabbitUser,
		"default_pass = " + c.password,
		fmt.Sprintf("management.tcp.ip = %s", n.ip),
		fmt.Sprintf("management.tcp.port = %d", n.mgmt),
		"cluster_partition_handling = " + c.prof.handling,
		"cluster_formation.peer_discovery_backend = classic_config",
	}
	// The first node is the seed: it lists only itself, so it boots at once
	// as a cluster of one, and the others start once it runs. With every node
	// listed and all started together, the first to take the discovery lock
	// tries to join peers still waiting for that lock, ten times 500 ms,
	// before it boots alone: 5 s of every start. The others join whichever
	// listed node runs, trying every 100 ms for up to 30 s.
	if i == 0 {
		peers = peers[:1]
	}
	for j, p := range peers {
		conf = append(conf, fmt.Sprintf("cluster_formation.classic_config.nodes.%d = %s", j+1, p))
	}
	conf = append(conf, "cluster_formation.discovery_retry_interval = 100", "cluster_formation.discovery_retry_limit = 300")
	ipTuple := "{" + strings.ReplaceAll(n.ip, ".", ",") + "}"
	advanced := fmt.Sprintf("[{kernel, [{inet_dist_use_interface, %s}, {inet_dist_connect_options, [{ip, %s}]}, {net_ticktime, %d}]}].\n", ipTuple, ipTuple, rabbitNetTicktime)
	files := map[string]string{
		"rabbitmq.conf":     strings.Join(conf, "\n") + "\n",
		"enabled_plugins":   "[rabbitmq_management].\n",
		"advanced.config":   advanced,
		"rabbitmq-env.conf": "",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(n.dir, name), []byte(body), 0o600); err != nil {
			return err
		}
	}
	return nil
}

func (c *rabbitCluster) command(n *rabbitNode, epmdPort int) func() *exec.Cmd {
	return func() *exec.Cmd {
		cmd := exec.Command(c.server, "-noinput")
		cmd.Dir = n.dir
		cmd.Env = []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"HOME=" + c.home, "LANG=C.UTF-8",
			"ERL_EPMD_PORT=" + strconv.Itoa(epmdPort),
			"RABBITMQ_USE_LONGNAME=true",
			"RABBITMQ_NODENAME=" + n.erlName,
			"RABBITMQ_NODE_IP_ADDRESS=" + n.ip,
			"RABBITMQ_NODE_PORT=" + strconv.Itoa(n.amqp),
			"RABBITMQ_DIST_PORT=" + strconv.Itoa(n.dist),
			"RABBITMQ_MNESIA_BASE=" + filepath.Join(n.dir, "mnesia"),
			"RABBITMQ_LOG_BASE=" + filepath.Join(n.dir, "log"),
			"RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(n.dir, "enabled_plugins"),
			"RABBITMQ_PLUGINS_EXPAND_DIR=" + filepath.Join(n.dir, "plugins"),
			"RABBITMQ_CONFIG_FILE=" + filepath.Join(n.dir, "rabbitmq.conf"),
			"RABBITMQ_ADVANCED_CONFIG_FILE=" + filepath.Join(n.dir, "advanced.config"),
			"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(n.dir, "rabbitmq-env.conf"),
			"RABBITMQ_PID_FILE=" + filepath.Join(n.dir, "pid"),
			// exec erl instead of forking it from a shell that waits: the child
			// is beam.smp itself (-noinput is then ours to pass).
			"RABBITMQ_ALLOW_INPUT=true",
			"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-start_epmd false",
		}
		cmd.Env = append(cmd.Env, c.installEnv...)
		return cmd
	}
}

// api GETs path from node n's management API into v.
func (c *rabbitCluster) api(ctx context.Context, n *rabbitNode, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s%s", net.JoinHostPort(n.ip, strconv.Itoa(n.mgmt)), path), nil)
	if err != nil {
		return err
	}
	req.SetBasicAuth(rabbitUser, c.password)
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return errNotFound
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("management API of %s: %s %s", n.name, path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

var errNotFound = errors.New("not found")

type rabbitAPINode struct {
	Name       string   `json:"name"`
	Running    bool     `json:"running"`
	Partitions []string `json:"partitions"`
}

type rabbitAPIQueue struct {
	Type    string   `json:"type"`
	Node    string   `json:"node"`
	Leader  string   `json:"leader"`
	Members []string `json:"members"`
	Online  []string `json:"online"`
	State   string   `json:"state"`
}

func (c *rabbitCluster) byErlName(name string) string {
	for _, n := range c.nodes {
		if n.erlName == name {
			return n.name
		}
	}
	return ""
}

// reachable are the nodes durachk can ask: up and not cut off.
func (c *rabbitCluster) reachable() []*rabbitNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*rabbitNode
	for _, n := range c.nodes {
		if !n.down && !slices.Contains(c.cut, n.name) {
			out = append(out, n)
		}
	}
	return out
}

// queueInfo asks the reachable nodes, in turn, about the run's work queue.
func (c *rabbitCluster) queueInfo(ctx context.Context) (rabbitAPIQueue, error) {
	var errs []error
	for _, n := range c.reachable() {
		var q rabbitAPIQueue
		err := c.api(ctx, n, "/api/queues/%2F/"+neturl.PathEscape(c.queue), &q)
		if err == nil {
			return q, nil
		}
		errs = append(errs, err)
	}
	return rabbitAPIQueue{}, errors.Join(errs...)
}

// Primary is the node of the run's work queue: its Raft leader for a quorum
// queue, its home node for a classic one; "" before the queue exists.
func (c *rabbitCluster) Primary(ctx context.Context) (string, error) {
	q, err := c.queueInfo(ctx)
	if errors.Is(err, errNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if q.Leader != "" {
		return c.byErlName(q.Leader), nil
	}
	return c.byErlName(q.Node), nil
}

func (c *rabbitCluster) Describe() string { return c.prof.describe() }

// PartitionTimeout: a node finds a peer gone only after 1–1.25 net_ticktime
// (durachk's 5 s), and only then does cluster_partition_handling (and a quorum
// queue's election) act. A partition outlasts it in wall time; net_ticktime is
// durachk's own setting, but stretched with the load it would come no closer
// to what an operator runs (60 s).
func (c *rabbitCluster) PartitionTimeout() (time.Duration, string) {
	return rabbitNetTicktime * time.Second * 5 / 4, fmt.Sprintf("net_ticktime %d s (a node finds a peer gone within 1.25 of it)", rabbitNetTicktime)
}

func (c *rabbitCluster) NodeURL(name string) (string, error) {
	n, err := c.node(name)
	if err != nil {
		return "", err
	}
	return c.nodeURL(n.pinned.Addr()), nil
}

func (c *rabbitCluster) Kill(name string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	n.down = true
	c.mu.Unlock()
	c.proxies.cutTo(n.amqpAddr())
	return n.proc.Kill()
}

// Restart starts a killed node on its own data: it rejoins the cluster.
func (c *rabbitCluster) Restart(ctx context.Context, name string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	if err := n.proc.Start(ctx); err != nil {
		return fmt.Errorf("restart of %s: %w: %s", name, err, n.logTail())
	}
	c.mu.Lock()
	n.down = false
	c.mu.Unlock()
	return nil
}

// Failover is Raft's to do (quorum queues); a classic queue has none.
func (c *rabbitCluster) Failover(context.Context) (string, error) { return "", ErrAutomaticFailover }

// Partition cuts nodes from the others: their client proxies, and their
// distribution traffic in the kernel.
func (c *rabbitCluster) Partition(names []string) error {
	var side, rest []string
	for _, n := range c.nodes {
		if slices.Contains(names, n.name) {
			side = append(side, n.ip)
			n.link.Cut(true)
			c.mu.Lock()
			n.wasCut = true
			c.mu.Unlock()
		} else {
			rest = append(rest, n.ip)
		}
	}
	c.mu.Lock()
	c.cut = append(c.cut, names...)
	c.mu.Unlock()
	return c.nft.cut(side, rest)
}

func (c *rabbitCluster) Heal() error {
	for _, n := range c.nodes {
		n.link.Cut(false)
	}
	c.mu.Lock()
	c.cut = nil
	c.mu.Unlock()
	return c.nft.heal()
}

// Settle waits until every live node runs in one cluster with no partition
// recorded, and the run's queue (once declared) has a leader with every member
// online. With cluster_partition_handling=ignore a cluster that stays split
// after the heal has its minority side restarted, as RabbitMQ's documentation
// tells operators to do.
func (c *rabbitCluster) Settle(ctx context.Context) error {
	var splitSince time.Time
	return pollUntil(ctx, 250*time.Millisecond, func() error {
		var gone []string
		for _, n := range c.nodes {
			if !c.isDown(n) && n.proc.gone() {
				gone = append(gone, n.name)
			}
		}
		if c.epmd.gone() {
			gone = append(gone, "epmd")
		}
		if len(gone) > 0 {
			return fmt.Errorf("processes durachk did not kill are gone (killed from outside the run?): %s", strings.Join(gone, ", "))
		}
		live := c.reachable()
		if len(live) == 0 {
			return errors.New("no node is up")
		}
		// Every node's view at once: after a heal a node's API may answer only
		// when its client times out (2 s), and asking in turn would add those up.
		views := make([][]rabbitAPINode, len(live))
		errs := make([]error, len(live))
		var wg sync.WaitGroup
		for i, n := range live {
			wg.Go(func() { errs[i] = c.api(ctx, n, "/api/nodes", &views[i]) })
		}
		wg.Wait()
		var problems []string
		recorded := false // a node records a partition: with ignore, it stays
		for i, n := range live {
			if errs[i] != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", n.name, errs[i]))
				continue
			}
			for _, x := range views[i] {
				m := c.byErlName(x.Name)
				if len(x.Partitions) > 0 {
					problems = append(problems, fmt.Sprintf("%s records a partition with %v", m, x.Partitions))
					recorded = true
				}
				if mn, _ := c.node(m); mn != nil && !c.isDown(mn) && !x.Running {
					problems = append(problems, fmt.Sprintf("%s says %s is not running", n.name, m))
				}
			}
		}
		if len(problems) > 0 {
			// ignore: the sides do not merge again by themselves. autoheal:
			// RabbitMQ 3.10 may give up healing (docs/rabbit.md: a round
			// decided while the nodes reconnect one link at a time restarts
			// the wrong node, and the round its return starts aborts while
			// it boots); nothing starts another round.
			if c.anyWasCut() && (c.prof.handling == "ignore" || c.prof.handling == "autoheal") {
				if splitSince.IsZero() {
					splitSince = time.Now()
				}
				if time.Since(splitSince) > splitGrace(c.prof.handling, recorded) {
					return c.restartMinority(ctx)
				}
			}
			return errors.New(strings.Join(problems, "; "))
		}
		if c.declared {
			q, err := c.queueInfo(ctx)
			if err != nil {
				return fmt.Errorf("queue %s: %w", c.queue, err)
			}
			if q.Leader == "" && q.Node == "" {
				return fmt.Errorf("queue %s has no leader", c.queue)
			}
			if q.Type == "quorum" && len(q.Online) < len(q.Members) {
				return fmt.Errorf("queue %s: %d of %d members online", c.queue, len(q.Online), len(q.Members))
			}
			if q.State != "" && q.State != "running" {
				return fmt.Errorf("queue %s is %s", c.queue, q.State)
			}
		}
		if err := rabbit.Ready(c.url); err != nil {
			return err
		}
		c.mu.Lock()
		for _, n := range c.nodes {
			n.wasCut = false
		}
		c.mu.Unlock()
		return nil
	})
}

// splitGrace is how long the nodes may disagree after a heal before durachk
// restarts the side the partition cut away. With ignore a recorded
// partition never clears by itself (1 s), other problems right after a
// heal may (3 s). With autoheal RabbitMQ restarts the losing side itself,
// a round taking 5-6 s (a loser's stop takes 5 s) and a second round
// following the first loser's return: only a disagreement that outlasts
// two rounds is autoheal having given up.
func splitGrace(handling string, recorded bool) time.Duration {
	switch {
	case handling == "autoheal":
		return 15 * time.Second
	case recorded:
		return time.Second
	}
	return 3 * time.Second
}

func (c *rabbitCluster) anyWasCut() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.wasCut {
			return true
		}
	}
	return false
}

func (c *rabbitCluster) isDown(n *rabbitNode) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return n.down
}

// restartMinority restarts the nodes that the last partition cut away (the
// nodes of the smaller side), so that they rejoin the majority's view.
func (c *rabbitCluster) restartMinority(ctx context.Context) error {
	c.mu.Lock()
	var victims []*rabbitNode
	for _, n := range c.nodes {
		if n.wasCut {
			victims = append(victims, n)
		}
	}
	c.mu.Unlock()
	if len(victims) == 0 {
		return errors.New("the cluster stays split after the heal and durachk does not know its minority side")
	}
	for _, n := range victims {
		_ = n.proc.Kill()
		if err := n.proc.Start(ctx); err != nil {
			return err
		}
		n.wasCut = false
		c.env.logf("  restarted %s: the cluster stayed split after the heal (cluster_partition_handling=%s)", n.name, c.prof.handling)
		if c.env.OnFault != nil {
			c.env.OnFault("restarted_after_split", "node:"+n.name)
		}
	}
	return errors.New("the cluster stayed split: the minority side was restarted")
}

// Unpin points every pinned client's proxy at the queue's node.
func (c *rabbitCluster) Unpin(ctx context.Context) error {
	p, err := c.Primary(ctx)
	if err != nil || p == "" {
		return fmt.Errorf("no leader to move pinned clients to: %v", err)
	}
	pn, err := c.node(p)
	if err != nil {
		return err
	}
	for _, n := range c.nodes {
		if n.pinned.UpstreamAddr() != pn.amqpAddr() {
			n.pinned.SetUpstream(pn.amqpAddr())
		}
	}
	return nil
}

func (c *rabbitCluster) Stop() error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	c.mu.Unlock()
	var errs []error
	for _, n := range c.nodes {
		errs = append(errs, n.proc.Kill())
	}
	errs = append(errs, c.epmd.Kill())
	c.proxies.closeAll()
	errs = append(errs, c.nft.remove())
	for _, n := range c.nodes {
		errs = append(errs, os.RemoveAll(n.dir))
	}
	errs = append(errs, os.RemoveAll(c.home), os.RemoveAll(c.install))
	c.claim.release()
	return errors.Join(errs...)
}

// nodeList reads the further nodes (addr=host:port) of an AMQP node list URL.
func nodeList(raw string) []string {
	u, err := neturl.Parse(raw)
	if err != nil {
		return nil
	}
	return u.Query()["addr"]
}

// logTail is the end of a node's log, for an error that must say why the node
// did not start: the run directory is gone once the run ends.
func (n *rabbitNode) logTail() string {
	b, err := os.ReadFile(filepath.Join(n.dir, "log", n.erlName+".log"))
	if err != nil {
		return "no log: " + err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var keep []string
	for _, l := range lines[max(0, len(lines)-8):] {
		keep = append(keep, strings.TrimSpace(l))
	}
	return "its log ends: " + strings.Join(keep, " | ")
}
