package targets

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	myq "github.com/durachk/durachk/adapters/mysql"
	"github.com/durachk/durachk/adapters/queuetest"
)

// startMySQLClusterForTest starts the private topology raw names, or skips.
func startMySQLClusterForTest(t *testing.T, raw string) (Cluster, Spec) {
	t.Helper()
	if os.Getenv("DURACHK_MYSQL_URL") == "" {
		t.Skip("DURACHK_MYSQL_URL is not set: private MariaDB clusters are tested where the MariaDB target is")
	}
	if testing.Short() {
		t.Skip("starts a private MariaDB cluster")
	}
	s, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := CanFaultNodes(s); err != nil {
		t.Skip(err)
	}
	s.RunID = "tmycl" + randSuffix()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, cs, err := StartCluster(ctx, s, ClusterEnv{Dir: runDir(t), RunID: s.RunID, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cl.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return cl, cs
}

// A semi-synchronous (AFTER_SYNC) primary's acknowledged enqueues are on the
// replica it fails over to; the old primary rejoins as a replica and the
// cluster settles with it.
func TestMySQLReplicaClusterFailover(t *testing.T) {
	cl, s := startMySQLClusterForTest(t, "mysql://root@127.0.0.1:3306/test?private-cluster.replicas=1&private-cluster.rpl_semi_sync_master_enabled=ON&private-cluster.rpl_semi_sync_master_wait_point=AFTER_SYNC")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	q, err := OpenQueue(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for i := range 5 {
		if err := q.Enqueue(ctx, queuetest.Job("j"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.Kill("n1"); err != nil {
		t.Fatal(err)
	}
	p, err := cl.Failover(ctx)
	if err != nil || p != "n2" {
		t.Fatalf("failover = %s, %v; want n2", p, err)
	}
	inv, err := finalInspect(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Queued) != 5 {
		t.Errorf("after the failover the queue holds %v, want the 5 acknowledged jobs", inv.Queued)
	}
	if err := cl.Restart(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 40*time.Second)
	defer scancel()
	if err := cl.Settle(sctx); err != nil {
		t.Fatal(err)
	}
	rs, err := myq.ReplicaStatus(ctx, cl.(*replicaCluster).nodes[0].rootURL())
	if err != nil || rs == nil || rs["Slave_SQL_Running"] != "Yes" {
		t.Errorf("n1 after its rejoin: %v, %v", rs, err)
	}
}

// finalInspect inspects through a fresh connection (the pool's may point at
// the killed node).
func finalInspect(ctx context.Context, q adapters.Queue) (adapters.Inventory, error) {
	var inv adapters.Inventory
	var err error
	for range 20 {
		if inv, err = q.(adapters.Inspector).Inspect(ctx); err == nil {
			return inv, nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return inv, err
}
