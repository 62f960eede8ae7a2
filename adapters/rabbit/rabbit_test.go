package rabbit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/adapters/mem"
	"github.com/durachk/durachk/adapters/queuetest"
)

// testURL is the RabbitMQ the tests run against, e.g.
// amqp://guest:guest@127.0.0.1:5672/.
func testURL(t testing.TB) string {
	return queuetest.URL(t, "DURACHK_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
}

var randomRunID = queuetest.RunID

var (
	classic = Options{Args: map[string]any{"x-queue-type": "classic"}}
	quorum  = Options{Args: map[string]any{"x-queue-type": "quorum", "x-delivery-limit": int64(5), "x-dead-letter-exchange": "dlx"}}
)

// newQueue opens a queue of a fresh run and drops it when the test ends.
func newQueue(t testing.TB, opts Options) *Queue {
	t.Helper()
	url := testURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q, err := Open(ctx, url, randomRunID(), opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		drop(t, url, q)
		_ = q.Close()
	})
	return q
}

// drop deletes q's queues over a connection of its own, so that a test may
// close or drop its queue itself, and checks that nothing of the run is left.
func drop(t testing.TB, url string, q *Queue) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	other, err := Open(ctx, url, q.runID, q.opts)
	if err != nil {
		t.Errorf("drop: %v", err)
		return
	}
	defer other.Close()
	if err := other.Drop(ctx); err != nil {
		t.Errorf("drop: %v", err)
	}
	c, err := amqp.Dial(url)
	if err != nil {
		t.Errorf("drop: %v", err)
		return
	}
	defer c.Close()
	for _, n := range q.Names() {
		ch, err := c.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclarePassive(n, false, false, false, false, nil); err == nil {
			t.Errorf("queue %s is left after Drop", n)
			ch.Close()
		}
	}
	if x := q.DeadLetterExchange(); x != "" {
		ch, _ := c.Channel()
		if err := ch.ExchangeDeclarePassive(x, "fanout", true, false, false, false, nil); err == nil {
			t.Errorf("exchange %s is left after Drop", x)
		}
	}
}

// job is the job of a script's enqueue: "id" or "id@group".
var job = queuetest.Job

const long = time.Minute

// features are RabbitMQ's documented deviations from the reference semantics.
// https://www.rabbitmq.com/docs/confirms#automatic-requeueing: an unacked
// delivery returns when its channel or connection closes; there is no
// per-message lease, so the adapter returns an expired delivery on the holding
// Queue's next Lease (ExpiryOnNextLease). A delivery tag is valid only on its
// channel: the adapter refuses a delivery that is no longer current without
// telling superseded from finished (StaleIsLost). Inspect counts unacked
// messages (messages_unacknowledged) but cannot name them (InFlightUnnamed),
// and names the ready ones by basic.get without ack, returned when the browsing
// channel closes: a return that counts as a delivery (x-delivery-count on quorum
// queues, the redelivered flag on classic ones) (InspectRedelivers).
var features = queuetest.Features{ExpiryOnNextLease: true, StaleIsLost: true, InFlightUnnamed: true, InspectRedelivers: true}

// open opens a queue of kind for a conformance script: o.NackDelay turns the
// delay queue on; a delivery limit becomes the quorum queue's x-delivery-limit,
// which dead-letters a message returned more than x-delivery-limit times
// (https://www.rabbitmq.com/docs/quorum-queues#poison-message-handling), so a
// limit of n deliveries is x-delivery-limit n-1. Classic queues have none: the
// suite skips those scripts.
func open(kind Options) func(t *testing.T, o queuetest.Options) adapters.Queue {
	return func(t *testing.T, o queuetest.Options) adapters.Queue {
		opts := kind
		opts.DelayQueue = o.NackDelay
		if o.DeliveryLimit > 0 && kind.Args["x-queue-type"] == "quorum" {
			opts.Args = maps.Clone(kind.Args)
			opts.Args["x-delivery-limit"] = int64(o.DeliveryLimit - 1)
		}
		return newQueue(t, opts)
	}
}

