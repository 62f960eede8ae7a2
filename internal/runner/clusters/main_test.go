// Package clusters_test runs the contracts on private replicated clusters
// (Redis with Sentinels, a Postgres standby, RabbitMQ nodes) through
// internal/runner. Its own package so that go test runs it beside
// internal/runner's other real-process tests (a package runs at most
// GOMAXPROCS of its parallel tests at a time); the clusters durachk did not
// start are internal/runner/extclusters'.
package clusters_test

import (
	"os"
	"testing"

	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/internal/runner/clustertest"
)

// TestMain lets the test binary play `durachk worker`: the runner re-executes
// its own binary for every child process.
func TestMain(m *testing.M) {
	runner.ServeChildIfAsked()
	os.Exit(m.Run())
}

var (
	clusterTarget    = clustertest.Target
	evaluateCluster  = clustertest.Evaluate
	clusterLeftovers = clustertest.Leftovers
)
