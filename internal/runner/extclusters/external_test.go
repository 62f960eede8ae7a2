package extclusters_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/internal/runner/clustertest"
	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/internal/targets"
)

// existingRedis starts, outside durachk, what a user already runs: a Redis
// primary, two replicas and three Sentinels, daemonized, and returns the
// Sentinel URL with every node's control commands. The test stops them all.
func existingRedis(t *testing.T) string {
	t.Helper()
	server, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not found")
	}
	dir, err := os.MkdirTemp("", "durachk-existing-redis-")
	if err != nil {
		t.Fatal(err)
	}
	port := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	var pidfiles []string
	t.Cleanup(func() {
		for _, f := range pidfiles {
			if b, err := os.ReadFile(f); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		os.RemoveAll(dir)
	})
	start := func(conf string, lines ...string) {
		if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		args := []string{conf}
		if strings.Contains(conf, "sentinel") {
			args = append(args, "--sentinel")
		}
		if out, err := exec.Command(server, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", conf, err, out)
		}
		// A daemonized server reports success before it binds: wait until it
		// serves, or say why not (its log), instead of failing later at a dial.
		var addr, logf string
		for _, l := range lines {
			if p, ok := strings.CutPrefix(l, "port "); ok {
				addr = "127.0.0.1:" + p
			}
			if f, ok := strings.CutPrefix(l, "logfile "); ok {
				logf = f
			}
		}
		for i := 0; ; i++ {
			c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
			if err == nil {
				c.Close()
				break
			}
			if i == 100 {
				b, _ := os.ReadFile(logf)
				t.Fatalf("%s does not serve on %s after 10 s: %v; its log: %s", conf, addr, err, b)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	q := url.Values{}
	ports := []int{port(), port(), port()}
	for i, p := range ports {
		name := fmt.Sprintf("n%d", i+1)
		conf := filepath.Join(dir, name+".conf")
		pid := filepath.Join(dir, name+".pid")
		pidfiles = append(pidfiles, pid)
		lines := []string{"bind 127.0.0.1", "port " + strconv.Itoa(p), "daemonize yes", "pidfile " + pid, "dir " + dir,
			"dbfilename " + name + ".rdb", "appendonly yes", "appendfilename " + name + ".aof", "appenddirname " + name + "-aof",
			`save ""`, "repl-diskless-sync-delay 0", "logfile " + filepath.Join(dir, name+".log")}
		if i > 0 {
			lines = append(lines, "replicaof 127.0.0.1 "+strconv.Itoa(ports[0]))
		}
		start(conf, lines...)
		q.Set("control."+name+".kill", fmt.Sprintf("kill -9 $(cat %s)", pid))
		q.Set("control."+name+".start", fmt.Sprintf("%s %s", server, conf))
		q.Set("control."+name+".addr", fmt.Sprintf("127.0.0.1:%d", p))
	}
	var sentinels []string
	for j := 1; j <= 3; j++ {
		p := port()
		conf := filepath.Join(dir, fmt.Sprintf("sentinel%d.conf", j))
		pid := filepath.Join(dir, fmt.Sprintf("sentinel%d.pid", j))
		pidfiles = append(pidfiles, pid)
		start(conf, "bind 127.0.0.1", "port "+strconv.Itoa(p), "daemonize yes", "pidfile "+pid, "dir "+dir,
			"logfile "+filepath.Join(dir, fmt.Sprintf("sentinel%d.log", j)),
			fmt.Sprintf("sentinel monitor mymaster 127.0.0.1 %d 2", ports[0]),
			"sentinel down-after-milliseconds mymaster 500", "sentinel failover-timeout mymaster 5000")
		sentinels = append(sentinels, fmt.Sprintf("127.0.0.1:%d", p))
	}
	q.Set("master_name", "mymaster")
	for _, s := range sentinels[1:] {
		q.Add("addr", s)
	}
	q.Set("name", "existing-redis")
	// The Sentinels find each other through the master's hello channel (every 2 s).
	time.Sleep(5 * time.Second)
	return "redis://" + sentinels[0] + "/0?" + q.Encode()
}

// An existing Sentinel-managed Redis under per-node control commands: the
// cluster contracts kill its primary through them, the Sentinels fail over,
// and the killed node is started again; it cannot be partitioned by durachk.
func TestExistingRedisClusterUnderControlCommands(t *testing.T) {
	t.Parallel() // brokers of its own, on ports of their own
	if os.Getenv("DURACHK_PG_URL") == "" {
		t.Skip("DURACHK_PG_URL is not set: no store")
	}
	spec, err := targets.Parse(existingRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	if !targets.HasExternalCluster(spec) {
		t.Fatal("the control commands of three nodes do not make an existing cluster")
	}
	tg, err := runner.New(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	tg.Log = clustertest.Log{T: t}
	if !tg.Capabilities().NodeFaults || tg.Capabilities().NodePartitions {
		t.Fatalf("capabilities %+v: want node faults without partitions", tg.Capabilities())
	}
	c, _ := contracts.Lookup("durability.failover")
	// A verdict (pass or violation: what an asynchronous Redis loses depends
	// on the moment of the kill), with the node killed, failed over and
	// started again; a run that did not settle in time tries the next seed.
	rs, ok := runnertest.Seek(t, 1, func(seed uint64) contracts.Result {
		r, err := contracts.Evaluate(context.Background(), tg, c, contracts.Options{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("durability.failover on an existing cluster, seed %d: %s (%s); cluster %+v", r.Seed, r.Verdict, r.Reason, r.Cluster)
		return r
	}, func(r contracts.Result) bool { return r.Verdict == contracts.Pass || r.Verdict == contracts.Violated })
	r := rs[len(rs)-1]
	if !ok {
		t.Fatalf("no verdict in %d seeds; the last: %s: %s", len(rs), r.Verdict, r.Reason)
	}
	if r.Stats.Faults["node_kill"] == 0 || r.Stats.Faults["failover"] == 0 || r.Stats.Faults["node_restart"] == 0 {
		t.Fatalf("faults %v: want a node killed, a failover and the node started again", r.Stats.Faults)
	}
	p, _ := contracts.Lookup("partition.minority")
	r, err = contracts.Evaluate(context.Background(), tg, p, contracts.Options{Seed: 1})
	if err != nil || r.Verdict != contracts.Skipped {
		t.Fatalf("partition.minority on an existing cluster: %s (%s), %v; want skipped", r.Verdict, r.Reason, err)
	}
}