// TestConformance runs the port's conformance suite against RabbitMQ (classic and
// quorum) and, as the reference, against adapters/mem.
func TestConformance(t *testing.T) {
	t.Run("classic", func(t *testing.T) { queuetest.Run(t, open(classic), features) })
	t.Run("quorum", func(t *testing.T) { queuetest.Run(t, open(quorum), features) })
}

// closeConnection kills the connection of a RabbitMQ queue, as a heartbeat
// timeout or a partition ends it; on the reference broker the held deliveries'
// leases simply run out (they are nacked).
func closeConnection(q adapters.Queue, ds []adapters.Delivery) error {
	if rq, ok := q.(*Queue); ok {
		rq.mu.Lock()
		defer rq.mu.Unlock()
		return rq.cur.c.Close()
	}
	for _, d := range ds {
		_ = q.Nack(context.Background(), d, 0)
	}
	return nil
}

// A closed connection returns its deliveries at once; the old holder is refused.
func TestConnectionLoss(t *testing.T) {
	steps := []queuetest.Step{
		{Op: "enqueue", Arg: "a", Want: "ok"},
		{Op: "lease", Dur: long, Want: "a a1 t1"},
		{Op: "call", Call: closeConnection},
		{Op: "lease", Dur: long, Want: "a a2 t2", Wait: true},
		{Op: "ack", D: 0, Want: "lost"},
		{Op: "nack", D: 0, Want: "lost"},
		{Op: "dead", D: 0, Want: "lost"},
		{Op: "ack", D: 1, Want: "ok"},
		{Op: "lease", Dur: long, Want: "none"},
	}
	t.Run("mem", func(t *testing.T) {
		queuetest.RunScript(t, mem.New(mem.Options{}), queuetest.Features{StaleIsLost: true}, steps)
	})
	t.Run("classic", func(t *testing.T) { queuetest.RunScript(t, newQueue(t, classic), features, steps) })
	t.Run("quorum", func(t *testing.T) { queuetest.RunScript(t, newQueue(t, quorum), features, steps) })
}

// On a quorum queue the broker counts deliveries (x-delivery-count) and its
// delivery limit dead-letters natively; a classic queue only flags a
// redelivery, so its token stops growing and there is no attempt.
func TestDeliveryCounting(t *testing.T) {
	tests := []struct {
		name         string
		opts         Options
		wantAttempts string
		wantTokens   string
		wantDead     string
	}{
		{name: "quorum counts every return and dead-letters past the limit", opts: Options{Args: map[string]any{"x-queue-type": "quorum", "x-delivery-limit": int64(2), "x-dead-letter-exchange": "dlx"}},
			wantAttempts: "1 2 3", wantTokens: "1 2 3", wantDead: "[a]"},
		{name: "classic only flags a redelivery", opts: classic,
			wantAttempts: "0 0 0 0", wantTokens: "1 2 2 2", wantDead: "[]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := newQueue(t, tt.opts)
			ctx := context.Background()
			if err := q.Enqueue(ctx, job("a")); err != nil {
				t.Fatal(err)
			}
			var attempts, tokens []string
			for range 4 {
				d, err := q.Lease(ctx, long)
				if errors.Is(err, adapters.ErrNoJob) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				attempts, tokens = append(attempts, fmt.Sprint(d.Attempt)), append(tokens, fmt.Sprint(d.Token))
				// The worker dies with the delivery: its connection closes.
				q.mu.Lock()
				q.cur.c.Close()
				q.mu.Unlock()
			}
			if got := strings.Join(attempts, " "); got != tt.wantAttempts {
				t.Errorf("attempts %q, want %q", got, tt.wantAttempts)
			}
			if got := strings.Join(tokens, " "); got != tt.wantTokens {
				t.Errorf("tokens %q, want %q", got, tt.wantTokens)
			}
			time.Sleep(100 * time.Millisecond)
			inv, err := q.Inspect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(inv.DeadLettered); got != tt.wantDead {
				t.Errorf("dead letters %s, want %s", got, tt.wantDead)
			}
		})
	}
}

