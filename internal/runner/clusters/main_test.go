// Package clusters_test runs the contracts on private replicated clusters
// (Redis with Sentinels, a Postgres standby, RabbitMQ nodes) and on an
// existing Sentinel-managed Redis, through internal/runner. Its own package so
// that go test runs it beside internal/runner's other real-process tests.
package clusters_test

import (
	"github.com/durachk/durachk/internal/runner/runnertest"
	"os"
	"strings"
	"testing"
	"time"

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

// leftovers lists what a run left (runnertest.Leftovers).
var leftovers = runnertest.Leftovers
