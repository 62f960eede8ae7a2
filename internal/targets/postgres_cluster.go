package targets

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/durachk/durachk/adapters/pg"
	"github.com/durachk/durachk/adapters/pg/pgdb"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/internal/redact"
)

// Postgres streaming-replication knobs, written as the user runs Postgres:
//
//	private-cluster.standbys=N                    streaming standbys of the private primary
//	                                              (1 or 2, default 1)
//	private-cluster.synchronous_standby_names=S   the primary's synchronous_standby_names
//	                                              (default empty: asynchronous), e.g. * or
//	                                              ANY 1 (*) or FIRST 1 (n2); standbys are
//	                                              named n2, n3 (application_name)
//	synchronous_commit=on|off|local|remote_write|remote_apply   every session's (as before)
//
// Postgres has no failover of its own: durachk promotes the most up-to-date
// standby (pg_promote) when the plan says failover, as Patroni or an operator
// would, and a node that comes back rejoins as a standby of the current primary
// from a fresh base backup (what pg_rewind would keep, and what it would throw
// away: its unreplicated WAL). Clients use a multi-host URL through a proxy per
// node with target_session_attrs=read-write, so pgx finds the primary itself.
// A multi-host URL of an existing cluster (postgres://h1:5432,h2:5432/db?
// target_session_attrs=read-write) is passed to pgx as it is.
var pgClusterKnobs = map[string]bool{
	ClusterPrefix + "standbys": true, ClusterPrefix + "synchronous_standby_names": true,
}

var pgClusterKind = &ClusterKind{Knobs: pgClusterKnobs, Check: checkPGCluster, Can: canStartPrivatePostgres, Start: startPGCluster,
	Describe: func(s Spec) string { return pgClusterShape(s).describe() }}

func init() {
	for k := range pgClusterKnobs {
		pgKnobs[k] = true
	}
}

type pgClusterProfile struct {
	standbys   int
	syncNames  string
	syncCommit string
}

func pgClusterShape(s Spec) pgClusterProfile {
	p := pgClusterProfile{standbys: 1, syncNames: s.Options[ClusterPrefix+"synchronous_standby_names"], syncCommit: s.Options["synchronous_commit"]}
	if n, err := strconv.Atoi(s.Options[ClusterPrefix+"standbys"]); err == nil {
		p.standbys = n
	}
	if s.Unreplicated {
		p.syncCommit = "local"
	}
	return p
}

func (p pgClusterProfile) describe() string {
	d := fmt.Sprintf("postgres primary + %d streaming standby", p.standbys)
	if p.standbys > 1 {
		d += "s"
	}
	if p.syncNames == "" {
		d += " (asynchronous)"
	} else {
		d += fmt.Sprintf(" (synchronous_standby_names %q)", p.syncNames)
	}
	if p.syncCommit != "" {
		d += ", synchronous_commit " + p.syncCommit
	}
	return d
}

func checkPGCluster(s Spec) error {
	if !HasPrivateCluster(s) {
		return nil
	}
	if v, ok := s.Options[ClusterPrefix+"standbys"]; ok {
		if n, err := strconv.Atoi(v); err != nil || n < 1 || n > 2 {
			return fmt.Errorf("%w: %sstandbys=%q: want 1 or 2", ErrBadTarget, ClusterPrefix, v)
		}
	}
	if v := s.Options[ClusterPrefix+"synchronous_standby_names"]; strings.ContainsAny(v, "'\\\n") {
		return fmt.Errorf("%w: %ssynchronous_standby_names=%q: quotes, backslashes and newlines are not accepted", ErrBadTarget, ClusterPrefix, v)
	}
	if s.Options["transactional_ack"] == "true" {
		return fmt.Errorf("%w: transactional_ack=true needs the effect store in the queue's database; a private cluster is not the store's server", ErrBadTarget)
	}
	return nil
}

type pgNode struct {
	name, ip string
	port     int
	data     string
	proc     PrivateProcess
	link     *faults.Link
	front    *faults.Proxy // every client → the node (a host of the multi-host URL)
	pinned   *faults.Proxy // a client pinned to the node: never cut
	repl     *faults.Proxy // this standby → its primary (primary_conninfo), lagged by the replication link
	down     bool
}

