package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/reports"
)

// exploreBin runs durachk explore with args (PATH=path when path is not
// "") and returns its exit code, stdout and stderr.
func exploreBin(t *testing.T, path string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(durachkBinary(t), append([]string{"explore"}, args...)...)
	if path != "" {
		cmd.Env = append(os.Environ(), "PATH="+path)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return exitCode(err), stdout.String(), stderr.String()
}

// On the local Redis, from a machine without redis-server (PATH empty of it,
// as a container image without the broker's binary): the broker faults
// Redis supports are never drawn, and the exploration says so loudly — a
// warning at the start, a line in what it prints, a note in the explore
// result's reason and the kinds in result.json — where before a "never drawn"
// line among the node faults was all; its shard does not merge with one that
// drew them (exit 3, one line), where before the merge added them up; and
// --faults broker_crash is refused (exit 3, one line, naming the binary).
// Runs real processes: under the heavy lock.
func TestExploreWhereTheBrokerBinaryIsMissing(t *testing.T) {
	url := os.Getenv("DURACHK_REDIS_URL")
	if url == "" {
		t.Skip("DURACHK_REDIS_URL is not set; .ci/run sets it")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed: the shard that has it cannot run here")
	}
	dir := t.TempDir()
	common := []string{"--target", url, "--rounds", "2", "--jobs", "10", "--no-shrink"}
	none := filepath.Join(dir, "no-binary") // on no PATH: no redis-server, no fusermount
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	code, stdout, stderr := exploreBin(t, none, append(common, "--shard", "1/2", "--out", a)...)
	if code == ExitConfig {
		t.Fatalf("explore without redis-server: exit 3\n%s%s", stdout, stderr)
	}
	const kinds = "broker_crash, power_loss"
	if !strings.Contains(stderr, "WARNING: this machine cannot apply "+kinds+" to redis") || !strings.Contains(stderr, "redis-server not found") {
		t.Errorf("no warning naming %s and the missing binary:\n%s", kinds, stderr)
	}
	if !strings.Contains(stdout, "never drawn, this machine cannot apply them: "+kinds) {
		t.Errorf("what explore prints does not say it:\n%s", stdout)
	}
	doc, err := reports.ReadJSON(filepath.Join(a, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	x := doc.Exploration
	if x == nil || x.Lacking["broker_crash"] == "" || x.Lacking["power_loss"] == "" || strings.Contains(x.Config, "broker_crash") {
		t.Errorf("result.json exploration %+v: want broker_crash and power_loss lacking, out of its kinds", x)
	}
	if r := doc.Results[0]; !strings.Contains(r.Reason, "never drawn, this machine cannot apply them: "+kinds) {
		t.Errorf("the explore result's reason does not say it: %s", r.Reason)
	}
	if code, stdout, stderr := exploreBin(t, "", append(common, "--shard", "2/2", "--out", b)...); code == ExitConfig {
		t.Fatalf("explore with redis-server: exit 3\n%s%s", stdout, stderr)
	}
	var mout, merr bytes.Buffer
	err = Merge(MergeOptions{Inputs: []string{a, b}, Out: filepath.Join(dir, "merged")}, &mout, &merr)
	if Code(err) != ExitConfig || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "could not apply "+kinds) {
		t.Errorf("merge of a shard that could not draw broker faults with one that could: %v (exit %d), want one line saying so, exit 3", err, Code(err))
	}
	code, stdout, stderr = exploreBin(t, none, "--target", url, "--rounds", "1", "--faults", "kill,broker_crash", "--out", filepath.Join(dir, "c"))
	if code != ExitConfig || !strings.Contains(stderr, "--faults broker_crash: this machine cannot apply it to redis") || !strings.Contains(stderr, "redis-server not found") {
		t.Errorf("--faults broker_crash without redis-server: exit %d, want 3 naming the missing binary\n%s%s", code, stdout, stderr)
	}
}

// --duration bounds a real exploration: the round in flight at its end is
// cut (a round of 100 jobs on Redis takes several seconds), and an
// exploration none of whose rounds ended is unknown (exit 2), not "no
// violation" (exit 0, before: the round ran to its end, past the duration).
// Runs real processes: under the heavy lock.
func TestExploreDurationCutsRealRounds(t *testing.T) {
	url := os.Getenv("DURACHK_REDIS_URL")
	if url == "" {
		t.Skip("DURACHK_REDIS_URL is not set; .ci/run sets it")
	}
	out := t.TempDir()
	start := time.Now()
	code, stdout, stderr := exploreBin(t, "", "--target", url, "--duration", "1s", "--jobs", "100", "--faults", "kill", "--out", out)
	took := time.Since(start)
	if code != ExitUnknown || !strings.Contains(stdout, "unknown: no round ended within --duration 1s") {
		t.Fatalf("exit %d, want 2 and why\n%s%s", code, stdout, stderr)
	}
	doc, err := reports.ReadJSON(filepath.Join(out, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if x := doc.Exploration; x.Rounds != 0 || x.Cut != 1 {
		t.Errorf("exploration: %d rounds, %d cut; want 0 and 1", x.Rounds, x.Cut)
	}
	// The probe of the target, a second of rounds, the teardown of the one cut.
	if limit := runnertest.Loaded(30 * time.Second); took > limit {
		t.Errorf("explore --duration 1s took %s (limit %s)", took, limit)
	}
	t.Logf("explore --duration 1s took %s", took.Round(time.Millisecond))
}
