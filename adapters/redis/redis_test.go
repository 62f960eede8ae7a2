package redis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/adapters/queuetest"
)

// testURL is the Redis the tests run against, e.g. redis://127.0.0.1:6379/0.
// The tests only ever touch keys under durachk:t<random>: and delete them.
func testURL(t testing.TB) string {
	return queuetest.URL(t, "DURACHK_REDIS_URL", "redis://127.0.0.1:6379/0")
}

var randomRunID = queuetest.RunID

// newQueue opens a queue under a fresh prefix and checks, when the test ends,
// that Drop leaves no key with that prefix behind.
func newQueue(t testing.TB, opts Options) *Queue {
	t.Helper()
	q, err := Open(context.Background(), testURL(t), randomRunID(), opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if !q.closed.Load() {
			if err := q.Drop(ctx); err != nil {
				t.Errorf("drop: %v", err)
			}
			_ = q.Close()
		}
		if left := keysWithPrefix(t, q.stream[:strings.LastIndex(q.stream, ":")+1]); len(left) > 0 {
			t.Errorf("keys left behind: %v", left)
		}
	})
	return q
}

// keysWithPrefix scans (never KEYS) for keys under prefix, on a client of its own.
func keysWithPrefix(t testing.TB, prefix string) []string {
	o, err := goredis.ParseURL(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(o)
	defer c.Close()
	var out []string
	it := c.Scan(context.Background(), 0, prefix+"*", 100).Iterator()
	for it.Next(context.Background()) {
		out = append(out, it.Val())
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// job is the job of a script's enqueue: "id" or "id@group".
var job = queuetest.Job

// features are Redis's documented deviations from the reference semantics.
// A delayed Nack re-adds the job as a new stream entry (XADD, with the earlier
// deliveries carried forward: see the capabilities' notes), so the nacked
// delivery's entry is gone: a later call with it is lost, not stale. A pending
// entry expires when a claimer's XAUTOCLAIM min-idle time (its own lease) has
// passed, which the conformance scripts allow for by re-leasing with the lease
// they leased with.
var features = queuetest.Features{NackIsNewMessage: true}

// TestConformance runs the port's conformance suite against the Redis queue and,
// as the reference, against adapters/mem. Redis has neither FIFO nor a native
// delivery limit: those scripts skip with the reason.
func TestConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T, o queuetest.Options) adapters.Queue {
		return newQueue(t, Options{})
	}, features)
}

