package runner

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/targets"
)

// failingStarts makes the first n private broker starts fail for real: the
// private redis-server is given a setting it refuses (appendfsync bogus), so
// that it exits while starting with its own complaint on its console.
func failingStarts(t *testing.T, n int) *int {
	t.Helper()
	var mu sync.Mutex
	calls := 0
	real := startBrokerFunc
	startBrokerFunc = func(ctx context.Context, s targets.Spec, dir string) (targets.Instance, targets.Spec, error) {
		mu.Lock()
		calls++
		fail := calls <= n
		mu.Unlock()
		if fail {
			s.Options = map[string]string{"private-instance.appendfsync": "bogus"}
		}
		return real(ctx, s, dir)
	}
	t.Cleanup(func() { startBrokerFunc = real })
	return &calls
}

func privateRedisTarget(t *testing.T) *Target {
	t.Helper()
	red := startTestRedis(t, 0)
	tg := redisTarget(t, red)
	// The AOF fsynced always: durability.ack is then a property of Redis, not
	// of the disk's timing (the test's server runs without persistence).
	tg.Spec.Options = map[string]string{"private-instance.appendonly": "yes", "private-instance.appendfsync": "always"}
	if err := targets.CanKillBroker(tg.Spec); err != nil {
		t.Skip(err)
	}
	tg.KeepLogs = t.TempDir()
	return tg
}

// TestPrivateBrokerStartedOnceMore: a private broker that does not start is
// started once more, on fresh ports, and the contract runs; the log of the
// start that failed is kept.
func TestPrivateBrokerStartedOnceMore(t *testing.T) {
	tg := privateRedisTarget(t)
	calls := failingStarts(t, 1)
	var lines strings.Builder
	tg.Log = &lines
	c, _ := contracts.Lookup("durability.ack")
	r, err := contracts.Evaluate(context.Background(), tg, c, contracts.Options{Seed: 1})
	t.Logf("%s%v %s %s", lines.String(), err, r.Verdict, r.Reason)
	if err != nil || r.Verdict != contracts.Pass || *calls != 2 {
		t.Fatalf("%v %s %s after %d starts; want pass after two", err, r.Verdict, r.Reason, *calls)
	}
	if !strings.Contains(lines.String(), "did not start, once more on fresh ports") {
		t.Errorf("no line says the broker was started once more")
	}
	checkKept(t, tg.KeepLogs, 1)
}

// TestPrivateBrokerThatDoesNotStartIsUnknown: a private broker that does not
// start twice ends its contract as unknown — not an error that would end the
// whole durachk run — with the broker's own last lines in the reason and its
// logs kept; nothing of the run is left.
func TestPrivateBrokerThatDoesNotStartIsUnknown(t *testing.T) {
	tg := privateRedisTarget(t)
	calls := failingStarts(t, 2)
	var runID, dir string
	tg.OnRun = func(id, d string) { runID, dir = id, d }
	c, _ := contracts.Lookup("durability.ack")
	r, err := contracts.Evaluate(context.Background(), tg, c, contracts.Options{Seed: 1})
	t.Logf("%v %s %s", err, r.Verdict, r.Reason)
	if err != nil || r.Verdict != contracts.Unknown || *calls != 2 {
		t.Fatalf("%v %s after %d starts; want unknown after two", err, r.Verdict, *calls)
	}
	for _, want := range []string{"did not start (twice, on fresh ports)", "exited while starting", "its last log lines: ", "appendfsync", "its logs: " + tg.KeepLogs} {
		if !strings.Contains(r.Reason, want) {
			t.Errorf("reason lacks %q", want)
		}
	}
	checkKept(t, tg.KeepLogs, 2)
	if left := leftovers(t, runID, dir); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// checkKept checks that KeepLogs holds the console of every failed start,
// with redis-server's complaint.
func checkKept(t *testing.T, dir string, starts int) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*-redis-*-output"))
	if len(files) != starts {
		t.Fatalf("kept logs %v, want the console of %d starts", files, starts)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(b), "appendfsync") {
			t.Errorf("%s: %v %q, want redis-server's complaint about appendfsync", f, err, b)
		}
	}
}
