package clusters_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/runner/runnertest"
)

// A cluster run cancelled mid-way (SIGINT in the CLI) leaves no node, helper,
// schema, directory or nftables table behind.
func TestCancelledClusterRunLeavesNothing(t *testing.T) {
	tg := clusterTarget(t, "DURACHK_REDIS_URL", "private-cluster.replicas=2&private-cluster.sentinels=3&name=redis-async")
	var runID, dir string
	tg.OnRun = func(id, d string) { runID, dir = id, d }
	c, _ := contracts.Lookup("durability.failover")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := contracts.Evaluate(ctx, tg, c, contracts.Options{Seed: 1})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Evaluate after cancel: %v, want the context's error", err)
	}
	if runID == "" {
		t.Fatal("the run never started")
	}
	if left := clusterLeftovers(t, runID, dir); len(left) > 0 {
		t.Errorf("left behind after cancel: %v", left)
	}
}

// The verdicts the CI cluster gate gives on seed 1 (.ci/clusters.yaml, baseline
// .ci/clusters-baseline.json) are not sought again here: Redis async
// durability.failover a violation, with WAIT 1 a pass, Postgres synchronous
// standby a pass, RabbitMQ quorum leader kill a pass (and the existing-cluster
// tests, internal/runner/extclusters, seek the same verdicts across seeds on
// clusters durachk did not start). What the gate does not run is here.

// The negative control on the WAIT 1 target: without the WAIT the failover
// loses what the primary acknowledged.
func TestRedisFailoverUnreplicatedIsCaught(t *testing.T) {
	t.Parallel() // its own private cluster, on its own loopback block and ports
	tg := clusterTarget(t, "DURACHK_REDIS_URL", "private-cluster.replicas=2&private-cluster.sentinels=3&wait.replicas=1&wait.timeout=1s&name=redis-wait1")
	runnertest.SeekViolation(t, "the unreplicated sabotage", contracts.PropLost, func(seed uint64) contracts.Result {
		return evaluateCluster(t, tg, "durability.failover", seed, "unreplicated")
	})
}

// A deposed Redis primary keeps acknowledging the client that still reaches
// it; Sentinel turns it into a replica once the partition heals and its
// writes are gone.
func TestRedisPartitionMinorityLosesWrites(t *testing.T) {
	t.Parallel() // its own private cluster, on its own loopback block and ports
	tg := clusterTarget(t, "DURACHK_REDIS_URL", "private-cluster.replicas=2&private-cluster.sentinels=3&name=redis-async")
	runnertest.SeekViolation(t, "partition.minority on async redis", contracts.PropLost, func(seed uint64) contracts.Result {
		return evaluateCluster(t, tg, "partition.minority", seed, "")
	})
}

// Redis replicates a consumer group's deliveries asynchronously too: after a
// failover the new primary hands out a token the store has already accepted.
// Whether a run shows it depends on which deliveries the replicas had when
// the primary died: with the kill at any moment a lease was held, 1 seed in
// 3 raised it beside other tests. The kill now waits for a job handed out
// within half the replication lag (Plan.KillAfterLease): 5 of 6 runs of
// seed 1 beside two busy loops. The test still seeks a seed that does.
func TestRedisFencingFailoverReissuesTokens(t *testing.T) {
	t.Parallel() // its own private cluster, on its own loopback block and ports
	tg := clusterTarget(t, "DURACHK_REDIS_URL", "private-cluster.replicas=2&private-cluster.sentinels=3&name=redis-async")
	runnertest.SeekViolation(t, "fencing.failover on async redis", contracts.PropTokenReissued, func(seed uint64) contracts.Result {
		return evaluateCluster(t, tg, "fencing.failover", seed, "")
	})
}

// A Postgres standby promoted while streaming lags has not got the last
// commits the primary acknowledged.
func TestPostgresAsyncFailoverLosesCommits(t *testing.T) {
	t.Parallel() // its own private cluster, on its own loopback block and ports
	tg := clusterTarget(t, "DURACHK_PG_URL", "private-cluster.standbys=1&name=pg-async")
	runnertest.SeekViolation(t, "durability.failover on an async standby", contracts.PropLost, func(seed uint64) contracts.Result {
		return evaluateCluster(t, tg, "durability.failover", seed, "")
	})
}

// With a synchronous standby a deposed primary acknowledges nothing: the
// partition loses nothing (the failover's pass is the cluster gate's).
func TestPostgresSyncStandbyPartitionPasses(t *testing.T) {
	t.Parallel() // its own private cluster, on its own loopback block and ports
	tg := clusterTarget(t, "DURACHK_PG_URL", "private-cluster.standbys=1&private-cluster.synchronous_standby_names=*&name=pg-sync")
	runnertest.SeekPasses(t, "partition.minority on a synchronous standby", 1, func(seed uint64) contracts.Result {
		return evaluateCluster(t, tg, "partition.minority", seed, "")
	})
}
