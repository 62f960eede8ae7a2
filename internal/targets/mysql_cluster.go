package targets

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/durachk/durachk/adapters"
	myq "github.com/durachk/durachk/adapters/mysql"
	"github.com/durachk/durachk/faults"
)

// MariaDB replicated topologies, written as the user runs MariaDB:
//
//	private-cluster.replicas=N                              a primary and N replicas (1 or 2; binary
//	                                                        log replication with GTIDs, asynchronous)
//	private-cluster.rpl_semi_sync_master_enabled=ON|OFF     semi-synchronous replication (OFF)
//	private-cluster.rpl_semi_sync_master_wait_point=AFTER_SYNC|AFTER_COMMIT   (AFTER_COMMIT, MariaDB's default)
//	private-cluster.rpl_semi_sync_master_timeout=MS         after which a commit stops waiting and the
//	                                                        primary falls back to asynchronous (10000)
//	private-cluster.galera_nodes=N                          a Galera cluster of N nodes instead (3 or 5;
//	                                                        mysql_galera.go)
//	private-cluster.crash=kill|power-loss                   Galera: a node crash (node_kill, and every
//	                                                        node at once in a broker crash) is a kill -9
//	                                                        (default) or a power loss of the node's
//	                                                        machine (its data on a lazy file system)
//	private-instance.*                                      every node's durability settings, as for the
//	                                                        private server
//
// MariaDB elects nobody: when the plan says failover, durachk promotes the
// replica whose log goes furthest (it applies what it received, then RESET
// SLAVE ALL and read_only off), as MaxScale or an operator would; every other
// node, and a node that comes back, rejoins the current primary as a replica
// from the pristine data directory the cluster started from, replaying the
// primary's binary log from its start (every node logs what it replicates:
// log_slave_updates). A deposed primary that still runs at the heal is
// rejoined the same way: what it took alone is gone, as a rebuild from a
// backup of the new primary would lose it.
//
// Clients connect as a user without READ_ONLY ADMIN (read_only refuses its
// writes on a replica) through a proxy per node, with a node list: a
// connection goes to the first node that takes writes (adapters/mysql).
var mysqlClusterKnobs = map[string]bool{
	ClusterPrefix + "replicas": true, ClusterPrefix + "rpl_semi_sync_master_enabled": true,
	ClusterPrefix + "rpl_semi_sync_master_wait_point": true, ClusterPrefix + "rpl_semi_sync_master_timeout": true,
	ClusterPrefix + "galera_nodes": true, ClusterPrefix + "crash": true,
}

var mysqlClusterKind = &ClusterKind{Knobs: mysqlClusterKnobs, Check: checkMySQLCluster, Can: canStartMySQLCluster, Start: startMySQLCluster,
	Describe: func(s Spec) string { return mysqlClusterShape(s).describe() },
	Adjust:   adjustMySQLCluster}

// adjustMySQLCluster corrects the capabilities read from the target's own
// server for the nodes' durability settings.
func adjustMySQLCluster(s Spec, c *adapters.Capabilities) {
	p := mysqlClusterShape(s)
	c.Durable = p.node.trxCommit == "1" && !s.Volatile
	c.Notes = append(c.Notes, "the cluster's nodes: "+p.node.String())
}

func init() {
	for k := range mysqlClusterKnobs {
		mysqlKnobs[k] = true
	}
}

type mysqlClusterProfile struct {
	replicas  int
	galera    int // nodes of a Galera cluster; 0: primary and replicas
	semiSync  bool
	waitPoint string
	timeout   string
	node      mysqlProfile
	syncWait  string
	powerLoss bool // Galera: a node crash drops what the node never fsynced
}

func mysqlClusterShape(s Spec) mysqlClusterProfile {
	p := mysqlClusterProfile{replicas: 1, waitPoint: "AFTER_COMMIT", timeout: "10000", node: privateMySQLProfile(s), syncWait: s.Options["wsrep_sync_wait"]}
	if n, err := strconv.Atoi(s.Options[ClusterPrefix+"replicas"]); err == nil {
		p.replicas = n
	}
	if n, err := strconv.Atoi(s.Options[ClusterPrefix+"galera_nodes"]); err == nil {
		p.galera = n
	}
	p.semiSync = s.Options[ClusterPrefix+"rpl_semi_sync_master_enabled"] == "ON"
	p.powerLoss = s.Options[ClusterPrefix+"crash"] == "power-loss"
	if v := s.Options[ClusterPrefix+"rpl_semi_sync_master_wait_point"]; v != "" {
		p.waitPoint = v
	}
	if v := s.Options[ClusterPrefix+"rpl_semi_sync_master_timeout"]; v != "" {
		p.timeout = v
	}
	return p
}