// startupLog is where the server's start-up errors go, beside its data
// directory (which pg_basebackup copies, and which must hold only the
// server's own files).
func (n *pgNode) startupLog() string { return n.data + ".startup.log" }

func (n *pgNode) addr() string { return net.JoinHostPort(n.ip, strconv.Itoa(n.port)) }

// adminURL reaches node n directly, for durachk's own queries.
func (c *pgCluster) adminURL(n *pgNode) string {
	return c.clientURL(n.addr())
}

// clientURL is the superuser's URL of hosts (host:port, comma-separated).
func (c *pgCluster) clientURL(hosts string) string {
	return fmt.Sprintf("postgres://postgres:%s@%s/postgres?sslmode=disable", c.password, hosts)
}

// pgReplicationUser is the role the standbys stream as: REPLICATION LOGIN,
// nothing else (pg_hba lets it make replication connections only).
const pgReplicationUser = "replicator"

// pgCluster is a primary with streaming standbys, each a postgres server of
// its own on its own loopback address, run as the postgres user with its
// data and socket in the run directory.
//
// Every connection needs a password of the run (SCRAM): the superuser
// postgres's for durachk and its workers, pgReplicationUser's for the
// standbys and pg_basebackup, which read it from passfile (mode 0600 in the
// run directory, never on a command line). pg_hba.conf has no trust and no
// local line: nothing connects over the socket.
type pgCluster struct {
	clusterNodes[*pgNode]
	claim   *blockClaim // the run's loopback block, held until Stop
	env     ClusterEnv
	prof    pgClusterProfile
	bin     struct{ initdb, server, basebackup string }
	proxies proxySet
	user    string
	// password is the superuser's, replPassword pgReplicationUser's (in
	// passfile for the standbys and pg_basebackup).
	password, replPassword, passfile string

	mu      sync.Mutex
	primary string
	stopped bool
}

