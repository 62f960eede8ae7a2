package driver_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	rq "github.com/durachk/durachk/adapters/redis"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/cli"
	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/internal/targets"
)

// nodeDriver is the path of a Node.js driver's main.js (drivers/<name>),
// skipping the test with the reason when Node.js or the driver's packages
// are missing: this test installs nothing (make test and .ci/run do: npm ci
// in .ci/setup.d). tools/testreport counts such a skip as a missing service.
func nodeDriver(t *testing.T, name string) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skipf("needs Node.js: node is not on PATH (drivers/%s runs on it)", name)
	}
	dir, err := filepath.Abs(filepath.Join("..", "..", "drivers", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		t.Skipf("needs Node.js packages: drivers/%s/node_modules is missing (npm ci there; make test does it)", name)
	}
	return filepath.Join(dir, "main.js")
}

// withKnobs appends knob=value pairs to a URL.
func withKnobs(url, knobs string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + strings.TrimPrefix(knobs, "&")
}

// bullmqTarget is the shared Redis with the BullMQ driver and knobs.
func bullmqTarget(t *testing.T, knobs string) *runner.Target {
	t.Helper()
	url := os.Getenv("DURACHK_REDIS_URL")
	if url == "" {
		t.Skip("DURACHK_REDIS_URL is not set: no Redis to run BullMQ on")
	}
	if os.Getenv("DURACHK_PG_URL") == "" {
		t.Skip("DURACHK_PG_URL is not set: no Postgres for durachk's effect store")
	}
	spec, err := targets.Parse(withKnobs(url, "name=bullmq&worker.command="+nodeDriver(t, "bullmq")+knobs))
	if err != nil {
		t.Fatal(err)
	}
	tg, err := runner.New(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// Locks of a second, checked twice a second: the contract's lease (1 s at
// durachk's scale) instead of BullMQ's 30 s, so that a run sees its
// redeliveries.
const bullmqShortLocks = "&worker.lockDuration=1000&worker.stalledInterval=500"

// BullMQ's Worker with short locks: a job whose worker was killed comes back
// through BullMQ's stalled check and is finished once; a setting BullMQ does
// not have is refused; cancellation is emulated (BullMQ has no cancelled
// state), the rest native.
func TestBullMQ(t *testing.T) {
	// maxStalledCount 10: a job whose workers are killed twice would be
	// failed by BullMQ itself at its default of 1 (moved_by_broker, as
	// retry.bounded's poison job is: docs/bullmq.md), which is not this
	// test's claim.
	tg := bullmqTarget(t, bullmqShortLocks+"&worker.maxStalledCount=10")
	caps := tg.Capabilities()
	if !caps.FencedAck || caps.LeaseExtension == "none" || caps.Token == "none" {
		t.Errorf("BullMQ declared %+v: want a renewed lock and a fenced ack", caps)
	}
	runnertest.SeekPasses(t, "bullmq × lease.redelivery", 1, func(seed uint64) contracts.Result {
		return evaluate(t, tg, "lease.redelivery", seed)
	})
	spec, err := targets.Parse(withKnobs(os.Getenv("DURACHK_REDIS_URL"), "worker.command="+tg.Spec.Options["worker.command"]+"&worker.lockTime=1000"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runner.New(context.Background(), spec); err == nil {
		t.Errorf("BullMQ started with a knob it does not have (lockTime)")
	}
}

// A processor that returns before its work is done (a missing await) loses
// the jobs of the workers killed in between; one that catches its job's
// error and returns has BullMQ complete jobs that were never done.
func TestSabotagedBullMQ(t *testing.T) {
	for _, tc := range []struct {
		sabotage, contract string
		raises             contracts.Property
	}{
		{"ack-before-effect", "lease.redelivery", contracts.PropLost},
		{"swallow-errors", "retry.bounded", contracts.PropLost},
	} {
		t.Run(tc.sabotage, func(t *testing.T) {
			tg := bullmqTarget(t, bullmqShortLocks+"&worker.sabotage="+tc.sabotage)
			r := runnertest.SeekViolation(t, "bullmq sabotaged "+tc.sabotage, tc.raises, func(seed uint64) contracts.Result {
				return evaluate(t, tg, tc.contract, seed)
			})
			if !runnertest.Witnessed(r, tc.raises) {
				t.Errorf("%s: no witnessed %s", tc.sabotage, tc.raises)
			}
		})
	}
}

// durachk killed with SIGKILL mid-run on BullMQ takes the driver's Node.js
// processes with it; `durachk cleanup` then removes BullMQ's keys of the run
// (its queue under the run's namespace) and the effect store.
func TestKilledBullMQRunCleanedUp(t *testing.T) {
	url := os.Getenv("DURACHK_REDIS_URL")
	if url == "" || os.Getenv("DURACHK_PG_URL") == "" {
		t.Skip("DURACHK_REDIS_URL or DURACHK_PG_URL is not set")
	}
	script := nodeDriver(t, "bullmq")
	target := withKnobs(url, "worker.command="+script+bullmqShortLocks)
	bin := runnertest.Binary(t)
	before := namespaces(t, url)
	cmd := exec.Command(bin, "run", "--contract", "lease.heartbeat", "--jobs", "12", "--target", target, "--out", t.TempDir())
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	kill := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	// The run's namespace (its run id is the contract's, a child of the
	// command's), once BullMQ holds jobs in it.
	var ns string
	var procs []string
	drivers := func() []string { return runnertest.Processes(script) }
	for end := time.Now().Add(runnertest.Loaded(30 * time.Second)); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if ns == "" {
			ns = newNamespace(t, url, before, 5)
		}
		if procs = drivers(); ns != "" && len(procs) >= 2 {
			break
		}
	}
	if ns == "" || len(procs) < 2 {
		kill()
		t.Fatalf("no jobs in BullMQ or no driver processes (%v) within 30 s; durachk's stderr:\n%s", procs, stderr.String())
	}
	kill()
	if left := settled(drivers); len(left) > 0 {
		t.Errorf("driver processes left after SIGKILL of durachk: %v", left)
	}
	var parent string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if m := commandLine.FindStringSubmatch(l); m != nil {
			parent = m[1]
		}
	}
	var out bytes.Buffer
	c := exec.Command(bin, "cleanup", "--target", target, "--run", parent)
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		t.Fatalf("cleanup: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "removed redis key "+ns) {
		t.Errorf("cleanup removed no key of BullMQ's:\n%s", out.String())
	}
	if keys, err := rq.KeysWithPrefix(context.Background(), url, ns); err != nil || len(keys) > 0 {
		t.Errorf("keys left under %s after cleanup: %v (%v)", ns, keys, err)
	}
}

var namespaceRE = regexp.MustCompile(`^(durachk_[a-z0-9]+_q:)`)

// namespaces counts the keys of every worker namespace in Redis by prefix
// (durachk_<runid>_q:).
func namespaces(t *testing.T, url string) map[string]int {
	t.Helper()
	keys, err := rq.KeysWithPrefix(context.Background(), url, "durachk_")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, k := range keys {
		if m := namespaceRE.FindStringSubmatch(k); m != nil {
			out[m[1]]++
		}
	}
	return out
}

// newNamespace is a namespace not in before holding at least n keys, or "".
func newNamespace(t *testing.T, url string, before map[string]int, n int) string {
	for ns, keys := range namespaces(t, url) {
		if _, old := before[ns]; !old && keys >= n {
			return ns
		}
	}
	return ""
}

// syncBuffer is a bytes.Buffer a process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// durachk selftest on the BullMQ driver: the catalogue's sabotages of the
// reference worker are skipped with the reason, the driver's own run on
// their contract and are caught by the property they declare.
func TestSelftestOnBullMQ(t *testing.T) {
	url := os.Getenv("DURACHK_REDIS_URL")
	if url == "" || os.Getenv("DURACHK_PG_URL") == "" {
		t.Skip("DURACHK_REDIS_URL or DURACHK_PG_URL is not set")
	}
	target := withKnobs(url, "name=bullmq&worker.command="+nodeDriver(t, "bullmq")+bullmqShortLocks)
	var out bytes.Buffer
	err := cli.Selftest(context.Background(), cli.RunOptions{Targets: []string{target}, Contracts: []string{"lease.redelivery"}, Seed: 1, Jobs: 12}, &out)
	t.Logf("durachk selftest:\n%s", out.String())
	if err != nil {
		t.Fatalf("selftest: %v", err)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^bullmq +lease\.redelivery +ack-before-effect +lost +yes 1/1 +violation`),
		regexp.MustCompile(`(?m)^bullmq +lease\.redelivery +ack-before-commit +lost +- +skipped +this negative control breaks the reference pipeline's worker`),
		regexp.MustCompile(`(?m)^1 of 1 sabotages caught`),
	} {
		if !want.MatchString(out.String()) {
			t.Errorf("selftest printed no line matching %s", want)
		}
	}
}