func (p mysqlClusterProfile) describe() string {
	if p.galera > 0 {
		d := fmt.Sprintf("mariadb galera cluster of %d nodes", p.galera)
		if p.syncWait != "" {
			d += ", wsrep_sync_wait " + p.syncWait
		}
		d += ", innodb_flush_log_at_trx_commit " + p.node.trxCommit
		if p.powerLoss {
			d += ", a node crash is a power loss of its machine"
		}
		return d
	}
	d := fmt.Sprintf("mariadb primary + %d replica", p.replicas)
	if p.replicas > 1 {
		d += "s"
	}
	if p.semiSync {
		d += fmt.Sprintf(" (semi-synchronous %s, timeout %s ms)", p.waitPoint, p.timeout)
	} else {
		d += " (asynchronous)"
	}
	return d
}

func checkMySQLCluster(s Spec) error {
	if !HasPrivateCluster(s) {
		return nil
	}
	o := s.Options
	bad := func(k, want string) error {
		return fmt.Errorf("%w: %s%s=%q: want %s", ErrBadTarget, ClusterPrefix, k, o[ClusterPrefix+k], want)
	}
	if v, ok := o[ClusterPrefix+"replicas"]; ok && v != "1" && v != "2" {
		return bad("replicas", "1 or 2")
	}
	if v, ok := o[ClusterPrefix+"galera_nodes"]; ok {
		if v != "3" && v != "5" {
			return bad("galera_nodes", "3 or 5")
		}
		for _, k := range []string{"replicas", "rpl_semi_sync_master_enabled", "rpl_semi_sync_master_wait_point", "rpl_semi_sync_master_timeout"} {
			if _, both := o[ClusterPrefix+k]; both {
				return fmt.Errorf("%w: %sgalera_nodes and %s%s exclude each other (Galera replicates by certification, not by the binary log)", ErrBadTarget, ClusterPrefix, ClusterPrefix, k)
			}
		}
	}
	if v, ok := o[ClusterPrefix+"crash"]; ok {
		if v != "kill" && v != "power-loss" {
			return bad("crash", "kill or power-loss")
		}
		if _, galera := o[ClusterPrefix+"galera_nodes"]; !galera {
			return fmt.Errorf("%w: %scrash needs %sgalera_nodes (a power loss of every node is modelled for Galera)", ErrBadTarget, ClusterPrefix, ClusterPrefix)
		}
	}
	if v, ok := o[ClusterPrefix+"rpl_semi_sync_master_enabled"]; ok && v != "ON" && v != "OFF" {
		return bad("rpl_semi_sync_master_enabled", "ON or OFF")
	}
	if v, ok := o[ClusterPrefix+"rpl_semi_sync_master_wait_point"]; ok && v != "AFTER_SYNC" && v != "AFTER_COMMIT" {
		return bad("rpl_semi_sync_master_wait_point", "AFTER_SYNC or AFTER_COMMIT")
	}
	if v, ok := o[ClusterPrefix+"rpl_semi_sync_master_timeout"]; ok {
		if n, err := strconv.ParseUint(v, 10, 32); err != nil || n == 0 {
			return bad("rpl_semi_sync_master_timeout", "milliseconds ≥ 1")
		}
	}
	return nil
}

func canStartMySQLCluster() error {
	if _, err := findMariaDB(); err != nil {
		return err
	}
	return nil
}

func startMySQLCluster(ctx context.Context, s Spec, env ClusterEnv) (Cluster, Spec, error) {
	if mysqlClusterShape(s).galera > 0 {
		return startGaleraCluster(ctx, s, env)
	}
	return startReplicaCluster(ctx, s, env)
}

// mysqlCred are a cluster's accounts: root (durachk's own queries), repl (the
// replication links), the clients' (no READ_ONLY ADMIN) and, on Galera, the
// state transfers' (sst, mysql_galera.go).
type mysqlCred struct{ root, repl, client, sst string }

