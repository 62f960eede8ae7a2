package driver_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters/pg/pgdb"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/runner/runnertest"
)

// workerProcesses lists the live processes of the example worker this test
// binary built (its path is the test binary's own).
func workerProcesses() []string { return runnertest.Processes(ownWorker) }

// settled polls f until it returns nothing, for up to a few seconds (a
// parent-death signal is delivered asynchronously), and returns its last.
func settled(f func() []string) []string {
	left := f()
	for end := time.Now().Add(runnertest.Loaded(5 * time.Second)); len(left) > 0 && time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		left = f()
	}
	return left
}

// A run cancelled mid-way (SIGINT in the CLI) leaves no worker process, no
// namespace of the worker's and nothing of durachk's.
func TestCancelledWorkerRunLeavesNothing(t *testing.T) {
	tg := ownTarget(t, "")
	var runID, dir string
	tg.OnRun = func(id, d string) { runID, dir = id, d }
	c, _ := contracts.Lookup("lease.heartbeat") // slow jobs: still running after a second
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if _, err := contracts.Evaluate(ctx, tg, c, contracts.Options{Seed: 1, Jobs: 12}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Evaluate after cancel: %v, want the context's error", err)
	}
	if runID == "" {
		t.Fatal("the run never started")
	}
	if left := runnertest.Leftovers(t, runID, dir); len(left) > 0 {
		t.Errorf("left behind after cancel: %v", left)
	}
	if left := settled(workerProcesses); len(left) > 0 {
		t.Errorf("worker processes left after cancel: %v", left)
	}
}

var commandLine = regexp.MustCompile(`^durachk: run ([a-z0-9]+): `)

// durachk killed with SIGKILL mid-run takes its workers with it (parent-death
// signals); `durachk cleanup` of the target then removes the worker's
// namespace (a Postgres schema named as the postgres adapter names its own)
// and the effect store.
func TestKilledWorkerRunCleanedUp(t *testing.T) {
	url := os.Getenv("DURACHK_PG_URL")
	if url == "" {
		t.Skip("DURACHK_PG_URL is not set")
	}
	target := url + "&worker.command=" + ownWorker
	bin := runnertest.Binary(t)
	cmd := exec.Command(bin, "run", "--contract", "lease.heartbeat", "--jobs", "12", "--target", target, "--out", t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	db, err := pgdb.Open(context.Background(), url, pgdb.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	schemas := func(pattern string) []string {
		rows, err := db.Pool.Query(context.Background(), `SELECT nspname FROM pg_namespace WHERE nspname LIKE $1`, pattern)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var n string
			_ = rows.Scan(&n)
			out = append(out, n)
		}
		return out
	}
	// The worker processes of the run appear once it works.
	// Counted once per look: looked at twice, a worker that had just
	// answered the target's probe and exited made the second look fail.
	var procs []string
	for end := time.Now().Add(runnertest.Loaded(30 * time.Second)); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if procs = workerProcesses(); len(procs) >= 2 {
			break
		}
	}
	if len(procs) < 2 {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("no worker processes within 30 s; durachk's stderr:\n%s", stderr.String())
	}
	time.Sleep(700 * time.Millisecond) // jobs in the worker's table
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	var m []string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if m = commandLine.FindStringSubmatch(l); m != nil {
			break
		}
	}
	if m == nil {
		t.Fatalf("durachk run printed no run id:\n%s", stderr.String())
	}
	if left := settled(workerProcesses); len(left) > 0 {
		t.Errorf("worker processes left after SIGKILL of durachk: %v", left)
	}
	var out bytes.Buffer
	c := exec.Command(bin, "cleanup", "--target", target, "--run", m[1])
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		t.Fatalf("cleanup: %v\n%s", err, out.String())
	}
	t.Logf("cleanup after SIGKILL of run %s:\n%s", m[1], out.String())
	re := regexp.MustCompile(`removed postgres schema (durachk_[a-z0-9]+_q)\b`)
	q := re.FindStringSubmatch(out.String())
	if q == nil {
		t.Fatalf("cleanup removed no worker namespace")
	}
	id := strings.TrimSuffix(strings.TrimPrefix(q[1], "durachk_"), "_q")
	if left := schemas("durachk_" + id + "%"); len(left) > 0 {
		t.Errorf("schemas left after cleanup: %v", left)
	}
}