func TestCapabilities(t *testing.T) {
	tests := []struct {
		name                string
		opts                Options
		version             string
		wantToken, wantDC   adapters.Support
		wantDL              adapters.Support
		wantDurable         bool
		wantNote            string
		wantLeaseExtensions adapters.Support
	}{
		{"classic", classic, "rabbitmq 3.10.8", adapters.Approximate, adapters.None, adapters.Emulated, true, "redelivered flag", adapters.None},
		{"quorum 3.x", quorum, "rabbitmq 3.10.8", adapters.Native, adapters.Native, adapters.Native, true, "RabbitMQ 3.x", adapters.None},
		{"quorum 4.0", quorum, "rabbitmq 4.0.5", adapters.Native, adapters.Native, adapters.Native, true, "default delivery limit of 20", adapters.None},
		{"quorum 4.3", quorum, "rabbitmq 4.3.0", adapters.Approximate, adapters.Approximate, adapters.Native, true, "failed deliveries only", adapters.None},
		{"transient classic", Options{Transient: true}, "rabbitmq 3.10.8", adapters.Approximate, adapters.None, adapters.Emulated, false, "delivery mode 1", adapters.None},
		{"transient quorum is still durable", Options{Transient: true, Args: quorum.Args}, "rabbitmq 3.10.8", adapters.Native, adapters.Native, adapters.Native, true, "quorum", adapters.None},
		{"no confirms", Options{NoConfirms: true, Args: quorum.Args}, "rabbitmq 3.10.8", adapters.Native, adapters.Native, adapters.Native, false, "confirms off", adapters.None},
		{"volatile", Options{Volatile: true}, "rabbitmq 3.10.8", adapters.Approximate, adapters.None, adapters.Emulated, false, "negative control", adapters.None},
		{"the broker's own dead letters are reported", quorum, "rabbitmq 3.10.8", adapters.Native, adapters.Native, adapters.Native, true, "x-death reason", adapters.None},
		{"a TTL without a dead-letter exchange drops without a record", Options{Args: map[string]any{"x-message-ttl": int64(100)}}, "rabbitmq 3.10.8", adapters.Approximate, adapters.None, adapters.Emulated, true, "x-message-ttl) is dropped without a record", adapters.None},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			isQuorum := tt.opts.Args["x-queue-type"] == "quorum" && !tt.opts.Volatile
			_, dlx := tt.opts.Args["x-dead-letter-exchange"]
			c := capabilities(tt.opts, isQuorum, dlx, tt.version)
			if c.Broker != Broker || c.Lease != adapters.Approximate || c.LeaseExtension != tt.wantLeaseExtensions || !c.FencedAck || c.FIFO || c.DelayedNack != adapters.None {
				t.Errorf("capabilities %+v", c)
			}
			if c.Token != tt.wantToken || c.DeliveryCount != tt.wantDC || c.DeadLetter != tt.wantDL || c.Durable != tt.wantDurable {
				t.Errorf("token %s delivery count %s dead letter %s durable %v, want %s %s %s %v", c.Token, c.DeliveryCount, c.DeadLetter, c.Durable, tt.wantToken, tt.wantDC, tt.wantDL, tt.wantDurable)
			}
			if !strings.Contains(strings.Join(c.Notes, "\n"), tt.wantNote) {
				t.Errorf("notes %q lack %q", c.Notes, tt.wantNote)
			}
		})
	}
}

func TestServerVersionAndCapabilitiesFromTheBroker(t *testing.T) {
	q := newQueue(t, quorum)
	if v := q.ServerVersion(); !strings.HasPrefix(v, "rabbitmq ") || len(v) < len("rabbitmq 3.0") {
		t.Errorf("server version %q", v)
	}
	if n := strings.Join(q.Capabilities().Notes, "\n"); !strings.Contains(n, q.ServerVersion()) {
		t.Errorf("notes do not name the version: %q", n)
	}
}

