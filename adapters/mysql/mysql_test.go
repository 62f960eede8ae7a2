package mysql

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

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/adapters/mem"
	"github.com/durachk/durachk/adapters/queuetest"
)

// testURL is the MySQL or MariaDB server the tests run against, e.g.
// mysql://root@127.0.0.1:3306/test.
func testURL(t testing.TB) string {
	return queuetest.URL(t, "DURACHK_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
}

// newQueue opens a queue in a fresh database durachk_t<random> and drops it
// when the test ends.
func newQueue(t testing.TB, opts Options) *Queue {
	t.Helper()
	url := testURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q, err := Open(ctx, url, queuetest.RunID(), opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		_ = q.Close()
		dropAfter(t, url, q.Database())
	})
	return q
}

// dropAfter drops database over a connection of its own, so that a test may
// close or drop its queue itself.
func dropAfter(t testing.TB, url, database string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := DropDatabase(ctx, url, database); err != nil {
		t.Errorf("drop %s: %v", database, err)
	}
}

var job = queuetest.Job

// TestConformance runs the port's conformance suite against the MySQL queue
// and, as the reference, against adapters/mem configured the same way. The
// queue keeps the reference semantics exactly: no deviation is declared.
func TestConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T, o queuetest.Options) adapters.Queue {
		return newQueue(t, Options{DeliveryLimit: o.DeliveryLimit, FIFO: o.FIFO, MaxConns: 2})
	}, queuetest.Features{})
}

// With server-side prepared statements (the Go driver's default protocol,
// interpolateParams=false) the queue keeps the same semantics on one server.
func TestConformancePrepared(t *testing.T) {
	conformanceAgain(t, "with prepared statements", func(o *Options) { o.PreparedStatements = true })
}

// conformanceAgain runs the conformance suite on queues that set also sets
// (not with -short: the suite once more).
func conformanceAgain(t *testing.T, what string, set func(*Options)) {
	if testing.Short() {
		t.Skip("the conformance suite again, " + what)
	}
	queuetest.Run(t, func(t *testing.T, o queuetest.Options) adapters.Queue {
		opts := Options{DeliveryLimit: o.DeliveryLimit, FIFO: o.FIFO, MaxConns: 2}
		set(&opts)
		return newQueue(t, opts)
	}, queuetest.Features{})
}

// TestProtocol: PreparedStatements reaches the driver: the queue's session
// prepares statements on the server with it (Com_stmt_prepare), none
// without.
func TestProtocol(t *testing.T) {
	for _, prepared := range []bool{false, true} {
		q := newQueue(t, Options{MaxConns: 1, PreparedStatements: prepared})
		ctx := context.Background()
		if err := q.Enqueue(ctx, job("a")); err != nil {
			t.Fatal(err)
		}
		var name string
		var n int
		// No arguments: sent as text either way, on the pool's one session.
		if err := q.db.pool.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Com_stmt_prepare'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		if (n > 0) != prepared {
			t.Errorf("prepared statements %v: the session prepared %d statements", prepared, n)
		}
		notes := strings.Join(q.Capabilities().Notes, "\n")
		if want := map[bool]string{false: "interpolateParams=true", true: "interpolateParams=false"}[prepared]; !strings.Contains(notes, want) {
			t.Errorf("notes %q do not say %s", notes, want)
		}
	}
}

// The volatile negative control keeps the same semantics on the MEMORY engine.
func TestConformanceVolatile(t *testing.T) {
	conformanceAgain(t, "on the MEMORY engine", func(o *Options) { o.Volatile = true })
}

