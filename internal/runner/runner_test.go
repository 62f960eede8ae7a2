package runner

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/runner/runnertest"
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

// leftovers lists what a run left (runnertest.Leftovers).
var leftovers = runnertest.Leftovers

// A crash between the writes and COMMIT leaves neither result nor event; a crash
// after COMMIT and before the ack dedupes on redelivery — on real processes.
func TestOutboxAtomicOnPostgres(t *testing.T) {
	tg := pgTarget(t)
	var runID, dir string
	tg.OnRun = func(id, d string) { runID, dir = id, d }
	c, _ := contracts.Lookup("outbox.atomic")
	// Which crash points a run reaches, and whether a crash after COMMIT is
	// followed by a redelivery, depends on the run: seek one that shows both
	// (from seed 3, which did when this was written). No run may violate.
	crashes := []string{"crash:mid_commit", "crash:after_commit_before_ack"}
	rs, ok := runnertest.Seek(t, 3, func(seed uint64) contracts.Result {
		r, err := contracts.Evaluate(context.Background(), tg, c, contracts.Options{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		if left := leftovers(t, runID, dir); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
		t.Logf("seed %d: %s (%s), faults %v, deduped %d", r.Seed, r.Verdict, r.Reason, r.Stats.Faults, r.Stats.Deduped)
		return r
	}, func(r contracts.Result) bool {
		if r.Verdict == contracts.Violated {
			t.Errorf("outbox.atomic on postgres: %s: %s", r.Verdict, r.Reason)
			return true
		}
		return r.Verdict == contracts.Pass && r.Stats.Faults[crashes[0]] > 0 && r.Stats.Faults[crashes[1]] > 0 && r.Stats.Deduped > 0
	})
	if !ok {
		r := rs[len(rs)-1]
		t.Fatalf("no passing run with both crash points and a deduped commit in %d seeds; the last: %s, faults %v, deduped %d",
			len(rs), r.Verdict, r.Stats.Faults, r.Stats.Deduped)
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
	// No run may dedupe a commit or violate; a run that had no crash after
	// COMMIT shows nothing, so seek one with acks in the commit.
	for _, r := range runnertest.SeekPasses(t, "outbox.atomic with transactional ack", 1, func(seed uint64) contracts.Result {
		r, err := contracts.Evaluate(context.Background(), tg, c, contracts.Options{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		if r.Stats.Deduped != 0 {
			t.Errorf("seed %d: deduped commits %d: want none, the ack commits with the result", r.Seed, r.Stats.Deduped)
		}
		return r
	}) {
		if r.Stats.AcksInCommit == 0 {
			t.Fatalf("seed %d: no ack in a commit", r.Seed)
		}
	}
}