const mysqlClientUser = "durachk"

// clusterInit is the init file of a cluster node: its accounts, set again at
// every start, never written to the binary log.
func (c mysqlCred) initSQL() []string {
	out := []string{
		"SET SESSION sql_log_bin = 0",
		"CREATE USER IF NOT EXISTS 'root'@'%' IDENTIFIED BY '" + c.root + "'",
		"ALTER USER 'root'@'%' IDENTIFIED BY '" + c.root + "'",
		"GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION",
		"ALTER USER 'root'@'localhost' IDENTIFIED BY '" + c.root + "'",
		"DROP USER IF EXISTS 'root'@'127.0.0.1'", "DROP USER IF EXISTS 'root'@'::1'", "DROP USER IF EXISTS ''@'localhost'",
		"CREATE USER IF NOT EXISTS 'repl'@'%' IDENTIFIED BY '" + c.repl + "'",
		"ALTER USER 'repl'@'%' IDENTIFIED BY '" + c.repl + "'",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'repl'@'%'",
		"CREATE USER IF NOT EXISTS '" + mysqlClientUser + "'@'%' IDENTIFIED BY '" + c.client + "'",
		"ALTER USER '" + mysqlClientUser + "'@'%' IDENTIFIED BY '" + c.client + "'",
		"GRANT ALL PRIVILEGES ON *.* TO '" + mysqlClientUser + "'@'%'",
		"REVOKE READ_ONLY ADMIN ON *.* FROM '" + mysqlClientUser + "'@'%'",
	}
	if c.sst != "" {
		out = append(out, galeraSSTInit(c.sst)...)
	}
	return out
}

// clusterNode is a node of a replicated MariaDB topology.
type clusterNode struct {
	mariadbNode
	name    string
	proc    PrivateProcess
	link    *faults.Link
	front   *faults.Proxy // every client → the node (a host of the node list)
	pinned  *faults.Proxy // a client pinned to the node: never cut
	repl    *faults.Proxy // this replica → its primary, lagged by the replication link
	down    bool
	replica bool // started read-only, as a replica
}

// rootURL reaches the node directly as root, for durachk's own queries.
func (n *clusterNode) rootURL() string { return n.url(n.addr()) }

// mysqlSeed is a data directory made once per cluster by mariadb-install-db,
// copied for every node (and again for every rejoin).
type mysqlSeed struct{ dir, user string }

func makeSeed(ctx context.Context, bins mariadbBins, dir, user string) (*mysqlSeed, error) {
	n := &mariadbNode{dir: dir, bins: bins, user: user}
	if err := n.mkdir(); err != nil {
		return nil, err
	}
	if err := n.install(ctx); err != nil {
		return nil, err
	}
	return &mysqlSeed{dir: n.data(), user: user}, nil
}

// copyTo makes n's data directory a copy of the seed, owned by n's user.
func (s *mysqlSeed) copyTo(n *mariadbNode) error {
	if err := os.RemoveAll(n.data()); err != nil {
		return err
	}
	cred, err := Credential(n.user)
	if err != nil {
		return err
	}
	return filepath.Walk(s.dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(s.dir, path)
		dst := filepath.Join(n.data(), rel)
		switch {
		case fi.IsDir():
			err = os.Mkdir(dst, fi.Mode().Perm())
		case fi.Mode().IsRegular():
			err = copyRegular(path, dst, fi.Mode().Perm())
		default:
			return nil
		}
		if err == nil && cred != nil {
			err = os.Chown(dst, int(cred.Uid), int(cred.Gid))
		}
		return err
	})
}

