package targets

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	myq "github.com/durachk/durachk/adapters/mysql"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/internal/lazyfs"
	"github.com/durachk/durachk/internal/reaper"
)

// A private MariaDB Galera cluster (private-cluster.galera_nodes=3): every
// node a mariadbd of its own with the galera-4 provider, on its own loopback
// address, with its group communication (gcomm) and incremental state
// transfer ports on that address. Every node takes writes; clients use a
// node list through a proxy per node with spread=true, so that
// the workers' connections spread over the nodes. Galera's group
// communication is peer to peer between the nodes' own addresses (a node
// tells the others where it listens), so a partition cuts it in the kernel
// (nftables, nft.go), as for RabbitMQ, and the clients' proxies of the cut
// nodes.
//
// The nodes start from one data directory: a server started once as a
// cluster of its own, with the cluster's accounts, and shut down cleanly, so
// that its state (grastate.dat: the cluster's UUID and seqno) is every node's
// and no node needs a state transfer to join. A node killed (or all of them)
// comes back as mysqld_safe would bring it: its position recovered first
// (mariadbd --wsrep-recover), then started with it; when no node runs, the
// most advanced one bootstraps the cluster again (safe_to_bootstrap, the
// documented recovery after a crash of every node) and the others join it.
//
// Members authenticate: gcomm has no password, and a mariadbd that knows the
// cluster's name and a member's address (both on the nodes' command lines)
// joined as a member and got the run's data by a state transfer. So the
// group communication (and IST, which follows socket.ssl_*) runs over TLS
// with a CA made for the run: every node presents a certificate it signed
// and accepts only peers that do (writeTLS). The CA's key is never written,
// so no other certificate can be made; the nodes' keys are in the run
// directory, mode 0600, the servers' user's. A full state transfer (SST)
// goes by mysqldump to the joiner's own server, as an account of the run's
// with a password of its own (wsrep_sst_auth, set by the init file: never on
// a command line): rsync's, the default, opens an rsync daemon on the
// joiner, for as long as the transfer lasts, that takes whatever anyone
// writes into its data directory and lets anyone read it.

// galeraProvider is where Debian's galera-4 package puts the provider.
var galeraProvider = "/usr/lib/galera/libgalera_smm.so"

func canStartGalera() error {
	if _, err := findMariaDB(); err != nil {
		return err
	}
	if _, err := os.Stat(galeraProvider); err != nil {
		return fmt.Errorf("private galera: %s not found (install the galera-4 package)", galeraProvider)
	}
	for _, c := range []string{"mariadb", "mariadb-dump"} {
		if _, err := exec.LookPath(c); err != nil {
			return fmt.Errorf("private galera: %s not found: state transfers use it (install the mariadb-client package)", c)
		}
	}
	return nil
}

// galeraSSTUser is the account the donor of a state transfer loads the
// joiner's server as (mysqldump, wsrep_sst_method=mysqldump).
const galeraSSTUser = "durachk_sst"

// galeraSSTInit are the init file's statements that make the state transfer
// account (it loads every database, the mysql schema's too) and tell the
// server its password: the donor connects to the joiner with it.
func galeraSSTInit(password string) []string {
	return []string{
		"CREATE USER IF NOT EXISTS '" + galeraSSTUser + "'@'%' IDENTIFIED BY '" + password + "'",
		"ALTER USER '" + galeraSSTUser + "'@'%' IDENTIFIED BY '" + password + "'",
		"GRANT ALL PRIVILEGES ON *.* TO '" + galeraSSTUser + "'@'%'",
		"SET GLOBAL wsrep_sst_auth = '" + galeraSSTUser + ":" + password + "'",
	}
}

// galeraNode is a node with its Galera ports and how it starts next.
type galeraNode struct {
	clusterNode
	lazy       *lazyfs.Remote // the node's machine's disk, where a crash is a power loss
	lazyMnt    string         // its mount point and its backing directory (+"-lazyfs")
	gcomm, ist int
	bootstrap  bool   // next start: --wsrep-new-cluster
	startPos   string // next start: --wsrep-start-position
	tls        tlsFiles
}

