package cli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters/pg/pgdb"
	"github.com/durachk/durachk/internal/reaper"
	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/internal/targets"
)

// durachkBinary builds cmd/durachk once per test binary.
func durachkBinary(t *testing.T) string { return runnertest.Binary(t) }

func TestMain(m *testing.M) {
	code := m.Run()
	runnertest.RemoveBinary()
	os.Exit(code)
}

var privateLine = regexp.MustCompile(`private (\S+) instance at \S+ \(run ([a-z0-9]+), (\S+)\)`)

// runProcesses lists the processes of a run: those whose command line names
// its directory or its node name (durachk-<id>), whose working directory is in
// the run directory, or that are in its cgroup.
func runProcesses(id, dir string) []int {
	var out []int
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		stat, err := os.ReadFile("/proc/" + p.Name() + "/stat")
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		cwd, _ := os.Readlink("/proc/" + p.Name() + "/cwd")
		cg, _ := os.ReadFile("/proc/" + p.Name() + "/cgroup")
		if bytes.Contains(cmdline, []byte(dir)) || bytes.Contains(cmdline, []byte("durachk-"+id)) ||
			cwd == dir || strings.HasPrefix(cwd, dir+"/") || bytes.Contains(cg, []byte("/durachk-"+id)) {
			out = append(out, pid)
		}
	}
	return out
}