func TestOpenRejectsBadOptions(t *testing.T) {
	tests := []struct {
		name  string
		runID string
		opts  Options
	}{
		{"empty run id", "", Options{}},
		{"upper case run id", "Run1", Options{}},
		{"run id with a dot", "run.1", Options{}},
		{"negative prefetch", "r1", Options{Prefetch: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Open(context.Background(), "amqp://guest:guest@127.0.0.1:1/", tt.runID, tt.opts); err == nil {
				t.Error("Open accepted it")
			}
		})
	}
}

// Credentials never appear in an error: not when the broker is unreachable,
// not when it refuses them.
func TestCredentialsNeverInErrors(t *testing.T) {
	const pw = "s3cret-Passw0rd"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	urls := map[string]string{"unreachable": "amqp://durachk:" + pw + "@" + addr + "/"}
	if u := os.Getenv("DURACHK_AMQP_URL"); u != "" {
		p, err := amqp.ParseURI(u)
		if err != nil {
			t.Fatal(err)
		}
		urls["refused"] = fmt.Sprintf("amqp://durachk-nobody:%s@%s:%d/", pw, p.Host, p.Port)
	}
	for name, u := range urls {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := Open(ctx, u, "tcreds", Options{})
			if !errors.Is(err, adapters.ErrUnavailable) {
				t.Fatalf("open = %v, want ErrUnavailable", err)
			}
			if strings.Contains(err.Error(), pw) {
				t.Errorf("error contains the password: %v", err)
			}
		})
	}
}

func TestClosed(t *testing.T) {
	q := newQueue(t, classic)
	ctx := context.Background()
	if err := q.Enqueue(ctx, job("a")); err != nil {
		t.Fatal(err)
	}
	d, err := q.Lease(ctx, long)
	if err != nil {
		t.Fatal(err)
	}
	_ = q.Close()
	_ = q.Close()
	for name, err := range map[string]error{
		"enqueue": q.Enqueue(ctx, job("b")),
		"lease":   func() error { _, err := q.Lease(ctx, long); return err }(),
		"ack":     q.Ack(ctx, d),
		"inspect": func() error { _, err := q.Inspect(ctx); return err }(),
	} {
		if !errors.Is(err, adapters.ErrClosed) {
			t.Errorf("%s on a closed queue = %v, want ErrClosed", name, err)
		}
	}
}

// Volatile is the negative control of durability.ack: its queues are not durable
// and its messages transient.
func TestVolatileDeclaresNothingDurable(t *testing.T) {
	q := newQueue(t, Options{Volatile: true, Args: quorum.Args})
	if q.quorum || q.persistence() != amqp.Transient {
		t.Errorf("volatile queue: quorum %v, delivery mode %d", q.quorum, q.persistence())
	}
	c, err := amqp.Dial(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, _ := c.Channel()
	// Declaring it durable fails with PRECONDITION_FAILED when it exists non-durable.
	if _, err := ch.QueueDeclare(q.names.main, true, false, false, false, nil); err == nil {
		t.Error("the volatile work queue is durable")
	}
}

// A job published by the adapter comes back intact.
func TestJobRoundTrip(t *testing.T) {
	q := newQueue(t, quorum)
	ctx := context.Background()
	in := adapters.Job{ID: "j1", Tenant: "acme", DocumentID: "d1", Version: 3, Payload: []byte{0, 1, 2, 0xff},
		CreatedAt: time.Date(2026, 2, 3, 4, 5, 6, 7, time.UTC), Deadline: time.Date(2026, 2, 3, 5, 0, 0, 0, time.UTC), MaxAttempts: 4, Group: "g"}
	if err := q.Enqueue(ctx, in); err != nil {
		t.Fatal(err)
	}
	d, err := q.Lease(ctx, long)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%+v", d.Job) != fmt.Sprintf("%+v", in) || d.Attempt != 1 || d.Token != 1 {
		t.Errorf("got %+v attempt %d token %d, want %+v, 1, 1", d.Job, d.Attempt, d.Token, in)
	}
}

