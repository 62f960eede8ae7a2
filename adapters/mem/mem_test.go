package mem

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
)

// clock is a virtual clock: tests move it by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newQ(t *testing.T, opts Options) (*Queue, *clock) {
	t.Helper()
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	opts.Now = c.now
	q := New(opts)
	t.Cleanup(func() { _ = q.Close() })
	return q, c
}

func job(id string) adapters.Job {
	return adapters.Job{ID: id, Tenant: "acme", DocumentID: "d-" + id, Version: 1, Payload: []byte(`{"doc":"d"}`), MaxAttempts: 3}
}

func grouped(id, group string) adapters.Job {
	j := job(id)
	j.Group = group
	return j
}

var ctx = context.Background()

const lease = 10 * time.Second

func mustEnqueue(t *testing.T, q *Queue, jobs ...adapters.Job) {
	t.Helper()
	for _, j := range jobs {
		if err := q.Enqueue(ctx, j); err != nil {
			t.Fatalf("enqueue %s: %v", j.ID, err)
		}
	}
}

func mustLease(t *testing.T, q *Queue) adapters.Delivery {
	t.Helper()
	d, err := q.Lease(ctx, lease)
	if err != nil {
		t.Fatalf("lease: %v", err)
	}
	return d
}

func noJob(t *testing.T, q *Queue) {
	t.Helper()
	if d, err := q.Lease(ctx, lease); !errors.Is(err, adapters.ErrNoJob) {
		t.Fatalf("lease = %s, %v; want ErrNoJob", d.Job.ID, err)
	}
}