func startPGCluster(ctx context.Context, s Spec, env ClusterEnv) (Cluster, Spec, error) {
	begin := time.Now()
	c := &pgCluster{clusterNodes: clusterNodes[*pgNode]{kind: "postgres cluster"}, env: env, prof: pgClusterShape(s), primary: "n1", password: Secret(16), replPassword: Secret(16),
		passfile: filepath.Join(env.Dir, "pg-replication.pass")}
	var err error
	for _, b := range []struct {
		dst  *string
		name string
	}{{&c.bin.initdb, "initdb"}, {&c.bin.server, "postgres"}, {&c.bin.basebackup, "pg_basebackup"}} {
		if *b.dst, err = pgBin(b.name); err != nil {
			return nil, s, err
		}
	}
	cred, err := Credential("postgres")
	if err != nil {
		return nil, s, err
	}
	if cred != nil {
		c.user = "postgres"
		_ = os.Chmod(env.Dir, 0o711) // the server runs as postgres: it must reach its directory
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
	block := c.claim.block
	for i, name := range nodeNames(1 + c.prof.standbys) {
		n := &pgNode{name: name, ip: fmt.Sprintf("%s.%d", block, 11+i), link: faults.NodeLink(name),
			data: filepath.Join(env.Dir, "pg-"+name)}
		if n.port, err = FreePortOn(n.ip); err != nil {
			return nil, s, err
		}
		if n.front, err = c.proxies.start(&faults.Proxy{Upstream: n.addr(), Also: []*faults.Link{n.link}, OnFault: c.onFault("front:" + name)}); err != nil {
			return nil, s, err
		}
		if n.pinned, err = c.proxies.start(&faults.Proxy{Upstream: n.addr()}); err != nil {
			return nil, s, err
		}
		url := c.adminURL(n)
		n.proc = PrivateProcess{Addr: n.addr(), User: c.user, RunID: env.RunID, Name: "pg-" + name, Command: func() *exec.Cmd { return c.command(n) },
			Ready: func(ctx context.Context) error { _, err := pg.State(ctx, url); return err }}
		c.nodes = append(c.nodes, n)
	}
	primary := c.nodes[0]
	step := time.Now()
	lap := func(what string) {
		env.logf("    %s: %s", what, time.Since(step).Round(time.Millisecond))
		step = time.Now()
	}
	if err := c.initPrimary(ctx, primary); err != nil {
		return nil, s, err
	}
	lap("initdb")
	// A copy of a data directory that was shut down cleanly (initdb's) is a
	// base backup: each standby starts from one and streams the rest, so all
	// nodes start at once, without pg_basebackup's checkpoint and copy.
	for _, n := range c.nodes[1:] {
		if err := c.coldCopy(primary, n); err != nil {
			return nil, s, err
		}
	}
	lap("standby copies")
	if err := startAll(c.nodes, func(n *pgNode) error {
		if err := n.proc.Start(ctx); err != nil {
			return fmt.Errorf("private postgres %s: %w: %s", n.name, err, n.logTail())
		}
		return nil
	}); err != nil {
		return nil, s, err
	}
	lap("nodes up")
	var hosts []string
	for _, n := range c.nodes {
		hosts = append(hosts, n.front.Addr())
	}
	c.url = c.clientURL(strings.Join(hosts, ",")) + "&target_session_attrs=read-write"
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := c.Settle(sctx); err != nil {
		return nil, s, fmt.Errorf("private postgres cluster did not settle after its start: %w", err)
	}
	lap("streaming, settled")
	c.took = time.Since(begin)
	ok = true
	u := s
	u.URL = c.url
	return c, u, nil
}

func (c *pgCluster) onFault(link string) func(string) {
	return func(kind string) {
		if c.env.OnFault != nil {
			c.env.OnFault(kind, link)
		}
	}
}

// command is the server's command line: settings on it, so that nothing of
// the installed server's configuration applies.
func (c *pgCluster) command(n *pgNode) *exec.Cmd {
	args := []string{"-D", n.data, "-p", strconv.Itoa(n.port), "-k", n.data,
		// max_connections: initdb's; a standby must not have fewer than its primary.
		"-c", "listen_addresses=" + n.ip, "-c", "fsync=on", "-c", "max_connections=100",
		"-c", "shared_buffers=16MB", "-c", "wal_level=replica", "-c", "wal_retrieve_retry_interval=100ms",
		"-c", "max_wal_senders=10", "-c", "hot_standby=on", "-c", "wal_log_hints=on",
		"-c", "wal_sender_timeout=5s", "-c", "wal_receiver_timeout=5s", "-c", "wal_receiver_status_interval=1s",
		"-c", "synchronous_standby_names=" + c.prof.syncNames,
		"-c", "cluster_name=durachk-" + n.name,
		"-c", "logging_collector=on", "-c", "log_directory=" + n.data, "-c", "log_filename=server.log"}
	if c.prof.syncCommit != "" && c.prof.syncCommit != "off" {
		args = append(args, "-c", "synchronous_commit="+c.prof.syncCommit)
	}
	if n.repl != nil {
		_, port, _ := net.SplitHostPort(n.repl.Addr())
		args = append(args, "-c", fmt.Sprintf("primary_conninfo=host=127.0.0.1 port=%s user=%s passfile=%s application_name=%s connect_timeout=2",
			port, pgReplicationUser, c.passfile, n.name))
	}
	cmd := exec.Command(c.bin.server, args...)
	cmd.Dir = n.data
	cmd.Env = pgEnv()
	// What the server says before its logging collector runs.
	if f, err := os.OpenFile(n.startupLog(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600); err == nil {
		cmd.Stderr = f
		go func() { time.Sleep(time.Minute); f.Close() }()
	}
	return cmd
}

// pgEnv is durachk's environment without libpq's variables: a PGPASSWORD
// or PGPASSFILE of the user's would take the place of the run's passfile
// (in a standby's WAL receiver too), a PGHOST or PGUSER would redirect a tool.
func pgEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// asUser runs a tool as the server's user, with stdin if not nil, and returns
// its error with its output (without the run's secrets).
func (c *pgCluster) asUser(ctx context.Context, stdin io.Reader, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = c.env.Dir
	cmd.Stdin = stdin
	cmd.Env = pgEnv("PGPASSFILE=" + c.passfile)
	cred, err := Credential(c.user)
	if err != nil {
		return err
	}
	// It dies with durachk too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	cancelGroup(cmd) // a SIGINT ends its server child too, at once
	if out, err := cmd.CombinedOutput(); err != nil {
		msg := strings.TrimSpace(string(out))
		for _, x := range []string{c.password, c.replPassword} {
			msg = strings.ReplaceAll(msg, x, redact.Mask)
		}
		return fmt.Errorf("%s: %v: %s", filepath.Base(name), err, msg)
	}
	return nil
}

// writeOwned writes a file of the run's directory that only the server's
// user (and durachk) may read.
func (c *pgCluster) writeOwned(path, body string) error {
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		return err
	}
	if cred, _ := Credential(c.user); cred != nil {
		return os.Chown(path, int(cred.Uid), int(cred.Gid))
	}
	return nil
}

// mkdata makes an empty data directory the server's user owns.
func (c *pgCluster) mkdata(n *pgNode) error {
	if err := os.RemoveAll(n.data); err != nil {
		return err
	}
	if err := os.MkdirAll(n.data, 0o700); err != nil {
		return err
	}
	if cred, _ := Credential(c.user); cred != nil {
		return os.Chown(n.data, int(cred.Uid), int(cred.Gid))
	}
	return nil
}

// pgHBA is every node's pg_hba.conf: the superuser and the replication role,
// each with its password (SCRAM), over TCP from loopback; nothing else, and
// no connection over the socket.
const pgHBA = `# durachk: every connection needs the run's password
host replication ` + pgReplicationUser + ` 127.0.0.0/8 scram-sha-256
host all postgres 127.0.0.0/8 scram-sha-256
`

// initPrimary makes the primary's data directory: initdb with the
// superuser's password (read from a file removed at once), the replication
// role with its own password (made in single-user mode, the statement on
// stdin), pg_hba.conf, and the passfile the standbys read.
func (c *pgCluster) initPrimary(ctx context.Context, n *pgNode) error {
	if err := c.mkdata(n); err != nil {
		return err
	}
	pwfile := filepath.Join(c.env.Dir, "pg-initdb.pw")
	if err := c.writeOwned(pwfile, c.password+"\n"); err != nil {
		return err
	}
	// 1 MB WAL segments: less to write, and to copy for each standby.
	err := c.asUser(ctx, nil, c.bin.initdb, "-D", n.data, "-U", "postgres", "--auth=scram-sha-256", "--pwfile="+pwfile,
		"-E", "UTF8", "--no-sync", "--no-instructions", "--wal-segsize=1")
	os.Remove(pwfile)
	if err != nil {
		return fmt.Errorf("private postgres n1: %w", err)
	}
	if err := c.writeOwned(c.passfile, "*:*:*:"+pgReplicationUser+":"+c.replPassword+"\n"); err != nil {
		return err
	}
	// A failed statement is not echoed (log_min_error_statement): it holds
	// the password.
	create := fmt.Sprintf("CREATE ROLE %s WITH REPLICATION LOGIN PASSWORD '%s'\n", pgReplicationUser, c.replPassword)
	if err := c.asUser(ctx, strings.NewReader(create), c.bin.server, "--single", "-D", n.data, "-F",
		"-c", "password_encryption=scram-sha-256", "-c", "log_min_error_statement=panic", "-c", "exit_on_error=on", "postgres"); err != nil {
		return fmt.Errorf("private postgres n1: the replication role: %w", err)
	}
	return os.WriteFile(filepath.Join(n.data, "pg_hba.conf"), []byte(pgHBA), 0o600)
}

// coldCopy makes n a standby of primary from a copy of primary's data
// directory, which must be shut down cleanly.
func (c *pgCluster) coldCopy(primary, n *pgNode) error {
	if err := c.mkdata(n); err != nil {
		return err
	}
	cred, err := Credential(c.user)
	if err != nil {
		return err
	}
	err = filepath.Walk(primary.data, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(primary.data, path)
		dst := filepath.Join(n.data, rel)
		switch {
		case rel == ".":
			return nil
		case fi.IsDir():
			err = os.Mkdir(dst, fi.Mode().Perm())
		case fi.Mode().IsRegular():
			err = copyFile(path, dst, fi.Mode().Perm())
		default:
			return nil
		}
		if err == nil && cred != nil {
			err = os.Chown(dst, int(cred.Uid), int(cred.Gid))
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("private postgres %s: copy of n1: %w", n.name, err)
	}
	sig := filepath.Join(n.data, "standby.signal")
	if err := os.WriteFile(sig, nil, 0o600); err != nil {
		return err
	}
	if cred != nil {
		if err := os.Chown(sig, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	p, err := c.proxies.start(&faults.Proxy{Link: c.env.Links[faults.LinkReplication], Upstream: primary.addr(),
		Also: []*faults.Link{n.link, primary.link}, OnFault: c.onFault(faults.LinkReplication + ":" + n.name + "->" + primary.name)})
	if err != nil {
		return err
	}
	n.repl = p
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
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

// rejoin makes n a standby of primary from a fresh base backup, streaming
// through a replication proxy of its own, and starts it.
func (c *pgCluster) rejoin(ctx context.Context, n, primary *pgNode) error {
	_ = n.proc.Kill()
	if n.repl != nil {
		c.proxies.close(n.repl)
		n.repl = nil
	}
	if err := c.mkdata(n); err != nil {
		return err
	}
	// Without -R: primary_conninfo is on the server's command line
	// (command), and -R would write the replication password into the
	// data directory.
	if err := c.asUser(ctx, nil, c.bin.basebackup, "-h", primary.ip, "-p", strconv.Itoa(primary.port), "-U", pgReplicationUser, "-w",
		"-D", n.data, "-X", "stream", "-c", "fast", "-N"); err != nil {
		return fmt.Errorf("private postgres %s: %w", n.name, err)
	}
	if err := c.writeOwned(filepath.Join(n.data, "standby.signal"), ""); err != nil {
		return err
	}
	p, err := c.proxies.start(&faults.Proxy{Link: c.env.Links[faults.LinkReplication], Upstream: primary.addr(),
		Also: []*faults.Link{n.link, primary.link}, OnFault: c.onFault(faults.LinkReplication + ":" + n.name + "->" + primary.name)})
	if err != nil {
		return err
	}
	n.repl = p
	if err := n.proc.Start(ctx); err != nil {
		return fmt.Errorf("private postgres %s: %w", n.name, err)
	}
	c.mu.Lock()
	n.down = false
	c.mu.Unlock()
	return nil
}

func (c *pgCluster) Describe() string { return c.prof.describe() }

// A Postgres cluster is no PartitionTimer: a commit waiting for a synchronous
// standby cut off by a partition waits until the heal (no timeout falls back
// to asynchronous), an asynchronous primary acknowledges at once, and the
// failover is durachk's; wal_sender_timeout and wal_receiver_timeout (5 s)
// only end the replication connection, which the heal opens again.

func (c *pgCluster) NodeURL(name string) (string, error) {
	n, err := c.node(name)
	if err != nil {
		return "", err
	}
	return c.clientURL(n.pinned.Addr()), nil
}

func (c *pgCluster) current() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.primary
}

// Primary is the node durachk promoted last (or n1): Postgres elects nobody.
func (c *pgCluster) Primary(context.Context) (string, error) { return c.current(), nil }

func (c *pgCluster) isDown(n *pgNode) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return n.down
}

func (c *pgCluster) Kill(name string) error {
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
// recovery), any other node as a standby of the current primary.
func (c *pgCluster) Restart(ctx context.Context, name string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	p := c.current()
	if p == name {
		if err := n.proc.Start(ctx); err != nil {
			return err
		}
		c.mu.Lock()
		n.down = false
		c.mu.Unlock()
		return nil
	}
	pn, err := c.node(p)
	if err != nil {
		return err
	}
	return c.rejoin(ctx, n, pn)
}

// Failover promotes the live, reachable standby whose WAL goes furthest, and
// makes the other standbys follow it.
func (c *pgCluster) Failover(ctx context.Context) (string, error) {
	old := c.current()
	var best *pgNode
	var bestLSN uint64
	for _, n := range c.nodes {
		if n.name == old || c.isDown(n) || n.link.IsCut() {
			continue
		}
		st, err := pg.State(ctx, c.adminURL(n))
		if err != nil || !st.InRecovery {
			continue
		}
		if best == nil || st.LSN > bestLSN {
			best, bestLSN = n, st.LSN
		}
	}
	if best == nil {
		return "", errors.New("postgres cluster: no live standby to promote")
	}
	if err := pg.Promote(ctx, c.adminURL(best)); err != nil {
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
		if n == best || n.name == old || c.isDown(n) || n.link.IsCut() {
			continue
		}
		if err := c.rejoin(ctx, n, best); err != nil {
			return best.name, err
		}
	}
	return best.name, nil
}

func (c *pgCluster) Partition(names []string) error {
	for _, name := range names {
		n, err := c.node(name)
		if err != nil {
			return err
		}
		n.link.Cut(true)
	}
	return nil
}

func (c *pgCluster) Heal() error {
	for _, n := range c.nodes {
		n.link.Cut(false)
	}
	return nil
}

// upstreamOf names the node a standby's WAL receiver streams from (its
// replication proxy).
func (c *pgCluster) upstreamOf(n *pgNode, addr string) string {
	if n.repl == nil || n.repl.Addr() != addr {
		return ""
	}
	for _, m := range c.nodes {
		if m.addr() == n.repl.UpstreamAddr() {
			return m.name
		}
	}
	return ""
}

// Settle waits until the primary takes writes, every other live node streams
// from it (a deposed primary that still takes writes, or a standby that
// follows another, rejoins from a fresh base backup), synchronous standbys
// are attached where they are configured, and a client of the multi-host URL
// finds the primary.
func (c *pgCluster) Settle(ctx context.Context) error {
	notStreaming := map[string]time.Time{}
	return pollUntil(ctx, 100*time.Millisecond, func() error {
		for _, n := range c.nodes {
			if !c.isDown(n) && n.proc.gone() {
				return fmt.Errorf("node %s is gone though durachk did not kill it (killed from outside the run?)", n.name)
			}
		}
		p := c.current()
		pn, err := c.node(p)
		if err != nil {
			return err
		}
		if c.isDown(pn) {
			return fmt.Errorf("the primary %s is down", p)
		}
		st, err := pg.State(ctx, c.adminURL(pn))
		if err != nil {
			return fmt.Errorf("primary %s: %w", p, err)
		}
		if st.InRecovery {
			return fmt.Errorf("%s is named primary but is in recovery", p)
		}
		for _, n := range c.nodes {
			if n == pn || c.isDown(n) {
				continue
			}
			ns, err := pg.State(ctx, c.adminURL(n))
			if err != nil {
				return fmt.Errorf("standby %s: %w", n.name, err)
			}
			if !ns.InRecovery || (ns.Streaming && c.upstreamOf(n, ns.Upstream) != p) {
				if err := c.rejoin(ctx, n, pn); err != nil {
					return err
				}
				return fmt.Errorf("%s did not follow %s: it rejoined from a fresh base backup", n.name, p)
			}
			if !ns.Streaming {
				// A WAL receiver that does not come back by itself is
				// reinitialised, as an operator (or Patroni) would.
				if notStreaming[n.name].IsZero() {
					notStreaming[n.name] = time.Now()
				} else if time.Since(notStreaming[n.name]) > 10*time.Second {
					delete(notStreaming, n.name)
					if err := c.rejoin(ctx, n, pn); err != nil {
						return err
					}
					c.env.logf("  %s did not stream for 10 s: it rejoined %s from a fresh base backup", n.name, p)
				}
				return fmt.Errorf("standby %s is not streaming", n.name)
			}
			delete(notStreaming, n.name)
		}
		if c.prof.syncNames != "" && len(st.Sync) == 0 {
			return fmt.Errorf("no synchronous standby is attached to %s", p)
		}
		db, err := pgdb.Open(ctx, c.url, pgdb.Options{MaxConns: 1})
		if err != nil {
			return fmt.Errorf("a client of the multi-host URL: %w", err)
		}
		db.Close()
		return nil
	})
}

func (c *pgCluster) Stop() error {
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
	c.proxies.closeAll()
	for _, n := range c.nodes {
		errs = append(errs, os.RemoveAll(n.data), os.RemoveAll(n.startupLog()))
	}
	errs = append(errs, os.RemoveAll(c.passfile))
	c.claim.release()
	return errors.Join(errs...)
}

// Unpin points every pinned client's proxy at the current primary.
func (c *pgCluster) Unpin(ctx context.Context) error {
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

// logTail is the end of a node's server log, or its start-up errors: the run
// directory is gone once the run ends.
func (n *pgNode) logTail() string {
	var out []string
	for _, f := range []string{filepath.Join(n.data, "server.log"), n.startupLog()} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		out = append(out, lines[max(0, len(lines)-6):]...)
	}
	if len(out) == 0 {
		return "no log"
	}
	return "its log ends: " + strings.Join(out, " | ")
}