// BenchmarkAdapterLoop is publish → lease → ack through the adapter;
// BenchmarkRawLoop does the same with amqp091 directly (a confirmed persistent
// publish, basic.get, basic.ack) on a queue of the same kind. Their ratio is the
// adapter's overhead: go test -run X -bench Loop -benchtime 2000x ./adapters/rabbit/
func BenchmarkAdapterLoop(b *testing.B) {
	for _, k := range []struct {
		name string
		opts Options
	}{{"classic", classic}, {"quorum", quorum}} {
		b.Run(k.name, func(b *testing.B) {
			q := newQueue(b, k.opts)
			ctx := context.Background()
			j := job("bench")
			b.ResetTimer()
			for range b.N {
				if err := q.Enqueue(ctx, j); err != nil {
					b.Fatal(err)
				}
				d, err := q.Lease(ctx, long)
				if err != nil {
					b.Fatal(err)
				}
				if err := q.Ack(ctx, d); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkRawLoop(b *testing.B) {
	for _, k := range []struct {
		name string
		args amqp.Table
	}{{"classic", amqp.Table{"x-queue-type": "classic"}}, {"quorum", amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(5)}}} {
		b.Run(k.name, func(b *testing.B) {
			url := testURL(b)
			c, err := amqp.Dial(url)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ch, _ := c.Channel()
			pub, _ := c.Channel()
			if err := pub.Confirm(false); err != nil {
				b.Fatal(err)
			}
			name := "durachk." + randomRunID() + ".raw"
			if _, err := ch.QueueDeclare(name, true, false, false, false, k.args); err != nil {
				b.Fatal(err)
			}
			defer ch.QueueDelete(name, false, false, false)
			body := []byte(`{"id":"bench","tenant":"acme","document_id":"doc-bench","version":1,"payload":"cGF5bG9hZCBiZW5jaA==","max_attempts":5}`)
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				dc, err := pub.PublishWithDeferredConfirmWithContext(ctx, "", name, true, false,
					amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: "bench", Body: body})
				if err != nil {
					b.Fatal(err)
				}
				if ok, err := dc.WaitContext(ctx); err != nil || !ok {
					b.Fatal("not confirmed", err)
				}
				m, ok, err := ch.Get(name, false)
				if err != nil || !ok {
					b.Fatal("get", ok, err)
				}
				if err := m.Ack(false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// What RabbitMQ does on its own — dead-lettering at the delivery limit,
// expiring by TTL, dropping the head on overflow — is listed in Moved with the
// x-death reason; what the pipeline dead-letters (basic.reject, or the
// emulated publish to the DLQ) is not; without a dead-letter exchange the
// broker drops the message and keeps no record, so nothing is listed.
func TestBrokerActionsAreReported(t *testing.T) {
	args := func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name string
		opts Options
		// act enqueues and settles; the pipeline dead-letters the job "p".
		act       func(t *testing.T, q *Queue)
		wantDead  string
		wantMoved string // job:action:reason:deliveries, space-separated
	}{
		{name: "quorum delivery limit", opts: Options{Args: args("x-queue-type", "quorum", "x-delivery-limit", int64(1), "x-dead-letter-exchange", "dlx")},
			act: func(t *testing.T, q *Queue) {
				enqueue(t, q, "a", "p")
				da := leaseJob(t, q, "a")
				deadLetter(t, q, "p")
				nack(t, q, da)
				nack(t, q, leaseJob(t, q, "a")) // a's second return: over the limit
			}, wantDead: "[p a]", wantMoved: "a:dead_lettered:delivery_limit:2"},
		{name: "quorum message TTL", opts: Options{Args: args("x-queue-type", "quorum", "x-message-ttl", int64(200), "x-dead-letter-exchange", "dlx")},
			act: func(t *testing.T, q *Queue) {
				enqueue(t, q, "p")
				deadLetter(t, q, "p")
				enqueue(t, q, "a")
				time.Sleep(400 * time.Millisecond)
			}, wantDead: "[p a]", wantMoved: "a:expired:expired:0"},
		{name: "per-message expiration on a classic queue", opts: Options{Expiration: 200 * time.Millisecond, Args: args("x-queue-type", "classic", "x-dead-letter-exchange", "dlx")},
			act: func(t *testing.T, q *Queue) {
				enqueue(t, q, "a")
				time.Sleep(400 * time.Millisecond)
			}, wantDead: "[a]", wantMoved: "a:expired:expired:0"},
		{name: "quorum max length drops the head", opts: Options{Args: args("x-queue-type", "quorum", "x-max-length", int64(1), "x-overflow", "drop-head", "x-dead-letter-exchange", "dlx")},
			act: func(t *testing.T, q *Queue) {
				enqueue(t, q, "a", "b")
			}, wantDead: "[a]", wantMoved: "a:dropped:maxlen:0"},
		{name: "classic reject-publish-dlx dead-letters the refused publish", opts: Options{Args: args("x-queue-type", "classic", "x-max-length", int64(1), "x-overflow", "reject-publish-dlx", "x-dead-letter-exchange", "dlx")},
			act: func(t *testing.T, q *Queue) {
				enqueue(t, q, "a")
				if err := q.Enqueue(context.Background(), job("b")); err == nil {
					t.Error("enqueue past the max length was confirmed")
				}
			}, wantDead: "[b]", wantMoved: "b:dropped:maxlen:0"},
		{name: "a delayed nack's expiry in the delay queue is not the work queue's", opts: Options{DelayQueue: true, Args: quorum.Args},
			act: func(t *testing.T, q *Queue) {
				enqueue(t, q, "p")
				if err := q.Nack(context.Background(), leaseJob(t, q, "p"), 100*time.Millisecond); err != nil {
					t.Fatal(err)
				}
				deadLetter(t, q, "p") // its x-death: rejected from the work queue, expired from the delay queue
			}, wantDead: "[p]"},
		{name: "emulated dead letters are the pipeline's", opts: classic,
			act: func(t *testing.T, q *Queue) {
				enqueue(t, q, "p")
				deadLetter(t, q, "p")
			}, wantDead: "[p]"},
		{name: "without a dead-letter exchange an expired message leaves no record", opts: Options{Args: args("x-queue-type", "classic", "x-message-ttl", int64(200))},
			act: func(t *testing.T, q *Queue) {
				enqueue(t, q, "a")
				time.Sleep(400 * time.Millisecond)
			}, wantDead: "[]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := newQueue(t, tt.opts)
			before := time.Now().Add(-time.Second).Truncate(time.Second)
			tt.act(t, q)
			var inv adapters.Inventory
			deadline := time.Now().Add(5 * time.Second)
			for {
				var err error
				if inv, err = q.Inspect(context.Background()); err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(inv.DeadLettered) == tt.wantDead || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if got := fmt.Sprint(inv.DeadLettered); got != tt.wantDead {
				t.Errorf("dead letters %s, want %s", got, tt.wantDead)
			}
			var moved []string
			for _, m := range inv.Moved {
				moved = append(moved, fmt.Sprintf("%s:%s:%s:%d", m.Job, m.Action, m.Reason, m.Deliveries))
				if m.At.Before(before) || m.At.After(time.Now()) {
					t.Errorf("%s moved at %v, want between %v and now", m.Job, m.At, before)
				}
			}
			if got := strings.Join(moved, " "); got != tt.wantMoved {
				t.Errorf("moved %q, want %q", got, tt.wantMoved)
			}
		})
	}
}

func enqueue(t *testing.T, q *Queue, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := q.Enqueue(context.Background(), job(id)); err != nil {
			t.Fatal(err)
		}
	}
}

func leaseJob(t *testing.T, q *Queue, want string) adapters.Delivery {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		d, err := q.Lease(context.Background(), long)
		if errors.Is(err, adapters.ErrNoJob) && time.Now().Before(deadline) {
			continue
		}
		if err != nil || d.Job.ID != want {
			t.Fatalf("lease = %s, %v; want %s", d.Job.ID, err, want)
		}
		return d
	}
}

func nack(t *testing.T, q *Queue, d adapters.Delivery) {
	t.Helper()
	if err := q.Nack(context.Background(), d, 0); err != nil {
		t.Fatal(err)
	}
}

// deadLetter leases the job id and dead-letters it as the pipeline does.
func deadLetter(t *testing.T, q *Queue, id string) {
	t.Helper()
	if err := q.DeadLetter(context.Background(), leaseJob(t, q, id), "permanent_error"); err != nil {
		t.Fatal(err)
	}
}

// An Open the broker refuses (a queue argument it does not accept) leaves no
// queue of the run behind.
func TestRefusedArgumentsLeaveNothing(t *testing.T) {
	url := testURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runID := randomRunID()
	_, err := Open(ctx, url, runID, Options{Args: map[string]any{"x-queue-type": "quorum", "x-overflow": "bogus", "x-dead-letter-exchange": "dlx"}})
	if err == nil || !strings.Contains(err.Error(), "x-overflow") {
		t.Fatalf("open with x-overflow=bogus: %v, want the broker's refusal", err)
	}
	c, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	base := QueueName(runID)
	for _, n := range []string{base, base + ".delay", base + ".dlq", base + ".held", base + ".live"} {
		ch, err := c.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclarePassive(n, false, false, false, false, nil); err == nil {
			t.Errorf("queue %s is left after a refused Open", n)
			_, _ = ch.QueueDelete(n, false, false, false)
			ch.Close()
		}
	}
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclarePassive(base+".dlx", "fanout", true, false, false, false, nil); err == nil {
		t.Errorf("exchange %s.dlx is left after a refused Open", base)
		_ = ch.ExchangeDelete(base+".dlx", false, false)
	}
}

// The controller's liveness probe (Ping) touches no message. Inspect, with
// no other process of the run connected, browses the queue, and on a quorum
// queue every message it gets and requeues counts as a delivery: the
// negative control, and why the probe pings instead.
func TestPingDeliversNothing(t *testing.T) {
	q := newQueue(t, Options{Args: map[string]any{"x-queue-type": "quorum"}})
	enqueue(t, q, "pinged", "inspected")
	for range 3 {
		if err := q.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if d := leaseJob(t, q, "pinged"); d.Attempt != 1 {
		t.Errorf("after three pings the job's first lease is attempt %d, want 1", d.Attempt)
	}
	if _, err := q.Inspect(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := leaseJob(t, q, "inspected"); d.Attempt < 2 {
		t.Errorf("after an Inspect that browsed the queue the job's first lease is attempt %d, want more than 1", d.Attempt)
	}
}

// A return is a definite failure only when routing found no queue: RabbitMQ
// also returns a mandatory message whose queue went down before confirming
// it, and that message may be in the queue after all.
func TestReturnIsDefiniteOnlyForAMissingQueue(t *testing.T) {
	q := newQueue(t, classic)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	missing := q.names.main + ".missing"
	err := q.do(ctx, func(c *conn) error {
		for _, tc := range []struct {
			queue string
			want  bool
		}{{q.names.main, false}, {missing, true}} {
			if got := queueMissing(c, tc.queue); got != tc.want {
				t.Errorf("queueMissing(%s) = %v, want %v", tc.queue, got, tc.want)
			}
		}
		return q.publish(ctx, c, missing, amqp.Publishing{Body: []byte("{}")})
	})
	if !errors.Is(err, adapters.ErrUnavailable) || errors.Is(err, adapters.ErrAmbiguous) {
		t.Fatalf("publish to a missing queue = %v, want ErrUnavailable (definite)", err)
	}
	// The connection still serves: the 404 closed only the probe's channel.
	if err := q.Enqueue(ctx, job("a")); err != nil {
		t.Fatalf("enqueue after the return: %v", err)
	}
}