func (n *galeraNode) gcommAddr() string { return net.JoinHostPort(n.ip, strconv.Itoa(n.gcomm)) }

type galeraCluster struct {
	clusterNodes[*galeraNode]
	claim   *blockClaim
	env     ClusterEnv
	prof    mysqlClusterProfile
	bins    mariadbBins
	cred    mysqlCred
	name    string
	proxies proxySet
	nft     *nftTable

	mu      sync.Mutex
	stopped bool
}

func startGaleraCluster(ctx context.Context, s Spec, env ClusterEnv) (Cluster, Spec, error) {
	begin := time.Now()
	if err := canStartGalera(); err != nil {
		return nil, s, err
	}
	bins, _ := findMariaDB()
	c := &galeraCluster{clusterNodes: clusterNodes[*galeraNode]{kind: "galera cluster"}, env: env, prof: mysqlClusterShape(s), bins: bins, name: "durachk-" + env.RunID, nft: newNFTTable(env.RunID),
		cred: mysqlCred{root: Secret(16), repl: Secret(16), client: Secret(16), sst: Secret(16)}}
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
	var err error
	if c.claim, err = claimLoopbackBlock(env.RunID); err != nil {
		return nil, s, err
	}
	step := time.Now()
	lap := func(what string) {
		env.logf("    %s: %s", what, time.Since(step).Round(time.Millisecond))
		step = time.Now()
	}
	names := nodeNames(c.prof.galera)
	tls, err := writeTLS(filepath.Join(env.Dir, "galera-tls"), user, names)
	if err != nil {
		return nil, s, fmt.Errorf("private galera: certificates: %w", err)
	}
	lap("certificates")
	for i, name := range names {
		n := &galeraNode{clusterNode: clusterNode{name: name, link: faults.NodeLink(name)}, tls: tls[name]}
		n.mariadbNode = mariadbNode{dir: filepath.Join(env.Dir, "galera-"+name), ip: fmt.Sprintf("%s.%d", c.claim.block, 11+i),
			user: user, password: c.cred.root, bins: bins}
		if c.prof.powerLoss {
			if err := c.mountLazy(n); err != nil {
				return nil, s, err
			}
		}
		for _, p := range []*int{&n.port, &n.gcomm, &n.ist} {
			if *p, err = FreePortOn(n.ip); err != nil {
				return nil, s, err
			}
		}
		if n.front, err = c.proxies.start(&faults.Proxy{Upstream: n.addr(), Also: []*faults.Link{n.link}, OnFault: c.onFault("front:" + name)}); err != nil {
			return nil, s, err
		}
		if n.pinned, err = c.proxies.start(&faults.Proxy{Upstream: n.addr()}); err != nil {
			return nil, s, err
		}
		c.nodes = append(c.nodes, n)
	}
	seed, err := c.makeSeed(ctx, user)
	if err != nil {
		return nil, s, err
	}
	lap("seed: install, one start and a clean shutdown")
	for _, n := range c.nodes {
		if err := n.mkdir(); err != nil {
			return nil, s, err
		}
		if err := seed.copyTo(&n.mariadbNode); err != nil {
			return nil, s, err
		}
		if err := writeInit(&n.mariadbNode, c.cred); err != nil {
			return nil, s, err
		}
		n.proc = c.process(n)
	}
	_ = os.RemoveAll(filepath.Dir(seed.dir))
	// n1 bootstraps from the seed's state; the others join it with the same
	// state (no transfer).
	c.nodes[0].bootstrap = true
	if err := c.startNode(ctx, c.nodes[0]); err != nil {
		return nil, s, err
	}
	if err := startAll(c.nodes[1:], func(n *galeraNode) error { return c.startNode(ctx, n) }); err != nil {
		return nil, s, err
	}
	lap("nodes up")
	var hosts []string
	for _, n := range c.nodes {
		hosts = append(hosts, n.front.Addr())
	}
	c.url = clientURL(c.cred.client, hosts, true)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.Settle(sctx); err != nil {
		return nil, s, fmt.Errorf("private galera cluster did not settle after its start: %w", err)
	}
	lap("synced, settled")
	u := s
	u.URL = c.url
	if c.prof.powerLoss {
		// The run's queue existed long before a power cut, and the kernel
		// would have written it back: provision it, then make every node's
		// disk durable (as the runner's checkpoint does for one server).
		q, err := OpenQueue(ctx, u)
		if err != nil {
			return nil, s, fmt.Errorf("private galera: provision the run's queue: %w", err)
		}
		q.Close()
		time.Sleep(1500 * time.Millisecond) // InnoDB's once-a-second flush has run
		for _, n := range c.nodes {
			if err := n.lazy.Sync(); err != nil {
				return nil, s, fmt.Errorf("private galera %s: checkpoint: %w", n.name, err)
			}
		}
		lap("queue provisioned, every node's disk checkpointed")
	}
	c.took = time.Since(begin)
	ok = true
	return c, u, nil
}

