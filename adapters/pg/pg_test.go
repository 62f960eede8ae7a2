package pg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/adapters/mem"
	"github.com/durachk/durachk/adapters/queuetest"
)

// testURL is the Postgres the tests run against, e.g.
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable.
func testURL(t testing.TB) string {
	return queuetest.URL(t, "DURACHK_PG_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
}

var randomRunID = queuetest.RunID

// newQueue opens a queue in a fresh schema durachk_t<random>_q and drops it when
// the test ends.
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
		_ = q.Close()
		dropSchema(t, url, q.Schema())
	})
	return q
}

// dropSchema drops schema over a connection of its own, so that a test may close
// or drop its queue itself.
func dropSchema(t testing.TB, url, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Errorf("drop %s: %v", schema, err)
		return
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Errorf("drop %s: %v", schema, err)
	}
}

// job is the job of a script's enqueue: "id" or "id@group".
var job = queuetest.Job

// TestConformance runs the port's conformance suite against the Postgres queue
// and, as the reference, against adapters/mem configured the same way. Postgres
// keeps the reference semantics exactly: no deviation is declared.
func TestConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T, o queuetest.Options) adapters.Queue {
		return newQueue(t, Options{DeliveryLimit: o.DeliveryLimit, FIFO: o.FIFO, MaxConns: 2})
	}, queuetest.Features{})
}

// BreakOrder is the negative control of order.fifo, shared with adapters/mem:
// both must break the order the same way.
func TestBreakOrderScripts(t *testing.T) {
	for _, tt := range queuetest.BreakOrderScripts() {
		t.Run(tt.Name, func(t *testing.T) {
			t.Run("mem", func(t *testing.T) {
				queuetest.RunScript(t, mem.New(mem.Options{FIFO: tt.FIFO, BreakOrder: true}), queuetest.Features{}, tt.Steps)
			})
			t.Run("postgres", func(t *testing.T) {
				queuetest.RunScript(t, newQueue(t, Options{FIFO: tt.FIFO, BreakOrder: true, MaxConns: 2}), queuetest.Features{}, tt.Steps)
			})
		})
	}
}

func TestJobRoundTrip(t *testing.T) {
	q := newQueue(t, Options{})
	ctx := context.Background()
	in := adapters.Job{ID: "j1", Tenant: "acme", DocumentID: "d1", Version: 3, Payload: []byte{0, 1, 2, 0xff, 'x'},
		CreatedAt: time.Date(2026, 2, 3, 4, 5, 6, 7008, time.FixedZone("x", 3600)), Deadline: time.Date(2026, 2, 3, 5, 0, 0, 0, time.UTC),
		MaxAttempts: 4, Group: "g"}
	noDeadline := in
	noDeadline.ID, noDeadline.Deadline, noDeadline.Payload, noDeadline.Group = "j2", time.Time{}, nil, ""
	for _, j := range []adapters.Job{in, noDeadline} {
		if err := q.Enqueue(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []adapters.Job{in, noDeadline} {
		d, err := q.Lease(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		want.CreatedAt = want.CreatedAt.UTC().Truncate(time.Microsecond) // the database keeps microseconds
		got := d.Job
		if got.ID != want.ID || got.Tenant != want.Tenant || got.DocumentID != want.DocumentID || got.Version != want.Version ||
			!bytes.Equal(got.Payload, want.Payload) || got.CreatedAt != want.CreatedAt || got.Deadline != want.Deadline ||
			got.MaxAttempts != want.MaxAttempts || got.Group != want.Group {
			t.Errorf("leased job\n got %+v\nwant %+v", got, want)
		}
		if d.Attempt != 1 || d.Token != 1 || d.Receipt == "" {
			t.Errorf("delivery attempt %d token %d receipt %q, want 1, 1 and a receipt", d.Attempt, d.Token, d.Receipt)
		}
	}
}

// Concurrent leases from several goroutines never hand out one job twice while
// it is leased.
func TestConcurrentLeasesAreExclusive(t *testing.T) {
	q := newQueue(t, Options{MaxConns: 4})
	queuetest.ExclusiveLeases(t, q, func(*testing.T) adapters.Queue { return q }, 200, 8)
}

// Under concurrent workers, FIFO still delivers each group in acceptance order
// with never two jobs of one group in flight.
func TestConcurrentFIFO(t *testing.T) {
	q := newQueue(t, Options{MaxConns: 4, FIFO: true})
	ctx := context.Background()
	const groups, perGroup, workers = 4, 15, 6
	for i := range perGroup {
		for g := range groups {
			if err := q.Enqueue(ctx, job(fmt.Sprintf("g%d-%02d@g%d", g, i, g))); err != nil {
				t.Fatal(err)
			}
		}
	}
	var mu sync.Mutex
	order := map[string][]string{}
	inFlight := map[string]bool{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				d, err := q.Lease(ctx, time.Minute)
				if errors.Is(err, adapters.ErrNoJob) {
					mu.Lock()
					done := len(inFlight) == 0 && total(order) == groups*perGroup
					mu.Unlock()
					if done {
						return
					}
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					t.Errorf("lease: %v", err)
					return
				}
				g := d.Job.Group
				mu.Lock()
				if inFlight[g] {
					t.Errorf("two jobs of group %s in flight", g)
				}
				inFlight[g] = true
				order[g] = append(order[g], d.Job.ID)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				delete(inFlight, g)
				mu.Unlock()
				if err := q.Ack(ctx, d); err != nil {
					t.Errorf("ack: %v", err)
				}
			}
		})
	}
	wg.Wait()
	for g, ids := range order {
		if !slices.IsSorted(ids) || len(ids) != perGroup {
			t.Errorf("group %s delivered as %v, want %d jobs in acceptance order", g, ids, perGroup)
		}
	}
}

