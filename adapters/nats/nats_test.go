package nats

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/adapters/queuetest"
)

// testURL is the NATS server with JetStream the tests run against, e.g.
// nats://127.0.0.1:4222. The tests only ever touch streams durachk-t<random>*
// and delete them.
func testURL(t testing.TB) string {
	return queuetest.URL(t, "DURACHK_NATS_URL", "nats://127.0.0.1:4222")
}

// newQueue opens a queue under a fresh run id and checks, when the test ends,
// that Drop leaves no stream of the run behind.
func newQueue(t testing.TB, opts Options) *Queue {
	t.Helper()
	q, err := Open(context.Background(), testURL(t), queuetest.RunID(), opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if !q.closed.Load() {
			// Deleting a stream is idempotent: a request that timed out on a
			// busy machine (outcome unknown) is made again, three times at
			// most; the check below says what is left.
			err := q.Drop(context.Background())
			for try := 1; err != nil && try < 3 && (errors.Is(err, adapters.ErrAmbiguous) || errors.Is(err, adapters.ErrUnavailable)); try++ {
				t.Logf("drop, try %d: %v", try, err)
				err = q.Drop(context.Background())
			}
			if err != nil {
				t.Errorf("drop: %v", err)
			}
			_ = q.Close()
		}
		if left := runStreams(t, q.runID); len(left) > 0 {
			t.Errorf("streams left behind: %v", left)
		}
	})
	return q
}

