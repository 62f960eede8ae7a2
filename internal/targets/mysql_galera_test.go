package targets

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	myq "github.com/durachk/durachk/adapters/mysql"
	"github.com/durachk/durachk/adapters/queuetest"
)

// assertGaleraLockedDown: outsiders try to join the private Galera cluster
// c, each a mariadbd started beside it with what `ps` shows of the nodes
// (the cluster's name, a member's group communication address) and nothing
// else — no certificate of the run's, no account: one speaks plain gcomm,
// one TLS with a certificate and CA of its own, one TLS with a certificate
// of its own and the run's CA (a certificate is no secret). None may become
// a member (the cluster stays at its size) or get any of the run's data by
// a state transfer (a database made on the cluster before they start), and
// the member they reach says it refused a certificate. No node's command line
// holds a password. The cluster is whole afterwards.
func assertGaleraLockedDown(t *testing.T, c Cluster) {
	t.Helper()
	gc := c.(*galeraCluster)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	n1 := gc.nodes[0]
	const marker = "durachk_outsider_probe"
	if err := myq.Exec(ctx, n1.rootURL(), "CREATE DATABASE "+marker); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = myq.Exec(ctx, n1.rootURL(), "DROP DATABASE IF EXISTS "+marker) }()
	for _, n := range gc.nodes {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", n.proc.cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{gc.cred.root, gc.cred.client, gc.cred.repl, gc.cred.sst} {
			if strings.Contains(string(cmdline), secret) {
				t.Errorf("%s's command line holds a password", n.name)
			}
		}
	}
	size := strconv.Itoa(len(gc.nodes))
	seed, err := makeSeed(ctx, gc.bins, filepath.Join(reachable(t), "seed"), n1.user)
	if err != nil {
		t.Fatal(err)
	}
	outsiders := []*outsider{
		startOutsider(t, gc, seed, "plain", nil),
		startOutsider(t, gc, seed, "tls-own-ca", ownTLS(t, n1.user, "")),
		startOutsider(t, gc, seed, "tls-own-cert", ownTLS(t, n1.user, n1.tls.ca)),
	}
	// Until every outsider gave up, the cluster has its members only (one
	// without TLS took the first outsider in within seconds).
	joined := ""
	deadline := time.Now().Add(time.Duration(queuetest.LoadFactor() * float64(60*time.Second)))
	for joined == "" && time.Now().Before(deadline) && !allExited(outsiders) {
		st, err := myq.Status(ctx, n1.rootURL(), "wsrep_cluster_size")
		if err == nil && st["wsrep_cluster_size"] != size {
			joined = st["wsrep_cluster_size"]
		}
		time.Sleep(100 * time.Millisecond)
	}
	if joined != "" {
		// What it got: the state transfer that follows a join.
		for wait := time.Now().Add(20 * time.Second); time.Now().Before(wait) && !receivedAny(outsiders, marker); {
			time.Sleep(200 * time.Millisecond)
		}
		t.Errorf("an outsider joined: the cluster had %s members, not %s", joined, size)
	}
	for _, o := range outsiders {
		gaveUp := o.exited()
		o.stop()
		if _, err := os.Stat(filepath.Join(o.node.data(), marker)); err == nil {
			t.Errorf("outsider %s received the run's database %s", o.name, marker)
		}
		log, _ := os.ReadFile(o.node.errorLog())
		if joined == "" && !gaveUp {
			t.Errorf("outsider %s neither joined nor gave up within %s: %s", o.name, time.Until(deadline), lastLines(string(log), 6))
		}
	}
	if joined != "" {
		t.FailNow()
	}
	if b, _ := os.ReadFile(n1.errorLog()); !strings.Contains(string(b), "certificate verify failed") {
		t.Errorf("n1 does not say it refused a certificate the run's CA did not sign: %s", lastLines(string(b), 6))
	}
	sctx, scancel := context.WithTimeout(ctx, 40*time.Second)
	defer scancel()
	if err := c.Settle(sctx); err != nil {
		t.Fatalf("after the outsiders: %v", err)
	}
}