func total(m map[string][]string) int {
	n := 0
	for _, v := range m {
		n += len(v)
	}
	return n
}

func TestCapabilities(t *testing.T) {
	tests := []struct {
		name        string
		opts        Options
		wantDurable bool
		wantFIFO    bool
		wantNote    string
	}{
		{name: "server default", opts: Options{}, wantDurable: true, wantNote: "synchronous_commit=on"},
		{name: "synchronous_commit off", opts: Options{SyncCommit: "off"}, wantDurable: false, wantNote: "synchronous_commit=off"},
		{name: "synchronous_commit local", opts: Options{SyncCommit: "local"}, wantDurable: true, wantNote: "synchronous_commit=local"},
		{name: "FIFO with a delivery limit", opts: Options{FIFO: true, DeliveryLimit: 3}, wantDurable: true, wantFIFO: true, wantNote: "delivery limit 3"},
		{name: "BreakOrder claims FIFO", opts: Options{BreakOrder: true}, wantDurable: true, wantFIFO: true, wantNote: "negative control"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.MaxConns = 1
			c := newQueue(t, tt.opts).Capabilities()
			if c.Broker != "postgres" || c.Lease != adapters.Native || c.LeaseExtension != adapters.Native || c.Token != adapters.Native ||
				!c.FencedAck || c.DeliveryCount != adapters.Native || c.DeadLetter != adapters.Native || c.DelayedNack != adapters.Native || c.BrokerKill {
				t.Errorf("capabilities %+v", c)
			}
			if c.Durable != tt.wantDurable || c.FIFO != tt.wantFIFO {
				t.Errorf("durable %v fifo %v, want %v and %v", c.Durable, c.FIFO, tt.wantDurable, tt.wantFIFO)
			}
			if !strings.Contains(strings.Join(c.Notes, "\n"), tt.wantNote) {
				t.Errorf("notes %q lack %q", c.Notes, tt.wantNote)
			}
		})
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
		{"run id with a dash", "run-1", Options{}},
		{"run id with a quote", `r"; drop`, Options{}},
		{"run id too long", strings.Repeat("a", 41), Options{}},
		{"unknown synchronous_commit", "r1", Options{SyncCommit: "sometimes"}},
		{"negative delivery limit", "r1", Options{DeliveryLimit: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Open(context.Background(), "postgres://127.0.0.1:1/x", tt.runID, tt.opts); err == nil {
				t.Error("Open accepted it")
			}
		})
	}
}

func TestUnreachableIsUnavailable(t *testing.T) {
	queuetest.Unreachable(t, func(addr, pw string) string { return "postgres://durachk:" + pw + "@" + addr + "/test?sslmode=disable" },
		func(ctx context.Context, url string) error {
			_, err := Open(ctx, url, "tunreachable", Options{})
			return err
		})
}

