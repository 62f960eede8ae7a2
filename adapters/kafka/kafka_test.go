package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	kq "github.com/durachk/durachk/adapters/kafka"
	"github.com/durachk/durachk/adapters/queuetest"
	"github.com/durachk/durachk/internal/kafkaserver"
	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/internal/targets"
)

// broker is the private kfake the tests share: durachk's own child process,
// started once (TestMain).
var broker struct {
	inst targets.Instance
	url  string
	err  error
}

// TestMain lets this test binary be the private kfake and the runner's
// children, and starts one private kfake for the package.
func TestMain(m *testing.M) {
	kafkaserver.ServeIfAsked()
	runner.ServeChildIfAsked()
	dir, err := os.MkdirTemp("", "durachk-kafka-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	spec, err := targets.Parse("kafka://127.0.0.1:9092")
	if err == nil {
		spec.RunID = queuetest.RunID()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		broker.inst, spec, broker.err = targets.StartPrivate(ctx, spec, dir)
		cancel()
		broker.url = spec.URL
	} else {
		broker.err = err
	}
	code := m.Run()
	if broker.inst != nil {
		_ = broker.inst.Stop()
	}
	stopShareBroker()
	os.RemoveAll(dir)
	runnertest.RemoveBinary()
	os.Exit(code)
}

func brokerURL(t *testing.T) string {
	t.Helper()
	if broker.err != nil {
		t.Fatalf("private kfake: %v", broker.err)
	}
	return broker.url
}

// open opens a queue of a fresh run on the private kfake; the run's topics
// and group are dropped at the end of the test, and the test fails if any is
// left.
func open(t *testing.T, o kq.Options) (*kq.Queue, string) {
	t.Helper()
	u := brokerURL(t)
	id := queuetest.RunID()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := kq.Open(ctx, u, id, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := q.Drop(ctx); err != nil {
			t.Errorf("drop: %v", err)
		}
		q.Close()
		left, err := kq.Leftovers(ctx, u, "", id)
		if err != nil {
			t.Errorf("leftovers: %v", err)
		}
		if len(left) > 0 {
			t.Errorf("left on the broker after Drop: %v", left)
		}
	})
	return q, id
}

// TestConformance runs the port's conformance suite on the private kfake in
// consumer-group mode.
func TestConformance(t *testing.T) {
	brokerURL(t)
	queuetest.Run(t, func(t *testing.T, o queuetest.Options) adapters.Queue {
		q, _ := open(t, kq.Options{FIFO: o.FIFO})
		return q
	}, queuetest.Features{})
}

// TestBreakOrder: the negative control of order.fifo follows the reference
// broker's scripts.
func TestBreakOrder(t *testing.T) {
	for _, sc := range queuetest.BreakOrderScripts() {
		t.Run(sc.Name, func(t *testing.T) {
			q, _ := open(t, kq.Options{FIFO: sc.FIFO, BreakOrder: true})
			queuetest.RunScript(t, q, queuetest.Features{}, sc.Steps)
		})
	}
}

// TestZombieCommitRejected: a member that stopped heartbeating past its
// session timeout is fenced out of the group by the coordinator; its ack
// (an offset commit with its old generation) is rejected by the broker, and
// the record goes to the member that took the partition over. The negative
// control: the same ack while the member is live is accepted.
func TestZombieCommitRejected(t *testing.T) {
	o := kq.Options{SessionTimeout: 1000 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond, RebalanceTimeout: 2 * time.Second}
	var fz freezer
	ao := o
	ao.ConsumerDial = fz.dial
	a, id := open(t, ao)
	t.Cleanup(func() { fz.set(false) }) // before the queue's own cleanup, which leaves the group
	ctx := context.Background()
	for _, j := range []string{"a", "b"} {
		if err := a.Enqueue(ctx, queuetest.Job(j)); err != nil {
			t.Fatal(err)
		}
	}
	d1, err := a.Lease(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Negative control: a live member's ack is accepted by the coordinator.
	if err := a.Ack(ctx, d1); err != nil {
		t.Fatalf("live member's ack: %v", err)
	}
	d2, err := a.Lease(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// The member goes silent (its heartbeats stop, as under SIGSTOP) while
	// it holds d2; a second member of the same group takes the partition.
	fz.set(true)
	b, err := kq.Open(ctx, brokerURL(t), id, o)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var got adapters.Delivery
	deadline := time.Now().Add(time.Duration(queuetest.LoadFactor() * float64(20*time.Second)))
	for {
		got, err = b.Lease(ctx, time.Minute)
		if err == nil || !errors.Is(err, adapters.ErrNoJob) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("the second member leased nothing: %v", err)
	}
	if got.Job.ID != d2.Job.ID {
		t.Fatalf("the second member got %s, want %s (the zombie's uncommitted record)", got.Job.ID, d2.Job.ID)
	}
	err = a.Ack(ctx, d2)
	if !errors.Is(err, adapters.ErrLeaseLost) {
		t.Fatalf("zombie's ack = %v, want ErrLeaseLost", err)
	}
	n, why := a.CommitsRejected()
	if n == 0 || !strings.Contains(why, "rejected the commit") {
		t.Errorf("rejections %d (%q), want the coordinator's rejection recorded", n, why)
	}
	t.Logf("zombie: %v", err)
	if err := b.Ack(ctx, got); err != nil {
		t.Fatalf("the new owner's ack: %v", err)
	}
}

// freezer dials connections whose reads and writes hang while it is frozen,
// as a paused process's do.
type freezer struct {
	mu     sync.Mutex
	frozen bool
	cond   *sync.Cond
}

func (f *freezer) set(v bool) {
	f.mu.Lock()
	f.frozen = v
	if f.cond != nil {
		f.cond.Broadcast()
	}
	f.mu.Unlock()
}

func (f *freezer) wait() {
	f.mu.Lock()
	if f.cond == nil {
		f.cond = sync.NewCond(&f.mu)
	}
	for f.frozen {
		f.cond.Wait()
	}
	f.mu.Unlock()
}

func (f *freezer) dial(ctx context.Context, network, host string) (net.Conn, error) {
	f.wait()
	var d net.Dialer
	c, err := d.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	return &frozenConn{Conn: c, f: f}, nil
}

type frozenConn struct {
	net.Conn
	f *freezer
}

func (c *frozenConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.f.wait() // what arrived while frozen is read only after
	return n, err
}

func (c *frozenConn) Write(b []byte) (int, error) {
	c.f.wait()
	return c.Conn.Write(b)
}
