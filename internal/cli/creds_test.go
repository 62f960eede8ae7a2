package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/durachk/durachk/internal/reaper"
	"github.com/durachk/durachk/internal/targets"
	"github.com/durachk/durachk/reports"
)

// TestPrivateCredentialsStayInTheRun runs durability.failover on a private
// cluster of every kind and durability.ack on a private instance of every
// kind, and looks for every credential durachk made for them (passwords,
// Erlang cookies: targets.SeeSecrets) in what the run leaves: --out
// (result.json, histories, every report), what it printed, and its run
// directories, which must be gone. A credential may live in the run
// directory while the run goes on, nowhere else.
func TestPrivateCredentialsStayInTheRun(t *testing.T) {
	if os.Getenv("DURACHK_PG_URL") == "" {
		t.Skip("DURACHK_PG_URL is not set (the local Postgres, the effect store); .ci/run sets it")
	}
	t.Setenv("DURACHK_BIN", durachkBinary(t)) // workers and the private NATS server
	var mu sync.Mutex
	var secrets []string
	stop := targets.SeeSecrets(func(s string) {
		mu.Lock()
		secrets = append(secrets, s)
		mu.Unlock()
	})
	defer stop()
	with := func(env, knobs string) string {
		u := os.Getenv(env)
		if u == "" {
			return ""
		}
		if strings.Contains(u, "?") {
			return u + "&" + knobs
		}
		return u + "?" + knobs
	}
	runs := []struct {
		contract string
		targets  []string
	}{
		{"durability.failover", []string{
			with("DURACHK_REDIS_URL", "private-cluster.replicas=1&private-cluster.sentinels=3&name=redis-cluster"),
			with("DURACHK_PG_URL", "private-cluster.standbys=1&name=pg-cluster"),
			with("DURACHK_AMQP_URL", "queue-arguments.x-queue-type=quorum&private-cluster.nodes=3&name=rabbit-cluster"),
		}},
		{"durability.ack", []string{
			with("DURACHK_REDIS_URL", "name=redis-private"),
			with("DURACHK_PG_URL", "name=pg-private"),
			with("DURACHK_AMQP_URL", "name=rabbit-private"),
			with("DURACHK_NATS_URL", "name=nats-private"),
		}},
	}
	var printed bytes.Buffer
	var outs []string
	var runIDs []string
	started := 0
	for _, r := range runs {
		var ts []string
		for _, u := range r.targets {
			if u == "" {
				continue
			}
			spec, err := targets.Parse(u)
			if err != nil {
				t.Fatal(err)
			}
			can := targets.CanKillBroker(spec)
			if targets.HasPrivateCluster(spec) {
				can = targets.CanFaultNodes(spec)
			}
			if can != nil {
				t.Logf("%s: no private broker here: %v", spec.Name, can)
				continue
			}
			ts = append(ts, u)
		}
		if len(ts) == 0 {
			continue
		}
		out := t.TempDir()
		outs = append(outs, out)
		o := RunOptions{Targets: ts, Contracts: []string{r.contract}, Seed: 1, Out: out, Command: "durachk run"}
		err := Run(context.Background(), o, &printed, &printed)
		if code := Code(err); code == ExitConfig {
			t.Fatalf("%s: %v\n%s", r.contract, err, printed.String())
		}
		doc, err := reports.ReadJSON(filepath.Join(out, "result.json"))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range doc.Results {
			// Every target ran on a private broker of its own (a verdict of
			// any kind: the machine may be loaded; skipped would mean it did not).
			if e.Verdict == "skipped" {
				t.Errorf("%s %s skipped: %s", e.Target, e.Contract, e.Reason)
			}
			started++
		}
		for _, w := range doc.Wall.Results {
			runIDs = append(runIDs, w.RunIDs...)
		}
	}
	stop()
	mu.Lock()
	defer mu.Unlock()
	// Each private broker has at least one credential of its own.
	if started == 0 || len(secrets) < started {
		t.Fatalf("%d credentials seen for %d runs on private brokers: the check would see nothing", len(secrets), started)
	}
	t.Logf("%d runs on private brokers, %d credentials made", started, len(secrets))
	found := func(b []byte) string {
		low := bytes.ToLower(b) // a RabbitMQ cookie is written in capitals
		for _, s := range secrets {
			if bytes.Contains(low, []byte(strings.ToLower(s))) {
				return s[:4] + "…"
			}
		}
		return ""
	}
	// The check itself finds a credential where one is.
	if found([]byte("x "+strings.ToUpper(secrets[0])+" y")) == "" {
		t.Fatal("the search does not find a credential")
	}
	if s := found(printed.Bytes()); s != "" {
		t.Errorf("the run printed credential %s", s)
	}
	for _, out := range outs {
		files := 0
		_ = filepath.Walk(out, func(p string, fi os.FileInfo, err error) error {
			if err != nil || !fi.Mode().IsRegular() {
				return err
			}
			files++
			b, err := os.ReadFile(p)
			if err != nil {
				t.Error(err)
			} else if s := found(b); s != "" {
				t.Errorf("%s holds credential %s", p, s)
			}
			return nil
		})
		if files < 3 {
			t.Errorf("%s: %d files, want result.json, histories and reports", out, files)
		}
	}
	if len(runIDs) < started {
		t.Errorf("%d run ids for %d runs", len(runIDs), started)
	}
	for _, id := range runIDs {
		if m, _ := filepath.Glob(filepath.Join(os.TempDir(), reaper.DirPattern(id)+"*")); len(m) > 0 {
			t.Errorf("run %s left its directory: %v", id, m)
		}
	}
}