// mountLazy puts n's directory on a lazy file system of its own (n's
// machine's disk), served by `durachk lazyfs` (this binary, or $DURACHK_BIN).
func (c *galeraCluster) mountLazy(n *galeraNode) error {
	if err := lazyfs.Available(); err != nil {
		return fmt.Errorf("private galera: %s%s=power-loss: %w", ClusterPrefix, "crash", err)
	}
	bin := os.Getenv("DURACHK_BIN")
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		bin = self
	}
	mnt := n.dir + "-disk"
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return err
	}
	fs, err := lazyfs.StartRemote(bin, mnt, mnt+"-lazyfs", lazyfs.Options{})
	if err != nil {
		return fmt.Errorf("private galera %s: %w", n.name, err)
	}
	reaper.Watch(reaper.KindPgid, strconv.Itoa(fs.Pid()))
	n.lazy, n.lazyMnt = fs, mnt
	n.dir = filepath.Join(mnt, "mariadb")
	return nil
}

func (c *galeraCluster) onFault(link string) func(string) {
	return func(kind string) {
		if c.env.OnFault != nil {
			c.env.OnFault(kind, link)
		}
	}
}

// galeraArgs are the wsrep settings of node n (address of the group: every
// node; short failure detection: a run lasts seconds).
func (c *galeraCluster) galeraArgs(n *galeraNode, peers []string) []string {
	opts := []string{
		"gmcast.listen_addr=tcp://" + n.gcommAddr(), "ist.recv_addr=" + net.JoinHostPort(n.ip, strconv.Itoa(n.ist)),
		"evs.keepalive_period=PT0.5S", "evs.suspect_timeout=PT2S", "evs.inactive_timeout=PT4S", "evs.inactive_check_period=PT0.5S",
		"evs.install_timeout=PT4S", "gmcast.peer_timeout=PT2S", "pc.announce_timeout=PT1S", "gcache.size=64M",
	}
	opts = append(opts, n.tls.providerOptions()...)
	args := append(c.prof.node.args(),
		"--wsrep-on=ON", "--wsrep-provider="+galeraProvider, "--wsrep-cluster-name="+c.name, "--wsrep-node-name="+n.name,
		"--wsrep-node-address="+n.ip, "--wsrep-cluster-address=gcomm://"+strings.Join(peers, ","),
		"--wsrep-provider-options="+strings.Join(opts, ";"),
		"--wsrep-sst-method=mysqldump", "--wsrep-sst-receive-address="+n.addr(),
		"--binlog-format=ROW", "--innodb-autoinc-lock-mode=2", "--default-storage-engine=InnoDB", "--wsrep-slave-threads=1")
	return args
}

func (c *galeraCluster) peers() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.gcommAddr())
	}
	return out
}

