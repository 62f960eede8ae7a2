package targets

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters/pg/pgdb"
	rq "github.com/durachk/durachk/adapters/redis"
)

// A run that faults a cluster it did not start records, before each fault,
// what undoes it, and forgets it once it undid it; killed with its faults in
// place, it leaves the records, and cleanup of the target — with its control
// commands — undoes them (heal, unlag, then start), waits until the cluster
// answers and removes the run's registry; cleanup of the target without them
// undoes nothing, says which command it lacks and keeps the registry. The
// cluster is two real redis-servers (a primary and its replica), killed and
// started by their commands; partitions and lags only write to a log.
func TestKilledRunsFaultsUndoneByCleanup(t *testing.T) {
	pg, dir, log, addrs := redisPair(t)
	v := url.Values{}
	for i, n := range []string{"n1", "n2"} {
		note := func(what string) string { return "echo " + n + " " + what + " >> " + log }
		conf := filepath.Join(dir, n+".conf")
		v.Set("control."+n+".kill", "kill -9 $(cat "+filepath.Join(dir, n+".pid")+") && "+note("kill"))
		v.Set("control."+n+".start", "redis-server "+conf+" && "+note("start"))
		for _, a := range []string{ActionPartition, ActionHeal, ActionLag, ActionUnlag} {
			v.Set("control."+n+"."+a, note(a))
		}
		v.Set("control."+n+".addr", addrs[i])
	}
	raw := "redis://" + addrs[0] + "/0"
	s, err := Parse(raw + "?" + v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	s.StoreURL = pg
	s.RunID = "trst" + randSuffix()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	release, err := HoldRun(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	t.Cleanup(func() {
		if !released {
			release()
		}
		_ = TeardownStore(context.Background(), s)
	})
	cl, _, err := StartCluster(ctx, s, ClusterEnv{RunID: s.RunID, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	lg := cl.(Lagger)
	db, err := pgdb.Open(ctx, pg, pgdb.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	recorded := func(want string) {
		t.Helper()
		fs, err := pendingFaults(ctx, db, s.RunID)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range fs {
			got = append(got, f.node+" "+f.undo)
		}
		if strings.Join(got, ", ") != want {
			t.Errorf("recorded %q, want %q", strings.Join(got, ", "), want)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(cl.Partition([]string{"n1"}))
	recorded("n1 heal")
	must(cl.Heal())
	recorded("")
	_, err = lg.Lag(ctx, time.Second, 0)
	must(err)
	recorded("n1 unlag, n2 unlag")
	must(lg.Unlag(ctx))
	recorded("")
	must(cl.Kill("n2"))
	recorded("n2 start")
	must(cl.Restart(ctx, "n2"))
	recorded("")
	// Killed while n1 is cut off, replication lags and n2 is down.
	must(cl.Partition([]string{"n1"}))
	_, err = lg.Lag(ctx, time.Second, 0)
	must(err)
	must(cl.Kill("n2"))
	recorded("n1 heal, n1 unlag, n2 unlag, n2 start")
	cl.(laggingExternal).proxies.closeAll()
	release()
	released = true
	before := readFile(log)

	bare, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	bare.StoreURL = pg
	lines, err := Cleanup(ctx, bare, []string{s.RunID})
	if err == nil || !strings.Contains(err.Error(), "no control.n1.heal") || len(lines) > 0 {
		t.Errorf("cleanup without the control commands: %q, %v; want nothing done and the lacking control.n1.heal named", lines, err)
	}
	if !storeSchemaExists(t, pg, s.StoreSchema()) {
		t.Fatal("cleanup without the control commands removed the run's registry")
	}
	lines, err = Cleanup(ctx, s, []string{s.RunID})
	if err != nil {
		t.Fatalf("cleanup: %v (%q)", err, lines)
	}
	id := s.RunID
	want := []string{
		"ran control.n1.heal (run " + id + " had cut off node n1)",
		"ran control.n1.unlag (run " + id + " had lagged node n1)",
		"ran control.n2.unlag (run " + id + " had lagged node n2)",
		"ran control.n2.start (run " + id + " had killed node n2)",
		"the cluster answers again: every node serves, and follows its primary",
	}
	if len(lines) < len(want) || !slices.Equal(lines[:len(want)], want) {
		t.Errorf("cleanup said:\n%s\nwant first:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if !slices.Contains(lines, "removed postgres schema durachk_"+id+" (effect store)") {
		t.Errorf("cleanup did not remove the run's registry: %q", lines)
	}
	if got := strings.TrimPrefix(readFile(log), before); got != "n1 heal\nn1 unlag\nn2 unlag\nn2 start\n" {
		t.Errorf("cleanup ran %q", got)
	}
	r, err := rq.NodeReplication(ctx, addrs[1], "")
	if err != nil || r.Role != "slave" || !r.LinkUp {
		t.Errorf("n2 after the cleanup: %+v, %v; want a replica of n1 with its link up", r, err)
	}
}

// A broker under control commands (not a cluster) paused by a run that was
// killed is resumed by cleanup.
func TestKilledRunsPausedBrokerResumedByCleanup(t *testing.T) {
	pg, _, log, addrs := redisPair(t)
	v := url.Values{}
	for _, a := range []string{ActionKill, ActionStart, ActionPause, ActionResume} {
		v.Set("control."+a, "echo "+a+" >> "+log)
	}
	s, err := Parse("redis://" + addrs[0] + "/0?" + v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	s.StoreURL = pg
	s.RunID = "trsp" + randSuffix()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	release, err := HoldRun(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = TeardownStore(context.Background(), s) }()
	inst, _, err := startControlled(ctx, s)
	if err != nil {
		release()
		t.Fatal(err)
	}
	if err := inst.(Pauser).Pause(); err != nil {
		release()
		t.Fatal(err)
	}
	release()
	lines, err := Cleanup(ctx, s, []string{s.RunID})
	if err != nil {
		t.Fatalf("cleanup: %v (%q)", err, lines)
	}
	want := []string{"ran control.resume (run " + s.RunID + " had paused the broker)", "the broker answers again"}
	if len(lines) < 2 || !slices.Equal(lines[:2], want) {
		t.Errorf("cleanup said %q, want first %q", lines, want)
	}
	if got := readFile(log); got != "pause\nresume\n" {
		t.Errorf("commands run: %q", got)
	}
}

// redisPair is the effect store ($DURACHK_PG_URL), a directory with the log
// the tests' commands write, and the addresses of twoRedis in it.
func redisPair(t *testing.T) (pg, dir, log string, addrs []string) {
	t.Helper()
	if pg = os.Getenv("DURACHK_PG_URL"); pg == "" {
		t.Skip("DURACHK_PG_URL is not set")
	}
	dir = t.TempDir()
	return pg, dir, filepath.Join(dir, "log"), twoRedis(t, dir)
}

// twoRedis starts a redis-server on 127.0.0.1 and a replica of it, each
// daemonized with its configuration (dir/n1.conf, dir/n2.conf) and pid file
// (dir/n1.pid, dir/n2.pid), and returns their addresses once the replica is
// in sync. The test kills them at its end.
func twoRedis(t *testing.T, dir string) []string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not found")
	}
	var addrs []string
	for i, n := range []string{"n1", "n2"} {
		port, err := FreePortOn("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(port))
		pid := filepath.Join(dir, n+".pid")
		lines := []string{"bind 127.0.0.1", "port " + strconv.Itoa(port), "daemonize yes", "pidfile " + pid, "dir " + dir,
			"dbfilename " + n + ".rdb", "save \"\"", "appendonly no", "repl-diskless-sync-delay 0", "logfile " + filepath.Join(dir, n+".log")}
		if i == 1 {
			lines = append(lines, "replicaof 127.0.0.1 "+strings.TrimPrefix(addrs[0], "127.0.0.1:"))
		}
		conf := filepath.Join(dir, n+".conf")
		if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("redis-server", conf).CombinedOutput(); err != nil {
			t.Fatalf("redis-server %s: %v: %s", n, err, out)
		}
		t.Cleanup(func() {
			if b, err := os.ReadFile(pid); err == nil {
				if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && p > 1 {
					_ = syscall.Kill(p, syscall.SIGKILL)
				}
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := pollUntil(ctx, 50*time.Millisecond, func() error {
		r, err := rq.NodeReplication(ctx, addrs[1], "")
		if err == nil && (r.Role != "slave" || !r.LinkUp) {
			err = fmt.Errorf("role %s, link up %t", r.Role, r.LinkUp)
		}
		return err
	})
	if err != nil {
		t.Fatalf("the replica is not in sync: %v", err)
	}
	return addrs
}
