package sqs

import (
	"context"
	"errors"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/adapters/queuetest"
)

// testOptions reads DURACHK_SQS_URL (sqs://host:port?region=...&endpoint-kind=...,
// as .ci/setup.d/20-sqs-emulator.sh exports it for the pinned fauxqs) into
// Options; the test skips when it is not set.
func testOptions(t testing.TB) Options {
	t.Helper()
	raw := os.Getenv("DURACHK_SQS_URL")
	if raw == "" {
		t.Skip("DURACHK_SQS_URL is not set: the SQS tests need an endpoint, e.g. eval \"$(tools/sqs-emulator/start.sh)\" and DURACHK_SQS_URL=sqs://${FAUXQS_ENDPOINT#http://}?region=us-east-1")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "sqs" || u.Port() == "" {
		t.Fatalf("DURACHK_SQS_URL=%q: want sqs://host:port?region=...", raw)
	}
	o := Options{Endpoint: "http://" + u.Host, Region: u.Query().Get("region"), AccessKey: "test", SecretKey: "test",
		Kind: EndpointKind(u.Query().Get("endpoint-kind"))}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	return o
}

var randomRunID = queuetest.RunID

// newQueue opens the queues of a fresh run id and drops them when the test ends.
func newQueue(t testing.TB, edit func(*Options)) *Queue {
	t.Helper()
	o := testOptions(t)
	if edit != nil {
		edit(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q, err := Open(ctx, randomRunID(), o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := q.Drop(ctx); err != nil {
			t.Errorf("drop: %v", err)
		}
		left, err := ListRunQueues(ctx, q.Client(), Prefix+q.runID)
		if err != nil || len(left) > 0 {
			t.Errorf("after Drop, queues of run %s: %v (err %v)", q.runID, left, err)
		}
		_ = q.Close()
	})
	return q
}

// job is the job of a script's enqueue: "id" or "id@group".
var job = queuetest.Job

// features are SQS's documented deviations from the reference semantics.
// Visibility timeouts and delays are whole seconds (ReceiveMessage
// VisibilityTimeout, ChangeMessageVisibility, DelaySeconds). Standard queues
// have "best-effort ordering" (Unordered). ApproximateNumberOfMessages* count
// messages but name none (Unnamed). "Changing a message's visibility timeout
// after it has expired might result in an error" (fauxqs: it succeeds):
// ExtendExpiredMaySucceed. No fenced ack (Capabilities.FencedAck false) is
// derived from the capabilities. Scripts run in whole seconds, so in parallel.
var features = queuetest.Features{LeaseUnit: time.Second, Unordered: true, Unnamed: true, ExtendExpiredMaySucceed: true, LateDeleteAmbiguous: true, Parallel: true}

// TestConformance runs the port's conformance suite against SQS and, as the
// reference, against adapters/mem. A delivery limit is the RedrivePolicy's
// maxReceiveCount: SQS moves a message received more than maxReceiveCount
// times to the DLQ, as mem dead-letters its (limit+1)-th delivery.
func TestConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T, o queuetest.Options) adapters.Queue {
		return newQueue(t, func(so *Options) { so.MaxReceiveCount, so.FIFO = o.DeliveryLimit, o.FIFO })
	}, features)
}

func TestSeconds(t *testing.T) {
	tests := []struct {
		name string
		d    time.Duration
		min  int32
		want int32
	}{
		{"zero delay", 0, 0, 0},
		{"zero lease is the minimum", 0, 1, 1},
		{"300ms lease rounds up", 300 * time.Millisecond, 1, 1},
		{"1s stays", time.Second, 1, 1},
		{"1.001s rounds up", time.Second + time.Millisecond, 1, 2},
		{"20ms delay rounds up", 20 * time.Millisecond, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Seconds(tc.d, tc.min); got != tc.want {
				t.Errorf("Seconds(%v, %d) = %d, want %d", tc.d, tc.min, got, tc.want)
			}
		})
	}
}

func TestNames(t *testing.T) {
	tests := []struct {
		name      string
		fifo      bool
		main, dlq string
	}{
		{"standard", false, "durachk-0123456789", "durachk-0123456789-dlq"},
		{"fifo", true, "durachk-0123456789.fifo", "durachk-0123456789-dlq.fifo"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := QueueName("0123456789", tc.fifo); got != tc.main {
				t.Errorf("QueueName = %q, want %q", got, tc.main)
			}
			if got := DLQName("0123456789", tc.fifo); got != tc.dlq {
				t.Errorf("DLQName = %q, want %q", got, tc.dlq)
			}
			if n := DLQName(strings.Repeat("a", 40), tc.fifo); len(n) > 80 {
				t.Errorf("a 40-character run id makes a %d-character name; SQS allows 80", len(n))
			}
		})
	}
}