// process is n's server process; its command line says how it starts next.
func (c *galeraCluster) process(n *galeraNode) PrivateProcess {
	return PrivateProcess{Addr: n.addr(), User: n.user, RunID: c.env.RunID, Name: "galera-" + n.name,
		Command: func() *exec.Cmd {
			n.extra = c.galeraArgs(n, c.peers())
			cmd := n.command()
			if n.bootstrap {
				cmd.Args = append(cmd.Args, "--wsrep-new-cluster")
			}
			if n.startPos != "" {
				cmd.Args = append(cmd.Args, "--wsrep-start-position="+n.startPos)
			}
			// The state transfer scripts need the server's tools on PATH.
			cmd.Env = append(os.Environ(), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
			return cmd
		},
		Ready: func(ctx context.Context) error { return myq.Ready(ctx, n.rootURL()) }}
}

func (c *galeraCluster) startNode(ctx context.Context, n *galeraNode) error {
	err := n.proc.Start(ctx)
	n.bootstrap, n.startPos = false, ""
	if err != nil {
		return fmt.Errorf("private galera %s: %w: %s", n.name, err, n.logTail())
	}
	c.mu.Lock()
	n.down = false
	c.mu.Unlock()
	return nil
}

// makeSeed installs the system tables, starts the server once as a cluster of
// its own (on n1's address and ports) with the cluster's accounts, and shuts
// it down cleanly.
func (c *galeraCluster) makeSeed(ctx context.Context, user string) (*mysqlSeed, error) {
	seed, err := makeSeed(ctx, c.bins, filepath.Join(c.env.Dir, "galera-seed"), user)
	if err != nil {
		return nil, err
	}
	n1 := c.nodes[0]
	sn := &galeraNode{clusterNode: clusterNode{name: "seed"}, gcomm: n1.gcomm, ist: n1.ist, tls: n1.tls}
	sn.mariadbNode = mariadbNode{dir: filepath.Dir(seed.dir), ip: n1.ip, port: n1.port, user: user, password: c.cred.root, bins: c.bins}
	if err := writeInit(&sn.mariadbNode, c.cred); err != nil {
		return nil, err
	}
	sn.extra = c.galeraArgs(sn, nil)
	cmd := sn.command()
	cmd.Args = append(cmd.Args, "--wsrep-new-cluster")
	cred, err := Credential(user)
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	ready := pollUntil(ctx, 100*time.Millisecond, func() error {
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("exited: %v", err)
		default:
		}
		return myq.Ready(ctx, sn.rootURL())
	})
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return nil, fmt.Errorf("private galera: the seed server did not shut down within 30 s: %s", sn.logTail())
	}
	if ready != nil {
		return nil, fmt.Errorf("private galera: the seed server did not start: %v: %s", ready, sn.logTail())
	}
	return seed, nil
}

var recoveredRE = regexp.MustCompile(`WSREP: Recovered position:\s*([0-9a-f-]{36}):(-?[0-9]+)`)

