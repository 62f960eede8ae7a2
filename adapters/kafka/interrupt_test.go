package kafka_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	kq "github.com/durachk/durachk/adapters/kafka"
	"github.com/durachk/durachk/internal/runner/runnertest"
)

// workerRun returns the run id of a worker process of bin (from its working
// directory, the run's), or "".
func workerRun(bin string) string {
	for _, p := range runnertest.Processes(bin) {
		pid, cmdline, _ := strings.Cut(p, ": ")
		if !strings.Contains(cmdline, " worker --config ") {
			continue
		}
		cwd, err := os.Readlink("/proc/" + pid + "/cwd")
		if err != nil {
			continue
		}
		if rest, ok := strings.CutPrefix(filepath.Base(cwd), "durachk-"); ok {
			if id, _, ok := strings.Cut(rest, "-"); ok {
				return id
			}
		}
	}
	return ""
}

// TestInterruptedRunLeavesNothing: a whole `durachk run` on Kafka
// interrupted by SIGINT tears its topics, group and processes down itself;
// one killed with SIGKILL leaves its topics and group until `durachk
// cleanup`, and no process (its children die with it or by its watchdog).
// For a consumer group and a share group on a broker of the user's (the
// package's kfake, which outlives the run), and for kafka://, whose private
// kfake is the run's own process.
func TestInterruptedRunLeavesNothing(t *testing.T) {
	if os.Getenv("DURACHK_PG_URL") == "" && os.Getenv("DURACHK_STORE_URL") == "" {
		t.Skip("DURACHK_PG_URL is not set: the run needs the effect store")
	}
	u := brokerURL(t)
	bin := runnertest.Binary(t)
	runsOn := func(t *testing.T) []string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ids, err := kq.RunIDs(ctx, u, "")
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	for _, tc := range []struct{ name, target string }{
		{"consumer group", u},
		{"share group", u + "?group.type=share"},
		{"private kfake", "kafka://"},
	} {
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
			t.Run(tc.name+"/"+sig.String(), func(t *testing.T) {
				before := runsOn(t)
				if p := runnertest.Processes(bin); len(p) > 0 {
					t.Fatalf("processes of %s before the run: %v", bin, p)
				}
				cmd := exec.Command(bin, "run", "--target", tc.target, "--contract", "lease.redelivery", "--out", t.TempDir())
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				exited := make(chan error, 1)
				go func() { exited <- cmd.Wait() }()
				// Signalled once the run's workers run: it has its topics
				// and group then (the probe's come and go before). The run
				// id is in the name of their directory.
				id := ""
				for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
					if id = workerRun(bin); id != "" {
						break
					}
					select {
					case err := <-exited:
						t.Fatalf("durachk exited before its run started workers: %v\n%s", err, out.String())
					default:
					}
					if time.Now().After(deadline) {
						_ = cmd.Process.Kill()
						t.Fatalf("no worker within a minute\n%s", out.String())
					}
				}
				if err := cmd.Process.Signal(sig); err != nil {
					t.Fatal(err)
				}
				select {
				case <-exited:
				case <-time.After(time.Minute):
					_ = cmd.Process.Kill()
					t.Fatalf("durachk did not exit within a minute of %v", sig)
				}
				if sig == syscall.SIGKILL {
					var cl bytes.Buffer
					c := exec.Command(bin, "cleanup", "--target", tc.target, "--run", id)
					c.Stdout, c.Stderr = &cl, &cl
					if err := c.Run(); err != nil {
						t.Fatalf("cleanup: %v\n%s", err, cl.String())
					}
					t.Logf("cleanup:\n%s", cl.String())
				}
				// The watchdog ends a killed durachk's children: give it
				// a moment.
				var procs []string
				for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
					if procs = runnertest.Processes(bin); len(procs) == 0 || time.Now().After(deadline) {
						break
					}
				}
				if len(procs) > 0 {
					t.Errorf("processes left after %v: %v", sig, procs)
				}
				for _, id := range runsOn(t) {
					if !slices.Contains(before, id) {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						left, _ := kq.Leftovers(ctx, u, "", id)
						cancel()
						t.Errorf("run %s left %v after %v\n%s", id, left, sig, out.String())
					}
				}
			})
		}
	}
}
