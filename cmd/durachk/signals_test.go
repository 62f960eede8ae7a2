package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters/pg/pgdb"
	"github.com/durachk/durachk/internal/cli"
	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/reports"
)

// startDurachk starts this binary as durachk with args (see TestMain) and
// returns at once.
func startDurachk(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), "DURACHK_MAIN_TEST=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, &out
}

// waitResults waits until result.json holds n results and leaves the process
// stopped (SIGSTOP), returning the document it holds then: final until the
// test sends its signal. Every read must be a valid document: result.json is
// never seen half written. With step, the process only runs in slices of a
// few milliseconds between reads (for runs faster than a loaded machine
// schedules the test); otherwise the test polls while it runs.
func waitResults(t *testing.T, cmd *exec.Cmd, path string, n int, limit time.Duration, step bool) *reports.Document {
	t.Helper()
	stop := func() {
		if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		for !stopped(cmd.Process.Pid) {
			time.Sleep(time.Millisecond)
		}
	}
	read := func() *reports.Document {
		if _, err := os.Stat(path); err != nil {
			return nil
		}
		doc, err := reports.ReadJSON(path)
		if err != nil {
			t.Fatalf("result.json read while the run goes on: %v", err)
		}
		return doc
	}
	if step {
		stop()
	}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if procState(cmd.Process.Pid) == 'Z' {
			t.Fatalf("durachk ended before result.json had %d results", n)
		}
		if step {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			time.Sleep(3 * time.Millisecond)
			stop()
		}
		if doc := read(); doc != nil && len(doc.Results) >= n {
			if !step {
				stop()
				doc = read()
			}
			return doc
		}
		if !step {
			time.Sleep(2 * time.Millisecond)
		}
	}
	t.Fatalf("result.json did not reach %d results within %s", n, limit)
	return nil
}

// stopped reports whether process pid is stopped.
func stopped(pid int) bool { return procState(pid) == 'T' }

// procState is the state letter of process pid (R, S, T, Z, ...), or 0.
func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	if i := bytes.LastIndexByte(b, ')'); i > 0 && i+2 < len(b) {
		return b[i+2]
	}
	return 0
}

// TestSIGKILLLeavesTheLastRewrite: durachk killed with SIGKILL after N
// results leaves a valid result.json with those N results, complete false;
// `durachk report` renders it with the partial-run banner.
func TestSIGKILLLeavesTheLastRewrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "result.json")
	// 2500 jobs a contract: about 100 ms each on the embedded target.
	cmd, out := startDurachk(t, "run", "--jobs", "2500", "--parallel", "1", "--out", dir)
	seen := waitResults(t, cmd, path, 3, 2*time.Minute, true)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	doc, err := reports.ReadJSON(path)
	if err != nil {
		t.Fatalf("after SIGKILL: %v\n%s", err, out)
	}
	if doc.Complete || len(doc.Results) != len(seen.Results) || len(doc.Results) < 3 || len(doc.Results) >= doc.Planned {
		t.Fatalf("after SIGKILL: %d results (seen %d before), complete %v, planned %d; want the results seen, complete false",
			len(doc.Results), len(seen.Results), doc.Complete, doc.Planned)
	}
	for _, r := range doc.Results {
		if ev := doc.EvidenceFor(r.Target, r.Contract); ev.History != "" {
			if _, err := os.Stat(filepath.Join(dir, ev.History)); err != nil {
				t.Errorf("%s: history %s missing: %v", r.Contract, ev.History, err)
			}
		}
	}
	var b bytes.Buffer
	if err := cli.Report(path, "md", "", &b); err != nil || !bytes.Contains(b.Bytes(), []byte("durachk did not finish it (killed, or still running)")) {
		t.Errorf("report of the killed run: %v, banner missing:\n%.300s", err, b.String())
	}
}