func copyRegular(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// writeInit writes n's init file with the cluster's accounts.
func writeInit(n *mariadbNode, cred mysqlCred) error {
	if err := os.WriteFile(n.initFile(), []byte(strings.Join(cred.initSQL(), ";\n")+";\n"), 0o600); err != nil {
		return err
	}
	return chownTo(n.initFile(), n.user)
}

// replicaCluster is a MariaDB primary with replicas.
type replicaCluster struct {
	clusterNodes[*clusterNode]
	claim   *blockClaim
	env     ClusterEnv
	prof    mysqlClusterProfile
	bins    mariadbBins
	seed    *mysqlSeed
	cred    mysqlCred
	proxies proxySet

	mu      sync.Mutex
	primary string
	stopped bool
}

func startReplicaCluster(ctx context.Context, s Spec, env ClusterEnv) (Cluster, Spec, error) {
	begin := time.Now()
	bins, err := findMariaDB()
	if err != nil {
		return nil, s, err
	}
	c := &replicaCluster{clusterNodes: clusterNodes[*clusterNode]{kind: "mariadb cluster"}, env: env, prof: mysqlClusterShape(s), bins: bins, primary: "n1",
		cred: mysqlCred{root: Secret(16), repl: Secret(16), client: Secret(16)}}
	user := ""
	if cred, err := Credential("mysql"); err != nil {
		return nil, s, err
	} else if cred != nil {
		user = "mysql"
		_ = os.Chmod(env.Dir, 0o711)
	}
	ok := false
	defer func() {
		if !ok {
			_ = c.Stop()
		}
	}()
	if c.claim, err = claimLoopbackBlock(env.RunID); err != nil {
		return nil, s, err
	}
	step := time.Now()
	lap := func(what string) {
		env.logf("    %s: %s", what, time.Since(step).Round(time.Millisecond))
		step = time.Now()
	}
	if c.seed, err = makeSeed(ctx, bins, filepath.Join(env.Dir, "mariadb-seed"), user); err != nil {
		return nil, s, err
	}
	lap("mariadb-install-db")
	for i, name := range nodeNames(1 + c.prof.replicas) {
		n := &clusterNode{name: name, link: faults.NodeLink(name), replica: i > 0}
		n.mariadbNode = mariadbNode{dir: filepath.Join(env.Dir, "mariadb-"+name), ip: fmt.Sprintf("%s.%d", c.claim.block, 11+i),
			user: user, password: c.cred.root, bins: bins}
		if n.port, err = FreePortOn(n.ip); err != nil {
			return nil, s, err
		}
		if n.front, err = c.proxies.start(&faults.Proxy{Upstream: n.addr(), Also: []*faults.Link{n.link}, OnFault: c.onFault("front:" + name)}); err != nil {
			return nil, s, err
		}
		if n.pinned, err = c.proxies.start(&faults.Proxy{Upstream: n.addr()}); err != nil {
			return nil, s, err
		}
		if err := c.prepare(n, i+1); err != nil {
			return nil, s, err
		}
		n.proc = c.process(n)
		c.nodes = append(c.nodes, n)
	}
	lap("node copies")
	if err := startAll(c.nodes, func(n *clusterNode) error { return c.startNode(ctx, n) }); err != nil {
		return nil, s, err
	}
	lap("nodes up")
	for _, n := range c.nodes[1:] {
		if err := c.follow(ctx, n, c.nodes[0]); err != nil {
			return nil, s, err
		}
	}
	var hosts []string
	for _, n := range c.nodes {
		hosts = append(hosts, n.front.Addr())
	}
	c.url = clientURL(c.cred.client, hosts, false)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.Settle(sctx); err != nil {
		return nil, s, fmt.Errorf("private mariadb cluster did not settle after its start: %w", err)
	}
	lap("replicating, settled")
	c.took = time.Since(begin)
	ok = true
	u := s
	u.URL = c.url
	return c, u, nil
}

// clientURL is a node list of the client account: the first host, the others
// as addr= parameters.
func clientURL(password string, hosts []string, spread bool) string {
	u := &url.URL{Scheme: "mysql", User: url.UserPassword(mysqlClientUser, password), Host: hosts[0], Path: "/"}
	q := url.Values{}
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	if spread {
		q.Set("spread", "true")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func (c *replicaCluster) onFault(link string) func(string) {
	return func(kind string) {
		if c.env.OnFault != nil {
			c.env.OnFault(kind, link)
		}
	}
}

// prepare makes n's directory, data (a copy of the seed) and init file, and
// its command line: server id, binary log with GTIDs, semi-synchronous
// replication on both sides where configured, read_only for a replica.
func (c *replicaCluster) prepare(n *clusterNode, serverID int) error {
	if err := n.mkdir(); err != nil {
		return err
	}
	if err := c.seed.copyTo(&n.mariadbNode); err != nil {
		return err
	}
	if err := writeInit(&n.mariadbNode, c.cred); err != nil {
		return err
	}
	n.extra = append(c.prof.node.args(), "--server-id="+strconv.Itoa(serverID), "--log-bin=mariadb-bin", "--log-bin-index=mariadb-bin.index",
		"--log-slave-updates=ON", "--binlog-format=ROW", "--skip-slave-start", "--slave-net-timeout=2", "--gtid-strict-mode=ON")
	if c.prof.semiSync {
		// The master side is turned on where the node is the primary only
		// (process, promote): a replica that logs what it applies
		// (log_slave_updates) would wait for acknowledgements of its own.
		n.extra = append(n.extra, "--rpl-semi-sync-slave-enabled=ON",
			"--rpl-semi-sync-master-wait-point="+c.prof.waitPoint, "--rpl-semi-sync-master-timeout="+c.prof.timeout)
	}
	return nil
}

// process is n's server process (read-only when n is a replica at its start).
func (c *replicaCluster) process(n *clusterNode) PrivateProcess {
	return PrivateProcess{Addr: n.addr(), User: n.user, RunID: c.env.RunID, Name: "mariadb-" + n.name,
		Command: func() *exec.Cmd {
			cmd := n.command()
			ro := "--read-only=OFF"
			if n.replica {
				ro = "--read-only=ON"
			}
			cmd.Args = append(cmd.Args, ro)
			if c.prof.semiSync && !n.replica {
				cmd.Args = append(cmd.Args, "--rpl-semi-sync-master-enabled=ON")
			}
			return cmd
		},
		Ready: func(ctx context.Context) error { return myq.Ready(ctx, n.rootURL()) }}
}

// startNode starts n.
func (c *replicaCluster) startNode(ctx context.Context, n *clusterNode) error {
	if err := n.proc.Start(ctx); err != nil {
		return fmt.Errorf("private mariadb %s: %w: %s", n.name, err, n.logTail())
	}
	c.mu.Lock()
	n.down = false
	c.mu.Unlock()
	return nil
}

// follow makes the running replica n stream from primary through a
// replication proxy of its own, from the start of primary's binary log.
func (c *replicaCluster) follow(ctx context.Context, n, primary *clusterNode) error {
	if n.repl != nil {
		c.proxies.close(n.repl)
	}
	p, err := c.proxies.start(&faults.Proxy{Link: c.env.Links[faults.LinkReplication], Upstream: primary.addr(),
		Also: []*faults.Link{n.link, primary.link}, OnFault: c.onFault(faults.LinkReplication + ":" + n.name + "->" + primary.name)})
	if err != nil {
		return err
	}
	n.repl = p
	host, port, _ := net.SplitHostPort(p.Addr())
	err = myq.Exec(ctx, n.rootURL(),
		"STOP SLAVE",
		"SET GLOBAL gtid_slave_pos = ''",
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%s, MASTER_USER='repl', MASTER_PASSWORD='%s', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1, MASTER_HEARTBEAT_PERIOD=1",
			host, port, c.cred.repl),
		"START SLAVE")
	if err != nil {
		return fmt.Errorf("private mariadb %s: follow %s: %w", n.name, primary.name, err)
	}
	return nil
}

// rejoin makes n a replica of primary from a fresh copy of the seed.
func (c *replicaCluster) rejoin(ctx context.Context, n, primary *clusterNode) error {
	_ = n.proc.Kill()
	if n.repl != nil {
		c.proxies.close(n.repl)
		n.repl = nil
	}
	if err := c.seed.copyTo(&n.mariadbNode); err != nil {
		return err
	}
	n.replica = true
	if err := c.startNode(ctx, n); err != nil {
		return err
	}
	return c.follow(ctx, n, primary)
}

func (c *replicaCluster) Describe() string { return c.prof.describe() }

// PartitionTimeout: a semi-synchronous primary cut off from its replicas
// holds every commit for rpl_semi_sync_master_timeout, then falls back to
// asynchronous replication and acknowledges what no replica has. The timeout
// is the user's setting under test, in wall time: a partition outlasts it
// (rather than the timeout stretching with the load), so that a scenario
// stretched on a busy machine and one on an idle machine cross it alike (a
// 10 s partition against the 10 s default was a race; stretched to 40 s it
// crossed it). An asynchronous primary acknowledges at once: nothing to
// outlast.
func (c *replicaCluster) PartitionTimeout() (time.Duration, string) {
	ms, err := strconv.Atoi(c.prof.timeout)
	if !c.prof.semiSync || err != nil || ms <= 0 {
		return 0, ""
	}
	return time.Duration(ms) * time.Millisecond, fmt.Sprintf("rpl_semi_sync_master_timeout %d ms (after it a primary acknowledges a commit no replica has)", ms)
}

// PartitionTimeout: a Galera node cut off from the others is dropped from the
// primary component after evs.inactive_timeout (4 s here), and then refuses
// statements; before that its commits wait.
func (c *galeraCluster) PartitionTimeout() (time.Duration, string) {
	return galeraInactive, "evs.inactive_timeout 4 s (after it a node cut off from the primary component refuses statements)"
}

// galeraInactive is the nodes' evs.inactive_timeout (PT4S on their command line).
const galeraInactive = 4 * time.Second

func (c *replicaCluster) NodeURL(name string) (string, error) {
	n, err := c.node(name)
	if err != nil {
		return "", err
	}
	return clientURL(c.cred.client, []string{n.pinned.Addr()}, false), nil
}

func (c *replicaCluster) current() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.primary
}

// Primary is the node durachk promoted last (or n1): MariaDB elects nobody.
func (c *replicaCluster) Primary(context.Context) (string, error) { return c.current(), nil }

func (c *replicaCluster) isDown(n *clusterNode) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return n.down
}

