package extclusters_test

import (
	"bufio"
	"context"
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

// The cluster contracts on clusters durachk did not start. Each test starts a
// topology itself, outside durachk, with tools/extcluster/cluster.sh (every
// node a child of that script, which is the test's child, on its own
// loopback address 127.0.B.x; ports and directories of its own), and hands
// durachk only the target URL and the control commands the script prints:
// kill and start through the script, partition and lag with nft. The
// verdicts must be those of the private clusters (cluster_test.go).
//
// Each seeks across seeds: what a real cluster exposes depends on timing.
//
// make test runs them beside the rest (254-276 s of an idle .ci/run's
// make test, 2026-12-06); the private-cluster tests whose verdicts the CI
// cluster gate gives were dropped to make room (beside those, this package
// took 410 s and slowed the others by half).

// existingCluster starts tools/extcluster/cluster.sh up kind and returns the
// target URL it prints (for existingTarget). The script is stopped (SIGTERM: it
// kills its nodes and removes its nftables table and files) at the end of the
// test, and the test checks that it did.
func existingCluster(t *testing.T, kind string, tools ...string) string {
	t.Helper()
	if os.Getenv("DURACHK_PG_URL") == "" {
		t.Skip("DURACHK_PG_URL is not set: no effect store")
	}
	for _, tool := range append(tools, "setpriv", "ss", "flock") {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: cluster.sh up %s needs it", tool, kind)
		}
	}
	if err := targets.CanPartitionKernel(); err != nil {
		t.Skip(err)
	}
	if os.Geteuid() != 0 {
		t.Skip("nft needs root")
	}
	script, err := filepath.Abs("../../../tools/extcluster/cluster.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The servers run as their own users (rabbitmq, postgres): they must
	// reach their directories below this one.
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(script, "up", kind, dir)
	cmd.Stderr = clustertest.Log{T: t}
	// The script cleans up on SIGTERM, also when the test binary dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// exited is closed once the script has ended, waitErr then its status:
	// both the cleanup and a script that printed no target wait for it.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("cluster.sh did not end 30 s after SIGTERM")
		}
		if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) > 0 {
			t.Errorf("cluster.sh left %v", left)
		}
		if b, err := exec.Command("nft", "list", "tables").Output(); err == nil && strings.Contains(string(b), "durachk_x") {
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, "durachk_x") {
					t.Logf("an nftables table of an existing cluster is still there (this test's or a concurrent one's): %s", l)
				}
			}
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case l, ok := <-lines:
		if !ok {
			<-exited
			t.Fatalf("cluster.sh up %s printed no target: %v", kind, waitErr)
		}
		return l
	case <-time.After(runnertest.Loaded(3 * time.Minute)):
		t.Fatalf("cluster.sh up %s: no target after 3 minutes", kind)
	}
	return ""
}