func TestClosed(t *testing.T) {
	q := newQueue(t, Options{MaxConns: 1})
	ctx := context.Background()
	if err := q.Enqueue(ctx, job("a")); err != nil {
		t.Fatal(err)
	}
	d, err := q.Lease(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Drop needs the open queue: drop first, then check the closed queue.
	if err := q.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	_ = q.Close()
	_ = q.Close()
	for name, err := range map[string]error{
		"enqueue": q.Enqueue(ctx, job("b")),
		"lease":   func() error { _, err := q.Lease(ctx, time.Minute); return err }(),
		"ack":     q.Ack(ctx, d),
		"drop":    q.Drop(ctx),
	} {
		if !errors.Is(err, adapters.ErrClosed) {
			t.Errorf("%s on a closed queue = %v, want ErrClosed", name, err)
		}
	}
}

func TestAckTx(t *testing.T) {
	q := newQueue(t, Options{MaxConns: 2})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, id := range []string{"a", "b"} {
		if err := q.Enqueue(ctx, job(id)); err != nil {
			t.Fatal(err)
		}
	}
	da, err := q.Lease(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		d          adapters.Delivery
		commit     bool
		want       string
		wantQueued string
	}{
		{"rolled back: the job stays", da, false, "ok", "queued=[] inflight=[a b]"},
		{"stale token", adapters.Delivery{Job: da.Job, Token: da.Token + 1, Receipt: da.Receipt}, true, "stale", "queued=[] inflight=[a b]"},
		{"committed: the job is gone", da, true, "ok", "queued=[] inflight=[b]"},
		{"again: lost", da, true, "lost", "queued=[] inflight=[b]"},
	}
	if _, err := q.Lease(ctx, time.Minute); err != nil { // b in flight too
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := queuetest.Outcome(q.AckTx(ctx, tx, tt.d)); got != tt.want {
				t.Errorf("AckTx = %s, want %s", got, tt.want)
			}
			if tt.commit {
				err = tx.Commit(ctx)
			} else {
				err = tx.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			inv, err := q.Inspect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprintf("queued=%v inflight=%v", inv.Queued, inv.InFlight); got != tt.wantQueued {
				t.Errorf("inventory %s, want %s", got, tt.wantQueued)
			}
		})
	}
}

