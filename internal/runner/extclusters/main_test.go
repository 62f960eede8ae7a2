// Package extclusters_test runs the cluster contracts on clusters durachk did
// not start: the topologies of tools/extcluster/cluster.sh and daemonized
// Redis, faulted only through the control commands a user gives. Apart from
// internal/runner/clusters so that go test runs the two beside each other (a
// package runs at most GOMAXPROCS of its parallel tests at a time).
package extclusters_test

import (
	"os"
	"testing"

	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/internal/runner/clustertest"
	"github.com/durachk/durachk/internal/runner/runnertest"
)

// TestMain lets the test binary play `durachk worker`: the runner re-executes
// its own binary for every child process.
func TestMain(m *testing.M) {
	runner.ServeChildIfAsked()
	code := m.Run()
	runnertest.RemoveBinary()
	os.Exit(code)
}

var evaluateCluster = clustertest.Evaluate