// existingTarget is the target of the cluster at raw (existingCluster), named
// name, with knobs added.
func existingTarget(t *testing.T, raw, name, knobs string) *runner.Target {
	t.Helper()
	spec, err := targets.Parse(raw + "&name=" + name + knobs)
	if err != nil {
		t.Fatal(err)
	}
	// The effect store stays off the cluster the run faults (a Postgres
	// target's store is its own server otherwise), as on a private cluster.
	spec.StoreURL = os.Getenv("DURACHK_PG_URL")
	if !targets.HasExternalCluster(spec) || !targets.CanPartitionNodes(spec) || !targets.CanLagNodes(spec) {
		t.Fatalf("the script's control commands do not make an existing cluster that can be partitioned and lagged")
	}
	tg, err := runner.New(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	tg.Log = clustertest.Log{T: t}
	if c := tg.Capabilities(); !c.NodeFaults || !c.NodePartitions {
		t.Fatalf("capabilities %+v: want node faults and partitions", c)
	}
	return tg
}

// withLag is the cluster at raw (existingCluster) with its lag commands
// dropping percent of the lagged node's replication packets instead of the
// script's rate for the kind (cluster.sh ctl DIR lag NODE PERCENT).
func withLag(t *testing.T, raw string, percent int) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	n := 0
	for k, v := range q {
		if strings.HasPrefix(k, "control.") && strings.HasSuffix(k, ".lag") && len(v) == 1 {
			q.Set(k, v[0]+" "+strconv.Itoa(percent))
			n++
		}
	}
	if n == 0 {
		t.Fatalf("no lag command in the target cluster.sh printed")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// evaluateExisting is evaluateCluster with the checks of an existing
// cluster's run: its node faults went through the control commands.
func evaluateExisting(t *testing.T, tg *runner.Target, id string, seed uint64) contracts.Result {
	t.Helper()
	r := evaluateCluster(t, tg, id, seed, "")
	if r.Verdict == contracts.Skipped {
		t.Fatalf("%s skipped on an existing cluster with every control command: %s", id, r.Reason)
	}
	if r.Cluster != nil && !strings.HasPrefix(r.Cluster.Topology, "attached: existing") {
		t.Errorf("%s ran on %q, not the existing cluster", id, r.Cluster.Topology)
	}
	switch id {
	case "durability.failover":
		// The kill and the lag went through the commands.
		if r.Verdict != contracts.Unknown && (r.Stats.Faults["node_kill"] == 0 || r.Stats.Faults["latency"] == 0) {
			t.Errorf("%s seed %d: faults %v, want a node kill and the replication lag", id, r.Seed, r.Stats.Faults)
		}
	case "partition.minority":
		if r.Verdict != contracts.Unknown && (r.Stats.Faults["node_partition"] == 0 || r.Stats.Faults["node_heal"] == 0) {
			t.Errorf("%s seed %d: faults %v, want a partition and its heal", id, r.Seed, r.Stats.Faults)
		}
	}
	return r
}

// An existing Sentinel-managed Redis (a primary, two replicas, three
// Sentinels): asynchronous replication loses acknowledged enqueues when its
// primary is killed while replication lags, and when it is cut off from the
// others while a client still writes to it; with WAIT 1 the failover loses
// none.
//
// The Sentinels reach the nodes from their own addresses (bind-source-addr):
// from 127.0.0.1 no partition cut them off the primary, and
// partition.minority passed on every seed with no failover (2026-12-04:
// 5 of 5; the cause of the loaded CI runs this test failed before).
//
// Before them, durachk killed mid-run on this cluster (killedRunRestored).
func TestExistingRedisThroughNFT(t *testing.T) {
	t.Parallel() // its own cluster, on its own loopback block and ports
	raw := existingCluster(t, "redis", "redis-server", "redis-cli")
	// First durachk itself, killed mid-run: cleanup makes the cluster whole
	// again, and the next run is not unknown.
	killedRunRestored(t, raw)
	async := existingTarget(t, raw, "existing-redis-async", "")
	first := true
	runnertest.SeekViolation(t, "durability.failover on an existing async redis", contracts.PropLost, func(seed uint64) contracts.Result {
		r := evaluateExisting(t, async, "durability.failover", seed)
		if first && r.Verdict == contracts.Unknown {
			t.Errorf("the first run after the cleanup of a killed run is unknown: %s", r.Reason)
		}
		first = false
		return r
	})
	// Its lag drops 40% of the packets, not the script's 75%: at 75% the 1 s
	// WAIT timed out near the kill and 5 runs of 9 had no enqueue
	// acknowledged and unfinished there (not exercised); at 40% it was
	// exercised and passed on 6 seeds of 6 (2026-12-06).
	wait1 := existingTarget(t, withLag(t, raw, 40), "existing-redis-wait1", "&wait.replicas=1&wait.timeout=1s")
	runnertest.SeekPasses(t, "durability.failover on an existing redis with WAIT 1", 1, func(seed uint64) contracts.Result {
		return evaluateExisting(t, wait1, "durability.failover", seed)
	})
	runnertest.SeekViolation(t, "partition.minority on an existing async redis", contracts.PropLost, func(seed uint64) contracts.Result {
		return evaluateExisting(t, async, "partition.minority", seed)
	})
}

// An existing RabbitMQ cluster of three nodes (pause_minority) with a quorum
// queue: Raft elects a new leader when the leader's node is killed, and no
// confirmed message is lost; a producer on a node cut off from the others
// gets refusals or ambiguous outcomes, never a confirm that is later lost.
// The queue's leader comes from control.status (the management API).
//
// Each node has a name of its own (rabbit-n1@…: epmd, shared by the three,
// registers a node by the name before the @, and a second "rabbit" was
// refused as duplicate_node_name).
func TestExistingRabbitQuorumThroughNFT(t *testing.T) {
	t.Parallel() // its own cluster, on its own loopback block and ports
	raw := existingCluster(t, "rabbitmq", "rabbitmq-server", "curl")
	quorum := existingTarget(t, raw, "existing-rabbitmq-quorum", "&queue-arguments.x-queue-type=quorum")
	runnertest.SeekPasses(t, "durability.failover on an existing quorum queue", 1, func(seed uint64) contracts.Result {
		return evaluateExisting(t, quorum, "durability.failover", seed)
	})
	runnertest.SeekPasses(t, "partition.minority on an existing quorum queue", 1, func(seed uint64) contracts.Result {
		return evaluateExisting(t, quorum, "partition.minority", seed)
	})
}

// An existing Postgres primary and hot standby, failed over by the script's
// watchdog (standing in for Patroni: it promotes the standby that lost its
// primary and rebuilds a deposed primary from a base backup): an
// asynchronous standby promoted while streaming lags has not got the last
// commits the primary acknowledged (enqueues or acks); a synchronous one has
// every one.
//
// The workers reach the pair through durachk's own proxies, which a partition
// cuts (the script's nft rules cannot tell them from the pinned producer: all
// connect from 127.0.0.1); before that, partition.minority on the async pair
// passed 5 of 5 seeds where the private cluster loses.
func TestExistingPostgresThroughNFT(t *testing.T) {
	t.Parallel() // its own clusters, on their own loopback blocks and ports
	async := existingTarget(t, existingCluster(t, "postgres", "psql"), "existing-pg-async", "")
	runnertest.SeekViolation(t, "durability.failover on an existing async standby", contracts.PropLost, func(seed uint64) contracts.Result {
		return evaluateExisting(t, async, "durability.failover", seed)
	})
	sync := existingTarget(t, existingCluster(t, "postgres-sync", "psql"), "existing-pg-sync", "")
	runnertest.SeekPasses(t, "durability.failover on an existing synchronous standby", 1, func(seed uint64) contracts.Result {
		return evaluateExisting(t, sync, "durability.failover", seed)
	})
	// What the promoted standby had not got may be enqueues (lost) or acks
	// (the job delivered again after its ack: unexplained_duplicate, as the
	// ack was answered before the cut): which, depends on timing. A CI run
	// on a cold build cache (load average 17) gave the second on 4 seeds of
	// 5 and the first on none; the synchronous pair below must pass both.
	runnertest.SeekViolationOf(t, "partition.minority on an existing async standby",
		[]contracts.Property{contracts.PropLost, contracts.PropUnexplainedDup}, func(seed uint64) contracts.Result {
			return evaluateExisting(t, async, "partition.minority", seed)
		})
	runnertest.SeekPasses(t, "partition.minority on an existing synchronous standby", 1, func(seed uint64) contracts.Result {
		return evaluateExisting(t, sync, "partition.minority", seed)
	})
}