func TestCapabilities(t *testing.T) {
	tests := []struct {
		name       string
		opts       Options
		kind       EndpointKind
		deadLetter adapters.Support
		fifo       bool
		note       string
	}{
		{"no redrive", Options{}, AWS, adapters.Emulated, false, "no RedrivePolicy"},
		{"redrive", Options{MaxReceiveCount: 3}, AWS, adapters.Native, false, "maxReceiveCount=3"},
		{"redrive is reported as the broker's", Options{MaxReceiveCount: 3}, AWS, adapters.Native, false, "without durachk-reason was moved by SQS's redrive"},
		{"retention leaves no record", Options{Attributes: map[string]string{"MessageRetentionPeriod": "60"}}, AWS, adapters.Emulated, false, "deletes a message older than that without a record"},
		{"fifo", Options{FIFO: true}, AWS, adapters.Emulated, true, "MessageGroupId"},
		{"break order claims fifo", Options{BreakOrder: true}, AWS, adapters.Emulated, true, "negative control"},
		{"fauxqs differences", Options{}, Fauxqs, adapters.Emulated, false, "garbage receipt handle"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := capabilities(tc.opts, tc.kind, "x")
			if c.DeadLetter != tc.deadLetter || c.FIFO != tc.fifo {
				t.Errorf("DeadLetter %s FIFO %v, want %s %v", c.DeadLetter, c.FIFO, tc.deadLetter, tc.fifo)
			}
			if c.Token != adapters.Approximate || c.DeliveryCount != adapters.Approximate || c.FencedAck || !c.Durable || c.BrokerKill {
				t.Errorf("documented SQS semantics changed: %+v", c)
			}
			if !slices.ContainsFunc(c.Notes, func(n string) bool { return strings.Contains(n, tc.note) }) {
				t.Errorf("no note mentions %q: %q", tc.note, c.Notes)
			}
		})
	}
}

// TestIdentify checks that the endpoint names itself in every verdict.
func TestIdentify(t *testing.T) {
	o := testOptions(t)
	want := o.Kind
	o.Kind = ""
	kind, version := Identify(context.Background(), o)
	if want != "" && want != Unknown && kind != want {
		t.Errorf("detected %s, DURACHK_SQS_URL says endpoint-kind=%s", kind, want)
	}
	if kind == Fauxqs && !strings.HasPrefix(version, "fauxqs") {
		t.Errorf("version %q does not name fauxqs", version)
	}
	if _, v := Identify(context.Background(), Options{Region: "eu-west-1"}); v != "AWS SQS eu-west-1" {
		t.Errorf("AWS version %q", v)
	}
}

// TestOpenIsIdempotent opens one run's queues from several goroutines at once,
// as the controller and its child processes do.
func TestOpenIsIdempotent(t *testing.T) {
	for _, fifo := range []bool{false, true} {
		t.Run("fifo="+strconv.FormatBool(fifo), func(t *testing.T) {
			first := newQueue(t, func(o *Options) { o.FIFO, o.MaxReceiveCount = fifo, 3 })
			o := testOptions(t)
			o.FIFO, o.MaxReceiveCount = fifo, 3
			errs := make(chan error, 4)
			urls := make(chan string, 4)
			for range 4 {
				go func() {
					q, err := Open(context.Background(), first.runID, o)
					if err == nil {
						urls <- q.URL()
					}
					errs <- err
				}()
			}
			for range 4 {
				if err := <-errs; err != nil {
					t.Fatalf("concurrent open: %v", err)
				}
				if u := <-urls; u != first.URL() {
					t.Errorf("url %s, want %s", u, first.URL())
				}
			}
		})
	}
}

// TestEmulatorDifferences pins what Capabilities.Notes says about fauxqs: if a
// new fauxqs stops differing from AWS, the note must go.
func TestEmulatorDifferences(t *testing.T) {
	q := newQueue(t, nil)
	if q.Kind() != Fauxqs {
		t.Skipf("the endpoint is %s, not fauxqs", q.Kind())
	}
	ctx := context.Background()
	if err := q.Enqueue(ctx, job("a")); err != nil {
		t.Fatal(err)
	}
	_, err := q.client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(q.url), ReceiptHandle: aws.String("garbage")})
	if err != nil {
		t.Errorf("fauxqs refused a garbage receipt handle (%v): update the note in capabilities()", err)
	}
}

func TestClosed(t *testing.T) {
	q := newQueue(t, nil)
	_ = q.Close()
	if err := q.Enqueue(context.Background(), job("a")); !errors.Is(err, adapters.ErrClosed) {
		t.Errorf("enqueue after close: %v, want ErrClosed", err)
	}
	var oe *adapters.OpError
	if _, err := q.Lease(context.Background(), time.Second); !errors.As(err, &oe) || oe.Target != Broker || oe.Op != "lease" {
		t.Errorf("lease after close: %v, want an OpError of target sqs", err)
	}
}

func TestUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := Open(ctx, randomRunID(), Options{Endpoint: "http://127.0.0.1:1", Region: "us-east-1", AccessKey: "test", SecretKey: "secret-not-shown", Kind: Unknown})
	if !errors.Is(err, adapters.ErrUnavailable) {
		t.Errorf("open of a closed port: %v, want ErrUnavailable", err)
	}
	if err != nil && strings.Contains(err.Error(), "secret-not-shown") {
		t.Errorf("error shows the secret: %v", err)
	}
}

// A message SQS's redrive moved to the DLQ is in Moved with the
// maxReceiveCount and the receive count it carried; one the pipeline
// dead-lettered (durachk-reason attribute) is not. Repeated inspections, which
// receive the DLQ's messages, do not raise the reported count.
func TestRedriveIsTheBrokersOwnAction(t *testing.T) {
	for _, fifo := range []bool{false, true} {
		t.Run(map[bool]string{false: "standard", true: "fifo"}[fifo], func(t *testing.T) {
			t.Parallel()
			q := newQueue(t, func(o *Options) { o.MaxReceiveCount, o.FIFO = 2, fifo })
			ctx := context.Background()
			for _, id := range []string{"a", "p"} {
				if err := q.Enqueue(ctx, job(id)); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(20 * time.Second)
			for nacks := 0; nacks < 2 || time.Now().Before(deadline); {
				d, err := q.Lease(ctx, time.Second)
				if errors.Is(err, adapters.ErrNoJob) {
					if nacks >= 2 {
						break // a was moved by the receive that found nothing
					}
					time.Sleep(50 * time.Millisecond)
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				switch d.Job.ID {
				case "p":
					err = q.DeadLetter(ctx, d, "permanent_error")
				default:
					nacks++
					err = q.Nack(ctx, d, 0)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			var inv adapters.Inventory
			for range 3 {
				var err error
				if inv, err = q.Inspect(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(inv.DeadLettered, []string{"a", "p"}) {
				t.Errorf("dead letters %v, want [a p]", inv.DeadLettered)
			}
			if len(inv.Moved) != 1 {
				t.Fatalf("moved %+v, want a only", inv.Moved)
			}
			m := inv.Moved[0]
			if m.Job != "a" || m.Action != adapters.ActionDeadLettered || m.Reason != "maxReceiveCount 2" {
				t.Errorf("moved %+v, want a dead_lettered maxReceiveCount 2", m)
			}
			// Received twice before the redrive; fauxqs also counts the receive
			// that moved it.
			if m.Deliveries < 2 || m.Deliveries > 3 {
				t.Errorf("moved after %d deliveries, want 2 (3 on fauxqs)", m.Deliveries)
			}
		})
	}
}

// A delete answered after the lease's visibility timeout can have run out
// is ambiguous: SQS answers it without error whether or not it deleted the
// message. The control: within the lease, ack and dead letter are definite.
func TestDeleteAfterTheLeaseIsAmbiguous(t *testing.T) {
	q := newQueue(t, nil)
	ctx := context.Background()
	for _, id := range []string{"in-time", "late-ack", "late-dead"} {
		if err := q.Enqueue(ctx, job(id)); err != nil {
			t.Fatal(err)
		}
	}
	leased := map[string]adapters.Delivery{}
	for end := time.Now().Add(30 * time.Second); len(leased) < 3 && time.Now().Before(end); {
		d, err := q.Lease(ctx, time.Minute)
		if errors.Is(err, adapters.ErrNoJob) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		leased[d.Job.ID] = d
	}
	if len(leased) < 3 {
		t.Fatalf("leased %d of 3", len(leased))
	}
	if err := q.Ack(ctx, leased["in-time"]); err != nil {
		t.Errorf("ack within the lease: %v", err)
	}
	// The bound of each late delivery moved into the past, as time would.
	for _, id := range []string{"late-ack", "late-dead"} {
		q.leases.Store(leased[id].Receipt, time.Now().Add(-time.Second))
	}
	if err := q.Ack(ctx, leased["late-ack"]); !errors.Is(err, adapters.ErrAmbiguous) {
		t.Errorf("ack after the lease = %v, want ErrAmbiguous", err)
	}
	if err := q.DeadLetter(ctx, leased["late-dead"], "permanent_error"); !errors.Is(err, adapters.ErrAmbiguous) {
		t.Errorf("dead letter after the lease = %v, want ErrAmbiguous", err)
	}
}