// Redis-only scripts: the knobs that change guarantees.
func TestKnobScripts(t *testing.T) {
	const long = time.Minute
	tests := []struct {
		name  string
		opts  Options
		steps []queuetest.Step
	}{
		{name: "claim-min-idle shorter than the lease preempts a live worker", opts: Options{ClaimMinIdle: 100 * time.Millisecond}, steps: []queuetest.Step{
			{Op: "enqueue", Arg: "a", Want: "ok"},
			{Op: "lease", Dur: long, Want: "a a1 t1"},
			{Op: "sleep", Dur: 200 * time.Millisecond},
			{Op: "lease", Dur: long, Want: "a a2 t2", Wait: true},
			{Op: "ack", D: 0, Want: "stale"},
		}},
		{name: "exact MAXLEN trims unacknowledged jobs", opts: Options{MaxLen: 2}, steps: []queuetest.Step{
			{Op: "enqueue", Arg: "a", Want: "ok"},
			{Op: "enqueue", Arg: "b", Want: "ok"},
			{Op: "lease", Dur: long, Want: "a a1 t1"},
			{Op: "enqueue", Arg: "c", Want: "ok"},
			{Op: "enqueue", Arg: "d", Want: "ok"},
			// a and b are gone, trimmed by the server: a job can be lost.
			{Op: "inspect", Want: "queued=[c d] inflight=[] dead=[] moved=[a:trimmed b:trimmed] ok"},
			// a's holder may still ack it (it is pending): a is done, b is lost.
			{Op: "ack", D: 0, Want: "ok"},
			{Op: "inspect", Want: "queued=[c d] inflight=[] dead=[] moved=[b:trimmed] ok"},
			{Op: "lease", Dur: long, Want: "c a1 t1"},
		}},
		// The entry an XADD adds is trimmed by its own MINID: acknowledged, gone.
		{name: "MINID in the future trims even the new entry", opts: Options{MinID: strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)}, steps: []queuetest.Step{
			{Op: "enqueue", Arg: "a", Want: "ok"},
			{Op: "inspect", Want: "queued=[] inflight=[] dead=[] moved=[a:trimmed] ok"},
			{Op: "lease", Dur: long, Want: "none"},
		}},
		{name: "MINID retention keeps young entries", opts: Options{MinIDAge: time.Hour}, steps: []queuetest.Step{
			{Op: "enqueue", Arg: "a", Want: "ok"},
			{Op: "enqueue", Arg: "b", Want: "ok"},
			{Op: "inspect", Want: "queued=[a b] inflight=[] dead=[] ok"},
		}},
		{name: "approximate MAXLEN keeps whole nodes", opts: Options{MaxLen: 1, Approximate: true}, steps: []queuetest.Step{
			{Op: "enqueue", Arg: "a", Want: "ok"},
			{Op: "enqueue", Arg: "b", Want: "ok"},
			{Op: "inspect", Want: "queued=[a b] inflight=[] dead=[] ok"},
		}},
		{name: "block waits for a new entry", opts: Options{Block: 50 * time.Millisecond}, steps: []queuetest.Step{
			{Op: "lease", Dur: long, Want: "none"},
			{Op: "enqueue", Arg: "a", Want: "ok"},
			{Op: "lease", Dur: long, Want: "a a1 t1"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { queuetest.RunScript(t, newQueue(t, tt.opts), features, tt.steps) })
	}
}

// The lease extension is XCLAIM ... JUSTID: the delivery counter (the token)
// must not move, and the delivery stays current.
func TestExtendKeepsTheDeliveryCounter(t *testing.T) {
	q := newQueue(t, Options{})
	ctx := context.Background()
	if err := q.Enqueue(ctx, job("a")); err != nil {
		t.Fatal(err)
	}
	d, err := q.Lease(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := q.Extend(ctx, d, time.Minute); err != nil {
			t.Fatalf("extend: %v", err)
		}
	}
	p, err := q.rdb.XPendingExt(ctx, &goredis.XPendingExtArgs{Stream: q.stream, Group: Group, Start: "-", End: "+", Count: 10}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 1 || p[0].RetryCount != 1 || p[0].Consumer != q.Consumer() {
		t.Fatalf("pending after three extensions: %+v, want one entry delivered once to %s", p, q.Consumer())
	}
	if err := q.Ack(ctx, d); err != nil {
		t.Errorf("ack after extensions: %v", err)
	}
}

// A delivery leased by one Queue (one process) can be acked by another: the
// receipt names the consumer. A forged receipt for another consumer is stale.
func TestReceiptNamesTheConsumer(t *testing.T) {
	q := newQueue(t, Options{})
	ctx := context.Background()
	other, err := Open(ctx, testURL(t), strings.TrimSuffix(strings.TrimPrefix(q.stream, "durachk:"), ":stream"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for _, id := range []string{"a", "b"} {
		if err := q.Enqueue(ctx, job(id)); err != nil {
			t.Fatal(err)
		}
	}
	da, err := q.Lease(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	db, err := other.Lease(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	forged := db
	forged.Receipt = strings.Replace(db.Receipt, other.Consumer(), q.Consumer(), 1)
	tests := []struct {
		name string
		q    *Queue
		d    adapters.Delivery
		want string
	}{
		{"forged owner", q, forged, "stale"},
		{"bad receipt", q, adapters.Delivery{Receipt: "nope"}, "error: redis: bad receipt \"nope\""},
		{"acked by the other process", other, da, "ok"},
		{"own delivery", other, db, "ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.q.Ack(ctx, tt.d)
			got := queuetest.Outcome(err)
			var oe *adapters.OpError
			if err != nil && errors.As(err, &oe) && strings.HasPrefix(got, "error: ") {
				got = "error: " + oe.Err.Error()
			}
			if got != tt.want {
				t.Errorf("ack = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestJobRoundTrip(t *testing.T) {
	q := newQueue(t, Options{})
	ctx := context.Background()
	in := adapters.Job{ID: "j1", Tenant: "acme", DocumentID: "d1", Version: 3, Payload: []byte{0, 1, 2, 0xff, 'x', '"', '\\'},
		CreatedAt: time.Date(2026, 2, 3, 4, 5, 6, 7008, time.UTC), Deadline: time.Date(2026, 2, 3, 5, 0, 0, 0, time.UTC),
		MaxAttempts: 4, Group: "g"}
	noDeadline := in
	noDeadline.ID, noDeadline.Deadline, noDeadline.Payload, noDeadline.Group = "j2", time.Time{}, nil, ""
	for _, want := range []adapters.Job{in, noDeadline} {
		if err := q.Enqueue(ctx, want); err != nil {
			t.Fatal(err)
		}
		d, err := q.Lease(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		got := d.Job
		if got.ID != want.ID || got.Tenant != want.Tenant || got.DocumentID != want.DocumentID || got.Version != want.Version ||
			!bytes.Equal(got.Payload, want.Payload) || !got.CreatedAt.Equal(want.CreatedAt) || !got.Deadline.Equal(want.Deadline) ||
			got.MaxAttempts != want.MaxAttempts || got.Group != want.Group {
			t.Errorf("leased job\n got %+v\nwant %+v", got, want)
		}
		if d.Attempt != 1 || d.Token != 1 || d.Receipt == "" {
			t.Errorf("delivery attempt %d token %d receipt %q, want 1, 1 and a receipt", d.Attempt, d.Token, d.Receipt)
		}
		// The job survives a delayed Nack unchanged.
		if err := q.Nack(ctx, d, 0); err != nil {
			t.Fatal(err)
		}
		d2, err := q.Lease(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(d2.Job.Payload, want.Payload) || d2.Job.ID != want.ID || d2.Token != 2 {
			t.Errorf("after nack: %+v token %d, want the same job with token 2", d2.Job, d2.Token)
		}
		if err := q.Ack(ctx, d2); err != nil {
			t.Fatal(err)
		}
	}
}

// Concurrent leases from several Queues (processes) never hand out one job
// twice while it is leased.
func TestConcurrentLeasesAreExclusive(t *testing.T) {
	q := newQueue(t, Options{})
	runID := strings.TrimSuffix(strings.TrimPrefix(q.stream, "durachk:"), ":stream")
	queuetest.ExclusiveLeases(t, q, func(t *testing.T) adapters.Queue {
		w, err := Open(context.Background(), testURL(t), runID, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		return w
	}, 200, 6)
}

// After the server lost the stream and its group (a restart without
// persistence), the queue re-creates the group and serves the new entries.
func TestGroupLostIsRecreated(t *testing.T) {
	q := newQueue(t, Options{})
	ctx := context.Background()
	if err := q.Drop(ctx); err != nil { // what a volatile restart leaves: nothing
		t.Fatal(err)
	}
	if err := q.Enqueue(ctx, job("a")); err != nil { // XADD re-creates the stream, not the group
		t.Fatal(err)
	}
	inv, err := q.Inspect(ctx)
	if err != nil || fmt.Sprint(inv.Queued) != "[a]" {
		t.Fatalf("inspect = %+v, %v; want a queued", inv, err)
	}
	d, err := q.Lease(ctx, time.Minute)
	if err != nil || d.Job.ID != "a" {
		t.Fatalf("lease = %+v, %v; want a", d, err)
	}
}

// Drop deletes the run's keys and nothing else.
func TestDropTouchesOnlyTheRun(t *testing.T) {
	q := newQueue(t, Options{})
	ctx := context.Background()
	neighbour := Prefix(randomRunID()) + "stream"
	if err := q.rdb.Set(ctx, neighbour, "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	defer q.rdb.Del(context.Background(), neighbour)
	if err := q.Enqueue(ctx, job("a")); err != nil {
		t.Fatal(err)
	}
	d, err := q.Lease(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Enqueue(ctx, job("b")); err != nil {
		t.Fatal(err)
	}
	if err := q.Nack(ctx, d, time.Hour); err != nil { // fills the delayed set
		t.Fatal(err)
	}
	if err := q.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if left := keysWithPrefix(t, Prefix(strings.TrimSuffix(strings.TrimPrefix(q.stream, "durachk:"), ":stream"))); len(left) > 0 {
		t.Errorf("keys of the run left: %v", left)
	}
	if n, err := q.rdb.Exists(ctx, neighbour).Result(); err != nil || n != 1 {
		t.Errorf("neighbour key gone (exists=%d, %v)", n, err)
	}
}

func TestCapabilities(t *testing.T) {
	tests := []struct {
		name        string
		opts        Options
		settings    map[string]string
		cfgErr      error
		wantDurable bool
		wantNote    string
	}{
		{"no persistence", Options{}, map[string]string{"appendonly": "no", "appendfsync": "everysec", "save": ""}, nil, false, "appendonly no"},
		{"RDB snapshots only", Options{}, map[string]string{"appendonly": "no", "save": "3600 1"}, nil, false, "lost when the server is killed"},
		{"AOF everysec", Options{}, map[string]string{"appendonly": "yes", "appendfsync": "everysec"}, nil, true, "cannot tell appendfsync always from everysec"},
		{"AOF always", Options{}, map[string]string{"appendonly": "yes", "appendfsync": "always"}, nil, true, "durability.power-loss can"},
		{"CONFIG refused", Options{}, map[string]string{}, errors.New("ERR unknown command 'CONFIG'"), false, "could not be read"},
		{"MAXLEN trimming", Options{MaxLen: 10, Approximate: true}, map[string]string{"appendonly": "yes"}, nil, true, "MAXLEN ~ 10"},
		{"MINID retention", Options{MinIDAge: time.Hour}, map[string]string{"appendonly": "yes"}, nil, true, "MINID now-1h0m0s"},
		{"claim-min-idle", Options{ClaimMinIdle: time.Second}, map[string]string{"appendonly": "no"}, nil, false, "min-idle 1s (claim-min-idle)"},
		{"extra notes", Options{Notes: []string{"private instance: appendonly=yes"}}, map[string]string{"appendonly": "no"}, nil, false, "private instance"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := capabilities(tt.opts, "durachk:x:dead", tt.settings, tt.cfgErr)
			if c.Broker != "redis" || c.Lease != adapters.Emulated || c.LeaseExtension != adapters.Emulated || c.Token != adapters.Emulated ||
				!c.FencedAck || c.DeliveryCount != adapters.Emulated || c.DeadLetter != adapters.Emulated || c.DelayedNack != adapters.Emulated ||
				c.FIFO || c.BrokerKill {
				t.Errorf("capabilities %+v", c)
			}
			if c.Durable != tt.wantDurable {
				t.Errorf("durable %v, want %v", c.Durable, tt.wantDurable)
			}
			notes := strings.Join(c.Notes, "\n")
			for _, want := range []string{tt.wantNote, "JUSTID", "XACK checks no owner"} {
				if !strings.Contains(notes, want) {
					t.Errorf("notes %q lack %q", notes, want)
				}
			}
		})
	}
}

// The live server's capabilities come from its own CONFIG.
func TestCapabilitiesReadFromServer(t *testing.T) {
	q := newQueue(t, Options{})
	cfg, err := q.rdb.ConfigGet(context.Background(), "appendonly").Result()
	if err != nil {
		t.Skipf("CONFIG GET refused: %v", err)
	}
	if got, want := q.Capabilities().Durable, cfg["appendonly"] == "yes"; got != want {
		t.Errorf("durable %v on a server with appendonly=%s", got, cfg["appendonly"])
	}
	if v := q.ServerVersion(); !strings.HasPrefix(v, "redis 7") && !strings.HasPrefix(v, "redis 8") {
		t.Errorf("server version %q", v)
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
		{"run id with a colon", "run:1", Options{}},
		{"run id with a glob", "r*", Options{}},
		{"run id too long", strings.Repeat("a", 41), Options{}},
		{"negative maxlen", "r1", Options{MaxLen: -1}},
		{"maxlen and minid", "r1", Options{MaxLen: 5, MinID: "0"}},
		{"negative claim-min-idle", "r1", Options{ClaimMinIdle: -time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Open(context.Background(), "redis://127.0.0.1:1/0", tt.runID, tt.opts); err == nil {
				t.Error("Open accepted it")
			}
		})
	}
}

func TestUnreachableIsUnavailable(t *testing.T) {
	queuetest.Unreachable(t, func(addr, pw string) string { return "redis://durachk:" + pw + "@" + addr + "/0" },
		func(ctx context.Context, url string) error {
			_, err := Open(ctx, url, "tunreachable", Options{})
			return err
		})
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, "ok"},
		{"deadline", context.DeadlineExceeded, "ambiguous"},
		{"connection lost mid-request", io.ErrUnexpectedEOF, "ambiguous"},
		{"refused dial", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, "unavailable"},
		{"reset after write", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, "ambiguous"},
		{"pool timeout", goredis.ErrPoolTimeout, "unavailable"},
		{"closed client", goredis.ErrClosed, "closed"},
		{"loading", replyErr("LOADING Redis is loading the dataset in memory"), "unavailable"},
		{"read only replica", replyErr("READONLY You can't write against a read only replica."), "unavailable"},
		{"other reply", replyErr("ERR syntax error"), "error: ERR syntax error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := queuetest.Outcome(classify(tt.err)); got != tt.want {
				t.Errorf("classify(%v) = %s, want %s", tt.err, got, tt.want)
			}
		})
	}
}

func TestClosed(t *testing.T) {
	q := newQueue(t, Options{})
	ctx := context.Background()
	if err := q.Enqueue(ctx, job("a")); err != nil {
		t.Fatal(err)
	}
	d, err := q.Lease(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	_ = q.Close()
	_ = q.Close()
	for name, err := range map[string]error{
		"enqueue": q.Enqueue(ctx, job("b")),
		"lease":   func() error { _, err := q.Lease(ctx, time.Minute); return err }(),
		"ack":     q.Ack(ctx, d),
		"extend":  q.Extend(ctx, d, time.Minute),
		"inspect": func() error { _, err := q.Inspect(ctx); return err }(),
		"drop":    q.Drop(ctx),
	} {
		if !errors.Is(err, adapters.ErrClosed) {
			t.Errorf("%s on a closed queue = %v, want ErrClosed", name, err)
		}
	}
}

// replyErr is an error reply of the server, as go-redis reports it.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// Trimming is the server's own action: the trimmed jobs are named in Moved
// with the configured trimming as the reason and the deliveries the pending
// list still counts; a job the pipeline dead-lettered is not in Moved, nor is a
// trimmed job its holder acked. An entry deleted by someone else without
// trimming configured is reported dropped.
func TestTrimmedJobsAreTheServersOwnAction(t *testing.T) {
	ctx := context.Background()
	enqueue := func(q *Queue, ids ...string) {
		t.Helper()
		for _, id := range ids {
			if err := q.Enqueue(ctx, job(id)); err != nil {
				t.Fatal(err)
			}
		}
	}
	lease := func(q *Queue, d time.Duration, want string) adapters.Delivery {
		t.Helper()
		l, err := q.Lease(ctx, d)
		if err != nil || l.Job.ID != want {
			t.Fatalf("lease = %s, %v; want %s", l.Job.ID, err, want)
		}
		return l
	}
	moved := func(q *Queue) string {
		t.Helper()
		inv, err := q.Inspect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%+v dead=%v", inv.Moved, inv.DeadLettered)
	}

	q := newQueue(t, Options{MaxLen: 2})
	enqueue(q, "a")
	lease(q, 100*time.Millisecond, "a") // its holder dies with it
	enqueue(q, "b")
	if err := q.DeadLetter(ctx, lease(q, time.Minute, "b"), "permanent_error"); err != nil {
		t.Fatal(err)
	}
	enqueue(q, "c")
	dc := lease(q, time.Minute, "c")
	enqueue(q, "d", "e") // trims a (pending, delivered once) and c (pending)
	if err := q.Ack(ctx, dc); err != nil {
		t.Fatalf("ack of a trimmed pending entry: %v", err)
	}
	want := "[{Job:a Action:trimmed Reason:MAXLEN 2 Deliveries:1 Count:0 At:0001-01-01 00:00:00 +0000 UTC}] dead=[b]"
	if got := moved(q); got != want {
		t.Errorf("inspect:\n got %s\nwant %s", got, want)
	}
	// A claimer's XAUTOCLAIM drops the deleted entry from the pending list: the
	// job is still named, its deliveries are no longer known.
	time.Sleep(150 * time.Millisecond)
	lease(q, 100*time.Millisecond, "d")
	want = "[{Job:a Action:trimmed Reason:MAXLEN 2 Deliveries:0 Count:0 At:0001-01-01 00:00:00 +0000 UTC}] dead=[b]"
	if got := moved(q); got != want {
		t.Errorf("inspect after the claim:\n got %s\nwant %s", got, want)
	}

	q = newQueue(t, Options{})
	enqueue(q, "x")
	if err := q.rdb.XTrimMaxLen(ctx, q.stream, 0).Err(); err != nil {
		t.Fatal(err)
	}
	want = "[{Job:x Action:dropped Reason:deleted from the stream, not by the adapter Deliveries:0 Count:0 At:0001-01-01 00:00:00 +0000 UTC}] dead=[]"
	if got := moved(q); got != want {
		t.Errorf("inspect after an XTRIM by someone else:\n got %s\nwant %s", got, want)
	}
}

// DialThrough dials a server's address through another: a URL naming an
// address nothing listens on reaches the server it is mapped to, and without
// the map it does not.
func TestDialThrough(t *testing.T) {
	o, err := goredis.ParseURL(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nowhere := l.Addr().String() // closed at once: nothing listens there
	l.Close()
	url := strings.Replace(testURL(t), o.Addr, nowhere, 1)
	ctx := context.Background()
	if q, err := Open(ctx, url, randomRunID(), Options{}); err == nil {
		q.Close()
		t.Fatalf("open %s without a map: no error", nowhere)
	}
	q, err := Open(ctx, url, randomRunID(), Options{DialThrough: map[string]string{nowhere: o.Addr}})
	if err != nil {
		t.Fatalf("open %s through %s: %v", nowhere, o.Addr, err)
	}
	defer q.Close()
	defer func() { _ = q.Drop(ctx) }()
	if err := q.Enqueue(ctx, job("a")); err != nil {
		t.Fatalf("enqueue through the map: %v", err)
	}
}
