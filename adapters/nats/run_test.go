package nats_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/durachk/durachk/adapters"
	nq "github.com/durachk/durachk/adapters/nats"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/internal/targets"
)

// runURL is $DURACHK_NATS_URL with knobs, or skips: contract runs need the
// server and the effect store, and take seconds each.
func runURL(t *testing.T, knobs string) string {
	t.Helper()
	raw := os.Getenv("DURACHK_NATS_URL")
	if raw == "" {
		t.Skip("DURACHK_NATS_URL is not set: e.g. DURACHK_NATS_URL=nats://127.0.0.1:4222")
	}
	if testing.Short() {
		t.Skip("contract runs with real processes take seconds each")
	}
	if knobs == "" {
		return raw
	}
	return raw + "?" + knobs
}

// runStreamsOn lists the run streams (durachk-<id>...) on the server of raw,
// by run id.
func runStreamsOn(t *testing.T, raw string) map[string][]string {
	t.Helper()
	spec, err := targets.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := natsgo.Connect(spec.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	names := js.StreamNames(context.Background())
	for n := range names.Name() {
		if id := nq.RunOfStream(n); id != "" {
			out[id] = append(out[id], n)
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func newTarget(t *testing.T, ctx context.Context, raw string) (*runner.Target, *[]string) {
	t.Helper()
	spec, err := targets.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	target, err := runner.New(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ids := &[]string{}
	target.OnRun = func(id, _ string) { mu.Lock(); *ids = append(*ids, id); mu.Unlock() }
	return target, ids
}

// The default profile (file storage, work-queue retention) says that
// durability.ack runs on a private server durachk embeds. The whole catalogue
// on this profile is the CI gate's target nats-jetstream (.ci/durachk.yaml,
// .ci/baseline.json), which .ci/gates.sh also checks for what its runs left
// on the server.
func TestNotesSayDurabilityRunsOnAPrivateServer(t *testing.T) {
	raw := runURL(t, "name=nats")
	ctx, cancel := context.WithTimeout(context.Background(), runnertest.Loaded(time.Minute))
	defer cancel()
	target, _ := newTarget(t, ctx, raw)
	if !slices.ContainsFunc(target.Capabilities().Notes, func(n string) bool { return strings.Contains(n, "private nats-server") }) {
		t.Errorf("the notes do not say durability.ack runs on a private server: %q", target.Capabilities().Notes)
	}
}

// The known-bad profile storage=memory: durability.ack kills the private
// server, and every acknowledged job that was not finished before the kill is
// lost, each with its witness (the enqueue the broker acknowledged).
func TestMemoryStorageLosesAcknowledgedJobs(t *testing.T) {
	raw := runURL(t, "storage=memory&name=nats-memory")
	c, err := contracts.Lookup("durability.ack")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), runnertest.Loaded(2*time.Minute))
	defer cancel()
	target, _ := newTarget(t, ctx, raw)
	if target.Capabilities().Durable {
		t.Error("memory storage declared durable")
	}
	r := runnertest.SeekViolation(t, "durability.ack on memory storage", contracts.PropLost, func(seed uint64) contracts.Result {
		r, err := contracts.Evaluate(ctx, target, c, contracts.Options{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		return r
	})
	for _, v := range r.Violations {
		if v.Job == "" {
			continue // "further violations of this property omitted"
		}
		if v.Property != contracts.PropLost {
			t.Errorf("violation %s (%s), want lost", v.Property, v.Message)
		}
		if !slices.ContainsFunc(v.Witness, func(op history.Op) bool { return op.F == history.Enqueue && op.Job == v.Job }) {
			t.Errorf("lost %s: the witness does not show its enqueue: %+v", v.Job, v.Witness)
		}
	}
	t.Logf("%d violations, e.g. %s: %s", len(r.Violations), r.Violations[0].Job, r.Violations[0].Message)
}

// The known-bad profile max_msgs=4 (discard old, JetStream's default): the
// producer outruns the workers and the stream drops jobs nobody finished. The
// run is flagged (moved_by_broker, or lost), and the final inventory names
// every dropped job as trimmed by the broker with the limit as the reason;
// every flagged job is among them. A job the pipeline finished may be among them too, but only one that
// was leased: the stream drops a message in flight as well (the server then
// treats it as acked), and its holder's ack still "succeeds".
func TestMaxMsgsDropsJobsInARun(t *testing.T) {
	raw := runURL(t, "max_msgs=4&name=nats-max-msgs-4")
	c, err := contracts.Lookup("retry.bounded")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), runnertest.Loaded(2*time.Minute))
	defer cancel()
	target, _ := newTarget(t, ctx, raw)
	// Whether the producer outruns the workers far enough depends on the run:
	// seek a seed where the stream dropped a job the checker flags (every
	// run's drops are checked).
	for seed := uint64(1); seed <= runnertest.MaxSeeds; seed++ {
		ex, err := target.Execute(ctx, contracts.Run{Contract: c.ID, Scenario: c.Scenario(seed, contracts.DefaultJobs), Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		finished, leased := map[string]bool{}, map[string]bool{}
		for _, op := range ex.Ops {
			if (op.F == history.Ack || op.F == history.DeadLetter) && op.Type == history.OK {
				finished[op.Job] = true
			}
			if op.F == history.Lease && op.Type == history.OK {
				leased[op.Job] = true
			}
		}
		inv := ex.Final.Broker
		moved := map[string]bool{}
		for _, m := range inv.Moved {
			moved[m.Job] = true
			if m.Action != adapters.ActionTrimmed || m.Reason != "max_msgs=4 discard=old" || m.Job == "" {
				t.Errorf("moved %+v, want a named job trimmed by max_msgs=4 discard=old", m)
			}
			if finished[m.Job] && !leased[m.Job] {
				t.Errorf("%s was finished by the pipeline without a lease, yet listed as dropped by the broker", m.Job)
			}
			if slices.Contains(inv.Queued, m.Job) || slices.Contains(inv.InFlight, m.Job) {
				t.Errorf("%s is listed as dropped and as still in the stream", m.Job)
			}
		}
		vs, _, _ := contracts.Check(ex.Ops, ex.Final, ex.Check)
		flagged := 0
		for _, v := range vs {
			if (v.Property == contracts.PropLost || v.Property == contracts.PropMovedByBroker) && v.Job != "" {
				flagged++
				if !moved[v.Job] {
					t.Errorf("%s %s is not among the jobs the broker dropped %v", v.Property, v.Job, inv.Moved)
				}
			}
		}
		if len(inv.Moved) > 0 && flagged > 0 {
			t.Logf("seed %d: %d jobs dropped by the broker, e.g. %+v; %d flagged", seed, len(inv.Moved), inv.Moved[0], flagged)
			return
		}
		t.Logf("seed %d: %d jobs dropped by the broker, %d flagged; the next seed", seed, len(inv.Moved), flagged)
	}
	t.Fatalf("no run in %d seeds where the broker dropped a job the checker flags", runnertest.MaxSeeds)
}

// An interrupted run leaves no stream on the server: after SIGINT the run
// tears its streams down itself; after SIGKILL they stay until `durachk
// cleanup`, which names each one it removes.
func TestInterruptedRunLeavesNoStreams(t *testing.T) {
	raw := runURL(t, "name=nats-interrupted")
	if os.Getenv("DURACHK_PG_URL") == "" && os.Getenv("DURACHK_STORE_URL") == "" {
		t.Skip("DURACHK_PG_URL is not set: the run needs the effect store")
	}
	bin := runnertest.Binary(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			before := runStreamsOn(t, raw)
			cmd := exec.Command(bin, "run", "--target", raw, "--contract", "lease.heartbeat", "--out", t.TempDir())
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			// The run's streams: new ones that are still there a moment later
			// (the target probe's come and go at once).
			id := ""
			for deadline := time.Now().Add(time.Minute); id == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				for cand := range runStreamsOn(t, raw) {
					if _, old := before[cand]; !old {
						time.Sleep(200 * time.Millisecond)
						if len(runStreamsOn(t, raw)[cand]) > 0 {
							id = cand
						}
						break
					}
				}
				select {
				case err := <-exited:
					t.Fatalf("durachk exited before its run made streams: %v\n%s", err, out.String())
				default:
				}
			}
			if id == "" {
				_ = cmd.Process.Kill()
				t.Fatal("no run stream appeared within a minute")
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
				if len(runStreamsOn(t, raw)[id]) == 0 {
					t.Logf("run %s: no stream left even before cleanup", id)
				}
				var cl bytes.Buffer
				c := exec.Command(bin, "cleanup", "--target", raw, "--run", id)
				c.Stdout, c.Stderr = &cl, &cl
				if err := c.Run(); err != nil {
					t.Fatalf("cleanup: %v\n%s", err, cl.String())
				}
				if !strings.Contains(cl.String(), "removed nats stream "+nq.StreamName(id)) {
					t.Errorf("cleanup did not say it removed the run's work stream:\n%s", cl.String())
				}
				t.Logf("cleanup:\n%s", cl.String())
			}
			if left := runStreamsOn(t, raw)[id]; len(left) > 0 {
				t.Errorf("run %s left streams %v after %v\n%s", id, left, sig, lastLines(out.String(), 10))
			}
		})
	}
}

func lastLines(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
