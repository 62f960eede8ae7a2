package driver_test

import (
	"context"
	"os"
	"testing"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/internal/targets"
)

// pgbossTarget is the shared Postgres with the pg-boss driver and knobs.
func pgbossTarget(t *testing.T, knobs string) *runner.Target {
	t.Helper()
	url := os.Getenv("DURACHK_PG_URL")
	if url == "" {
		t.Skip("DURACHK_PG_URL is not set: no Postgres to run pg-boss on")
	}
	spec, err := targets.Parse(withKnobs(url, "name=pgboss&worker.command="+nodeDriver(t, "pgboss")+knobs))
	if err != nil {
		t.Fatal(err)
	}
	tg, err := runner.New(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// Expiry within a second or two, polled twice a second: pg-boss's 15 minutes,
// 2-minute maintenance and 2-second polling at durachk's scale, so that a
// run sees its redeliveries.
const pgbossShort = "&worker.expireInSeconds=1&worker.maintenanceIntervalSeconds=1&worker.pollingIntervalSeconds=0.5"

// pg-boss's worker with a short expiry: a job whose worker was killed
// expires, is retried and finished once; nothing renews a running job, so
// lease.heartbeat is skipped with the reason; a setting pg-boss does not
// have is refused.
func TestPgBoss(t *testing.T) {
	tg := pgbossTarget(t, pgbossShort)
	c, _ := contracts.Lookup("lease.heartbeat")
	if why := c.Needs(tg.Capabilities()); why == "" {
		t.Errorf("lease.heartbeat runs on pg-boss, which renews nothing")
	}
	runnertest.SeekPasses(t, "pg-boss × lease.redelivery", 1, func(seed uint64) contracts.Result {
		return evaluate(t, tg, "lease.redelivery", seed)
	})
	spec, err := targets.Parse(withKnobs(os.Getenv("DURACHK_PG_URL"), "worker.command="+tg.Spec.Options["worker.command"]+"&worker.expireIn=1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runner.New(context.Background(), spec); err == nil {
		t.Errorf("pg-boss started with a knob it does not have (expireIn)")
	}
}

// A handler that returns before its work is done loses the jobs of the
// workers killed in between; one that catches its job's error and returns
// has pg-boss complete jobs that were never done.
func TestSabotagedPgBoss(t *testing.T) {
	for _, tc := range []struct {
		sabotage, contract string
		raises             contracts.Property
	}{
		{"ack-before-effect", "lease.redelivery", contracts.PropLost},
		{"swallow-errors", "retry.bounded", contracts.PropLost},
	} {
		t.Run(tc.sabotage, func(t *testing.T) {
			tg := pgbossTarget(t, pgbossShort+"&worker.sabotage="+tc.sabotage)
			r := runnertest.SeekViolation(t, "pg-boss sabotaged "+tc.sabotage, tc.raises, func(seed uint64) contracts.Result {
				return evaluate(t, tg, tc.contract, seed)
			})
			if !runnertest.Witnessed(r, tc.raises) {
				t.Errorf("%s: no witnessed %s", tc.sabotage, tc.raises)
			}
		})
	}
}
