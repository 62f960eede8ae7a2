package targets

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/durachk/durachk/internal/lazyfs"
	"github.com/durachk/durachk/internal/reaper"
	"github.com/durachk/durachk/internal/runner/runnertest"
)

// TestMain lets the test binary play a durachk that starts a cluster and is
// then SIGKILLed (clusterHelperEnv).
func TestMain(m *testing.M) {
	lazyfs.ServeIfAsked() // the disks of a Galera cluster whose node crashes are power losses
	if url := os.Getenv(clusterHelperEnv); url != "" {
		os.Exit(clusterHelper(url))
	}
	os.Exit(m.Run())
}

const clusterHelperEnv = "DURACHK_TEST_CLUSTER_HELPER"

// clusterHelper starts the cluster url names in $DURACHK_TEST_DIR, partitions
// n1 away, prints "ready" and waits to be killed.
func clusterHelper(url string) int {
	s, err := Parse(url)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	s.RunID = os.Getenv("DURACHK_TEST_RUNID")
	// The run directory's lock, held until the SIGKILL: another durachk's
	// cleanup spares a live run.
	if _, err := reaper.LockDir(os.Getenv("DURACHK_TEST_DIR")); err != nil {
		fmt.Println(err)
		return 1
	}
	c, _, err := StartCluster(context.Background(), s, ClusterEnv{Dir: os.Getenv("DURACHK_TEST_DIR"), RunID: s.RunID})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	if err := c.Partition([]string{"n1"}); err != nil {
		fmt.Println(err)
		return 1
	}
	// The block the cluster got (another live run may hold the one its run
	// id prefers): the test looks for leftovers on it.
	fmt.Println("ready", ClaimedBlock(s.RunID))
	select {}
}

// processesOf lists the live processes whose command line holds one of marks.
func processesOf(marks ...string) []string {
	var out []string
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		b, err := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		for _, m := range marks {
			if strings.Contains(cmd, m) {
				st, _ := os.ReadFile("/proc/" + p.Name() + "/stat")
				if i := strings.LastIndexByte(string(st), ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
					break // a zombie is gone, only not reaped yet
				}
				out = append(out, p.Name()+": "+cmd)
				break
			}
		}
	}
	return out
}

// A durachk killed with SIGKILL while its cluster runs leaves no node, helper
// or epmd behind (they die with it); its nftables table is left, and durachk
// cleanup removes it.
func TestClusterDiesWithDurachk(t *testing.T) {
	t.Parallel() // clusters of its own, on loopback blocks of their own
	for _, tt := range []struct{ name, url string }{
		{"redis", "redis://127.0.0.1:6379/0?private-cluster.replicas=2&private-cluster.sentinels=3"},
		{"postgres", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable&private-cluster.standbys=1"},
		{"rabbitmq", "amqp://guest:guest@127.0.0.1:5672/?queue-arguments.x-queue-type=quorum&private-cluster.nodes=3"},
		{"mariadb", "mysql://root@127.0.0.1:3306/test?private-cluster.replicas=1"},
		{"galera", "mysql://root@127.0.0.1:3306/test?private-cluster.galera_nodes=3"},
	} {
		// Partitions of these are cut in the kernel: their nftables table is
		// left by the SIGKILL, and cleanup removes it.
		kernelCut := tt.name == "rabbitmq" || tt.name == "galera"
		t.Run(tt.name, func(t *testing.T) {
			if (tt.name == "rabbitmq" || tt.name == "galera") && testing.Short() {
				t.Skip("a RabbitMQ or Galera cluster takes seconds to tens of seconds")
			}
			if strings.HasPrefix(tt.url, "mysql:") && os.Getenv("DURACHK_MYSQL_URL") == "" {
				t.Skip("DURACHK_MYSQL_URL is not set: private MariaDB clusters are tested where the MariaDB target is")
			}
			s, err := Parse(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			if err := CanFaultNodes(s); err != nil {
				t.Skip(err)
			}
			if kernelCut {
				if err := CanPartitionKernel(); err != nil {
					t.Skip(err)
				}
			}
			// The cluster's start is not what this test is about: a start
			// that fails (a node that exits while starting on a busy machine)
			// is tried again, up to three times, each failure logged; the
			// helper's processes must be gone after a failed start too.
			var (
				cmd         *exec.Cmd
				runID, dir  string
				block, line string
				ok          bool
			)
			for try := 1; try <= 3 && !ok; try++ {
				runID = "k" + randSuffix()
				dir, err = os.MkdirTemp("", reaper.DirPattern(runID))
				if err != nil {
					t.Fatal(err)
				}
				defer os.RemoveAll(dir)
				cmd = exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), clusterHelperEnv+"="+tt.url, "DURACHK_TEST_DIR="+dir, "DURACHK_TEST_RUNID="+runID)
				out, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				// On every path out of the test, the helper is gone.
				defer func(cmd *exec.Cmd) {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
				}(cmd)
				line, _ = bufio.NewReader(out).ReadString('\n')
				block, ok = strings.CutPrefix(strings.TrimSpace(line), "ready ")
				ok = ok && strings.HasPrefix(block, "127.0.")
				if !ok {
					_ = cmd.Wait()
					t.Logf("start %d: helper: %s", try, strings.TrimSpace(line))
					var left []string
					for deadline := time.Now().Add(runnertest.Loaded(10 * time.Second)); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
						if left = processesOf(dir); len(left) == 0 {
							break
						}
					}
					if len(left) > 0 {
						t.Errorf("a failed start left %v", left)
					}
					failed := runID
					_, _ = reaper.Sweep(func(id string) bool { return id != failed })
					_, _ = CleanupNFT(func(id string) bool { return id != failed })
				}
			}
			if !ok {
				t.Fatalf("the cluster did not start in 3 tries; the last: %s", line)
			}
			if len(processesOf(dir, block+".")) == 0 {
				t.Fatal("no process of the cluster found before the kill: the check below would prove nothing")
			}
			_ = cmd.Process.Signal(syscall.SIGKILL)
			var left []string
			wait := runnertest.Loaded(10 * time.Second)
			for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				if left = processesOf(dir, block+"."); len(left) == 0 {
					break
				}
			}
			if len(left) > 0 {
				t.Errorf("left behind %v after the SIGKILL: %v", wait.Round(time.Second), left)
			}
			// What durachk cleanup removes after a SIGKILL: the run's cgroups and
			// directory (reaper.Sweep), and its nftables table.
			if _, err := reaper.Sweep(func(id string) bool { return id != runID }); err != nil {
				t.Error(err)
			}
			// With it go the files that hold the run's credentials (configs,
			// passfile, cookie): nothing of them outlives the run.
			if _, err := os.Stat(dir); err == nil {
				t.Errorf("cleanup left the run directory %s", dir)
			}
			removed, err := CleanupNFT(func(id string) bool { return id != runID })
			if err != nil {
				t.Fatal(err)
			}
			if kernelCut && len(removed) != 1 {
				t.Errorf("cleanup removed %v, want the run's nftables table", removed)
			}
			if again, _ := CleanupNFT(func(id string) bool { return id != runID }); len(again) > 0 {
				t.Errorf("a second cleanup removed %v", again)
			}
			// The block's lock died with the run; its file goes with cleanup.
			lock := filepath.Join(blockLockDir(), "durachk-loopback-"+block+".lock")
			if _, err := CleanupBlockLocks(); err != nil {
				t.Error(err)
			}
			if _, err := os.Stat(lock); err == nil {
				t.Errorf("cleanup left %s", lock)
			}
		})
	}
}
