package targets

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseControl(t *testing.T) {
	q := func(kv ...string) string {
		v := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Add(kv[i], kv[i+1])
		}
		return "redis://127.0.0.1:6379/0?" + v.Encode()
	}
	tests := []struct {
		name, url string
		want      map[string]string // nil: no control
		wantErr   string
		kills     bool
	}{
		{"none", "redis://127.0.0.1:6379/0", nil, "", false},
		{"kill and start", q("control.kill", "docker kill -s KILL r", "control.start", "docker start r"),
			map[string]string{"kill": "docker kill -s KILL r", "start": "docker start r"}, "", true},
		{"all four and a timeout", q("control.kill", "k", "control.start", "s", "control.pause", "p", "control.resume", "r", "control.timeout", "90s"),
			map[string]string{"kill": "k", "start": "s", "pause": "p", "resume": "r", "timeout": "90s"}, "", true},
		{"per node", q("control.n1.kill", "k1", "control.n1.start", "s1"), map[string]string{"n1.kill": "k1", "n1.start": "s1"}, "", false},
		{"kill without start", q("control.kill", "k"), nil, "control.kill needs control.start", false},
		{"resume without pause", q("control.resume", "r"), nil, "control.resume needs control.pause", false},
		{"node kill without start", q("control.n1.kill", "k"), nil, "control.n1.kill needs control.n1.start", false},
		{"unknown action", q("control.restart", "x"), nil, `unknown setting "control.restart"`, false},
		{"bad node", q("control.N 1.kill", "x", "control.N 1.start", "y"), nil, "node name", false},
		{"empty command", q("control.kill", " ", "control.start", "s"), nil, "control.kill is empty", false},
		{"bad timeout", q("control.kill", "k", "control.start", "s", "control.timeout", "soon"), nil, "control.timeout", false},
		{"twice", q("control.kill", "a", "control.kill", "b", "control.start", "s"), nil, "given 2 times", false},
		{"node faults and status", q("control.n1.partition", "p", "control.n1.heal", "h", "control.n1.lag", "l", "control.n1.unlag", "u", "control.status", "st"),
			map[string]string{"n1.partition": "p", "n1.heal": "h", "n1.lag": "l", "n1.unlag": "u", "status": "st"}, "", false},
		{"partition without heal", q("control.n1.partition", "p"), nil, "control.n1.partition needs control.n1.heal", false},
		{"unlag without lag", q("control.n2.unlag", "u"), nil, "control.n2.unlag needs control.n2.lag", false},
		{"a broker's partition", q("control.partition", "p", "control.heal", "h"), nil, "is a node's: control.<node>.", false},
		{"a node's status", q("control.n1.status", "st"), nil, "status is the cluster's", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse(tt.url)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrBadTarget) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse: %v, want a bad-target error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Control) != len(tt.want) {
				t.Fatalf("Control = %v, want %v", s.Control, tt.want)
			}
			for k, v := range tt.want {
				if s.Control[k] != v {
					t.Errorf("Control[%s] = %q, want %q", k, s.Control[k], v)
				}
			}
			if strings.Contains(s.URL, "control") {
				t.Errorf("the kind's URL still has the control commands: %s", s.URL)
			}
			if s.ControlKills() != tt.kills {
				t.Errorf("ControlKills = %v, want %v", s.ControlKills(), tt.kills)
			}
			if tt.want != nil && strings.Contains(Redact(tt.url), "docker") {
				t.Errorf("Redact leaves the commands in %s", Redact(tt.url))
			}
		})
	}
}