// recover runs the node's server with --wsrep-recover (it reads its InnoDB
// state and exits) and returns the position it printed.
func (c *galeraCluster) recover(ctx context.Context, n *galeraNode) (uuid string, seqno int64, err error) {
	n.extra = c.galeraArgs(n, c.peers())
	cmd := n.command()
	log := filepath.Join(n.dir, "recover.log")
	for i, a := range cmd.Args {
		if strings.HasPrefix(a, "--log-error=") {
			cmd.Args[i] = "--log-error=" + log
		}
	}
	cmd.Args = append(cmd.Args, "--wsrep-recover")
	cred, err := Credential(n.user)
	if err != nil {
		return "", 0, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	c2 := exec.CommandContext(rctx, cmd.Args[0], cmd.Args[1:]...)
	c2.Dir, c2.SysProcAttr = cmd.Dir, cmd.SysProcAttr
	runErr := c2.Run()
	b, _ := os.ReadFile(log)
	_ = os.Remove(log)
	m := recoveredRE.FindAllStringSubmatch(string(b), -1)
	if len(m) == 0 {
		return "", 0, fmt.Errorf("private galera %s: --wsrep-recover found no position (%v): %s", n.name, runErr, lastLines(string(b), 4))
	}
	last := m[len(m)-1]
	seqno, _ = strconv.ParseInt(last[2], 10, 64)
	return last[1], seqno, nil
}

// setSafeToBootstrap marks n's grastate.dat as the one to bootstrap from.
func setSafeToBootstrap(n *galeraNode) error {
	p := filepath.Join(n.data(), "grastate.dat")
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	s := regexp.MustCompile(`(?m)^safe_to_bootstrap:.*$`).ReplaceAllString(string(b), "safe_to_bootstrap: 1")
	return os.WriteFile(p, []byte(s), 0o660)
}

func (c *galeraCluster) Describe() string { return c.prof.describe() }

func (c *galeraCluster) NodeURL(name string) (string, error) {
	n, err := c.node(name)
	if err != nil {
		return "", err
	}
	return clientURL(c.cred.client, []string{n.pinned.Addr()}, false), nil
}

func (c *galeraCluster) isDown(n *galeraNode) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return n.down
}

// inPrimary reports whether n is up, in the primary component and synced.
func (c *galeraCluster) inPrimary(ctx context.Context, n *galeraNode) (map[string]string, bool) {
	if c.isDown(n) {
		return nil, false
	}
	st, err := myq.Status(ctx, n.rootURL(), "wsrep_cluster_status", "wsrep_ready", "wsrep_local_state_comment", "wsrep_cluster_size")
	if err != nil {
		return nil, false
	}
	return st, st["wsrep_cluster_status"] == "Primary" && st["wsrep_ready"] == "ON"
}

// Primary is the first node (by name) in the primary component: every node
// takes writes; this is the one a client of the node list reaches first.
func (c *galeraCluster) Primary(ctx context.Context) (string, error) {
	for _, n := range c.nodes {
		if n.link.IsCut() {
			continue
		}
		if _, ok := c.inPrimary(ctx, n); ok {
			return n.name, nil
		}
	}
	return "", nil
}

func (c *galeraCluster) Kill(name string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	n.down = true
	c.mu.Unlock()
	c.proxies.cutTo(n.addr())
	err = n.proc.Kill()
	if n.lazy != nil {
		began := time.Now()
		loss, lerr := n.lazy.PowerLoss()
		c.env.logf("  power loss of galera node %s (%s to drop what it never fsynced): %s", n.name, time.Since(began).Round(time.Millisecond), loss)
		if c.env.OnFault != nil {
			c.env.OnFault("power_loss", "node:"+n.name)
		}
		err = errors.Join(err, lerr)
	}
	return err
}

// Restart brings a killed node back with its recovered position; when no node
// runs, the most advanced of the nodes that are down bootstraps the cluster
// first.
func (c *galeraCluster) Restart(ctx context.Context, name string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	if !c.isDown(n) {
		return nil // brought back with an earlier node's bootstrap
	}
	var down []*galeraNode
	for _, m := range c.nodes {
		if c.isDown(m) {
			down = append(down, m)
		}
	}
	if len(down) == len(c.nodes) {
		return c.bootstrapAfterCrash(ctx, down)
	}
	if uuid, seqno, err := c.recover(ctx, n); err == nil && seqno >= 0 {
		n.startPos = uuid + ":" + strconv.FormatInt(seqno, 10)
	}
	return c.startNode(ctx, n)
}