func (c *replicaCluster) Kill(name string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	n.down = true
	c.mu.Unlock()
	c.proxies.cutTo(n.addr(), n.repl)
	return n.proc.Kill()
}

// Restart brings a killed node back: the primary on its own data (crash
// recovery), any other node as a replica of the current primary.
func (c *replicaCluster) Restart(ctx context.Context, name string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	p := c.current()
	if p == name {
		return c.startNode(ctx, n)
	}
	pn, err := c.node(p)
	if err != nil {
		return err
	}
	return c.rejoin(ctx, n, pn)
}

// gtidSeq is the highest sequence number of a GTID position ("0-1-42,1-2-7").
func gtidSeq(pos string) uint64 {
	var best uint64
	for _, g := range strings.Split(pos, ",") {
		parts := strings.Split(strings.TrimSpace(g), "-")
		if len(parts) != 3 {
			continue
		}
		if n, err := strconv.ParseUint(parts[2], 10, 64); err == nil && n > best {
			best = n
		}
	}
	return best
}

// Failover promotes the live, reachable replica that received the most, once
// it has applied what it received, and makes the other replicas follow it.
func (c *replicaCluster) Failover(ctx context.Context) (string, error) {
	old := c.current()
	var best *clusterNode
	var bestSeq uint64
	for _, n := range c.nodes {
		if n.name == old || c.isDown(n) || n.link.IsCut() {
			continue
		}
		st, err := myq.Status(ctx, n.rootURL(), "gtid_slave_pos", "gtid_current_pos")
		if err != nil {
			continue
		}
		if seq := gtidSeq(st["gtid_slave_pos"]); best == nil || seq > bestSeq {
			best, bestSeq = n, seq
		}
	}
	if best == nil {
		return "", errors.New("mariadb cluster: no live replica to promote")
	}
	if err := c.promote(ctx, best); err != nil {
		return "", fmt.Errorf("promote %s: %w", best.name, err)
	}
	c.mu.Lock()
	c.primary = best.name
	c.mu.Unlock()
	for _, n := range c.nodes {
		if n == best || n.name == old || c.isDown(n) || n.link.IsCut() {
			continue
		}
		if err := c.rejoin(ctx, n, best); err != nil {
			return best.name, err
		}
	}
	return best.name, nil
}

