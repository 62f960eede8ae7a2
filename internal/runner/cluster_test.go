package runner

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/targets"
)

type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// clusterTarget is a target with a private cluster shaped by knobs, on the
// kind of envURL's broker (which also holds the store, through
// DURACHK_PG_URL).
func clusterTarget(t *testing.T, env, knobs string) *Target {
	t.Helper()
	base := os.Getenv(env)
	if base == "" || os.Getenv("DURACHK_PG_URL") == "" {
		t.Skipf("%s or DURACHK_PG_URL is not set: no broker and store to run a cluster against", env)
	}
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	spec, err := targets.Parse(base + sep + knobs)
	if err != nil {
		t.Fatal(err)
	}
	if err := targets.CanFaultNodes(spec); err != nil {
		t.Skip(err)
	}
	tg, err := New(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	tg.Log = testLog{t}
	return tg
}

// evaluateCluster runs contract id on tg and checks that the run left nothing
// and stayed within 30 s.
func evaluateCluster(t *testing.T, tg *Target, id string, seed uint64, sab string) contracts.Result {
	t.Helper()
	var runID, dir string
	tg.OnRun = func(rid, d string) { runID, dir = rid, d }
	c, err := contracts.Lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	var r contracts.Result
	if sab == "" {
		r, err = contracts.Evaluate(context.Background(), tg, c, contracts.Options{Seed: seed})
	} else {
		for _, s := range c.Sabotages {
			if s.Name == sab {
				r, err = contracts.EvaluateSabotage(context.Background(), tg, c, s, contracts.Options{Seed: seed})
			}
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s seed %d on %s: %s (%s) in %v; cluster %+v", id, seed, tg.MeasuredOn(), r.Verdict, r.Reason, r.Wall.Round(time.Millisecond), r.Cluster)
	if r.Wall > 30*time.Second {
		t.Errorf("%s took %v, want ≤ 30 s", id, r.Wall)
	}
	if left := leftovers(t, runID, dir); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	return r
}

func witnessed(r contracts.Result, p contracts.Property) bool {
	for _, v := range r.Violations {
		if v.Property == p && len(v.Witness) > 0 {
			return true
		}
	}
	return false
}

// Redis with asynchronous replication loses acknowledged enqueues when its
// primary dies while replication lags and Sentinel promotes a replica.
func TestRedisFailoverLosesAcknowledgedEnqueues(t *testing.T) {
	tg := clusterTarget(t, "DURACHK_REDIS_URL", "private-cluster.replicas=2&private-cluster.sentinels=3&name=redis-async")
	r := evaluateCluster(t, tg, "durability.failover", 1, "")
	if r.Verdict != contracts.Violated || !witnessed(r, contracts.PropLost) {
		t.Fatalf("durability.failover on async redis: %s (%s), want a witnessed violation lost", r.Verdict, r.Reason)
	}
}

// With every enqueue waiting for one replica (WAIT 1), no acknowledged
// enqueue is lost.
func TestRedisFailoverWithWaitPasses(t *testing.T) {
	tg := clusterTarget(t, "DURACHK_REDIS_URL", "private-cluster.replicas=2&private-cluster.sentinels=3&wait.replicas=1&wait.timeout=1s&name=redis-wait1")
	for seed := uint64(1); seed <= 3; seed++ {
		r := evaluateCluster(t, tg, "durability.failover", seed, "")
		if r.Verdict != contracts.Pass {
			t.Errorf("seed %d: %s (%s), want pass", seed, r.Verdict, r.Reason)
			for _, v := range r.Violations {
				t.Logf("  %s %s: %s", v.Property, v.Job, v.Message)
			}
		}
	}
}
