package cli

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/reports"
)

// SIGINT while explore shrinks its finding: the violation is in hand, so
// the exit code is 1 (as the README promises), not 3; result.json is
// written, interrupted, with the finding and its original.yaml, and no
// shrunk plan. Each candidate runs 100 times (--shrink-n 100) so that the
// shrink outlasts the signal. Before, the shrink's "context canceled" was
// taken for an infrastructure failure: exit 3.
func TestExploreSIGINTDuringShrink(t *testing.T) {
	bin := durachkBinary(t)
	out := t.TempDir()
	cmd := exec.Command(bin, "explore", "--rounds", "20", "--jobs", "100", "--sabotage", "dual-write",
		"--shrink-n", "100", "--shrink-k", "100", "--out", out)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	shrinking := make(chan struct{})
	exited := make(chan error, 1)
	var rest bytes.Buffer
	go func() {
		sc := bufio.NewScanner(stderr)
		said := false
		for sc.Scan() {
			rest.WriteString(sc.Text() + "\n")
			if !said && strings.Contains(sc.Text(), "shrinking it") {
				said = true
				close(shrinking)
			}
		}
		exited <- cmd.Wait()
	}()
	select {
	case <-shrinking:
	case err := <-exited:
		t.Fatalf("explore exited before its shrink: %v\n%s", err, rest.String())
	case <-time.After(runnertest.Loaded(time.Minute)):
		_ = cmd.Process.Kill()
		t.Fatal("no shrink within a minute")
	}
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-exited:
	case <-time.After(runnertest.Loaded(30 * time.Second)):
		_ = cmd.Process.Kill()
		t.Fatalf("explore did not end within 30 s of SIGINT\n%s", rest.String())
	}
	if c := exitCode(err); c != ExitViolation {
		t.Fatalf("exit %d after SIGINT during the shrink, want %d (a violation in hand)\n%s%s", c, ExitViolation, stdout.String(), rest.String())
	}
	t.Logf("ended %.1f s after SIGINT", time.Since(start).Seconds())
	doc, err := reports.ReadJSON(filepath.Join(out, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if doc.Complete || !doc.Interrupted || doc.Exploration == nil || doc.Exploration.Finding == nil {
		t.Fatalf("result.json: complete %v, interrupted %v, exploration %+v: want an interrupted exploration with its finding", doc.Complete, doc.Interrupted, doc.Exploration)
	}
	if !strings.Contains(doc.Exploration.Finding.Shrunk, "shrink was interrupted") {
		t.Errorf("the finding says %q of its shrink, want that it was interrupted", doc.Exploration.Finding.Shrunk)
	}
	if len(doc.Results) != 1 || doc.Results[0].Verdict != contracts.Violated {
		t.Errorf("%d results (first %s), want the explore result alone, a violation", len(doc.Results), doc.Results[0].Verdict)
	}
	if _, err := os.Stat(filepath.Join(out, "original.yaml")); err != nil {
		t.Errorf("no original.yaml: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "shrunk.yaml")); err == nil {
		t.Error("a shrunk.yaml of a shrink cut short")
	}
}