// bootstrapAfterCrash recovers every node's position, bootstraps the cluster
// from the most advanced one and starts the others as joiners.
func (c *galeraCluster) bootstrapAfterCrash(ctx context.Context, nodes []*galeraNode) error {
	var best *galeraNode
	bestSeq := int64(-2)
	pos := map[*galeraNode]string{}
	for _, n := range nodes {
		uuid, seqno, err := c.recover(ctx, n)
		if err != nil {
			return err
		}
		pos[n] = uuid + ":" + strconv.FormatInt(seqno, 10)
		if seqno > bestSeq {
			best, bestSeq = n, seqno
		}
	}
	if err := setSafeToBootstrap(best); err != nil {
		return fmt.Errorf("private galera %s: %w", best.name, err)
	}
	best.bootstrap, best.startPos = true, pos[best]
	c.env.logf("  galera: every node was down; %s bootstraps the cluster again (recovered position %s)", best.name, pos[best])
	if err := c.startNode(ctx, best); err != nil {
		return err
	}
	var rest []*galeraNode
	for _, n := range nodes {
		if n != best {
			n.startPos = pos[n]
			rest = append(rest, n)
		}
	}
	return startAll(rest, func(n *galeraNode) error { return c.startNode(ctx, n) })
}

// Failover is Galera's own: the nodes that still see a majority form the
// primary component.
func (c *galeraCluster) Failover(context.Context) (string, error) { return "", ErrAutomaticFailover }

// Partition cuts nodes from the others: their client proxies, and their group
// communication and state transfers in the kernel.
func (c *galeraCluster) Partition(names []string) error {
	var side, rest []string
	for _, n := range c.nodes {
		if slices.Contains(names, n.name) {
			side = append(side, n.ip)
			n.link.Cut(true)
		} else {
			rest = append(rest, n.ip)
		}
	}
	return c.nft.cut(side, rest)
}

func (c *galeraCluster) Heal() error {
	for _, n := range c.nodes {
		n.link.Cut(false)
	}
	return c.nft.heal()
}

// Settle waits until every live node is synced in one primary component of
// all live nodes and a client of the node list is served.
func (c *galeraCluster) Settle(ctx context.Context) error {
	return pollUntil(ctx, 100*time.Millisecond, func() error {
		live := 0
		for _, n := range c.nodes {
			if !c.isDown(n) {
				live++
				if n.proc.gone() {
					return fmt.Errorf("node %s is gone though durachk did not kill it (killed from outside the run?): %s", n.name, n.logTail())
				}
			}
		}
		for _, n := range c.nodes {
			if c.isDown(n) {
				continue
			}
			st, ok := c.inPrimary(ctx, n)
			if !ok {
				return fmt.Errorf("node %s is not in the primary component (%v)", n.name, st)
			}
			if st["wsrep_local_state_comment"] != "Synced" || st["wsrep_cluster_size"] != strconv.Itoa(live) {
				return fmt.Errorf("node %s is %s in a component of %s (want %d)", n.name, st["wsrep_local_state_comment"], st["wsrep_cluster_size"], live)
			}
		}
		return myq.Ready(ctx, c.url)
	})
}

func (c *galeraCluster) Stop() error {
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
	errs = append(errs, c.nft.remove())
	for _, n := range c.nodes {
		if n.lazy != nil {
			errs = append(errs, n.lazy.Unmount())
			reaper.Forget(reaper.KindPgid, strconv.Itoa(n.lazy.Pid()))
			errs = append(errs, os.RemoveAll(n.lazyMnt), os.RemoveAll(n.lazyMnt+"-lazyfs"))
			continue
		}
		errs = append(errs, os.RemoveAll(n.dir))
	}
	errs = append(errs, os.RemoveAll(filepath.Join(c.env.Dir, "galera-seed")), os.RemoveAll(filepath.Join(c.env.Dir, "galera-tls")))
	c.claim.release()
	return errors.Join(errs...)
}

// Unpin points every pinned client's proxy at the first node of the primary
// component.
func (c *galeraCluster) Unpin(ctx context.Context) error {
	p, err := c.Primary(ctx)
	if err != nil || p == "" {
		return fmt.Errorf("no node in the primary component to move pinned clients to: %v", err)
	}
	pn, _ := c.node(p)
	for _, n := range c.nodes {
		if n.pinned.UpstreamAddr() != pn.addr() {
			n.pinned.SetUpstream(pn.addr())
		}
	}
	return nil
}