// listeningPorts returns the TCP ports the processes listen on (/proc/net/tcp*).
func listeningPorts(pids []int) []string {
	inodes := map[string]bool{}
	for _, pid := range pids {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if err == nil && strings.HasPrefix(l, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
			}
		}
	}
	seen := map[string]bool{}
	var out []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, _ := os.ReadFile(f)
		for _, line := range strings.Split(string(b), "\n") {
			fs := strings.Fields(line)
			if len(fs) < 10 || fs[3] != "0A" || !inodes[fs[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(fs[1], ":")
			port, _ := strconv.ParseUint(hexPort, 16, 16)
			if p := strconv.Itoa(int(port)); !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// leftOf lists what is left of run id on this machine and in the effect store.
func leftOf(t *testing.T, id, dir string, ports []string) []string {
	t.Helper()
	var left []string
	for _, p := range runProcesses(id, dir) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		left = append(left, fmt.Sprintf("process %d: %s", p, bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
	}
	for _, p := range ports {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+p, 300*time.Millisecond); err == nil {
			c.Close()
			left = append(left, "listening port "+p)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(os.TempDir(), reaper.DirPattern(id)+"*")); len(m) > 0 {
		left = append(left, "directories "+strings.Join(m, " "))
	}
	if cg, ok := reaper.RunCgroup(id); ok {
		left = append(left, "cgroup "+cg)
	}
	db, err := pgdb.Open(context.Background(), os.Getenv("DURACHK_PG_URL"), pgdb.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Pool.Query(context.Background(), `SELECT nspname FROM pg_namespace WHERE nspname LIKE $1`, "durachk_"+id+"%")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		_ = rows.Scan(&n)
		left = append(left, "schema "+n)
	}
	rows.Close()
	return left
}

// A run killed (SIGKILL) or interrupted (SIGINT) while its private broker is
// up leaves nothing: no process (broker, its helpers, workers), no listening
// port, no directory, cgroup, schema, key or queue of the run — after
// `durachk cleanup` for SIGKILL (the store schema and any namespace on the
// target stay until then), without it for SIGINT.
func TestInterruptedRunLeavesNothing(t *testing.T) {
	if os.Getenv("DURACHK_PG_URL") == "" {
		t.Skip("DURACHK_PG_URL is not set (the local Postgres); .ci/run sets it")
	}
	kinds := []struct{ kind, env string }{
		{"postgres", "DURACHK_PG_URL"}, {"redis", "DURACHK_REDIS_URL"}, {"amqp", "DURACHK_AMQP_URL"}, {"nats", "DURACHK_NATS_URL"},
		{"mysql", "DURACHK_MYSQL_URL"},
	}
	bin := durachkBinary(t)
	// The parent-death signal alone (no watchdog, no cgroup) ends RabbitMQ's
	// node too: it is beam.smp itself; cleanup then removes the directory.
	t.Run("amqp/SIGKILL/parent-death-signal-only", func(t *testing.T) {
		target := os.Getenv("DURACHK_AMQP_URL")
		if target == "" {
			t.Skip("DURACHK_AMQP_URL is not set")
		}
		if spec, err := targets.Parse(target); err != nil || targets.CanKillBroker(spec) != nil {
			t.Skip("no private RabbitMQ here")
		}
		t.Setenv("DURACHK_NO_WATCHDOG", "1")
		t.Setenv("DURACHK_NO_CGROUP", "1")
		interruptRun(t, bin, target, syscall.SIGKILL)
	})
	for _, k := range kinds {
		for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGINT} {
			t.Run(k.kind+"/"+map[syscall.Signal]string{syscall.SIGKILL: "SIGKILL", syscall.SIGINT: "SIGINT"}[sig], func(t *testing.T) {
				target := os.Getenv(k.env)
				if target == "" {
					t.Skipf("%s is not set", k.env)
				}
				spec, err := targets.Parse(target)
				if err != nil {
					t.Fatal(err)
				}
				if k.kind == "nats" {
					t.Setenv("DURACHK_BIN", bin) // the private server is durachk itself, not this test binary
				}
				if err := targets.CanKillBroker(spec); err != nil {
					t.Skip(err)
				}
				interruptRun(t, bin, target, sig)
			})
		}
	}
}

func interruptRun(t *testing.T, bin, target string, sig syscall.Signal) {
	cmd := exec.Command(bin, "run", "--contract", "durability.ack", "--target", target, "--out", t.TempDir())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	var id, dir string
	found := make(chan struct{})
	var rest bytes.Buffer
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := privateLine.FindStringSubmatch(sc.Text()); m != nil && id == "" {
				id, dir = m[2], m[3]
				close(found)
			}
			rest.WriteString(sc.Text() + "\n")
		}
		exited <- cmd.Wait()
	}()
	select {
	case <-found:
	case err := <-exited:
		t.Fatalf("durachk exited before its private broker was up: %v\n%s", err, rest.String())
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("no private instance within 3 minutes")
	}
	// Kill it once the broker listens and workers run (the broker itself is
	// killed and restarted within the first second: catch it up).
	var procs []int
	var ports []string
	for wait := time.Now().Add(runnertest.Loaded(10 * time.Second)); time.Now().Before(wait); time.Sleep(20 * time.Millisecond) {
		procs = runProcesses(id, dir)
		if ports = listeningPorts(procs); len(procs) >= 3 && len(ports) > 0 {
			break
		}
	}
	if len(procs) < 3 || len(ports) == 0 {
		t.Fatalf("run %s: processes %v, ports %v: the scan does not see the run", id, procs, ports)
	}
	// Secrets reach the children over a pipe: no worker config on disk.
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() && info.Size() < 1<<20 {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(`"store_url"`)) {
				t.Errorf("%s holds a child's configuration", p)
			}
		}
		return nil
	})
	start := time.Now()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("durachk did not exit within 2 minutes of %v", sig)
	}
	// The watchdog (SIGKILL) or the teardown (SIGINT) ends every process.
	deadline := time.Now().Add(runnertest.Loaded(20 * time.Second))
	for len(runProcesses(id, dir)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("run %s: %d processes, ports %v; all gone %.1f s after %v", id, len(procs), ports, time.Since(start).Seconds(), sig)
	watchdog := os.Getenv("DURACHK_NO_WATCHDOG") == ""
	if sig == syscall.SIGKILL && watchdog {
		// The watchdog removes the run directory once the processes are gone.
		for wait := time.Now().Add(runnertest.Loaded(10 * time.Second)); time.Now().Before(wait); time.Sleep(50 * time.Millisecond) {
			if _, err := os.Stat(dir); err != nil {
				break
			}
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("the watchdog left %s", dir)
		}
	}
	if sig == syscall.SIGKILL {
		var out bytes.Buffer
		c := exec.Command(bin, "cleanup", "--target", target, "--run", id)
		c.Stdout, c.Stderr = &out, &out
		if err := c.Run(); err != nil {
			t.Fatalf("cleanup: %v\n%s", err, out.String())
		}
		if !strings.Contains(out.String(), "removed postgres schema durachk_"+id) {
			t.Errorf("cleanup did not say it removed the run's store schema:\n%s", out.String())
		}
		if !watchdog && !strings.Contains(out.String(), "local: removed temporary directory "+dir) {
			t.Errorf("cleanup did not say it removed the run directory:\n%s", out.String())
		}
		t.Logf("cleanup:\n%s", out.String())
	}
	if left := leftOf(t, id, dir, ports); len(left) > 0 {
		t.Errorf("run %s left after %v: %v\ndurachk's stderr:\n%s", id, sig, left, rest.String())
	}
}