// promote stops n's receiving, waits (up to 5 s) until it applied what it
// received, and makes it a primary.
func (c *replicaCluster) promote(ctx context.Context, n *clusterNode) error {
	if err := myq.Exec(ctx, n.rootURL(), "STOP SLAVE IO_THREAD"); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		st, err := myq.ReplicaStatus(ctx, n.rootURL())
		if err != nil {
			return err
		}
		if st == nil || st["Slave_SQL_Running"] != "Yes" ||
			(st["Relay_Master_Log_File"] == st["Master_Log_File"] && st["Exec_Master_Log_Pos"] == st["Read_Master_Log_Pos"]) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n.repl != nil {
		c.proxies.close(n.repl)
		n.repl = nil
	}
	n.replica = false
	stmts := []string{"STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = OFF"}
	if c.prof.semiSync {
		stmts = append(stmts, "SET GLOBAL rpl_semi_sync_master_enabled = ON")
	}
	return myq.Exec(ctx, n.rootURL(), stmts...)
}

func (c *replicaCluster) Partition(names []string) error {
	for _, name := range names {
		n, err := c.node(name)
		if err != nil {
			return err
		}
		n.link.Cut(true)
	}
	return nil
}

func (c *replicaCluster) Heal() error {
	for _, n := range c.nodes {
		n.link.Cut(false)
	}
	return nil
}