// assertGaleraSST: n2, killed, loses its state (grastate.dat) and starts
// with no position: it can join only by a full state transfer, which the
// donor makes with mysqldump into n2's own server as the run's state
// transfer account. It then has a database made while it was down.
func assertGaleraSST(t *testing.T, c Cluster) {
	t.Helper()
	gc := c.(*galeraCluster)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n2 := gc.nodes[1]
	if err := c.Kill(n2.name); err != nil {
		t.Fatal(err)
	}
	const marker = "durachk_sst_probe"
	if err := myq.Exec(ctx, gc.nodes[0].rootURL(), "CREATE DATABASE "+marker); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(n2.data(), "grastate.dat")); err != nil {
		t.Fatal(err)
	}
	if err := gc.startNode(ctx, n2); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 60*time.Second)
	defer scancel()
	if err := c.Settle(sctx); err != nil {
		t.Fatalf("n2 without its state: %v", err)
	}
	if err := myq.Exec(ctx, n2.rootURL(), "USE "+marker); err != nil {
		t.Errorf("n2 after its state transfer: %v", err)
	}
	sent := false
	for _, n := range gc.nodes {
		b, _ := os.ReadFile(n.errorLog())
		sent = sent || strings.Contains(string(b), "mysqldump SST completed on donor")
	}
	if !sent {
		t.Errorf("no donor says it made a full state transfer with mysqldump; n2's log: %s", lastLines(readFile(n2.errorLog()), 8))
	}
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func allExited(outs []*outsider) bool {
	for _, o := range outs {
		if !o.exited() {
			return false
		}
	}
	return true
}

func receivedAny(outs []*outsider, db string) bool {
	for _, o := range outs {
		if _, err := os.Stat(filepath.Join(o.node.data(), db)); err == nil {
			return true
		}
	}
	return false
}

type outsider struct {
	name string
	node *galeraNode
	cmd  *exec.Cmd
	done chan struct{}
}

func (o *outsider) exited() bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

func (o *outsider) stop() {
	_ = syscall.Kill(-o.cmd.Process.Pid, syscall.SIGKILL)
	<-o.done
}

// startOutsider starts a mariadbd of its own on 127.0.0.1 (a copy of seed:
// fresh system tables, none of the run's accounts) that asks to join gc's
// cluster by its name at n1's group communication address, with an rsync
// state transfer (which needs no account); tls, if set, is its own
// certificate, key and CA (socket.ssl_*). It gives up when it finds no
// primary component to join within a few seconds.
func startOutsider(t *testing.T, gc *galeraCluster, seed *mysqlSeed, name string, tls *tlsFiles) *outsider {
	t.Helper()
	n := &galeraNode{clusterNode: clusterNode{name: "outsider-" + name}}
	n.mariadbNode = mariadbNode{dir: filepath.Join(reachable(t), "outsider"), ip: "127.0.0.1", user: gc.nodes[0].user, bins: gc.bins}
	if err := n.mkdir(); err != nil {
		t.Fatal(err)
	}
	if err := seed.copyTo(&n.mariadbNode); err != nil {
		t.Fatal(err)
	}
	var sst int
	var err error
	for _, p := range []*int{&n.port, &n.gcomm, &n.ist, &sst} {
		if *p, err = FreePortOn(n.ip); err != nil {
			t.Fatal(err)
		}
	}
	opts := []string{"gmcast.listen_addr=tcp://" + n.gcommAddr(), "ist.recv_addr=" + net.JoinHostPort(n.ip, strconv.Itoa(n.ist)),
		fmt.Sprintf("pc.wait_prim_timeout=PT%dS", int(8*queuetest.LoadFactor())), "evs.install_timeout=PT4S", "gmcast.peer_timeout=PT2S"}
	if tls != nil {
		opts = append(opts, tls.providerOptions()...)
	}
	n.extra = []string{"--wsrep-on=ON", "--wsrep-provider=" + galeraProvider, "--wsrep-cluster-name=" + gc.name, "--wsrep-node-name=" + n.name,
		"--wsrep-node-address=" + n.ip, "--wsrep-cluster-address=gcomm://" + gc.nodes[0].gcommAddr(),
		"--wsrep-provider-options=" + strings.Join(opts, ";"), "--wsrep-sst-method=rsync",
		"--wsrep-sst-receive-address=" + net.JoinHostPort(n.ip, strconv.Itoa(sst)),
		"--binlog-format=ROW", "--innodb-autoinc-lock-mode=2", "--default-storage-engine=InnoDB"}
	cmd := n.command()
	for i, a := range cmd.Args {
		if strings.HasPrefix(a, "--init-file=") {
			cmd.Args = append(cmd.Args[:i], cmd.Args[i+1:]...)
			break
		}
	}
	cmd.Env = append(os.Environ(), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	cred, err := Credential(n.user)
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	o := &outsider{name: name, node: n, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(o.done) }()
	t.Cleanup(o.stop)
	return o
}

// ownTLS is a certificate and key of the outsider's, signed by a CA of its
// own (made as the run makes its own).
func ownTLS(t *testing.T, user, trust string) *tlsFiles {
	t.Helper()
	fs, err := writeTLS(filepath.Join(reachable(t), "tls"), user, []string{"outsider"})
	if err != nil {
		t.Fatal(err)
	}
	f := fs["outsider"]
	if trust != "" {
		// It trusts the run's CA (a certificate is no secret), but its own
		// certificate is not one the run's CA signed.
		b, err := os.ReadFile(trust)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f.ca, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return &f
}

// reachable is a temporary directory the servers' user (mysql) can reach.
func reachable(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
