// Package loadfactor_test shows that a configuration's verdict does not
// change with the machine's load: the same verdict class with the scenario
// clock unstretched ($DURACHK_LOAD_FACTOR=1) and stretched fourfold (4, what
// a busy machine gets), for the faults whose timing against the broker's own
// timers decides what they threaten — a power cut against a log synced once
// a second, a partition against a semi-synchronous timeout. Its own package:
// the load factor is the process's environment, so its tests cannot run
// beside the other real-broker tests of a package (t.Setenv), and go test
// runs packages side by side.
package loadfactor_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/lazyfs"
	"github.com/durachk/durachk/internal/loadavg"
	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/internal/runner/clustertest"
	"github.com/durachk/durachk/internal/runner/runnertest"
)

// TestMain lets the test binary play `durachk worker`, its watchdog and its
// lazy file system: the runner re-executes its own binary for them.
func TestMain(m *testing.M) {
	runner.ServeChildIfAsked()
	os.Exit(m.Run())
}

// factors are the load factors compared: an idle machine's clock and the
// most a busy one stretches it (runner.MaxStretch).
var factors = []string{"1", "4"}

// target is a target on env's broker with knobs, at the load factor the
// test set, or a skip saying why it cannot run here.
func target(t *testing.T, env, knobs string) *runner.Target {
	t.Helper()
	tg := clustertest.Target(t, env, knobs)
	f, _ := loadavg.Fixed(runner.MaxStretch)
	if want := runner.DefaultScale * f; tg.Scale != want {
		t.Fatalf("the scenario clock runs at %v, want %v (load factor %v)", tg.Scale, want, f)
	}
	return tg
}

// evaluate runs contract id on tg with seed and checks that the run left
// nothing behind.
func evaluate(t *testing.T, tg *runner.Target, id string, seed uint64) contracts.Result {
	t.Helper()
	c, err := contracts.Lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	var runID, dir string
	tg.OnRun = func(rid, d string) { runID, dir = rid, d }
	began := time.Now()
	r, err := contracts.Evaluate(context.Background(), tg, c, contracts.Options{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s seed %d on %s in %s: %s (%s); stats: flush window %d ms, acknowledged in it at the cut %d, newest acknowledgement %d ms before; partition must outlast %d ms, outlasting %d",
		id, r.Seed, tg.Name(), time.Since(began).Round(100*time.Millisecond), r.Verdict, r.Reason, r.Stats.FlushWindowMs, r.Stats.AckedInFlushWindow,
		r.Stats.NewestAckBeforeBrokerFaultMs, r.Stats.PartitionMustOutlastMs, r.Stats.PartitionsOutlasting)
	if left := clustertest.Leftovers(t, runID, dir); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	return r
}

// A private Redis that syncs its log once a second loses acknowledged jobs
// to a power cut at either load factor, and one that syncs before every
// reply loses none: the cut comes a few milliseconds after an
// acknowledgement, not at a scenario time that stretches while the broker's
// fsync does not (before: everysec passed 3 of 3 runs under load, the cut
// 640–740 ms after the newest acknowledgement). Each run is exercised in
// the broker's terms: an acknowledged, unfinished job younger than the
// configuration's flush interval at the cut.
func TestPowerLossVerdictIndependentOfLoad(t *testing.T) {
	if err := lazyfs.Available(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	for _, f := range factors {
		t.Run("load factor "+f, func(t *testing.T) {
			t.Setenv(loadavg.Env, f)
			everysec := target(t, "DURACHK_REDIS_URL", "private-instance.appendonly=yes&private-instance.appendfsync=everysec&name=redis-everysec")
			if !everysec.Capabilities().PowerLoss {
				t.Skipf("no power loss here: %v", everysec.Capabilities().Notes)
			}
			r := runnertest.SeekViolation(t, "appendfsync everysec at load factor "+f, contracts.PropLost, func(seed uint64) contracts.Result {
				return evaluate(t, everysec, "durability.power-loss", seed)
			})
			if r.Stats.FlushWindowMs != 1000 || r.Stats.AckedInFlushWindow < 1 {
				t.Errorf("everysec: flush window %d ms, %d acknowledged in it at the cut; want 1000 ms, at least 1", r.Stats.FlushWindowMs, r.Stats.AckedInFlushWindow)
			}
			always := target(t, "DURACHK_REDIS_URL", "private-instance.appendonly=yes&private-instance.appendfsync=always&name=redis-always")
			for _, r := range runnertest.SeekPasses(t, "appendfsync always at load factor "+f, 1, func(seed uint64) contracts.Result {
				return evaluate(t, always, "durability.power-loss", seed)
			}) {
				if r.Stats.FlushWindowMs != 0 || r.Stats.AckedInFlushWindow < 1 || r.Stats.NewestAckBeforeBrokerFaultMs > 100 {
					t.Errorf("always: flush window %d ms, %d acknowledged and unfinished at the cut, the newest %d ms before; want none, at least 1, at most 100 ms",
						r.Stats.FlushWindowMs, r.Stats.AckedInFlushWindow, r.Stats.NewestAckBeforeBrokerFaultMs)
				}
			}
		})
	}
}

// A semi-synchronous MariaDB primary (AFTER_SYNC) cut off from its replica
// holds each commit for rpl_semi_sync_master_timeout (10 s), then
// acknowledges it without the replica: partition.minority loses those jobs
// at either load factor, since the partition outlasts the timeout in wall
// time (before: the 10 s partition of an idle machine raced the 10 s
// timeout, and the 40 s one of a busy machine crossed it).
func TestSemiSyncPartitionVerdictIndependentOfLoad(t *testing.T) {
	for _, f := range factors {
		t.Run("load factor "+f, func(t *testing.T) {
			t.Setenv(loadavg.Env, f)
			tg := target(t, "DURACHK_MYSQL_URL", "private-cluster.replicas=1&private-cluster.rpl_semi_sync_master_enabled=ON&private-cluster.rpl_semi_sync_master_wait_point=AFTER_SYNC&name=mariadb-after-sync")
			r := runnertest.SeekViolation(t, "AFTER_SYNC partition.minority at load factor "+f, contracts.PropLost, func(seed uint64) contracts.Result {
				return evaluate(t, tg, "partition.minority", seed)
			})
			if r.Stats.PartitionMustOutlastMs != 10000 || r.Stats.PartitionsOutlasting < 1 {
				t.Errorf("the partition must outlast %d ms, %d did; want 10000 ms, at least 1", r.Stats.PartitionMustOutlastMs, r.Stats.PartitionsOutlasting)
			}
		})
	}
}
