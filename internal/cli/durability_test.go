package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/lazyfs"
	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/internal/targets"
	"github.com/durachk/durachk/reports"
)

// startRedisServer starts a redis-server of the test's own on a free
// loopback port with args (its configuration), waits until it answers, and
// stops it when the test ends. It returns the process and the port.
func startRedisServer(t *testing.T, args ...string) (*exec.Cmd, int) {
	t.Helper()
	server, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed")
	}
	port, err := targets.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	red := exec.Command(server, append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", t.TempDir()}, args...)...)
	if err := red.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = red.Process.Kill(); _ = red.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := exec.Command("redis-cli", "-p", strconv.Itoa(port), "ping").Output(); err == nil && strings.TrimSpace(string(c)) == "PONG" {
			return red, port
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %d did not answer", port)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startPrivateServer starts, for the test's own use, a broker server as
// durachk starts a private instance, configured by the knobs of raw (a
// postgres with fsync=off, a mariadbd with innodb_flush_log_at_trx_commit=0),
// and returns its URL; it is stopped when the test ends.
func startPrivateServer(t *testing.T, raw string) string {
	t.Helper()
	spec, err := targets.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := targets.CanKillBroker(spec); err != nil {
		t.Skip(err)
	}
	spec.RunID = "tsrv" + strconv.FormatInt(time.Now().UnixNano()%1e6, 36)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The server runs as its own user (postgres, mysql): it must reach its
	// directory.
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	inst, _, err := targets.StartPrivate(ctx, spec, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := inst.Stop(); err != nil {
			t.Errorf("stop the test's server: %v", err)
		}
	})
	return inst.URL()
}

// withKnobs adds knobs to a target URL.
func withKnobs(u, knobs string) string {
	if strings.Contains(u, "?") {
		return u + "&" + knobs
	}
	return u + "?" + knobs
}

// TestDurabilityOnTheServersSettings is issue 36's bar: `durachk run
// --target URL --contract durability.ack|durability.power-loss` on a server
// that does not keep what it acknowledged is a violation (lost), because the
// private instance the contract runs on takes the server's own settings, and
// the printed table, summary.md, report.html and result.json name each
// setting with its source; a knob overrides the server; a setting the
// server does not let durachk read is named as such, its default used.
// Servers the test starts itself, never the shared ones: a Redis configured
// as the machine's (appendonly no, save ""), the same Redis with CONFIG
// renamed away (managed Redis), a Postgres with fsync=off and a MariaDB with
// innodb_flush_log_at_trx_commit=0. Those two survive a kill -9 (the kernel
// has what they wrote); only durability.power-loss tells them apart. Each
// outcome is a class, sought across seeds (runnertest).
func TestDurabilityOnTheServersSettings(t *testing.T) {
	if os.Getenv("DURACHK_PG_URL") == "" {
		t.Skip("DURACHK_PG_URL is not set (the local Postgres, the effect store); .ci/run sets it")
	}
	t.Setenv("DURACHK_BIN", durachkBinary(t)) // the workers
	redisNoAOF := func(t *testing.T, extra ...string) string {
		_, port := startRedisServer(t, append([]string{"--appendonly", "no", "--save", ""}, extra...)...)
		return fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	}
	tests := []struct {
		name, contract string
		target         func(t *testing.T) string
		powerLoss      bool
		pass           bool     // the class: pass (a knob made it durable), else a witnessed lost
		names          []string // what every report says of the settings
	}{
		{name: "redis appendonly no", contract: "durability.ack",
			target: func(t *testing.T) string { return withKnobs(redisNoAOF(t), "name=redis-server-settings") },
			names:  []string{"appendonly=no (server)", `save="" (server)`, "appendfsync=everysec (server)"}},
		{name: "a knob overrides the server", contract: "durability.ack", pass: true,
			target: func(t *testing.T) string {
				return withKnobs(redisNoAOF(t), "name=redis-knob&private-instance.appendonly=yes&private-instance.appendfsync=always")
			},
			names: []string{"appendonly=yes (knob; the server has no)", "appendfsync=always (knob; the server has everysec)", `save="" (server)`}},
		{name: "CONFIG renamed", contract: "durability.ack",
			target: func(t *testing.T) string {
				return withKnobs(redisNoAOF(t, "--rename-command", "CONFIG", ""), "name=redis-no-config")
			},
			names: []string{"appendonly=no (server)", "appendfsync: not readable from the server (CONFIG disabled or renamed): default everysec used",
				`save: not readable from the server (CONFIG disabled or renamed): default "" used`}},
		{name: "postgres fsync off", contract: "durability.power-loss", powerLoss: true,
			target: func(t *testing.T) string {
				return withKnobs(startPrivateServer(t, withKnobs(os.Getenv("DURACHK_PG_URL"), "private-instance.fsync=off")), "name=pg-fsync-off")
			},
			names: []string{"fsync=off (server)", "synchronous_commit=on (server)"}},
		{name: "mariadb innodb_flush_log_at_trx_commit 0", contract: "durability.power-loss", powerLoss: true,
			target: func(t *testing.T) string {
				return withKnobs(startPrivateServer(t, "mysql://root@127.0.0.1:3306/test?private-instance.innodb_flush_log_at_trx_commit=0"), "name=mariadb-trx0")
			},
			names: []string{"innodb_flush_log_at_trx_commit=0 (server)", "log_bin=OFF (server)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.powerLoss {
				if err := lazyfs.Available(); err != nil {
					t.Skipf("no power loss here: %v", err)
				}
			}
			target := tt.target(t)
			var printed, summary, page string
			var doc *reports.Document
			run := func(seed uint64) contracts.Result {
				out := t.TempDir()
				var stdout, stderr bytes.Buffer
				o := RunOptions{Targets: []string{target}, Contracts: []string{tt.contract}, Seed: seed, Out: out, Command: "durachk run"}
				err := Run(context.Background(), o, &stdout, &stderr)
				if code := Code(err); code == ExitConfig {
					t.Fatalf("%v\n%s", err, stderr.String())
				}
				d, err := reports.ReadJSON(filepath.Join(out, "result.json"))
				if err != nil {
					t.Fatalf("%v\n%s", err, stderr.String())
				}
				md, _ := os.ReadFile(filepath.Join(out, "summary.md"))
				html, _ := os.ReadFile(filepath.Join(out, "report.html"))
				printed, summary, page, doc = stdout.String(), string(md), string(html), d
				return d.Results[0]
			}
			if tt.pass {
				runnertest.SeekPasses(t, tt.name, 1, run)
			} else {
				runnertest.SeekViolation(t, tt.name, contracts.PropLost, run)
			}
			d := doc.Targets[0].Durability
			if d == nil {
				t.Fatalf("result.json names no durability settings: %+v", doc.Targets[0])
			}
			line := d.Line()
			for _, n := range tt.names {
				if !strings.Contains(line, n) {
					t.Errorf("result.json's settings %q lack %q", line, n)
				}
				if !strings.Contains(printed, n) {
					t.Errorf("the printed table lacks %q:\n%s", n, printed)
				}
				if !strings.Contains(summary, n) {
					t.Errorf("summary.md lacks %q", n)
				}
				if !strings.Contains(page, htmlEscaped(n)) {
					t.Errorf("report.html lacks %q", n)
				}
			}
		})
	}
}

// htmlEscaped is s as html/template writes it in text.
func htmlEscaped(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(s)
}
