package extclusters_test

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	rq "github.com/durachk/durachk/adapters/redis"
	"github.com/durachk/durachk/internal/runner/runnertest"
)

// commandLine is the first line of `durachk run`: the command's id.
var commandLine = regexp.MustCompile(`^durachk: run ([a-z0-9]+): `)

// killedRunRestored: durachk, run as a user runs it on the existing cluster
// at raw (existingCluster), is killed with SIGKILL right after its first node
// kill, with the replication lag it began still on: the cluster is left with
// a node down and the script's nft rules in place. `durachk cleanup` of the
// target, named by the id the command printed, then starts, unlags and
// heals what the run left, one line each, and waits until the cluster
// answers: every node of the script runs again, its nft chain holds no rule,
// and one node leads while the other follows it with its link up.
func killedRunRestored(t *testing.T, raw string) {
	t.Helper()
	bin := runnertest.Binary(t)
	target := raw + "&name=existing-redis-killed"
	cmd := exec.Command(bin, "run", "--target", target, "--contract", "durability.failover", "--out", t.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var id string
	var out bytes.Buffer
	killed := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			l := sc.Text()
			out.WriteString(l + "\n")
			if m := commandLine.FindStringSubmatch(l); m != nil && id == "" {
				id = m[1]
			}
			if strings.Contains(l, ": killed node ") {
				_ = cmd.Process.Kill()
				close(killed)
				break
			}
		}
		_ = cmd.Wait()
	}()
	select {
	case <-killed:
		<-exited
	case <-exited:
		t.Fatalf("durachk ended before its first node kill:\n%s", out.String())
	case <-time.After(runnertest.Loaded(3 * time.Minute)):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("no node kill within 3 minutes:\n%s", out.String())
	}
	if id == "" {
		t.Fatalf("durachk printed no run id:\n%s", out.String())
	}
	t.Logf("durachk run %s killed after:\n%s", id, out.String())
	c := scriptCluster(t, raw)
	if c.allUp() && len(c.rules(t)) == 0 {
		t.Fatal("the killed run left every node up and no nft rule: nothing for cleanup to undo")
	}
	t.Logf("left by the killed run: nodes up %v, rules %q", c.up(), c.rules(t))

	var cout bytes.Buffer
	cl := exec.Command(bin, "cleanup", "--target", target, "--run", id)
	cl.Stdout, cl.Stderr = &cout, &cout
	if err := cl.Run(); err != nil {
		t.Fatalf("cleanup: %v\n%s", err, cout.String())
	}
	t.Logf("cleanup:\n%s", cout.String())
	for _, want := range []string{"ran control.n", " had killed node n", " had lagged node n", "the cluster answers again", "removed postgres schema durachk_"} {
		if !strings.Contains(cout.String(), want) {
			t.Errorf("cleanup did not say %q", want)
		}
	}
	if !c.allUp() {
		t.Errorf("after the cleanup, nodes up: %v", c.up())
	}
	if r := c.rules(t); len(r) > 0 {
		t.Errorf("after the cleanup, the cluster's nft rules: %q", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	roles := map[string]int{}
	for _, a := range c.addrs {
		r, err := rq.NodeReplication(ctx, a, "")
		if err != nil {
			t.Errorf("after the cleanup, %s: %v", a, err)
			continue
		}
		if r.Role == "slave" && !r.LinkUp {
			t.Errorf("after the cleanup, %s follows with its link down", a)
		}
		roles[r.Role]++
	}
	if roles["master"] != 1 || roles["slave"] != len(c.addrs)-1 {
		t.Errorf("after the cleanup, roles %v: want one master, the others its replicas", roles)
	}
}

// script is a cluster of tools/extcluster/cluster.sh, read from its target
// URL: the directory its control commands name, its nft table and nodes.
type script struct {
	dir, table string
	nodes      []string
	addrs      []string
}

func scriptCluster(t *testing.T, raw string) *script {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	s := &script{}
	q := u.Query()
	for k, v := range q {
		node, ok := strings.CutSuffix(strings.TrimPrefix(k, "control."), ".kill")
		if !ok || !strings.HasPrefix(k, "control.") {
			continue
		}
		f := strings.Fields(v[0]) // SCRIPT ctl DIR kill NODE
		if len(f) != 5 {
			t.Fatalf("control.%s.kill = %q: not cluster.sh's", node, v[0])
		}
		s.dir = f[2]
		s.nodes = append(s.nodes, node)
		s.addrs = append(s.addrs, q.Get("control."+node+".addr"))
	}
	env, err := os.ReadFile(filepath.Join(s.dir, "cluster.env"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(env), "\n") {
		if v, ok := strings.CutPrefix(l, "TABLE="); ok {
			s.table = v
		}
	}
	if s.table == "" || len(s.nodes) < 2 {
		t.Fatalf("cluster.sh's cluster at %s: table %q, nodes %v", s.dir, s.table, s.nodes)
	}
	return s
}

// up lists the nodes that accept connections.
func (s *script) up() []string {
	var out []string
	for i, n := range s.nodes {
		if c, err := net.DialTimeout("tcp", s.addrs[i], time.Second); err == nil {
			c.Close()
			out = append(out, n)
		}
	}
	return out
}

func (s *script) allUp() bool { return len(s.up()) == len(s.nodes) }

// rules lists the rules of the script's nft table (each a fault: a cut, a
// lag, a node down).
func (s *script) rules(t *testing.T) []string {
	t.Helper()
	b, err := exec.Command("nft", "list", "chain", "inet", s.table, "out").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list chain inet %s out: %v: %s", s.table, err, b)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "comment \"") {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}