// TestSIGINTAfterThreeContracts: SIGINT while the fourth contract runs on a
// real Postgres ends the run within seconds with a result.json holding the
// three results, complete false and interrupted true, and exit 2 (no
// violation among them); the interrupted contract's namespace is torn down.
func TestSIGINTAfterThreeContracts(t *testing.T) {
	pg := os.Getenv("DURACHK_PG_URL")
	if pg == "" {
		t.Skip("DURACHK_PG_URL is not set (the local Postgres); .ci/run sets it")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "result.json")
	cmd, out := startDurachk(t, "run", "--target", pg, "--parallel", "1", "--out", dir,
		"--contract", "tenant.isolation", "--contract", "outbox.relay", "--contract", "dlq.redacted", "--contract", "lease.heartbeat", "--contract", "retry.bounded")
	seen := waitResults(t, cmd, path, 3, 2*time.Minute, false)
	// Time for the fourth contract to provision its namespace on a loaded
	// machine; lease.heartbeat's slow jobs keep it running for seconds more.
	time.Sleep(1500 * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Process.Signal(syscall.SIGCONT)
	sent := time.Now()
	err := cmd.Wait()
	took := time.Since(sent)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != cli.ExitUnknown {
		t.Fatalf("exit: %v, want %d\n%s", err, cli.ExitUnknown, out)
	}
	if took > runnertest.Loaded(20*time.Second) { // within seconds; more on a busy machine
		t.Errorf("the run took %s to end after SIGINT", took)
	}
	doc, err := reports.ReadJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Results) != len(seen.Results) || len(doc.Results) != 3 || doc.Complete || !doc.Interrupted {
		t.Fatalf("%d results (seen %d), complete %v, interrupted %v; want 3, false, true\n%s", len(doc.Results), len(seen.Results), doc.Complete, doc.Interrupted, out)
	}
	if !bytes.Contains(out.Bytes(), []byte("durachk: run "+doc.Wall.RunID+": ")) {
		t.Errorf("the run id %s was not printed at the start:\n%s", doc.Wall.RunID, out)
	}
	for _, w := range []string{"junit.xml", "summary.md", "report.html"} {
		if _, err := os.Stat(filepath.Join(dir, w)); err != nil {
			t.Errorf("%s not written on SIGINT: %v", w, err)
		}
	}
	for _, we := range doc.Wall.Results {
		if len(we.RunIDs) != 1 {
			t.Errorf("%s: run ids %v, want the namespace of its one execution", we.Contract, we.RunIDs)
		}
	}
	// The interrupted contract's namespace is named, and gone like the others.
	if len(doc.Wall.CutShort) != 1 {
		t.Errorf("cut-short run ids %v, want the interrupted contract's", doc.Wall.CutShort)
	}
	ids := doc.Wall.CutShort
	for _, we := range doc.Wall.Results {
		ids = append(ids, we.RunIDs...)
	}
	left := durachkSchemas(t, pg)
	for _, id := range ids {
		for _, s := range []string{"durachk_" + id, "durachk_" + id + "_q"} {
			if left[s] {
				t.Errorf("schema %s left after SIGINT", s)
			}
		}
	}
}

// durachkSchemas lists the schemas of durachk runs in pg's database.
func durachkSchemas(t *testing.T, pg string) map[string]bool {
	t.Helper()
	db, err := pgdb.Open(context.Background(), pg, pgdb.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Pool.Query(context.Background(), `SELECT nspname FROM pg_namespace WHERE nspname LIKE 'durachk\_%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out[n] = true
	}
	return out
}

// TestSignalsHandledFromTheStart: durachk listens for SIGINT and SIGTERM
// from the init of a package Go initializes among the first, before durachk's
// own packages and its command-line library: a process started with SIGINT
// ignored (a background job of a shell script) had the kernel discard the
// signals of its first milliseconds — 15 ms idle, far more on a busy machine
// — and the run went on to its end (seen: 3 of 20 such SIGINTs in the first
// 6 ms, and the runs took 14 to 32 s to finish).
func TestSignalsHandledFromTheStart(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "version")
	cmd.Env = append(os.Environ(), "DURACHK_MAIN_TEST=1", "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	order := map[string]int{}
	n := 0
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == "init" {
			n++
			if _, ok := order[f[1]]; !ok {
				order[f[1]] = n
			}
		}
	}
	at, ok := order["github.com/durachk/durachk/internal/interrupt"]
	if !ok {
		t.Fatalf("no init of the interrupt package among %d:\n%s", n, out)
	}
	for _, later := range []string{"github.com/durachk/durachk/internal/cli", "github.com/durachk/durachk/reports", "github.com/durachk/durachk/internal/targets",
		"github.com/durachk/durachk/contracts", "github.com/spf13/cobra"} {
		if order[later] == 0 || order[later] < at {
			t.Errorf("%s initializes at %d, before the signal handler (%d)", later, order[later], at)
		}
	}
	t.Logf("the handler is installed at init %d of %d", at, n)

	// Started with SIGINT ignored, a SIGINT once the handler is in ends the
	// run within the bound, interrupted.
	dir := t.TempDir()
	run := exec.Command(self, "run", "--trials", "1000", "--contract", "cancel.terminal", "--out", dir)
	run.Env = append(os.Environ(), "DURACHK_MAIN_TEST=1")
	signal.Ignore(syscall.SIGINT)
	err = run.Start()
	signal.Reset(syscall.SIGINT)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Process.Kill()
	for deadline := time.Now().Add(time.Minute); !catches(run.Process.Pid, syscall.SIGINT); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("durachk never handled SIGINT")
		}
	}
	sent := time.Now()
	_ = run.Process.Signal(syscall.SIGINT)
	err = run.Wait()
	took := time.Since(sent)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != cli.ExitUnknown || took > signalLimit {
		t.Errorf("SIGINT as soon as it is handled: %v after %s, want exit 2 within %s", err, took.Round(time.Millisecond), signalLimit)
	}
}

// catches reports whether process pid has a handler for sig (SigCgt in
// /proc/PID/status).
func catches(pid int, sig syscall.Signal) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if hex, ok := strings.CutPrefix(l, "SigCgt:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			return err == nil && mask&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}