// BreakOrder is the negative control of order.fifo, shared with adapters/mem:
// both must break the order the same way.
func TestBreakOrderScripts(t *testing.T) {
	for _, tt := range queuetest.BreakOrderScripts() {
		t.Run(tt.Name, func(t *testing.T) {
			t.Run("mem", func(t *testing.T) {
				queuetest.RunScript(t, mem.New(mem.Options{FIFO: tt.FIFO, BreakOrder: true}), queuetest.Features{}, tt.Steps)
			})
			t.Run("mysql", func(t *testing.T) {
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
		want.CreatedAt = want.CreatedAt.UTC().Truncate(time.Microsecond) // DATETIME(6) keeps microseconds
		got := d.Job
		if got.ID != want.ID || got.Tenant != want.Tenant || got.DocumentID != want.DocumentID || got.Version != want.Version ||
			!bytes.Equal(got.Payload, want.Payload) || !got.CreatedAt.Equal(want.CreatedAt) || got.CreatedAt.Location() != time.UTC ||
			!got.Deadline.Equal(want.Deadline) || got.MaxAttempts != want.MaxAttempts || got.Group != want.Group {
			t.Errorf("leased job\n got %+v\nwant %+v", got, want)
		}
		if d.Attempt != 1 || d.Token != 1 || d.Receipt == "" {
			t.Errorf("delivery attempt %d token %d receipt %q, want 1, 1 and a receipt", d.Attempt, d.Token, d.Receipt)
		}
	}
}

// Concurrent leases from several goroutines, and from several pools (the
// processes of a run), never hand out one job twice while it is leased.
func TestConcurrentLeasesAreExclusive(t *testing.T) {
	for _, tt := range []struct {
		name     string
		volatile bool
	}{{"innodb", false}, {"memory engine", true}} {
		t.Run(tt.name, func(t *testing.T) {
			q := newQueue(t, Options{MaxConns: 4, Volatile: tt.volatile})
			queuetest.ExclusiveLeases(t, q, func(t *testing.T) adapters.Queue {
				w, err := Open(context.Background(), testURL(t), strings.TrimPrefix(q.Database(), "durachk_"), Options{MaxConns: 1, Volatile: tt.volatile})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { w.Close() })
				return w
			}, 200, 6)
		})
	}
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
					n := 0
					for _, v := range order {
						n += len(v)
					}
					done := len(inFlight) == 0 && n == groups*perGroup
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

func TestCapabilities(t *testing.T) {
	tests := []struct {
		name     string
		opts     Options
		settings settings
		durable  bool
		fifo     bool
		note     string
	}{
		{name: "trx_commit 1", settings: settings{trxCommit: "1"}, durable: true, note: "innodb_flush_log_at_trx_commit=1"},
		{name: "trx_commit 2", settings: settings{trxCommit: "2"}, durable: false, note: "survives a crash of the server, not of the machine"},
		{name: "trx_commit 0", settings: settings{trxCommit: "0"}, durable: false, note: "a crash of the server itself may lose"},
		{name: "volatile", opts: Options{Volatile: true}, settings: settings{trxCommit: "1"}, durable: false, note: "MEMORY table"},
		{name: "FIFO with a delivery limit", opts: Options{FIFO: true, DeliveryLimit: 3}, settings: settings{trxCommit: "1"}, durable: true, fifo: true, note: "delivery limit 3"},
		{name: "BreakOrder claims FIFO", opts: Options{BreakOrder: true}, settings: settings{trxCommit: "1"}, durable: true, fifo: true, note: "negative control"},
		{name: "galera", settings: settings{trxCommit: "1", wsrepOn: "ON"}, durable: true, note: "certification"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := capabilities(tt.opts, tt.settings)
			if c.Broker != "mysql" || c.Lease != adapters.Native || c.LeaseExtension != adapters.Native || c.Token != adapters.Native ||
				!c.FencedAck || c.DeliveryCount != adapters.Native || c.DeadLetter != adapters.Native || c.DelayedNack != adapters.Native || c.BrokerKill {
				t.Errorf("capabilities %+v", c)
			}
			if c.Durable != tt.durable || c.FIFO != tt.fifo {
				t.Errorf("durable %v fifo %v, want %v and %v", c.Durable, c.FIFO, tt.durable, tt.fifo)
			}
			if !strings.Contains(strings.Join(c.Notes, "\n"), tt.note) {
				t.Errorf("notes %q lack %q", c.Notes, tt.note)
			}
		})
	}
	// And read from the server.
	q := newQueue(t, Options{MaxConns: 1})
	if !strings.Contains(strings.Join(q.Capabilities().Notes, "\n"), "innodb_flush_log_at_trx_commit=") {
		t.Errorf("notes %q do not say the server's setting", q.Capabilities().Notes)
	}
	if v := q.ServerVersion(); !strings.HasPrefix(v, "mariadb ") && !strings.HasPrefix(v, "mysql ") {
		t.Errorf("ServerVersion %q", v)
	}
}

func TestOpenRejectsBadOptions(t *testing.T) {
	tests := []struct {
		name  string
		url   string
		runID string
		opts  Options
	}{
		{"empty run id", "mysql://127.0.0.1:1/x", "", Options{}},
		{"upper case run id", "mysql://127.0.0.1:1/x", "Run1", Options{}},
		{"run id with a dash", "mysql://127.0.0.1:1/x", "run-1", Options{}},
		{"run id with a quote", "mysql://127.0.0.1:1/x", "r`; drop", Options{}},
		{"run id too long", "mysql://127.0.0.1:1/x", strings.Repeat("a", 41), Options{}},
		{"negative delivery limit", "mysql://127.0.0.1:1/x", "r1", Options{DeliveryLimit: -1}},
		{"another scheme", "postgres://127.0.0.1:1/x", "r1", Options{}},
		{"unknown parameter", "mysql://127.0.0.1:1/x?multiStatements=true", "r1", Options{}},
		{"bad timeout", "mysql://127.0.0.1:1/x?timeout=soon", "r1", Options{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Open(context.Background(), tt.url, tt.runID, tt.opts); err == nil {
				t.Error("Open accepted it")
			} else if errors.Is(err, adapters.ErrUnavailable) {
				t.Errorf("Open went to the server: %v", err)
			}
		})
	}
}

func TestUnreachableIsUnavailable(t *testing.T) {
	queuetest.Unreachable(t, func(addr, pw string) string { return "mysql://durachk:" + pw + "@" + addr + "/test" },
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
	if err := q.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	_ = q.Close()
	_ = q.Close()
	for name, err := range map[string]error{
		"enqueue": q.Enqueue(ctx, job("b")),
		"lease":   func() error { _, err := q.Lease(ctx, time.Minute); return err }(),
		"ack":     q.Ack(ctx, d),
		"dead":    q.DeadLetter(ctx, d, "x"),
		"drop":    q.Drop(ctx),
	} {
		if !errors.Is(err, adapters.ErrClosed) {
			t.Errorf("%s on a closed queue = %v, want ErrClosed", name, err)
		}
	}
}

// A job the queue moves itself past its delivery limit is in Moved with the
// reason, its deliveries and the server's time; a job DeadLetter moved is not.
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
	d, err := q.Lease(ctx, time.Minute)
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

// The error mapping: what the server refused is definite, what a broken
// connection left open during a write is ambiguous.
func TestErrorMapping(t *testing.T) {
	d := &db{secret: "s3cret"}
	tests := []struct {
		name  string
		err   error
		write bool
		want  string
	}{
		{"deadlock (certification failure)", mysqlErr(1213), true, "unavailable"},
		{"not in the primary component", mysqlErr(1047), true, "unavailable"},
		{"read-only", mysqlErr(1290), true, "unavailable"},
		{"duplicate key: a definite answer", mysqlErr(1062), true, "error"},
		{"shutdown during a write", mysqlErr(1053), true, "ambiguous"},
		{"broken connection during a write", errInvalidConn, true, "ambiguous"},
		{"broken connection during a read", errInvalidConn, false, "unavailable"},
		{"deadline during a write", context.DeadlineExceeded, true, "ambiguous"},
		{"rolled back without an error (Galera)", errRolledBack, true, "unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := d.err("op", fmt.Errorf("x s3cret: %w", tt.err), tt.write)
			got := queuetest.Outcome(err)
			if strings.HasPrefix(got, "error") {
				got = "error"
			}
			if got != tt.want {
				t.Errorf("%v = %s, want %s", err, got, tt.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("%v shows the password", err)
			}
			if want := tt.err == errRolledBack || ErrorNumber(tt.err) == 1213; RolledBack(err) != want {
				t.Errorf("RolledBack(%v) = %v, want %v", err, !want, want)
			}
		})
	}
}

func mysqlErr(n uint16) error { return &gomysql.MySQLError{Number: n, Message: "server says"} }

var errInvalidConn = gomysql.ErrInvalidConn

// Status reads variables and status values by name, leaves out names the
// server does not know and refuses a name that is not one.
func TestStatus(t *testing.T) {
	url := testURL(t)
	ctx := context.Background()
	st, err := Status(ctx, url, "innodb_flush_log_at_trx_commit", "Uptime", "no_such_variable")
	if err != nil {
		t.Fatal(err)
	}
	if st["innodb_flush_log_at_trx_commit"] == "" || st["Uptime"] == "" || len(st) != 2 {
		t.Errorf("status %v, want the setting and Uptime only", st)
	}
	if _, err := Status(ctx, url, "x') OR ('1"); err == nil {
		t.Error("Status took a name that is not one")
	}
	if rs, err := ReplicaStatus(ctx, url); err != nil || rs != nil {
		t.Errorf("replica status of a server that replicates from nobody: %v, %v", rs, err)
	}
}

// A node list's connections go to a node that takes writes: a node nobody
// listens on is passed over.
func TestNodeList(t *testing.T) {
	url := testURL(t)
	c, err := ParseURL(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	list := "mysql://" + c.cfg.User + ":" + c.cfg.Passwd + "@127.0.0.1:1/?addr=" + c.Addr()
	if c.cfg.Passwd == "" {
		list = "mysql://" + c.cfg.User + "@127.0.0.1:1/?addr=" + c.Addr()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q, err := Open(ctx, list, queuetest.RunID(), Options{MaxConns: 1})
	if err != nil {
		t.Fatalf("open through a node list whose first node is down: %v", err)
	}
	t.Cleanup(func() {
		_ = q.Close()
		dropAfter(t, url, q.Database())
	})
	if err := q.Enqueue(ctx, job("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, "mysql://root@127.0.0.1:1/?addr=127.0.0.1:2", "tnone", Options{}); !errors.Is(err, adapters.ErrUnavailable) {
		t.Errorf("a node list of which no node answers: %v, want unavailable", err)
	}
	for _, bad := range []string{"mysql://127.0.0.1:1/?addr=nohost", "mysql://127.0.0.1:1/?spread=maybe"} {
		if _, err := ParseURL(bad, nil); err == nil {
			t.Errorf("ParseURL(%s) accepted it", bad)
		}
	}
}
