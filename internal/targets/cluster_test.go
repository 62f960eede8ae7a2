package targets

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/internal/reaper"
	"github.com/durachk/durachk/internal/runner/runnertest"
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
		if e.Name() != reaper.LockName { // the test's own, until its cleanup
			left = append(left, "file "+e.Name())
		}
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
	// Not t.TempDir: its parent is closed to the postgres user the servers
	// run as. A run directory, locked: another durachk's cleanup spares it.
	s.RunID = "t" + randSuffix()
	dir, err := os.MkdirTemp("", reaper.DirPattern(s.RunID))
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := reaper.LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unlock(); os.RemoveAll(dir) })
	c, s, err := StartCluster(context.Background(), s, ClusterEnv{Dir: dir, RunID: s.RunID, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		begin := time.Now()
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
		t.Logf("stopped in %v", time.Since(begin))
		if left := clusterLeftovers(dir); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	})
	t.Logf("%s started and settled in %v", c.Describe(), c.StartTime())
	return c, s, dir
}

// waitPrimary waits for a primary other than not, within the bound stretched
// by the machine's load.
func waitPrimary(t *testing.T, c Cluster, not string, within time.Duration) (string, time.Duration) {
	t.Helper()
	within = runnertest.Loaded(within)
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
	ctx, cancel := context.WithTimeout(context.Background(), runnertest.Loaded(20*time.Second))
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
	t.Parallel() // a cluster of its own, on a loopback block of its own
	c, s, _ := startTestCluster(t, "redis://127.0.0.1:6379/0?private-cluster.replicas=2&private-cluster.sentinels=3")
	assertRedisLockedDown(t, c)
	if c.StartTime() > runnertest.Loaded(10*time.Second) {
		t.Errorf("start took %v", c.StartTime())
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
	// On a loaded machine the Sentinels (down-after 500 ms) may fail over
	// again; whoever is primary, every node follows it (Settle checked).
	if got, _ := c.Primary(context.Background()); got == "" {
		t.Fatal("no primary after the restart of n1")
	}
}

// Without Sentinels durachk promotes the most up-to-date replica and moves the
// clients' address; a partitioned node is cut from the clients.
func TestRedisClusterManualFailover(t *testing.T) {
	t.Parallel() // a cluster of its own, on a loopback block of its own
	c, _, _ := startTestCluster(t, "redis://127.0.0.1:6379/0?private-cluster.replicas=2&private-cluster.sentinels=0")
	assertRedisLockedDown(t, c)
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

// durachk promotes the standby; the old primary comes back as a standby of it
// from a fresh base backup; a deposed primary cut off by a partition rejoins
// once the partition heals.
func TestPostgresClusterFailover(t *testing.T) {
	t.Parallel() // a cluster of its own, on a loopback block of its own
	c, s, _ := startTestCluster(t, "postgres://postgres@127.0.0.1:5432/test?sslmode=disable&private-cluster.standbys=1")
	assertPGLockedDown(t, c)
	// ≤ 2 s on an idle machine; the bound leaves room for a loaded one.
	if c.StartTime() > runnertest.Loaded(10*time.Second) {
		t.Errorf("start took %v", c.StartTime())
	}
	if !strings.Contains(s.URL, "target_session_attrs=read-write") {
		t.Fatalf("the run's URL is not a multi-host URL: %s", s.URL)
	}
	if err := c.Kill("n1"); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	p, err := c.Failover(context.Background())
	if err != nil || p != "n2" {
		t.Fatalf("failover: %q, %v", p, err)
	}
	t.Logf("promoted %s in %v", p, time.Since(begin))
	if err := c.Restart(context.Background(), "n1"); err != nil {
		t.Fatal(err)
	}
	settle(t, c)
	// Split brain: the primary cut off, the standby promoted, then the heal.
	if err := c.Partition([]string{"n2"}); err != nil {
		t.Fatal(err)
	}
	if p, err := c.Failover(context.Background()); err != nil || p != "n1" {
		t.Fatalf("failover during the partition: %q, %v", p, err)
	}
	if err := c.Heal(); err != nil {
		t.Fatal(err)
	}
	settle(t, c)
	assertPGLockedDown(t, c) // n1 and n2 rejoined from base backups
}

func TestPostgresClusterKnobs(t *testing.T) {
	tests := []struct{ url, err string }{
		{"postgres://postgres@127.0.0.1:5432/test?private-cluster.standbys=1&private-cluster.synchronous_standby_names=*", ""},
		{"postgres://postgres@127.0.0.1:5432/test?private-cluster.standbys=3", "private-cluster.standbys"},
		{"postgres://postgres@127.0.0.1:5432/test?private-cluster.synchronous_standby_names=a'b", "quotes"},
		{"postgres://postgres@127.0.0.1:5432/test?private-cluster.standbys=1&transactional_ack=true", "transactional_ack"},
		{"postgres://postgres@127.0.0.1:5432/test?private-cluster.replicas=1", "unknown setting"},
		{"postgres://postgres@h1:5432,h2:5432/test?target_session_attrs=read-write", ""},
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

// Raft elects a new leader of the run's quorum queue once its leader's node
// is killed; the node rejoins on restart; a node cut away in the kernel comes
// back after the heal.
func TestRabbitClusterLeaderKillAndPartition(t *testing.T) {
	t.Parallel() // a cluster of its own, on a loopback block of its own
	if testing.Short() {
		t.Skip("a RabbitMQ cluster takes tens of seconds")
	}
	c, s, _ := startTestCluster(t, "amqp://guest:guest@127.0.0.1:5672/?queue-arguments.x-queue-type=quorum&private-cluster.nodes=3&private-cluster.cluster_partition_handling=pause_minority")
	assertRabbitLockedDown(t, c)
	if !strings.Contains(s.URL, "addr=") {
		t.Fatalf("the run's URL is not a node list: %s", Redact(s.URL))
	}
	leader, err := c.Primary(context.Background())
	if err != nil || leader == "" {
		t.Fatalf("leader %q, %v", leader, err)
	}
	if err := c.Kill(leader); err != nil {
		t.Fatal(err)
	}
	p, took := waitPrimary(t, c, leader, 30*time.Second)
	t.Logf("Raft elected %s %v after the kill of %s", p, took, leader)
	if err := c.Restart(context.Background(), leader); err != nil {
		t.Fatal(err)
	}
	settle(t, c)
	if err := CanPartitionKernel(); err != nil {
		t.Skip(err)
	}
	if err := c.Partition([]string{p}); err != nil {
		t.Fatal(err)
	}
	q, took := waitPrimary(t, c, p, 60*time.Second)
	t.Logf("after %s was cut away, %s leads, %v later", p, q, took)
	if err := c.Heal(); err != nil {
		t.Fatal(err)
	}
	settle(t, c)
}

func TestRabbitClusterKnobs(t *testing.T) {
	tests := []struct{ url, err string }{
		{"amqp://guest:guest@127.0.0.1:5672/?private-cluster.nodes=3&private-cluster.cluster_partition_handling=autoheal", ""},
		{"amqp://guest:guest@127.0.0.1:5672/?private-cluster.nodes=4", "private-cluster.nodes"},
		{"amqp://guest:guest@127.0.0.1:5672/?private-cluster.cluster_partition_handling=pause_if_all_down", "cluster_partition_handling"},
		{"amqp://guest:guest@127.0.0.1:5672/?private-cluster.nodes=3&queue-arguments.x-quorum-initial-group-size=4", "x-quorum-initial-group-size"},
		{"amqp://guest:guest@127.0.0.1:5672/?private-cluster.nodes=3&queue-arguments.x-quorum-initial-group-size=2", ""},
		{"amqp://guest:guest@h1:5672/?addr=h2:5672&addr=h3:5672", ""},
		{"amqp://guest:guest@127.0.0.1:5672/?private-cluster.replicas=1", "unknown setting"},
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
	if got := nodeList("amqp://u:p@h1:5672/?addr=h2:5672&addr=h3:5672"); strings.Join(got, ",") != "h2:5672,h3:5672" {
		t.Errorf("node list %v", got)
	}
}

func TestLoopbackBlock(t *testing.T) {
	for _, id := range []string{"abcd1234", "k0000", "ffffffffff"} {
		b := LoopbackBlock(id)
		if !strings.HasPrefix(b, "127.0.") || b == "127.0.0" || b == "127.0.1" {
			t.Errorf("%s: block %s is not a run's own loopback /24", id, b)
		}
		if LoopbackBlock(id) != b {
			t.Errorf("%s: two blocks", id)
		}
	}
}

// Two live runs never share a block, even when their run ids prefer the same
// one; a released block is free again.
func TestClaimLoopbackBlock(t *testing.T) {
	a, err := claimLoopbackBlock("claim-test-a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.release()
	// A run id that prefers a's block: a's claim must push it to another.
	var same string
	for i := 0; i < 100000 && same == ""; i++ {
		if id := fmt.Sprintf("claim-test-%d", i); LoopbackBlock(id) == a.block && id != "claim-test-a" {
			same = id
		}
	}
	if same == "" {
		t.Fatal("no run id found that prefers the same block")
	}
	b, err := claimLoopbackBlock(same)
	if err != nil {
		t.Fatal(err)
	}
	if b.block == a.block {
		t.Fatalf("two live runs got block %s", a.block)
	}
	if ClaimedBlock(same) != b.block {
		t.Errorf("ClaimedBlock(%s) = %s, want %s", same, ClaimedBlock(same), b.block)
	}
	b.release()
	if _, err := os.Stat(filepath.Join(blockLockDir(), "durachk-loopback-"+b.block+".lock")); err == nil {
		t.Errorf("released block %s left its lock file", b.block)
	}
	a.release()
	c, err := claimLoopbackBlock(same)
	if err != nil {
		t.Fatal(err)
	}
	defer c.release()
	if c.block != LoopbackBlock(same) {
		t.Errorf("after the release, %s got %s, want its own %s", same, c.block, LoopbackBlock(same))
	}
}