// RunControl: a failing command's output and text never reach the error; a
// command past its timeout is killed with everything it started.
func TestRunControl(t *testing.T) {
	dir := t.TempDir()
	pidfile := filepath.Join(dir, "child.pid")
	s := Spec{Control: map[string]string{
		"kill":    "echo Sup3rSecret; echo Sup3rSecret >&2; exit 3",
		"start":   "sleep 30 & echo $! > " + pidfile + "; wait",
		"timeout": "300ms",
	}}
	err := RunControl(context.Background(), s, "", ActionKill)
	if err == nil || !errors.Is(err, ErrControl) || !strings.Contains(err.Error(), "control.kill failed") {
		t.Fatalf("RunControl of a failing command: %v", err)
	}
	if strings.Contains(err.Error(), "Sup3rSecret") {
		t.Errorf("the error shows the command or its output: %v", err)
	}
	begin := time.Now()
	err = RunControl(context.Background(), s, "", ActionStart)
	if err == nil || !strings.Contains(err.Error(), "did not finish within 300ms") {
		t.Fatalf("RunControl past its timeout: %v", err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("RunControl returned after %s, want about the timeout", d)
	}
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	pid := atoi(strings.TrimSpace(string(b)))
	for wait := time.Now().Add(2 * time.Second); !zombieProc(pid) && time.Now().Before(wait); {
		time.Sleep(20 * time.Millisecond)
	}
	if !zombieProc(pid) {
		t.Errorf("the command's child (pid %d) outlived the timeout", pid)
	}
	if err := RunControl(context.Background(), s, "n1", ActionKill); err == nil || !strings.Contains(err.Error(), "control.n1.kill is not set") {
		t.Errorf("RunControl of an unset node command: %v", err)
	}
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// A Postgres whose effect store is the same server cannot be killed by its
// control commands: the run's results would die with it.
func TestControlKillNeedsAnotherStore(t *testing.T) {
	v := url.Values{"control.kill": {"k"}, "control.start": {"s"}}
	s, err := Parse("postgres://postgres@127.0.0.1:5432/test?" + v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if err := CanKillBroker(s); err == nil || !strings.Contains(err.Error(), "effect store") {
		t.Errorf("CanKillBroker with the store on the killed server: %v", err)
	}
	s.StoreURL = "postgres://postgres@127.0.0.1:5433/store"
	if err := CanKillBroker(s); err != nil {
		t.Errorf("CanKillBroker with a store elsewhere: %v", err)
	}
}

// An existing cluster's node faults go through its commands: partition and
// heal per node, lag and unlag on every node that has them (with the planned
// delay in their environment), the leader from control.status (with the run's
// queue for RabbitMQ), and Stop heals and unlags what a run left cut or lagged.
func TestExternalClusterFaultCommands(t *testing.T) {
	dir := t.TempDir()
	logf := filepath.Join(dir, "log")
	v := url.Values{}
	for _, n := range []string{"n1", "n2", "n3"} {
		v.Set("control."+n+".kill", "true")
		v.Set("control."+n+".start", "true")
		v.Set("control."+n+".addr", "127.0.0.1:1")
		v.Set("control."+n+".partition", "echo "+n+" partition $DURACHK_RUN_ID >> "+logf)
		v.Set("control."+n+".heal", "echo "+n+" heal >> "+logf)
		if n != "n3" {
			v.Set("control."+n+".lag", "echo "+n+" lag $DURACHK_LAG_DELAY_MS $DURACHK_LAG_JITTER_MS >> "+logf)
			v.Set("control."+n+".unlag", "echo "+n+" unlag >> "+logf)
		}
	}
	v.Set("control.status", "echo some noise; echo \"queue $DURACHK_QUEUE\" >> "+logf+"; echo leader n2")
	s, err := Parse("amqp://guest:guest@127.0.0.1:1/?" + v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if !HasExternalCluster(s) || !CanPartitionNodes(s) || !CanLagNodes(s) {
		t.Fatalf("HasExternalCluster %v, CanPartitionNodes %v, CanLagNodes %v: want all", HasExternalCluster(s), CanPartitionNodes(s), CanLagNodes(s))
	}
	cl, _, err := StartCluster(context.Background(), s, ClusterEnv{RunID: "abcd1234", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	lg, ok := cl.(Lagger)
	if !ok {
		t.Fatal("an existing cluster with lag commands is not a Lagger")
	}
	ctx := context.Background()
	if p, err := cl.Primary(ctx); err != nil || p != "n2" {
		t.Fatalf("Primary = %q, %v; want n2 from control.status", p, err)
	}
	if err := cl.Partition([]string{"n1"}); err != nil {
		t.Fatal(err)
	}
	if err := cl.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Heal(); err != nil { // nothing cut: nothing run
		t.Fatal(err)
	}
	lagged, err := lg.Lag(ctx, 200*time.Millisecond, 50*time.Millisecond)
	if err != nil || strings.Join(lagged, ",") != "n1,n2" {
		t.Fatalf("Lag = %v, %v; want n1,n2 (n3 has no lag command)", lagged, err)
	}
	if err := lg.Unlag(ctx); err != nil {
		t.Fatal(err)
	}
	// A run that ends while n3 is cut off and replication lags.
	if err := cl.Partition([]string{"n3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := lg.Lag(ctx, time.Second, 0); err != nil {
		t.Fatal(err)
	}
	if err := cl.Stop(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(logf)
	if err != nil {
		t.Fatal(err)
	}
	want := "queue durachk.abcd1234\nn1 partition abcd1234\nn1 heal\nn1 lag 200 50\nn2 lag 200 50\nn1 unlag\nn2 unlag\n" +
		"n3 partition abcd1234\nn1 lag 1000 0\nn2 lag 1000 0\nn3 heal\nn1 unlag\nn2 unlag\n"
	if string(b) != want {
		t.Errorf("commands run:\n%s\nwant:\n%s", b, want)
	}

	// Without partition commands on every node, or without lag commands, the
	// cluster cannot be partitioned or lagged; a status naming no node is an error.
	v.Del("control.n3.partition")
	v.Del("control.n3.heal")
	for _, n := range []string{"n1", "n2"} {
		v.Del("control." + n + ".lag")
		v.Del("control." + n + ".unlag")
	}
	v.Set("control.status", "echo leader n9")
	s, err = Parse("redis://127.0.0.1:1/0?" + v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if CanPartitionNodes(s) || CanLagNodes(s) {
		t.Errorf("CanPartitionNodes %v, CanLagNodes %v without the commands on every node", CanPartitionNodes(s), CanLagNodes(s))
	}
	cl, _, err = StartCluster(context.Background(), s, ClusterEnv{RunID: "abcd1234", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	if _, ok := cl.(Lagger); ok {
		t.Error("an existing cluster without lag commands is a Lagger")
	}
	if err := cl.Partition([]string{"n3"}); err == nil || !strings.Contains(err.Error(), "no control.n3.partition") {
		t.Errorf("Partition of a node without the command: %v", err)
	}
	if _, err := cl.Primary(ctx); err == nil || !strings.Contains(err.Error(), "n9") {
		t.Errorf("Primary from a status naming no node: %v", err)
	}
}

func TestLeaderLine(t *testing.T) {
	for out, want := range map[string]string{"leader n1\n": "n1", "x\nleader  n2 \n": "n2", "leader -\n": "", "": "", "leader\n": "", "leader a b\n": "", "leader N1": ""} {
		if got := leaderLine(out); got != want {
			t.Errorf("leaderLine(%q) = %q, want %q", out, got, want)
		}
	}
}

// On an existing Postgres pair, every client reaches the nodes from one place,
// so a command cannot cut the workers off a node and leave the pinned producer
// with it: the multi-host URL goes through durachk's own proxies, and a
// partition cuts the node's proxy while its pinned client still gets through.
func TestExternalPostgresPartitionCutsTheClientsOutsideTheMinority(t *testing.T) {
	echo := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
			}
		}()
		return ln.Addr().String()
	}
	addrs := map[string]string{"n1": echo(), "n2": echo()}
	v := url.Values{}
	for n, a := range addrs {
		v.Set("control."+n+".kill", "true")
		v.Set("control."+n+".start", "true")
		v.Set("control."+n+".addr", a)
		v.Set("control."+n+".partition", "true")
		v.Set("control."+n+".heal", "true")
	}
	v.Set("target_session_attrs", "read-write")
	s, err := Parse("postgres://u@" + addrs["n1"] + "," + addrs["n2"] + ",db.example:5432/d?" + v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	cl, spec, err := StartCluster(context.Background(), s, ClusterEnv{RunID: "abcd1234", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	u, err := url.Parse(cl.URL())
	if err != nil {
		t.Fatal(err)
	}
	hosts := strings.Split(u.Host, ",")
	if spec.URL != cl.URL() || len(hosts) != 3 || hosts[0] == addrs["n1"] || hosts[1] == addrs["n2"] || hosts[2] != "db.example:5432" ||
		u.Query().Get("target_session_attrs") != "read-write" {
		t.Fatalf("URL %s (spec %s): want n1 and n2 behind proxies, the third host and the query unchanged", cl.URL(), spec.URL)
	}
	pinned, err := cl.NodeURL("n1")
	if err != nil {
		t.Fatal(err)
	}
	pu, err := url.Parse(pinned)
	if err != nil {
		t.Fatal(err)
	}
	// answers says whether addr echoes a byte within. A cut proxy never
	// answers: the wait for it is the test's cost; one that must answer gets
	// long enough for a loaded machine.
	const must, cut = 10 * time.Second, time.Second
	answers := func(addr string, within time.Duration) bool {
		c, err := net.DialTimeout("tcp", addr, within)
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(within))
		if _, err := c.Write([]byte{7}); err != nil {
			return false
		}
		b := make([]byte, 1)
		_, err = io.ReadFull(c, b)
		return err == nil && b[0] == 7
	}
	for i, h := range hosts[:2] {
		if !answers(h, must) {
			t.Fatalf("host %d (%s) does not reach its node before the partition", i, h)
		}
	}
	if err := cl.Partition([]string{"n1"}); err != nil {
		t.Fatal(err)
	}
	if answers(hosts[0], cut) {
		t.Error("the clients outside the minority still reach n1 while it is cut off")
	}
	if !answers(hosts[1], must) {
		t.Error("the clients do not reach n2 while n1 is cut off")
	}
	if !answers(pu.Host, must) {
		t.Error("the producer pinned to n1 does not reach it while it is cut off")
	}
	if err := cl.Heal(); err != nil {
		t.Fatal(err)
	}
	if !answers(hosts[0], must) {
		t.Error("the clients do not reach n1 again after the heal")
	}
}