// runStreams lists the streams of runID on the test server, on a connection of
// its own.
func runStreams(t testing.TB, runID string) []string {
	nc, err := natsgo.Connect(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	names := js.StreamNames(context.Background())
	for n := range names.Name() {
		if RunOfStream(n) == runID {
			out = append(out, n)
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// features are JetStream's documented deviations from the reference
// semantics. A delivered message stays "ack pending" at the server until it is
// acked or delivered again, whether its ack wait ran out or it was nacked with
// a delay (https://docs.nats.io/nats-concepts/jetstream/consumers#ackwait):
// Inspect cannot tell that from a live lease. InProgress on a delivery whose
// ack wait ran out, before the redelivery, is accepted and restarts its timer.
var features = queuetest.Features{PendingInFlight: true, ExtendExpiredMaySucceed: true}

// TestConformance runs the port's conformance suite against JetStream and, as
// the reference, against adapters/mem. JetStream acks are not fenced and it
// has no FIFO: those scripts skip with the reason. The delivery-limit scripts
// run with max_deliver.
func TestConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T, o queuetest.Options) adapters.Queue {
		return newQueue(t, Options{MaxDeliver: o.DeliveryLimit})
	}, features)
}

const long = time.Minute

// JetStream-only scripts: the knobs that change guarantees.
func TestKnobScripts(t *testing.T) {
	tests := []struct {
		name  string
		opts  Options
		steps []queuetest.Step
	}{
		{name: "max_msgs with discard old removes unacknowledged jobs", opts: Options{MaxMsgs: 2}, steps: []queuetest.Step{
			{Op: "enqueue", Arg: "a", Want: "ok"},
			{Op: "enqueue", Arg: "b", Want: "ok"},
			{Op: "lease", Dur: long, Want: "a a1 t1"},
			{Op: "ack", D: 0, Want: "ok"},
			{Op: "enqueue", Arg: "c", Want: "ok"},
			{Op: "enqueue", Arg: "d", Want: "ok"},
			// b was never delivered: the stream dropped it to keep 2 messages. a
			// was acked before: not the broker's doing.
			{Op: "inspect", Want: "queued=[c d] inflight=[] dead=[] moved=[b:trimmed] ok", Wait: true},
			{Op: "lease", Dur: long, Want: "c a1 t1"},
		}},
		{name: "max_msgs with discard new refuses the publish", opts: Options{MaxMsgs: 1, Discard: "new"}, steps: []queuetest.Step{
			{Op: "enqueue", Arg: "a", Want: "ok"},
			{Op: "enqueue", Arg: "b", Want: "unavailable"},
			{Op: "inspect", Want: "queued=[a] inflight=[] dead=[] ok"},
		}},
		{name: "max_age expires old jobs", opts: Options{MaxAge: time.Second, DuplicateWindow: 500 * time.Millisecond}, steps: []queuetest.Step{
			{Op: "enqueue", Arg: "a", Want: "ok"},
			{Op: "sleep", Dur: 1500 * time.Millisecond},
			{Op: "inspect", Want: "queued=[] inflight=[] dead=[] moved=[a:expired] ok", Wait: true},
			{Op: "lease", Dur: long, Want: "none"},
		}},
		{name: "limits retention keeps acked messages, which are not listed", opts: Options{Retention: "limits"}, steps: []queuetest.Step{
			{Op: "enqueue", Arg: "a", Want: "ok"},
			{Op: "enqueue", Arg: "b", Want: "ok"},
			{Op: "lease", Dur: long, Want: "a a1 t1"},
			{Op: "ack", D: 0, Want: "ok"},
			{Op: "lease", Dur: long, Want: "b a1 t1"},
			{Op: "dead", D: 1, Want: "ok"},
			{Op: "inspect", Want: "queued=[] inflight=[] dead=[b] ok", Wait: true},
		}},
		{name: "a producer retry within the duplicate window is one message", steps: []queuetest.Step{
			{Op: "enqueue", Arg: "a", Want: "ok"},
			{Op: "enqueue", Arg: "a", Want: "ok"},
			{Op: "inspect", Want: "queued=[a] inflight=[] dead=[] ok"},
			{Op: "lease", Dur: long, Want: "a a1 t1"},
			{Op: "lease", Dur: long, Want: "none"},
		}},
		{name: "ack_wait fixes the lease whatever the worker asks", opts: Options{AckWait: 150 * time.Millisecond}, steps: []queuetest.Step{
			{Op: "enqueue", Arg: "a", Want: "ok"},
			{Op: "lease", Dur: long, Want: "a a1 t1"},
			{Op: "sleep", Dur: 400 * time.Millisecond},
			{Op: "lease", Dur: long, Want: "a a2 t2", Wait: true},
			{Op: "ack", D: 1, Want: "ok"},
		}},
		{name: "memory storage works like file storage while the server lives", opts: Options{Storage: "memory"}, steps: []queuetest.Step{
			{Op: "enqueue", Arg: "a", Want: "ok"},
			{Op: "lease", Dur: long, Want: "a a1 t1"},
			{Op: "nack", D: 0, Dur: 100 * time.Millisecond, Want: "ok"},
			{Op: "sleep", Dur: 200 * time.Millisecond}, // see TestNackDelayWhilePolling
			{Op: "lease", Dur: long, Want: "a a2 t2", Wait: true},
			{Op: "ack", D: 1, Want: "ok"},
			{Op: "inspect", Want: "queued=[] inflight=[] dead=[] ok", Wait: true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { queuetest.RunScript(t, newQueue(t, tt.opts), features, tt.steps) })
	}
}

// The server applies an ack from a superseded delivery: JetStream acks are not
// fenced, and the adapter says so rather than pretend. This test pins that
// down: if a server ever starts refusing them, FencedAck may become true.
func TestStaleAckIsApplied(t *testing.T) {
	q := newQueue(t, Options{})
	ctx := context.Background()
	if err := q.Enqueue(ctx, queuetest.Job("a")); err != nil {
		t.Fatal(err)
	}
	d1, err := q.Lease(ctx, 150*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	var d2 adapters.Delivery
	deadline := time.Now().Add(5 * time.Second)
	for {
		if d2, err = q.Lease(ctx, 150*time.Millisecond); err == nil || !errors.Is(err, adapters.ErrNoJob) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || d2.Token != 2 {
		t.Fatalf("redelivery: %+v %v", d2, err)
	}
	if err := q.Ack(ctx, d1); err != nil {
		t.Fatalf("stale ack: %v", err)
	}
	inv, err := q.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !inv.Empty() {
		t.Errorf("after the stale ack the queue holds %+v: the server refused it; declare FencedAck", inv)
	}
	if q.Capabilities().FencedAck {
		t.Error("FencedAck declared although the server applies stale acks")
	}
}

// Leases of several processes' worth of connections never hand a job out
// twice under a live lease.
func TestExclusiveLeases(t *testing.T) {
	q := newQueue(t, Options{})
	var mu sync.Mutex
	queuetest.ExclusiveLeases(t, q, func(t *testing.T) adapters.Queue {
		mu.Lock()
		defer mu.Unlock()
		w, err := Open(context.Background(), testURL(t), q.runID, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		return w
	}, 40, 4)
}

func TestUnreachable(t *testing.T) {
	queuetest.Unreachable(t, func(addr, pw string) string {
		return "nats://durachk:" + pw + "@" + addr
	}, func(ctx context.Context, url string) error {
		q, err := Open(ctx, url, queuetest.RunID(), Options{})
		if err == nil {
			q.Close()
		}
		return err
	})
}

// A request that was sent and never answered is an unknown outcome: an ack
// through a link that swallows the reply must be ErrAmbiguous, never success.
func TestLostAckReplyIsAmbiguous(t *testing.T) {
	q := newQueue(t, Options{RequestTimeout: 300 * time.Millisecond})
	ctx := context.Background()
	if err := q.Enqueue(ctx, queuetest.Job("a")); err != nil {
		t.Fatal(err)
	}
	px := newProxy(t, testURL(t))
	w, err := Open(ctx, px.url, q.runID, Options{RequestTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	d, err := w.Lease(ctx, long)
	if err != nil {
		t.Fatal(err)
	}
	px.swallow(true)
	err = w.Ack(ctx, d)
	if !errors.Is(err, adapters.ErrAmbiguous) {
		t.Fatalf("ack with its reply lost = %v, want ErrAmbiguous", err)
	}
	// It was applied: the server has the ack, only the reply was lost.
	inv, err := q.Inspect(ctx)
	if err != nil || !inv.Empty() {
		t.Errorf("inventory after the ambiguous ack %+v %v: the ack should have been applied", inv, err)
	}
}

// A request in flight when the connection breaks is ended at once as an
// unknown outcome: its reply cannot come any more, and waiting for the
// timeout would leave the delivery looking held by a live worker.
func TestBrokenConnectionEndsRequestsInFlight(t *testing.T) {
	q := newQueue(t, Options{})
	ctx := context.Background()
	if err := q.Enqueue(ctx, queuetest.Job("a")); err != nil {
		t.Fatal(err)
	}
	px := newProxy(t, testURL(t))
	w, err := Open(ctx, px.url, q.runID, Options{RequestTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	d, err := w.Lease(ctx, long)
	if err != nil {
		t.Fatal(err)
	}
	px.swallow(true)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- w.Ack(ctx, d) }()
	time.Sleep(200 * time.Millisecond)
	px.cut()
	select {
	case err := <-done:
		if !errors.Is(err, adapters.ErrAmbiguous) {
			t.Errorf("ack across a broken connection = %v, want ErrAmbiguous", err)
		}
		t.Logf("ended after %s: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(10 * time.Second):
		t.Fatal("the ack still waits 10 s after its connection broke")
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{{Storage: "disk"}, {Retention: "fifo"}, {Discard: "oldest"}, {MaxDeliver: -1},
		{MaxAge: time.Second, DuplicateWindow: time.Minute}} {
		if q, err := Open(context.Background(), "nats://127.0.0.1:1", "t1", o); err == nil {
			q.Close()
			t.Errorf("Open with %+v succeeded", o)
		}
	}
	if _, err := Open(context.Background(), "nats://127.0.0.1:1", "Bad-Run", Options{}); err == nil {
		t.Error("Open with a bad run id succeeded")
	}
}

func TestParseAck(t *testing.T) {
	tests := []struct {
		reply         string
		stream        string
		delivered, sq uint64
		bad           bool
	}{
		{reply: "$JS.ACK.durachk-x.durachk.3.17.40.1796061375852631172.2", stream: "durachk-x", delivered: 3, sq: 17},
		{reply: "$JS.ACK.hub.ACCHASH.durachk-x.durachk.1.5.9.1796061375852631172.0.tok", stream: "durachk-x", delivered: 1, sq: 5},
		{reply: "$JS.ACK.durachk-x.durachk.0.17.40.1.2", bad: true},
		{reply: "_INBOX.abc", bad: true},
		{reply: "", bad: true},
	}
	for _, tt := range tests {
		m, err := parseAck(tt.reply)
		if tt.bad {
			if err == nil {
				t.Errorf("parseAck(%q) = %+v, want an error", tt.reply, m)
			}
			continue
		}
		if err != nil || m.stream != tt.stream || m.delivered != tt.delivered || m.streamSeq != tt.sq {
			t.Errorf("parseAck(%q) = %+v %v", tt.reply, m, err)
		}
	}
}

func TestCheckURL(t *testing.T) {
	for _, ok := range []string{"nats://127.0.0.1:4222", "nats://u:p@localhost:4222", "nats://tok@127.0.0.1", "tls://h:4222/"} {
		if err := CheckURL(ok); err != nil {
			t.Errorf("CheckURL(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"http://h:4222", "nats://", "nats://h:4222/x", "nats://h:4222?x=1"} {
		if CheckURL(bad) == nil {
			t.Errorf("CheckURL(%q) accepted", bad)
		}
	}
}

func TestRunOfStream(t *testing.T) {
	for name, want := range map[string]string{"durachk-abc123": "abc123", "durachk-abc123-dlq": "abc123",
		"durachk-abc123-events": "abc123", "durachk-abc-other": "", "ORDERS": "", "durachk-": "", "durachk-ABC": ""} {
		if got := RunOfStream(name); got != want {
			t.Errorf("RunOfStream(%q) = %q, want %q", name, got, want)
		}
	}
}

// The capabilities follow the knobs: memory storage is not durable,
// max_deliver makes dead-lettering native, limits are said to lose jobs.
func TestCapabilities(t *testing.T) {
	c := capabilities(Options{}, "dlq")
	if !c.Durable || c.FencedAck || c.DeadLetter != adapters.Emulated || c.Token != adapters.Native || c.FIFO {
		t.Errorf("default capabilities %+v", c)
	}
	if capabilities(Options{Storage: "memory"}, "dlq").Durable {
		t.Error("memory storage declared durable")
	}
	if capabilities(Options{MaxDeliver: 3}, "dlq").DeadLetter != adapters.Native {
		t.Error("max_deliver does not make dead-lettering native")
	}
	c = capabilities(Options{MaxMsgs: 4}, "dlq")
	if !slices.ContainsFunc(c.Notes, func(n string) bool { return strings.Contains(n, "max_msgs=4 discard=old") }) {
		t.Errorf("max_msgs not named in the notes: %q", c.Notes)
	}
}

// After Drop, every call of a delivery of the run is lost: no consumer answers.
func TestCallsAfterDrop(t *testing.T) {
	q := newQueue(t, Options{})
	ctx := context.Background()
	if err := q.Enqueue(ctx, queuetest.Job("a")); err != nil {
		t.Fatal(err)
	}
	d, err := q.Lease(ctx, long)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := q.Ack(ctx, d); !errors.Is(err, adapters.ErrLeaseLost) {
		t.Errorf("ack after drop = %v, want ErrLeaseLost", err)
	}
	if err := q.Drop(ctx); err != nil {
		t.Errorf("second drop = %v", err)
	}
	q.Close()
	if err := q.Enqueue(ctx, queuetest.Job("b")); !errors.Is(err, adapters.ErrClosed) {
		t.Errorf("enqueue after close = %v, want ErrClosed", err)
	}
}

// proxy is a TCP proxy to the NATS server that can swallow what the server
// sends (replies) while passing on what the client sends.
type proxy struct {
	ln    net.Listener
	url   string
	mu    sync.Mutex
	eat   bool
	conns []net.Conn
}

// cut closes every connection through the proxy, as a broken link would.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func newProxy(t *testing.T, upstream string) *proxy {
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	pu := *u
	pu.Host = ln.Addr().String()
	p.url = pu.String()
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", u.Host)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { copyUntil(s, c, nil); s.Close() }()
			go func() { copyUntil(c, s, p); c.Close() }()
		}
	}()
	return p
}

func (p *proxy) swallow(on bool) { p.mu.Lock(); p.eat = on; p.mu.Unlock() }

// copyUntil copies src to dst; with p, it drops what passes while p swallows
// (the connection stays up: the client sees no error, only silence).
func copyUntil(dst net.Conn, src net.Conn, p *proxy) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			eat := false
			if p != nil {
				p.mu.Lock()
				eat = p.eat
				p.mu.Unlock()
			}
			if !eat {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// A worker polls while a job nacked with a delay comes due: every lease
// answers at once (none waits out the request timeout) and the job comes back
// with the next delivery count. nats-server 2.9.10 drops, unanswered, a pull
// request that expired as the nacked job came due, and then delivers the job
// with delivery count 1 again (about once in 50 rounds with memory storage
// and a poll every 20 ms); on those servers that count is tolerated and
// reported, on later ones it fails the test.
func TestNackDelayWhilePolling(t *testing.T) {
	q := newQueue(t, Options{Storage: "memory"})
	ctx := context.Background()
	var major, minor int
	_, _ = fmt.Sscanf(q.version, "%d.%d", &major, &minor)
	countMayRepeat := major == 2 && minor < 10
	repeats := 0
	for i := range 100 {
		job := queuetest.Job(fmt.Sprintf("j%d", i))
		if err := q.Enqueue(ctx, job); err != nil {
			t.Fatal(err)
		}
		d, err := q.Lease(ctx, long)
		if err != nil || d.Job.ID != job.ID {
			t.Fatalf("round %d: lease %+v %v", i, d, err)
		}
		if err := q.Nack(ctx, d, 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			start := time.Now()
			d, err = q.Lease(ctx, long)
			if took := time.Since(start); took > 1500*time.Millisecond { // the request timeout is 2 s
				t.Fatalf("round %d: a lease took %v (%v)", i, took, err)
			}
			if !errors.Is(err, adapters.ErrNoJob) || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil || d.Job.ID != job.ID {
			t.Fatalf("round %d: redelivery %+v %v, want %s", i, d, err, job.ID)
		}
		switch {
		case d.Token == 2:
		case d.Token == 1 && countMayRepeat:
			repeats++
		default:
			t.Fatalf("round %d: redelivery with delivery count %d, want 2 (nats-server %s)", i, d.Token, q.version)
		}
		if err := q.Ack(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("nats-server %s: %d of 100 redeliveries repeated delivery count 1", q.version, repeats)
}

// A message the server delivered to a pull its Lease gave up on (its worker
// starved past the pull's expiry) reaches no Lease: each Lease's pulls reply
// to a subscription of its own, gone when it returns. The server delivers it
// again after its ack wait, with the next delivery count, as after a lost
// pull reply. A later Lease that took it instead held a lease begun before it
// asked, which the server could have handed to another worker already: a
// false preempted and unexplained_duplicate in loaded runs (docs/nats.md).
func TestAbandonedPullsMessageComesAgainAfterItsAckWait(t *testing.T) {
	wait := time.Duration(float64(2*time.Second) * queuetest.LoadFactor())
	q := newQueue(t, Options{AckWait: wait})
	ctx := context.Background()
	if err := q.Enqueue(ctx, adapters.Job{ID: "late", Tenant: "acme", DocumentID: "d", Version: 1, MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	if err := q.followLease(ctx, wait); err != nil {
		t.Fatal(err)
	}
	// A Lease's pull whose answer comes after the Lease gave up on it.
	inbox := q.nc.NewInbox()
	answers := make(chan *natsgo.Msg, 4)
	sub, err := q.nc.ChanSubscribe(inbox+".*", answers)
	if err != nil {
		t.Fatal(err)
	}
	// Asked before the pull: the server's delivery comes after it. The
	// answer's arrival does not bound it from below (a loaded client reads
	// it late), so every time is counted from here.
	asked := time.Now()
	if err := q.nc.PublishRequest(q.next, inbox+".1", pullRequest); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-answers:
		if m.Header.Get(headerStatus) != "" {
			t.Fatalf("the pull was answered %s, not with the message", m.Header.Get(headerStatus))
		}
	case <-time.After(wait):
		t.Fatal("the pull got no message")
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	// Within its ack wait no Lease gets it: it is the abandoned pull's.
	if d, err := q.Lease(ctx, wait); !errors.Is(err, adapters.ErrNoJob) {
		if since := time.Since(asked); since >= wait {
			t.Skipf("the machine stalled %v past the pull (ack wait %v): nothing to tell", since, wait)
		}
		t.Fatalf("Lease within the ack wait of the abandoned pull's message = %+v, %v: want no job", d, err)
	}
	// After it, the next Lease does, delivered a second time: nothing lost.
	var d adapters.Delivery
	for deadline := asked.Add(3 * wait); ; time.Sleep(20 * time.Millisecond) {
		if d, err = q.Lease(ctx, wait); !errors.Is(err, adapters.ErrNoJob) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || d.Job.ID != "late" || d.Token != 2 {
		t.Fatalf("Lease after the ack wait = %+v, %v: want the message, second delivery", d, err)
	}
	if since := time.Since(asked); since < wait {
		t.Errorf("delivered again %v after the abandoned pull was sent, within its ack wait %v", since, wait)
	}
	if err := q.Ack(ctx, d); err != nil {
		t.Fatal(err)
	}
}
