package runner

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters/pg/pgdb"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/targets"
)

// TestMain lets the test binary play `durachk worker`: the runner re-executes
// its own binary for every child process.
func TestMain(m *testing.M) {
	ServeChildIfAsked()
	os.Exit(m.Run())
}

func pgTarget(t *testing.T) *Target {
	t.Helper()
	url := os.Getenv("DURACHK_PG_URL")
	if url == "" {
		t.Skip("DURACHK_PG_URL is not set: no Postgres to run real processes against")
	}
	spec, err := targets.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := New(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// leftovers lists what a run left: its schemas, its run directory, live children.
func leftovers(t *testing.T, runID, dir string) []string {
	t.Helper()
	var left []string
	db, err := pgdb.Open(context.Background(), os.Getenv("DURACHK_PG_URL"), pgdb.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Pool.Query(context.Background(), `SELECT nspname FROM pg_namespace WHERE nspname LIKE $1`, "durachk_"+runID+"%")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		_ = rows.Scan(&n)
		left = append(left, "schema "+n)
	}
	rows.Close()
	if _, err := os.Stat(dir); err == nil {
		left = append(left, "directory "+dir)
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		b, err := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), dir) {
			left = append(left, "process "+p.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return left
}

// A crash between the writes and COMMIT leaves neither result nor event; a crash
// after COMMIT and before the ack dedupes on redelivery — on real processes.
func TestOutboxAtomicOnPostgres(t *testing.T) {
	tg := pgTarget(t)
	var runID, dir string
	tg.OnRun = func(id, d string) { runID, dir = id, d }
	c, _ := contracts.Lookup("outbox.atomic")
	r, err := contracts.Evaluate(context.Background(), tg, c, contracts.Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != contracts.Pass {
		t.Fatalf("outbox.atomic on postgres: %s: %s", r.Verdict, r.Reason)
	}
	for _, k := range []string{"crash:mid_commit", "crash:after_commit_before_ack"} {
		if r.Stats.Faults[k] == 0 {
			t.Errorf("no %s applied: %v", k, r.Stats.Faults)
		}
	}
	if r.Stats.Deduped == 0 {
		t.Error("no commit deduped after a crash after COMMIT")
	}
	if left := leftovers(t, runID, dir); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// Every sabotage that the postgres target can run is caught on real
// processes, by the properties it declares (a run that did not exercise its
// claim is tried with the next seed, as selftest does).
func TestSelftestOnPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	tg := pgTarget(t)
	cs, err := contracts.SelfTestContracts(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		// Each contract's sabotages in a namespace of their own: they run
		// beside the other contracts' (go test -parallel).
		t.Run(c.ID, func(t *testing.T) {
			t.Parallel()
			rs, err := contracts.SelfTest(context.Background(), tg, []*contracts.Contract{c}, contracts.Options{Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				t.Run(r.Sabotage.Name, func(t *testing.T) {
					if r.Skipped() {
						t.Skip(r.Result.Reason)
					}
					if !r.Caught {
						t.Fatalf("sabotage %s not caught on postgres: %s (%s)", r.Sabotage.Name, r.Why, r.Result.Reason)
					}
				})
			}
		})
	}
}

// A run cancelled mid-way (SIGINT in the CLI) leaves no schema, child process or
// directory behind.
func TestCancelledRunLeavesNothing(t *testing.T) {
	tg := pgTarget(t)
	var runID, dir string
	tg.OnRun = func(id, d string) { runID, dir = id, d }
	c, _ := contracts.Lookup("lease.heartbeat") // slow jobs: still running after a second
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, err := contracts.Evaluate(ctx, tg, c, contracts.Options{Seed: 1})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Evaluate after cancel: %v, want the context's error", err)
	}
	if runID == "" {
		t.Fatal("the run never started")
	}
	if left := leftovers(t, runID, dir); len(left) > 0 {
		t.Errorf("left behind after cancel: %v", left)
	}
}

// With the transactional-ack profile the ack commits with the result: a crash
// after COMMIT leaves nothing to redeliver, so nothing is deduped — the
// difference to TestOutboxAtomicOnPostgres, measured.
func TestTransactionalAckOnPostgres(t *testing.T) {
	url := os.Getenv("DURACHK_PG_URL")
	if url == "" {
		t.Skip("DURACHK_PG_URL is not set: no Postgres to run real processes against")
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	spec, err := targets.Parse(url + sep + "transactional_ack=true&name=pg-txack")
	if err != nil {
		t.Fatal(err)
	}
	tg, err := New(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := contracts.Lookup("outbox.atomic")
	r, err := contracts.Evaluate(context.Background(), tg, c, contracts.Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != contracts.Pass {
		t.Fatalf("outbox.atomic with transactional ack: %s: %s", r.Verdict, r.Reason)
	}
	if r.Stats.AcksInCommit == 0 || r.Stats.Deduped != 0 {
		t.Fatalf("acks in commit %d, deduped commits %d: want acks in the commit and no dedupe", r.Stats.AcksInCommit, r.Stats.Deduped)
	}
}
