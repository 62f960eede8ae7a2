// Package clusters_test runs the contracts on private replicated clusters
// (Redis with Sentinels, a Postgres standby, RabbitMQ nodes) and on an
// existing Sentinel-managed Redis, through internal/runner. Its own package so
// that go test runs it beside internal/runner's other real-process tests.
package clusters_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters/pg/pgdb"
	"github.com/durachk/durachk/internal/runner"
)

// TestMain lets the test binary play `durachk worker`: the runner re-executes
// its own binary for every child process.
func TestMain(m *testing.M) {
	runner.ServeChildIfAsked()
	os.Exit(m.Run())
}

// testLog writes the runner's progress lines to the test's log.
type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Logf("%s %s", time.Now().Format("15:04:05.000"), strings.TrimRight(string(b), "\n"))
	return len(b), nil
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