func inventory(t *testing.T, q *Queue) adapters.Inventory {
	t.Helper()
	inv, err := q.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func TestEnqueueVisibleAtOnceInOrder(t *testing.T) {
	q, _ := newQ(t, Options{})
	mustEnqueue(t, q, job("a"), job("b"))
	if q.Live() != 2 {
		t.Fatalf("Live = %d", q.Live())
	}
	d1, d2 := mustLease(t, q), mustLease(t, q)
	if d1.Job.ID != "a" || d2.Job.ID != "b" {
		t.Fatalf("leased %s, %s; want a, b", d1.Job.ID, d2.Job.ID)
	}
	if d1.Token != 1 || d1.Attempt != 1 || d1.Receipt == "" {
		t.Fatalf("first delivery = %+v", d1)
	}
	if !reflect.DeepEqual(d1.Job, job("a")) {
		t.Fatalf("delivered job %+v differs from the enqueued one", d1.Job)
	}
	noJob(t, q) // both in flight
}

func TestLeaseExpiryRedelivers(t *testing.T) {
	q, c := newQ(t, Options{})
	mustEnqueue(t, q, job("a"))
	d1 := mustLease(t, q)
	c.advance(lease - time.Nanosecond)
	noJob(t, q)
	if inv := inventory(t, q); !reflect.DeepEqual(inv.InFlight, []string{"a"}) {
		t.Fatalf("inventory before expiry = %+v", inv)
	}
	c.advance(time.Nanosecond)
	if inv := inventory(t, q); !reflect.DeepEqual(inv.Queued, []string{"a"}) || len(inv.InFlight) != 0 {
		t.Fatalf("inventory after expiry = %+v", inv)
	}
	d2 := mustLease(t, q)
	if d2.Job.ID != "a" || d2.Token != d1.Token+1 || d2.Attempt != d1.Attempt+1 {
		t.Fatalf("redelivery = token %d attempt %d; want %d, %d", d2.Token, d2.Attempt, d1.Token+1, d1.Attempt+1)
	}
	if d2.Receipt == d1.Receipt {
		t.Fatal("redelivery reuses the receipt")
	}
	// The zombie's delivery is stale for every fenced call.
	for name, call := range map[string]func() error{
		"ack":         func() error { return q.Ack(ctx, d1) },
		"nack":        func() error { return q.Nack(ctx, d1, 0) },
		"extend":      func() error { return q.Extend(ctx, d1, lease) },
		"dead letter": func() error { return q.DeadLetter(ctx, d1, "permanent_error") },
	} {
		if err := call(); !errors.Is(err, adapters.ErrStaleToken) {
			t.Errorf("%s with the stale token: %v, want ErrStaleToken", name, err)
		}
	}
	if q.Live() != 1 {
		t.Fatalf("stale calls changed the queue: Live = %d", q.Live())
	}
	c.advance(lease)
	d3 := mustLease(t, q)
	if d3.Token != 3 || d3.Attempt != 3 {
		t.Fatalf("third delivery token %d attempt %d", d3.Token, d3.Attempt)
	}
	if err := q.Ack(ctx, d3); err != nil {
		t.Fatal(err)
	}
	if q.Live() != 0 {
		t.Fatalf("Live after ack = %d", q.Live())
	}
}

func TestExtend(t *testing.T) {
	q, c := newQ(t, Options{})
	mustEnqueue(t, q, job("a"))
	d := mustLease(t, q)
	for range 5 { // heartbeats keep the lease for 5 × 8 s > lease
		c.advance(8 * time.Second)
		if err := q.Extend(ctx, d, lease); err != nil {
			t.Fatalf("extend: %v", err)
		}
		noJob(t, q)
	}
	c.advance(lease - time.Nanosecond)
	noJob(t, q)
	c.advance(time.Nanosecond)
	// Expired: Extend is refused even before anyone else leases it.
	if err := q.Extend(ctx, d, lease); !errors.Is(err, adapters.ErrLeaseLost) {
		t.Fatalf("extend after expiry: %v, want ErrLeaseLost", err)
	}
	d2 := mustLease(t, q)
	if d2.Token != 2 {
		t.Fatalf("token %d after expiry", d2.Token)
	}
}

func TestAckNack(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, q *Queue, c *clock)
	}{
		{"ack removes", func(t *testing.T, q *Queue, c *clock) {
			d := mustLease(t, q)
			if err := q.Ack(ctx, d); err != nil {
				t.Fatal(err)
			}
			c.advance(time.Hour)
			noJob(t, q)
			if err := q.Ack(ctx, d); !errors.Is(err, adapters.ErrLeaseLost) {
				t.Fatalf("second ack: %v, want ErrLeaseLost", err)
			}
			if inv := inventory(t, q); len(inv.Queued)+len(inv.InFlight)+len(inv.DeadLettered) != 0 {
				t.Fatalf("inventory after ack = %+v", inv)
			}
		}},
		{"nack with delay", func(t *testing.T, q *Queue, c *clock) {
			d := mustLease(t, q)
			if err := q.Nack(ctx, d, 3*time.Second); err != nil {
				t.Fatal(err)
			}
			c.advance(3*time.Second - time.Nanosecond)
			noJob(t, q)
			c.advance(time.Nanosecond)
			d2 := mustLease(t, q)
			if d2.Token != 2 || d2.Attempt != 2 {
				t.Fatalf("after nack: token %d attempt %d", d2.Token, d2.Attempt)
			}
			if err := q.Ack(ctx, d); !errors.Is(err, adapters.ErrStaleToken) {
				t.Fatalf("ack of the nacked delivery: %v, want ErrStaleToken", err)
			}
		}},
		{"nack without delay", func(t *testing.T, q *Queue, c *clock) {
			d := mustLease(t, q)
			if err := q.Nack(ctx, d, 0); err != nil {
				t.Fatal(err)
			}
			if d2 := mustLease(t, q); d2.Job.ID != "a" {
				t.Fatalf("leased %s", d2.Job.ID)
			}
		}},
		{"bad receipt", func(t *testing.T, q *Queue, c *clock) {
			d := mustLease(t, q)
			d.Receipt = "garbage"
			if err := q.Ack(ctx, d); err == nil {
				t.Fatal("ack with a bad receipt succeeded")
			}
			if q.Live() != 1 {
				t.Fatal("bad receipt removed the message")
			}
		}},
		{"ack after expiry without redelivery is current", func(t *testing.T, q *Queue, c *clock) {
			d := mustLease(t, q)
			c.advance(2 * lease)
			if err := q.Ack(ctx, d); err != nil {
				t.Fatalf("ack of the latest delivery after expiry: %v", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, c := newQ(t, Options{})
			mustEnqueue(t, q, job("a"))
			tt.run(t, q, c)
		})
	}
}

func TestDeadLetter(t *testing.T) {
	q, c := newQ(t, Options{})
	mustEnqueue(t, q, job("a"), job("b"))
	d := mustLease(t, q)
	if err := q.DeadLetter(ctx, d, "permanent_error"); err != nil {
		t.Fatal(err)
	}
	if err := q.DeadLetter(ctx, d, "permanent_error"); !errors.Is(err, adapters.ErrLeaseLost) {
		t.Fatalf("second dead-letter: %v, want ErrLeaseLost", err)
	}
	c.advance(time.Hour)
	if d := mustLease(t, q); d.Job.ID != "b" {
		t.Fatalf("a dead-lettered job was delivered: %s", d.Job.ID)
	}
	inv := inventory(t, q)
	if !reflect.DeepEqual(inv.DeadLettered, []string{"a"}) || !reflect.DeepEqual(inv.InFlight, []string{"b"}) || len(inv.Queued) != 0 {
		t.Fatalf("inventory = %+v", inv)
	}
	if q.Live() != 1 {
		t.Fatalf("Live = %d", q.Live())
	}
}

func TestDeliveryLimitDeadLettersNatively(t *testing.T) {
	q, c := newQ(t, Options{DeliveryLimit: 2})
	if caps := q.Capabilities(); caps.DeadLetter != adapters.Native {
		t.Fatalf("DeadLetter capability %s with a delivery limit", caps.DeadLetter)
	}
	mustEnqueue(t, q, job("poison"), job("b"), job("c"))
	var at time.Time
	for attempt := 1; attempt <= 2; attempt++ {
		d := mustLease(t, q)
		if d.Job.ID != "poison" || d.Attempt != attempt {
			t.Fatalf("delivery %d: %s attempt %d", attempt, d.Job.ID, d.Attempt)
		}
		c.advance(lease) // the worker dies: the lease expires
		at = c.now()
	}
	// The third delivery would exceed the limit: the broker dead-letters it and
	// hands out the next job instead.
	d := mustLease(t, q)
	if d.Job.ID != "b" {
		t.Fatalf("after the limit got %s, want b", d.Job.ID)
	}
	// The pipeline dead-letters c: that is not the broker's doing.
	if err := q.DeadLetter(ctx, mustLease(t, q), "permanent_error"); err != nil {
		t.Fatal(err)
	}
	inv := inventory(t, q)
	if !reflect.DeepEqual(inv.DeadLettered, []string{"poison", "c"}) {
		t.Fatalf("dead-lettered = %v", inv.DeadLettered)
	}
	want := []adapters.BrokerAction{{Job: "poison", Action: adapters.ActionDeadLettered, Reason: "delivery_limit", Deliveries: 2, At: at}}
	if !reflect.DeepEqual(inv.Moved, want) {
		t.Fatalf("moved = %+v, want %+v", inv.Moved, want)
	}
	if q.Live() != 1 {
		t.Fatalf("Live = %d, want 1", q.Live())
	}
}

func TestNoDeliveryLimitByDefault(t *testing.T) {
	q, c := newQ(t, Options{})
	if caps := q.Capabilities(); caps.DeadLetter != adapters.Emulated {
		t.Fatalf("DeadLetter capability %s without a delivery limit", caps.DeadLetter)
	}
	mustEnqueue(t, q, job("a"))
	for attempt := 1; attempt <= 50; attempt++ {
		if d := mustLease(t, q); d.Attempt != attempt {
			t.Fatalf("attempt %d, want %d", d.Attempt, attempt)
		}
		c.advance(lease)
	}
}

func TestFIFOGroupBlocks(t *testing.T) {
	q, c := newQ(t, Options{FIFO: true})
	mustEnqueue(t, q, grouped("g1-a", "g1"), grouped("g1-b", "g1"), grouped("g2-a", "g2"), job("free"))
	d1 := mustLease(t, q)
	if d1.Job.ID != "g1-a" {
		t.Fatalf("first lease %s", d1.Job.ID)
	}
	// g1-b waits behind g1-a; g2 and the ungrouped job are free.
	d2, d3 := mustLease(t, q), mustLease(t, q)
	if d2.Job.ID != "g2-a" || d3.Job.ID != "free" {
		t.Fatalf("leased %s, %s; want g2-a, free", d2.Job.ID, d3.Job.ID)
	}
	noJob(t, q)
	// A nack with delay keeps the group blocked until the head is visible again.
	if err := q.Nack(ctx, d1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	noJob(t, q)
	c.advance(5 * time.Second)
	if d := mustLease(t, q); d.Job.ID != "g1-a" || d.Attempt != 2 {
		t.Fatalf("after nack got %s attempt %d, want g1-a attempt 2", d.Job.ID, d.Attempt)
	} else if err := q.Ack(ctx, d); err != nil {
		t.Fatal(err)
	}
	if d := mustLease(t, q); d.Job.ID != "g1-b" {
		t.Fatalf("after ack of the head got %s, want g1-b", d.Job.ID)
	}
}

func TestFIFOLeaseExpiryKeepsOrder(t *testing.T) {
	q, c := newQ(t, Options{FIFO: true})
	mustEnqueue(t, q, grouped("a", "g"), grouped("b", "g"))
	_ = mustLease(t, q)
	c.advance(lease)
	if d := mustLease(t, q); d.Job.ID != "a" {
		t.Fatalf("after expiry got %s, want a again", d.Job.ID)
	}
}

func TestFIFODeliveryLimitUnblocksGroup(t *testing.T) {
	q, c := newQ(t, Options{FIFO: true, DeliveryLimit: 1})
	mustEnqueue(t, q, grouped("a", "g"), grouped("b", "g"))
	_ = mustLease(t, q)
	c.advance(lease)
	if d := mustLease(t, q); d.Job.ID != "b" {
		t.Fatalf("got %s, want b after a hit the delivery limit", d.Job.ID)
	}
}

func TestNotFIFOIgnoresGroups(t *testing.T) {
	q, _ := newQ(t, Options{})
	mustEnqueue(t, q, grouped("a", "g"), grouped("b", "g"))
	if d1, d2 := mustLease(t, q), mustLease(t, q); d1.Job.ID != "a" || d2.Job.ID != "b" {
		t.Fatalf("got %s, %s", d1.Job.ID, d2.Job.ID)
	}
}

func TestBreakOrderDeliversNewestFirst(t *testing.T) {
	q, _ := newQ(t, Options{BreakOrder: true})
	if !q.Capabilities().FIFO {
		t.Fatal("BreakOrder must still claim FIFO")
	}
	mustEnqueue(t, q, grouped("a", "g"), grouped("b", "g"))
	if d := mustLease(t, q); d.Job.ID != "b" {
		t.Fatalf("got %s, want the newest, b", d.Job.ID)
	}
}

func TestVolatileCrashLosesEverything(t *testing.T) {
	q, c := newQ(t, Options{Volatile: true, DeliveryLimit: 1})
	if q.Capabilities().Durable {
		t.Fatal("a volatile broker claims durability")
	}
	mustEnqueue(t, q, job("a"), job("b"), job("c"))
	d := mustLease(t, q)
	_ = mustLease(t, q)
	c.advance(lease)
	_ = mustLease(t, q) // c
	_ = d
	q.Crash(2 * time.Second)
	c.advance(2 * time.Second)
	if q.Live() != 0 {
		t.Fatalf("Live after a volatile crash = %d", q.Live())
	}
	noJob(t, q)
	inv := inventory(t, q)
	if len(inv.Queued)+len(inv.InFlight)+len(inv.DeadLettered) != 0 {
		t.Fatalf("inventory after a volatile crash = %+v", inv)
	}
	if err := q.Ack(ctx, d); !errors.Is(err, adapters.ErrLeaseLost) {
		t.Fatalf("ack of a lost message: %v, want ErrLeaseLost", err)
	}
}

func TestDurableCrash(t *testing.T) {
	q, c := newQ(t, Options{})
	if !q.Capabilities().Durable {
		t.Fatal("the default broker must be durable")
	}
	mustEnqueue(t, q, job("a"), job("b"))
	d := mustLease(t, q)
	q.Crash(2 * time.Second)
	// While down every call fails definitely.
	for name, call := range map[string]func() error{
		"enqueue":     func() error { return q.Enqueue(ctx, job("c")) },
		"lease":       func() error { _, err := q.Lease(ctx, lease); return err },
		"ack":         func() error { return q.Ack(ctx, d) },
		"nack":        func() error { return q.Nack(ctx, d, 0) },
		"extend":      func() error { return q.Extend(ctx, d, lease) },
		"dead letter": func() error { return q.DeadLetter(ctx, d, "permanent_error") },
	} {
		if err := call(); !errors.Is(err, adapters.ErrUnavailable) {
			t.Errorf("%s while down: %v, want ErrUnavailable", name, err)
		}
	}
	c.advance(2*time.Second - time.Nanosecond)
	if _, err := q.Lease(ctx, lease); !errors.Is(err, adapters.ErrUnavailable) {
		t.Fatalf("lease just before restart: %v", err)
	}
	c.advance(time.Nanosecond)
	if q.Live() != 2 {
		t.Fatalf("Live after a durable crash = %d, want 2", q.Live())
	}
	if d2 := mustLease(t, q); d2.Job.ID != "b" {
		t.Fatalf("after restart got %s, want b (a is still leased)", d2.Job.ID)
	}
	if err := q.Ack(ctx, d); err != nil {
		t.Fatalf("ack of the pre-crash delivery: %v", err)
	}
}

func TestClose(t *testing.T) {
	q, _ := newQ(t, Options{})
	mustEnqueue(t, q, job("a"))
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := q.Enqueue(ctx, job("b")); !errors.Is(err, adapters.ErrClosed) {
		t.Fatalf("enqueue after close: %v", err)
	}
	if _, err := q.Lease(ctx, lease); !errors.Is(err, adapters.ErrClosed) {
		t.Fatalf("lease after close: %v", err)
	}
}

func TestInspect(t *testing.T) {
	q, c := newQ(t, Options{})
	mustEnqueue(t, q, job("a"), job("b"), job("c"), job("d"))
	da := mustLease(t, q)
	db := mustLease(t, q)
	if err := q.Nack(ctx, db, time.Minute); err != nil { // queued but not yet visible
		t.Fatal(err)
	}
	dc := mustLease(t, q)
	if err := q.DeadLetter(ctx, dc, "max_attempts_exceeded"); err != nil {
		t.Fatal(err)
	}
	_ = da
	want := adapters.Inventory{Queued: []string{"b", "d"}, InFlight: []string{"a"}, DeadLettered: []string{"c"}}
	if got := inventory(t, q); !reflect.DeepEqual(got, want) {
		t.Fatalf("Inspect = %+v, want %+v", got, want)
	}
	c.advance(lease)
	want = adapters.Inventory{Queued: []string{"a", "b", "d"}, DeadLettered: []string{"c"}}
	if got := inventory(t, q); !reflect.DeepEqual(got, want) {
		t.Fatalf("Inspect after expiry = %+v, want %+v", got, want)
	}
}

func TestCompactKeepsReceiptsWorking(t *testing.T) {
	q, _ := newQ(t, Options{})
	for i := range 200 {
		mustEnqueue(t, q, job(string(rune('A'+i%26))+string(rune('a'+i/26))))
	}
	var held adapters.Delivery
	for i := range 200 {
		d := mustLease(t, q)
		if i == 150 {
			held = d
			continue
		}
		if err := q.Ack(ctx, d); err != nil {
			t.Fatalf("ack %d: %v", i, err)
		}
	}
	noJob(t, q) // compacts the acked prefix
	if err := q.Ack(ctx, held); err != nil {
		t.Fatalf("ack after compaction: %v", err)
	}
	if q.Live() != 0 {
		t.Fatalf("Live = %d", q.Live())
	}
}

// TestUnfencedAckAfterCompaction: the unfenced broker (a sabotage) takes a
// stale handle of a message acked long ago, also once compact dropped it
// from the queue (it did not: fencing.zombie's unfenced-ack went uncaught
// with 100 jobs or more); the fenced broker refuses it either way.
func TestUnfencedAckAfterCompaction(t *testing.T) {
	for _, tc := range []struct {
		unfenced bool
		want     error
	}{{true, nil}, {false, adapters.ErrLeaseLost}} {
		q, c := newQ(t, Options{UnfencedAck: tc.unfenced})
		mustEnqueue(t, q, job("zombie"))
		stale := mustLease(t, q)
		c.advance(lease + time.Second)
		if err := q.Ack(ctx, mustLease(t, q)); err != nil {
			t.Fatal(err)
		}
		for i := range 100 {
			mustEnqueue(t, q, job(string(rune('A'+i%26))+string(rune('a'+i/26))))
			if err := q.Ack(ctx, mustLease(t, q)); err != nil {
				t.Fatal(err)
			}
		}
		noJob(t, q) // compacts the acked prefix, the zombie's message with it
		if err := q.Ack(ctx, stale); !errors.Is(err, tc.want) {
			t.Errorf("unfenced %v: stale ack after compaction: %v, want %v", tc.unfenced, err, tc.want)
		}
	}
}

func TestCapabilities(t *testing.T) {
	c := New(Options{FIFO: true}).Capabilities()
	if c.Broker != "mem" || c.Lease != adapters.Native || c.LeaseExtension != adapters.Native || c.Token != adapters.Native ||
		!c.FencedAck || c.DeliveryCount != adapters.Native || !c.FIFO || !c.Durable || !c.BrokerKill {
		t.Fatalf("capabilities = %+v", c)
	}
	if New(Options{}).Capabilities().FIFO {
		t.Fatal("claims FIFO without the option")
	}
}
