// Package clustertest holds what the tests of replicated clusters share
// (internal/runner/clusters: private clusters; internal/runner/extclusters:
// clusters durachk did not start): a contract's run on a cluster target with
// its leftovers checked, and the runner's log into the test's.
package clustertest

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/internal/targets"
)

// Log writes the runner's progress lines to the test's log.
type Log struct{ T *testing.T }

func (l Log) Write(b []byte) (int, error) {
	l.T.Logf("%s %s", time.Now().Format("15:04:05.000"), strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// Target is a target on the broker $env names (which holds the store too,
// through DURACHK_PG_URL) with knobs added to its URL, its log into the
// test's; a skip where the environment names no broker and store, or a
// private cluster's nodes cannot be faulted here.
func Target(t *testing.T, env, knobs string) *runner.Target {
	t.Helper()
	base := os.Getenv(env)
	if base == "" || os.Getenv("DURACHK_PG_URL") == "" {
		t.Skipf("%s or DURACHK_PG_URL is not set: no broker and store to run against", env)
	}
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	spec, err := targets.Parse(base + sep + knobs)
	if err != nil {
		t.Fatal(err)
	}
	if targets.HasPrivateCluster(spec) {
		if err := targets.CanFaultNodes(spec); err != nil {
			t.Skip(err)
		}
	}
	tg, err := runner.New(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	tg.Log = Log{T: t}
	return tg
}

// recordTo, if set, is where evaluateCluster writes each run's history and
// final state as a fixture of contracts' recorded-history tests:
//
//	go test ./internal/runner/clusters -run TestRedisFailover -record ../../../contracts/testdata
var recordTo = flag.String("record", "", "write the cluster runs' histories as fixtures into this directory")

// recording keeps the last execution of the target it wraps.
type recording struct {
	*runner.Target
	run contracts.Run
	ex  contracts.Execution
}

func (r *recording) Execute(ctx context.Context, run contracts.Run) (contracts.Execution, error) {
	ex, err := r.Target.Execute(ctx, run)
	r.run, r.ex = run, ex
	return ex, err
}

func record(t *testing.T, name string, rec *recording, seed uint64) {
	t.Helper()
	if *recordTo == "" {
		return
	}
	base := filepath.Join(*recordTo, name)
	if err := history.WriteFile(base+".jsonl", rec.ex.Ops); err != nil {
		t.Fatal(err)
	}
	sab := ""
	if rec.run.Sabotage != nil {
		sab = rec.run.Sabotage.Name
	}
	b, err := json.MarshalIndent(map[string]any{"contract": rec.run.Contract, "sabotage": sab, "seed": seed,
		"final": rec.ex.Final, "check": rec.ex.Check, "measured_on": rec.MeasuredOn()}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(base+".final.json", b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %s", base)
}

// Evaluate runs contract id on tg and checks that the run left nothing
// and stayed within 30 s.
func Evaluate(t *testing.T, tg *runner.Target, id string, seed uint64, sab string) contracts.Result {
	t.Helper()
	var runID, dir string
	tg.OnRun = func(rid, d string) { runID, dir = rid, d }
	c, err := contracts.Lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	var r contracts.Result
	rec := &recording{Target: tg}
	if sab == "" {
		r, err = contracts.Evaluate(context.Background(), rec, c, contracts.Options{Seed: seed})
	} else {
		for _, s := range c.Sabotages {
			if s.Name == sab {
				r, err = contracts.EvaluateSabotage(context.Background(), rec, c, s, contracts.Options{Seed: seed})
			}
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	name := strings.NewReplacer(".", "-", " ", "-").Replace(tg.Name() + "-" + id)
	if sab != "" {
		name += "-" + sab
	}
	record(t, fmt.Sprintf("%s-seed%d", name, seed), rec, seed)
	t.Logf("%s seed %d on %s: %s (%s) in %v; cluster %+v", id, seed, tg.MeasuredOn(), r.Verdict, r.Reason, r.Wall.Round(time.Millisecond), r.Cluster)
	// 30 s with the cluster's start on an idle machine; the bound leaves room
	// for a loaded one (the start is logged above, the run's phases in the log).
	if r.Wall > runnertest.Loaded(90*time.Second) {
		t.Errorf("%s took %v", id, r.Wall)
	}
	leftovers := Leftovers
	if targets.HasExternalCluster(tg.Spec) {
		// durachk starts no process on a loopback block for an existing
		// cluster (it claims none): what runs on the run's preferred block is
		// another's, such as the cluster's own nodes when its script claimed
		// that block (a false "left behind" once, 2026-12-06).
		leftovers = runLeftovers
	}
	if left := leftovers(t, runID, dir); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	return r
}

// Leftovers is runnertest.Leftovers plus what a cluster may leave: processes on the
// run's loopback addresses (redis-server names itself by its address, not its
// directory) and the run's nftables table.
func Leftovers(t *testing.T, runID, dir string) []string {
	t.Helper()
	left := runLeftovers(t, runID, dir)
	block := targets.ClaimedBlock(runID) + "."
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		b, err := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), block) {
			left = append(left, "process "+p.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return left
}

// runLeftovers is runnertest.Leftovers plus the run's nftables table.
func runLeftovers(t *testing.T, runID, dir string) []string {
	t.Helper()
	left := runnertest.Leftovers(t, runID, dir)
	if out, err := exec.Command("nft", "list", "tables").Output(); err == nil && strings.Contains(string(out), "durachk_"+runID) {
		left = append(left, "nftables table durachk_"+runID)
	}
	return left
}
