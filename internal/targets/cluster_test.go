package targets

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// clusterLeftovers lists the processes whose command line names dir and dir
// itself, if it is still there.
func clusterLeftovers(dir string) []string {
	var left []string
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		b, err := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), dir) {
			left = append(left, "process "+p.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left = append(left, "file "+e.Name())
	}
	return left
}

func startTestCluster(t *testing.T, url string) (Cluster, Spec, string) {
	t.Helper()
	s, err := Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	if err := CanFaultNodes(s); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	s.RunID = "t" + randSuffix()
	c, s, err := StartCluster(context.Background(), s, ClusterEnv{Dir: dir, RunID: s.RunID, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
		if left := clusterLeftovers(dir); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	})
	t.Logf("%s started and settled in %v", c.Describe(), c.StartTime())
	return c, s, dir
}

func waitPrimary(t *testing.T, c Cluster, not string, within time.Duration) (string, time.Duration) {
	t.Helper()
	begin := time.Now()
	for time.Since(begin) < within {
		p, err := c.Primary(context.Background())
		if err == nil && p != "" && p != not {
			return p, time.Since(begin)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no primary other than %s within %v", not, within)
	return "", 0
}

func settle(t *testing.T, c Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	begin := time.Now()
	if err := c.Settle(ctx); err != nil {
		t.Fatalf("did not settle: %v", err)
	}
	t.Logf("settled in %v", time.Since(begin))
}

// Sentinels promote a replica once the primary is killed; the old primary
// comes back as a replica of the new one.
func TestRedisClusterSentinelFailover(t *testing.T) {
	c, s, _ := startTestCluster(t, "redis://127.0.0.1:6379/0?private-cluster.replicas=2&private-cluster.sentinels=3")
	if c.StartTime() > 2*time.Second {
		t.Errorf("start took %v, want ≤ 2 s", c.StartTime())
	}
	if !strings.Contains(s.URL, "master_name=") {
		t.Fatalf("the run's URL is not a Sentinel URL: %s", Redact(s.URL))
	}
	if p, err := c.Primary(context.Background()); err != nil || p != "n1" {
		t.Fatalf("primary %q, %v; want n1", p, err)
	}
	if err := c.Kill("n1"); err != nil {
		t.Fatal(err)
	}
	p, took := waitPrimary(t, c, "n1", 10*time.Second)
	t.Logf("sentinels promoted %s %v after the kill", p, took)
	if err := c.Restart(context.Background(), "n1"); err != nil {
		t.Fatal(err)
	}
	settle(t, c)
	if got, _ := c.Primary(context.Background()); got != p {
		t.Fatalf("primary %s after the restart of n1, want %s", got, p)
	}
}

// Without Sentinels durachk promotes the most up-to-date replica and moves the
// clients' address; a partitioned node is cut from the clients.
func TestRedisClusterManualFailover(t *testing.T) {
	c, _, _ := startTestCluster(t, "redis://127.0.0.1:6379/0?private-cluster.replicas=2&private-cluster.sentinels=0")
	if err := c.Kill("n1"); err != nil {
		t.Fatal(err)
	}
	p, err := c.Failover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p == "n1" {
		t.Fatal("promoted the dead primary")
	}
	if err := c.Restart(context.Background(), "n1"); err != nil {
		t.Fatal(err)
	}
	settle(t, c)
	if err := c.Partition([]string{p}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := c.Settle(ctx); err == nil {
		t.Fatal("settled with the primary partitioned away")
	}
	if err := c.Heal(); err != nil {
		t.Fatal(err)
	}
	settle(t, c)
}

func TestRedisClusterKnobs(t *testing.T) {
	tests := []struct{ url, err string }{
		{"redis://127.0.0.1:6379/0?private-cluster.replicas=2", ""},
		{"redis://127.0.0.1:6379/0?private-cluster.replicas=0", "private-cluster.replicas"},
		{"redis://127.0.0.1:6379/0?private-cluster.sentinels=2", "private-cluster.sentinels"},
		{"redis://127.0.0.1:6379/0?private-cluster.replicas=1&private-cluster.min-replicas-to-write=2", "exceeds"},
		{"redis://127.0.0.1:6379/0?private-cluster.nodes=3", "unknown setting"},
		{"redis://127.0.0.1:6379/0?wait.replicas=1&wait.timeout=250ms", ""},
		{"redis://127.0.0.1:6379/0?wait.replicas=x", "wait.replicas"},
		{"redis://127.0.0.1:6379/0?wait.timeout=1h", "wait.timeout"},
		{"redis://127.0.0.1:26379/0?master_name=mymaster&addr=127.0.0.1:26380", ""},
		{"redis://127.0.0.1:26379/0?master_name=mymaster&private-cluster.replicas=1", "existing cluster"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.url)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.url, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: got %v, want an error with %q", tt.url, err, tt.err)
		}
	}
}