// Settle waits until the primary takes writes, every other live node
// replicates from it with both threads running (a deposed primary that still
// takes writes, a replica that follows another or stopped on an error
// rejoins from the seed), semi-synchronous replicas are attached where they
// are configured, and a client of the node list finds the primary.
func (c *replicaCluster) Settle(ctx context.Context) error {
	notRunning := map[string]time.Time{}
	return pollUntil(ctx, 100*time.Millisecond, func() error {
		for _, n := range c.nodes {
			if !c.isDown(n) && n.proc.gone() {
				return fmt.Errorf("node %s is gone though durachk did not kill it (killed from outside the run?)", n.name)
			}
		}
		pn, err := c.node(c.current())
		if err != nil {
			return err
		}
		if c.isDown(pn) {
			return fmt.Errorf("the primary %s is down", pn.name)
		}
		st, err := myq.Status(ctx, pn.rootURL(), "read_only", "Rpl_semi_sync_master_clients", "Rpl_semi_sync_master_status")
		if err != nil {
			return fmt.Errorf("primary %s: %w", pn.name, err)
		}
		if st["read_only"] != "OFF" {
			return fmt.Errorf("%s is named primary but is read-only", pn.name)
		}
		for _, n := range c.nodes {
			if n == pn || c.isDown(n) {
				continue
			}
			rs, err := myq.ReplicaStatus(ctx, n.rootURL())
			if err != nil {
				return fmt.Errorf("replica %s: %w", n.name, err)
			}
			follows := rs != nil && n.repl != nil && n.repl.UpstreamAddr() == pn.addr() &&
				rs["Master_Port"] == portOf(n.repl.Addr())
			if !n.replica || !follows || rs["Last_SQL_Errno"] != "0" || rs["Last_IO_Errno"] == "1236" {
				if err := c.rejoin(ctx, n, pn); err != nil {
					return err
				}
				return fmt.Errorf("%s did not follow %s: it rejoined from the seed", n.name, pn.name)
			}
			if rs["Slave_IO_Running"] != "Yes" || rs["Slave_SQL_Running"] != "Yes" {
				if notRunning[n.name].IsZero() {
					notRunning[n.name] = time.Now()
				} else if time.Since(notRunning[n.name]) > 10*time.Second {
					delete(notRunning, n.name)
					if err := c.rejoin(ctx, n, pn); err != nil {
						return err
					}
					c.env.logf("  %s did not replicate for 10 s: it rejoined %s from the seed", n.name, pn.name)
				}
				return fmt.Errorf("replica %s is not replicating (io %s, sql %s: %s)", n.name, rs["Slave_IO_Running"], rs["Slave_SQL_Running"], rs["Last_IO_Error"])
			}
			delete(notRunning, n.name)
		}
		if c.prof.semiSync && (st["Rpl_semi_sync_master_clients"] == "0" || st["Rpl_semi_sync_master_status"] != "ON") {
			return fmt.Errorf("no semi-synchronous replica is attached to %s", pn.name)
		}
		return myq.Ready(ctx, c.url)
	})
}

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

func (c *replicaCluster) Stop() error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	c.mu.Unlock()
	var errs []error
	for _, n := range c.nodes {
		errs = append(errs, n.proc.Close())
	}
	c.proxies.closeAll()
	for _, n := range c.nodes {
		errs = append(errs, os.RemoveAll(n.dir))
	}
	if c.seed != nil {
		errs = append(errs, os.RemoveAll(filepath.Dir(c.seed.dir)))
	}
	c.claim.release()
	return errors.Join(errs...)
}

// Unpin points every pinned client's proxy at the current primary.
func (c *replicaCluster) Unpin(ctx context.Context) error {
	pn, err := c.node(c.current())
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