// BenchmarkQueueLoop is enqueue → lease → ack through the adapter.
// BenchmarkRawPgxLoop runs the same statements on a raw pgx pool of the same
// size: the ratio of the two is the adapter's overhead.
func BenchmarkQueueLoop(b *testing.B) {
	q := newQueue(b, Options{})
	ctx := context.Background()
	j := job("bench")
	b.ResetTimer()
	for b.Loop() {
		if err := q.Enqueue(ctx, j); err != nil {
			b.Fatal(err)
		}
		d, err := q.Lease(ctx, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if err := q.Ack(ctx, d); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRawPgxLoop(b *testing.B) {
	q := newQueue(b, Options{})
	ctx := context.Background()
	pool := q.db.Pool // a plain *pgxpool.Pool, used without the adapter
	j := job("bench")
	b.ResetTimer()
	for b.Loop() {
		if _, err := pool.Exec(ctx, q.q.enqueue, j.ID, j.Tenant, j.DocumentID, j.Version, j.Payload, j.CreatedAt, nil, j.MaxAttempts, j.Group); err != nil {
			b.Fatal(err)
		}
		var dead bool
		var id, token int64
		var jb adapters.Job
		var deadline *time.Time
		var attempt int
		if err := pool.QueryRow(ctx, q.q.lease, time.Minute).Scan(&dead, &id, &jb.ID, &jb.Tenant, &jb.DocumentID, &jb.Version,
			&jb.Payload, &jb.CreatedAt, &deadline, &jb.MaxAttempts, &jb.Group, &token, &attempt); err != nil {
			b.Fatal(err)
		}
		tag, err := pool.Exec(ctx, q.q.ack, id, token)
		if err != nil || tag.RowsAffected() != 1 {
			b.Fatal(err, tag)
		}
	}
}

// A job the queue moves itself past its delivery limit is in Moved with the
// reason, its deliveries and the server's time; a job DeadLetter moved is not,
// even when the pipeline's reason reads the same.
func TestDeliveryLimitIsTheBrokersOwnAction(t *testing.T) {
	q := newQueue(t, Options{DeliveryLimit: 2, MaxConns: 2})
	ctx := context.Background()
	for _, id := range []string{"poison", "b"} {
		if err := q.Enqueue(ctx, job(id)); err != nil {
			t.Fatal(err)
		}
	}
	before := time.Now().Add(-time.Second)
	for attempt := 1; attempt <= 2; attempt++ {
		d, err := q.Lease(ctx, time.Minute)
		if err != nil || d.Job.ID != "poison" || d.Attempt != attempt {
			t.Fatalf("lease %d = %s attempt %d, %v", attempt, d.Job.ID, d.Attempt, err)
		}
		if err := q.Nack(ctx, d, 0); err != nil {
			t.Fatal(err)
		}
	}
	d, err := q.Lease(ctx, time.Minute) // poison is moved on the way
	if err != nil || d.Job.ID != "b" {
		t.Fatalf("lease past the limit = %s, %v; want b", d.Job.ID, err)
	}
	if err := q.DeadLetter(ctx, d, DeliveryLimitReason); err != nil {
		t.Fatal(err)
	}
	inv, err := q.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(inv.DeadLettered, []string{"poison", "b"}) {
		t.Errorf("dead-lettered = %v, want [poison b]", inv.DeadLettered)
	}
	if len(inv.Moved) != 1 {
		t.Fatalf("moved = %+v, want poison only", inv.Moved)
	}
	m := inv.Moved[0]
	if m.Job != "poison" || m.Action != adapters.ActionDeadLettered || m.Reason != "delivery_limit" || m.Deliveries != 2 {
		t.Errorf("moved = %+v, want poison dead_lettered delivery_limit after 2 deliveries", m)
	}
	if m.At.Before(before) || m.At.After(time.Now().Add(time.Second)) {
		t.Errorf("moved at %v, want between %v and now", m.At, before)
	}
}

// A lease, an extension or a nack's delay runs from the moment its row is
// written, not from the start of its statement: on a busy server a statement
// may start long before it writes (a gate run on a loaded machine had a 1 s
// lease handed to a second worker 15 ms after the first got it: the lease had
// been computed from a start a second earlier). Each write here runs in a
// transaction that starts, sleeps past the duration it writes, then writes and
// commits; right after, the job must still be held (or hidden).
func TestDurationsRunFromTheWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The duration written, and the sleep before the write: longer, so that a
	// duration measured from the statement's start is over at the commit. The
	// lease after the commit must come within the duration: stretched with the
	// machine's load.
	d := time.Duration(float64(time.Second) * queuetest.LoadFactor())
	sleep := d + d/2
	tests := []struct {
		name  string
		held  time.Duration // the job is leased this long first; 0: queued
		sql   func(q *Queue) string
		delay bool // the statement's last parameter is d (else its only one)
	}{
		{"lease", 0, func(q *Queue) string { return q.q.lease }, false},
		// A lease that outlasts the sleep: only where the new end runs from
		// decides.
		{"extend", 2 * sleep, func(q *Queue) string { return q.q.extend }, true},
		{"nack", time.Hour, func(q *Queue) string { return q.q.nack }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := newQueue(t, Options{MaxConns: 2})
			if err := q.Enqueue(ctx, job("a")); err != nil {
				t.Fatal(err)
			}
			args := []any{d}
			if tt.held > 0 {
				dl, err := q.Lease(ctx, tt.held)
				if err != nil {
					t.Fatal(err)
				}
				id, err := rowID(dl)
				if err != nil {
					t.Fatal(err)
				}
				args = []any{id, int64(dl.Token), d}
			}
			conn, err := pgx.Connect(ctx, testURL(t))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `SELECT pg_sleep($1)`, sleep.Seconds()); err != nil {
				t.Fatal(err)
			}
			tag, err := tx.Exec(ctx, tt.sql(q), args...)
			if err != nil || tag.RowsAffected() != 1 {
				t.Fatalf("%s: %v, %d rows", tt.name, err, tag.RowsAffected())
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if got, err := q.Lease(ctx, time.Minute); !errors.Is(err, adapters.ErrNoJob) {
				t.Errorf("lease right after the %s: %s token %d, %v; want none (the %v ran from the statement's start, %v before the write)",
					tt.name, got.Job.ID, got.Token, err, d, sleep)
			}
		})
	}
}