// runOf finds the run directory of a durachk process by its worker children
// (they run in it) and returns the run id and directory.
func runOf(ppid int) (id, dir string) {
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		stat, err := os.ReadFile("/proc/" + p.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		fs := strings.Fields(string(stat[i+2:]))
		if len(fs) < 2 || fs[1] != strconv.Itoa(ppid) {
			continue
		}
		cwd, _ := os.Readlink("/proc/" + p.Name() + "/cwd")
		if m := runDirRE.FindStringSubmatch(filepath.Base(cwd)); m != nil {
			return m[1], cwd
		}
	}
	return "", ""
}

var runDirRE = regexp.MustCompile(`^durachk-([a-z0-9]+)-[0-9]+$`)

// commandLine is the first line of `durachk run`, naming the command's id.
var commandLine = regexp.MustCompile(`^durachk: run ([a-z0-9]+): `)

// A run on the shared RabbitMQ killed with SIGKILL leaves its queues (with
// messages) and its store schema; cleanup of that target, named by the id
// `durachk run` printed (its contract's run has an id of its own), removes
// them, one line each, and a second cleanup finds nothing.
func TestKilledRunOnSharedRabbitCleanedUp(t *testing.T) {
	target := os.Getenv("DURACHK_AMQP_URL")
	if target == "" || os.Getenv("DURACHK_PG_URL") == "" {
		t.Skip("DURACHK_AMQP_URL or DURACHK_PG_URL is not set")
	}
	bin := durachkBinary(t)
	cmd := exec.Command(bin, "run", "--contract", "lease.redelivery", "--target", target, "--out", t.TempDir())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	printed := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := commandLine.FindStringSubmatch(sc.Text()); m != nil {
				printed <- m[1]
			}
		}
	}()
	var id, dir string
	for wait := time.Now().Add(time.Minute); id == "" && time.Now().Before(wait); time.Sleep(20 * time.Millisecond) {
		id, dir = runOf(cmd.Process.Pid)
	}
	if id == "" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("no run directory within a minute")
	}
	time.Sleep(500 * time.Millisecond) // jobs in the queues
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	var parent string
	select {
	case parent = <-printed:
	case <-time.After(5 * time.Second):
		t.Fatal("durachk run printed no run id")
	}
	if parent == id {
		t.Fatalf("the command's id %s is its contract run's", id)
	}
	cleanup := func() string {
		var out bytes.Buffer
		c := exec.Command(bin, "cleanup", "--target", target, "--run", parent)
		c.Stdout, c.Stderr = &out, &out
		if err := c.Run(); err != nil {
			t.Fatalf("cleanup: %v\n%s", err, out.String())
		}
		return out.String()
	}
	out := cleanup()
	t.Logf("cleanup after SIGKILL of run %s (its contract's run %s):\n%s", parent, id, out)
	for _, want := range []string{"the runs of " + parent + ": " + id, "removed rabbitmq queue durachk." + id + " (", "removed postgres schema durachk_" + id + " (effect store)"} {
		if !strings.Contains(out, want) {
			t.Errorf("cleanup output lacks %q", want)
		}
	}
	if again := cleanup(); !strings.Contains(again, "nothing left behind") || removedOtherThanBlockLocks(again) {
		t.Errorf("second cleanup:\n%s", again)
	}
	if left := leftOf(t, id, dir, nil); len(left) > 0 {
		t.Errorf("run %s left: %v", id, left)
	}
}

// removedOtherThanBlockLocks reports whether a cleanup's output removed
// anything but loopback block locks: those name no run, and a test of
// another package that SIGKILLs a cluster run on purpose leaves its own for
// whichever cleanup comes next (a second cleanup of this run removed one in
// an idle .ci/run, 2026-12-06).
func removedOtherThanBlockLocks(out string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "removed") && !strings.Contains(l, "removed loopback block lock ") {
			return true
		}
	}
	return false
}
