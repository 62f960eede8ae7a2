package runner

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/internal/targets"
)

// startRedis starts a redis-server of the test's own, daemonized, on a free
// loopback port with the given appendonly setting, and returns its URL with
// control commands that kill it through its pid file and start it again with
// the same command line. The server is killed at the end of the test.
func startRedis(t *testing.T, appendonly string) string {
	t.Helper()
	server, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed")
	}
	port, err := targets.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pidfile := filepath.Join(dir, "redis.pid")
	conf := filepath.Join(dir, "redis.conf")
	lines := []string{"bind 127.0.0.1", "port " + strconv.Itoa(port), "daemonize yes", "pidfile " + pidfile,
		"dir " + dir, "logfile " + filepath.Join(dir, "redis.log"), "appendonly " + appendonly,
		"appendfsync everysec", `save ""`}
	if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := server + " " + conf
	kill := "kill -KILL $(cat " + pidfile + ")"
	if out, err := exec.Command("sh", "-c", start).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", start, err, out)
	}
	t.Cleanup(func() {
		b, err := os.ReadFile(pidfile)
		if err != nil {
			return
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	v := url.Values{"control.kill": {kill}, "control.start": {start}, "control.timeout": {"20s"},
		"name": {"redis-appendonly-" + appendonly}}
	return fmt.Sprintf("redis://127.0.0.1:%d/0?%s", port, v.Encode())
}

// durability.ack on a Redis durachk did not start, through control commands
// only: with the AOF on, every acknowledged job survives the kill; with
// appendonly no (the negative control) the same run is a violation.
func TestDurabilityThroughControlCommands(t *testing.T) {
	t.Parallel() // brokers of its own, on ports of their own
	if os.Getenv("DURACHK_PG_URL") == "" {
		t.Skip("DURACHK_PG_URL is not set: no effect store")
	}
	c, _ := contracts.Lookup("durability.ack")
	for _, tt := range []struct {
		appendonly string
		want       contracts.Verdict
	}{{"yes", contracts.Pass}, {"no", contracts.Violated}} {
		t.Run("appendonly "+tt.appendonly, func(t *testing.T) {
			spec, err := targets.Parse(startRedis(t, tt.appendonly))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), runnertest.Loaded(2*time.Minute))
			defer cancel()
			tg, err := New(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			if !tg.Capabilities().BrokerKill {
				t.Fatal("a target with control.kill and control.start cannot kill its broker")
			}
			// A slower clock than the default: under load the producer must have
			// jobs acknowledged before the kill, or the negative control has
			// nothing to lose.
			tg.Scale = 0.25
			var log strings.Builder
			tg.Log = &log
			var runID, dir string
			tg.OnRun = func(id, d string) { runID, dir = id, d }
			run := func(seed uint64) contracts.Result {
				r, err := contracts.Evaluate(ctx, tg, c, contracts.Options{Seed: seed})
				if err != nil {
					t.Fatal(err)
				}
				if r.Stats.Faults["broker_crash"] == 0 && r.Verdict != contracts.Unknown {
					t.Errorf("seed %d: no broker kill applied: %v", r.Seed, r.Stats.Faults)
				}
				return r
			}
			// The class, sought across seeds: what the kill finds acknowledged
			// and not yet finished depends on the run.
			if tt.want == contracts.Violated {
				runnertest.SeekViolation(t, "durability.ack with appendonly no", contracts.PropLost, run)
			} else {
				runnertest.SeekPasses(t, "durability.ack with appendonly yes", 1, run)
			}
			if !strings.Contains(log.String(), "broker under control commands") || strings.Contains(log.String(), "private") {
				t.Errorf("the run did not use the control commands:\n%s", log.String())
			}
			if left := leftovers(t, runID, dir); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
			// The broker is the user's: the run leaves it running.
			if err := targets.Ready(ctx, spec); err != nil {
				t.Errorf("the broker is not running after the run: %v", err)
			}
		})
	}
}
