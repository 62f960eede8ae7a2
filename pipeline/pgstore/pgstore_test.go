package pgstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/durachk/durachk/adapters/queuetest"
	"net"
	"net/url"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/adapters/pg"
	"github.com/durachk/durachk/pipeline"
)

// testURL is the Postgres the tests run against, e.g.
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable.
func testURL(t testing.TB) string {
	return queuetest.URL(t, "DURACHK_PG_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newStoreAt opens a store in a fresh schema durachk_t<random> on url and drops it
// when the test ends.
func newStoreAt(t *testing.T, url string, opts Options) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := Open(ctx, url, "durachk_t"+randomSuffix(), opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		dropSchema(t, s.Schema())
	})
	return s
}

// dropSchema drops schema over a connection of its own (the store's may go
// through a proxy the test has cut).
func dropSchema(t testing.TB, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Errorf("drop %s: %v", schema, err)
		return
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Errorf("drop %s: %v", schema, err)
	}
}

func schemaExists(t *testing.T, schema string) bool {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var ok bool
	if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM information_schema.schemata WHERE schema_name = $1)", schema).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestOpenTwiceAndDrop(t *testing.T) {
	url := testURL(t)
	s := newStore(t, Options{})
	ctx := context.Background()
	// A second process opening the same run's schema shares it.
	s2, err := Open(ctx, url, s.Schema(), Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := s.CommitResultWithEvent(ctx, req("j1", "acme:d1:v1", "p", 1)); err != nil {
		t.Fatal(err)
	}
	if deduped, err := s2.CommitResultWithEvent(ctx, req("j1", "acme:d1:v1", "p", 1)); err != nil || !deduped {
		t.Fatalf("commit through the second store = (%v, %v), want deduped", deduped, err)
	}
	if err := s.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if schemaExists(t, s.Schema()) {
		t.Errorf("schema %s still exists after Drop", s.Schema())
	}
}

// DropSchema removes a store's schema without opening the store, and a
// schema never made is no error and is not made by it (a probe's teardown
// used to provision every table only to drop them).
func TestDropSchemaWithoutCreating(t *testing.T) {
	url := testURL(t)
	ctx := context.Background()
	missing := "durachk_t" + randomSuffix()
	if err := DropSchema(ctx, url, missing); err != nil {
		t.Fatalf("drop of a schema never made: %v", err)
	}
	if schemaExists(t, missing) {
		dropSchema(t, missing)
		t.Fatalf("DropSchema made %s", missing)
	}
	s := newStore(t, Options{})
	if err := DropSchema(ctx, url, s.Schema()); err != nil {
		t.Fatal(err)
	}
	if schemaExists(t, s.Schema()) {
		t.Errorf("schema %s still exists after DropSchema", s.Schema())
	}
	if err := DropSchema(ctx, url, "public"); err == nil {
		t.Error("DropSchema dropped a schema that is not durachk's")
	}
}

func newStore(t *testing.T, opts Options) *Store {
	return newStoreAt(t, testURL(t), opts)
}

func req(job, key, payload string, token uint64) pipeline.CommitRequest {
	return pipeline.CommitRequest{JobID: job, Tenant: "acme", Key: key, Token: token,
		PayloadHash: pipeline.Hash([]byte(payload)), Result: "r:" + payload, EventID: "ev:" + key}
}

func snapshot(t *testing.T, s pipeline.Store) pipeline.State {
	t.Helper()
	st, err := s.Snapshot(context.Background())
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return st
}

// outcome names an error the way the tests compare them.
func outcome(err error) string {
	var ce *pipeline.IdempotencyConflictError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, adapters.ErrStaleToken):
		return "stale"
	case errors.As(err, &ce):
		return "conflict"
	case errors.Is(err, adapters.ErrAmbiguous):
		return "ambiguous"
	case errors.Is(err, adapters.ErrUnavailable):
		return "unavailable"
	case err == pipeline.ErrOperatorRequired:
		return "operator_required"
	case err == pipeline.ErrNotDeadLettered:
		return "not_dead_lettered"
	case err == pipeline.ErrCancelledJob:
		return "cancelled"
	}
	return "error: " + err.Error()
}

func TestFence(t *testing.T) {
	type call struct {
		token uint64
		want  string
	}
	tests := []struct {
		name  string
		opts  Options
		calls []call
	}{
		{"raises and rejects older", Options{}, []call{{5, "ok"}, {5, "ok"}, {3, "stale"}, {7, "ok"}, {6, "stale"}, {7, "ok"}}},
		{"full uint64 range", Options{}, []call{{1<<64 - 2, "ok"}, {1<<63 + 1, "stale"}, {1<<64 - 1, "ok"}}},
		{"NoFence accepts older", Options{NoFence: true}, []call{{5, "ok"}, {3, "ok"}, {4, "ok"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, tt.opts)
			for i, c := range tt.calls {
				if got := outcome(s.Fence(context.Background(), "job-1", c.token)); got != c.want {
					t.Errorf("call %d: Fence(%d) = %s, want %s", i, c.token, got, c.want)
				}
			}
		})
	}
}

func TestCommit(t *testing.T) {
	type call struct {
		fence       uint64 // if set, Fence(job, fence) first
		req         pipeline.CommitRequest
		want        string
		wantDeduped bool
	}
	tests := []struct {
		name        string
		opts        Options
		calls       []call
		wantResults int
		wantEvents  int
	}{
		{name: "new result and event", calls: []call{{req: req("j1", "acme:d1:v1", "p", 1), want: "ok"}}, wantResults: 1, wantEvents: 1},
		{name: "same key same hash dedupes", calls: []call{
			{req: req("j1", "acme:d1:v1", "p", 1), want: "ok"},
			{req: req("j1", "acme:d1:v1", "p", 2), want: "ok", wantDeduped: true},
			{req: req("j2", "acme:d1:v1", "p", 1), want: "ok", wantDeduped: true},
		}, wantResults: 1, wantEvents: 1},
		{name: "same key other hash conflicts", calls: []call{
			{req: req("j1", "acme:d1:v1", "p", 1), want: "ok"},
			{req: req("j2", "acme:d1:v1", "q", 1), want: "conflict"},
		}, wantResults: 1, wantEvents: 1},
		{name: "KeyOnlyDedupe reuses silently", opts: Options{KeyOnlyDedupe: true}, calls: []call{
			{req: req("j1", "acme:d1:v1", "p", 1), want: "ok"},
			{req: req("j2", "acme:d1:v1", "q", 1), want: "ok", wantDeduped: true},
		}, wantResults: 1, wantEvents: 1},
		{name: "older token than the fence is stale", calls: []call{
			{fence: 5, req: req("j1", "acme:d1:v1", "p", 4), want: "stale"},
		}},
		{name: "stale wins over dedupe", calls: []call{
			{req: req("j1", "acme:d1:v1", "p", 3), want: "ok"},
			{req: req("j1", "acme:d1:v1", "p", 2), want: "stale"},
		}, wantResults: 1, wantEvents: 1},
		{name: "NoFence commits a stale token", opts: Options{NoFence: true}, calls: []call{
			{fence: 5, req: req("j1", "acme:d1:v1", "p", 4), want: "ok"},
		}, wantResults: 1, wantEvents: 1},
		{name: "equal token commits", calls: []call{
			{fence: 5, req: req("j1", "acme:d1:v1", "p", 5), want: "ok"},
		}, wantResults: 1, wantEvents: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, tt.opts)
			ctx := context.Background()
			for i, c := range tt.calls {
				if c.fence > 0 {
					if err := s.Fence(ctx, c.req.JobID, c.fence); err != nil {
						t.Fatalf("fence: %v", err)
					}
				}
				deduped, err := s.CommitResultWithEvent(ctx, c.req)
				if got := outcome(err); got != c.want || deduped != c.wantDeduped {
					t.Errorf("call %d: commit = (deduped %v, %s), want (deduped %v, %s)", i, deduped, got, c.wantDeduped, c.want)
				}
			}
			st := snapshot(t, s)
			if len(st.Results) != tt.wantResults || len(st.Events) != tt.wantEvents {
				t.Errorf("store holds %d results and %d events, want %d and %d", len(st.Results), len(st.Events), tt.wantResults, tt.wantEvents)
			}
		})
	}
}

func TestCommitRaisesFence(t *testing.T) {
	s := newStore(t, Options{})
	ctx := context.Background()
	if _, err := s.CommitResultWithEvent(ctx, req("j1", "acme:d1:v1", "p", 7)); err != nil {
		t.Fatal(err)
	}
	if err := s.Fence(ctx, "j1", 6); !errors.Is(err, adapters.ErrStaleToken) {
		t.Fatalf("Fence(6) after a commit with token 7 = %v, want ErrStaleToken", err)
	}
}

func TestConflictErrorFields(t *testing.T) {
	s := newStore(t, Options{})
	ctx := context.Background()
	if _, err := s.CommitResultWithEvent(ctx, req("j1", "acme:d1:v1", "p", 1)); err != nil {
		t.Fatal(err)
	}
	_, err := s.CommitResultWithEvent(ctx, req("j2", "acme:d1:v1", "q", 1))
	var ce *pipeline.IdempotencyConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want *IdempotencyConflictError", err)
	}
	want := pipeline.IdempotencyConflictError{Key: "acme:d1:v1", ExistingHash: pipeline.Hash([]byte("p")), NewHash: pipeline.Hash([]byte("q"))}
	if *ce != want {
		t.Errorf("conflict = %+v, want %+v", *ce, want)
	}
}

// A crash between the writes and COMMIT leaves neither row (outbox.atomic), and
// the fence raise of the crashed commit is undone with them.
func TestCrashMidCommitLeavesNothing(t *testing.T) {
	tests := []struct {
		name  string
		crash func(cancel context.CancelFunc)
	}{
		{"context cancelled in BeforeCommit", func(cancel context.CancelFunc) { cancel() }},
		{"goroutine exits in BeforeCommit", func(context.CancelFunc) { runtime.Goexit() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, Options{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r := req("j1", "acme:d1:v1", "p", 5)
			var before atomic.Bool
			r.BeforeCommit = func(ctx context.Context) {
				before.Store(true)
				// The writes are in the transaction: another session cannot see them.
				if st := snapshot(t, s); len(st.Results)+len(st.Events) != 0 {
					t.Errorf("uncommitted writes visible: %+v", st)
				}
				tt.crash(cancel)
			}
			var err error
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, err = s.CommitResultWithEvent(ctx, r)
			}()
			<-done
			if !before.Load() {
				t.Fatal("BeforeCommit was not called")
			}
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("commit err = %v, want context.Canceled", err)
			}
			st := snapshot(t, s)
			if len(st.Results) != 0 || len(st.Events) != 0 {
				t.Fatalf("a crashed commit left %d results and %d events", len(st.Results), len(st.Events))
			}
			if err := s.Fence(context.Background(), "j1", 4); err != nil {
				t.Errorf("the crashed commit's fence raise survived: Fence(4) = %v", err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for s.db.Pool.Stat().AcquiredConns() != 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if n := s.db.Pool.Stat().AcquiredConns(); n != 0 {
				t.Errorf("%d connections still acquired after the crash", n)
			}
			// The redelivery commits normally.
			r.BeforeCommit = nil
			if deduped, err := s.CommitResultWithEvent(context.Background(), r); err != nil || deduped {
				t.Fatalf("commit after crash = (%v, %v), want a new result", deduped, err)
			}
		})
	}
}

// proxy is a TCP proxy to the test server that can cut the connection carrying a
// COMMIT: after forwarding it (the server commits, the reply is lost) or before.
type proxy struct {
	ln     net.Listener
	target string
	mode   atomic.Int32 // 0 pass, cutAfter, cutBefore
	mu     sync.Mutex
	conns  []net.Conn
}

const (
	cutAfter  = 1
	cutBefore = 2
)

// newProxy returns the proxy and testURL rewritten to go through it.
func newProxy(t *testing.T) (*proxy, string) {
	u, err := url.Parse(testURL(t))
	if err != nil || u.Host == "" {
		t.Skip("DURACHK_PG_URL is not a postgres:// URL with a host; the proxy test needs one")
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(p.Close)
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		// cut: this pair's COMMIT was cut; nothing the server sends after it
		// reaches the client.
		cut := new(atomic.Bool)
		go p.pipe(c, s, true, cut)
		go p.pipe(s, c, false, cut)
	}
}

func (p *proxy) pipe(src, dst net.Conn, fromClient bool, cut *atomic.Bool) {
	defer src.Close()
	defer dst.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if mode := p.mode.Load(); fromClient && mode != 0 && bytes.Contains(bytes.ToLower(chunk), []byte("commit")) {
				p.mode.Store(0)
				// Before the COMMIT goes on: a loaded machine ran the reply's
				// pipe between the write and the close below, and the client
				// got its reply (a loaded CI run: commit = nil).
				cut.Store(true)
				if mode == cutAfter {
					_, _ = dst.Write(chunk)
					// Only the client side goes: the server reads the COMMIT and
					// commits; its reply finds no one.
					src.Close()
					return
				}
				return
			}
			if !fromClient && cut.Load() {
				return // read after the COMMIT went on: the reply to it
			}
			if _, err := dst.Write(chunk); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// partition.ambiguous: a connection lost during COMMIT is ErrAmbiguous, never a
// definite failure; the retry dedupes if the commit happened and writes if it
// did not, and the store ends with exactly one result and one event.
func TestCommitConnectionLostIsAmbiguous(t *testing.T) {
	tests := []struct {
		name        string
		mode        int32
		wantDeduped bool
	}{
		{"commit reached the server, reply lost", cutAfter, true},
		{"commit lost on the way", cutBefore, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, url := newProxy(t)
			s := newStoreAt(t, url, Options{})
			ctx := context.Background()
			r := req("j1", "acme:d1:v1", "p", 1)
			r.BeforeCommit = func(context.Context) { p.mode.Store(tt.mode) }
			_, err := s.CommitResultWithEvent(ctx, r)
			if !errors.Is(err, adapters.ErrAmbiguous) || errors.Is(err, adapters.ErrUnavailable) {
				t.Fatalf("commit with the connection cut = %v, want ErrAmbiguous", err)
			}
			r.BeforeCommit = nil
			deduped, err := s.CommitResultWithEvent(ctx, r)
			if err != nil || deduped != tt.wantDeduped {
				t.Fatalf("retry = (deduped %v, %v), want deduped %v", deduped, err, tt.wantDeduped)
			}
			st := snapshot(t, s)
			if len(st.Results) != 1 || len(st.Events) != 1 {
				t.Errorf("after the retry: %d results, %d events, want 1 and 1", len(st.Results), len(st.Events))
			}
		})
	}
}

func TestUnreachableIsUnavailable(t *testing.T) {
	t.Run("open", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // nothing listens there now: connection refused
		const pw = "s3cret-Passw0rd"
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = Open(ctx, "postgres://durachk:"+pw+"@"+addr+"/test?sslmode=disable", "durachk_tunreachable", Options{})
		if !errors.Is(err, adapters.ErrUnavailable) {
			t.Fatalf("open = %v, want ErrUnavailable", err)
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("error contains the password: %v", err)
		}
	})
	t.Run("commit after the server went away", func(t *testing.T) {
		p, url := newProxy(t)
		s := newStoreAt(t, url, Options{})
		p.Close()
		_, err := s.CommitResultWithEvent(context.Background(), req("j1", "acme:d1:v1", "p", 1))
		if !errors.Is(err, adapters.ErrUnavailable) || errors.Is(err, adapters.ErrAmbiguous) {
			t.Fatalf("commit = %v, want ErrUnavailable (nothing was committed)", err)
		}
	})
}

func TestOpenValidatesSchema(t *testing.T) {
	for _, name := range []string{"public", "durachk_", "durachk_Upper", "durachk_a;drop", "durachk_" + strings.Repeat("a", 51)} {
		if _, err := Open(context.Background(), "postgres://127.0.0.1:1/x", name, Options{}); err == nil {
			t.Errorf("Open(%q) accepted the schema name", name)
		}
	}
}

func TestPasswordNotInParseError(t *testing.T) {
	const pw = "s3cret-Passw0rd"
	_, err := Open(context.Background(), "postgres://u:"+pw+"@127.0.0.1:notaport/x", "durachk_tparse", Options{})
	if err == nil || strings.Contains(err.Error(), pw) {
		t.Fatalf("err = %v, want an error without the password", err)
	}
}

func TestConcurrentCommitsOfOneKey(t *testing.T) {
	s := newStore(t, Options{MaxConns: 4})
	const n = 8
	var wg sync.WaitGroup
	var news, dedupes atomic.Int32
	for i := range n {
		wg.Go(func() {
			deduped, err := s.CommitResultWithEvent(context.Background(), req("j1", "acme:d1:v1", "p", uint64(i%2+1)))
			switch {
			case err != nil && !errors.Is(err, adapters.ErrStaleToken):
				t.Errorf("commit %d: %v", i, err)
			case err == nil && deduped:
				dedupes.Add(1)
			case err == nil:
				news.Add(1)
			}
		})
	}
	wg.Wait()
	if news.Load() != 1 {
		t.Errorf("%d commits wrote a result, want exactly 1 (%d deduped)", news.Load(), dedupes.Load())
	}
	if st := snapshot(t, s); len(st.Results) != 1 || len(st.Events) != 1 {
		t.Errorf("%d results, %d events, want 1 and 1", len(st.Results), len(st.Events))
	}
}

func TestRecordReprocess(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)
	tests := []struct {
		name  string
		setup func(s *Store)
		audit pipeline.Audit
		want  string
		// wantAudit is the audit returned on success.
		wantAudit pipeline.Audit
	}{
		{name: "operator required", audit: pipeline.Audit{OldJob: "j1", NewJob: "j1.v2"}, want: "operator_required"},
		{name: "not dead-lettered", audit: pipeline.Audit{OldJob: "j1", NewJob: "j1.v2", Operator: "op"}, want: "not_dead_lettered"},
		{name: "cancelled", setup: func(s *Store) { _ = s.Cancel(context.Background(), "j1") },
			audit: pipeline.Audit{OldJob: "j1", NewJob: "j1.v2", Operator: "op"}, want: "cancelled"},
		{name: "dead-lettered", setup: func(s *Store) { deadLetter(s, "j1") },
			audit: pipeline.Audit{OldJob: "j1", NewJob: "j1.v2", Operator: "op", At: at}, want: "ok",
			wantAudit: pipeline.Audit{OldJob: "j1", NewJob: "j1.v2", Operator: "op", At: at}},
		{name: "repeat returns the first audit", setup: func(s *Store) {
			deadLetter(s, "j1")
			if _, err := s.RecordReprocess(context.Background(), pipeline.Audit{OldJob: "j1", NewJob: "j1.v2", Operator: "first", At: at}); err != nil {
				panic(err)
			}
		}, audit: pipeline.Audit{OldJob: "j1", NewJob: "j1.v2", Operator: "second", At: at.Add(time.Hour)}, want: "ok",
			wantAudit: pipeline.Audit{OldJob: "j1", NewJob: "j1.v2", Operator: "first", At: at}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, Options{})
			if tt.setup != nil {
				tt.setup(s)
			}
			got, err := s.RecordReprocess(context.Background(), tt.audit)
			if outcome(err) != tt.want {
				t.Fatalf("RecordReprocess = %v, want %s", err, tt.want)
			}
			if got != tt.wantAudit {
				t.Errorf("audit = %+v, want %+v", got, tt.wantAudit)
			}
			if err == nil {
				st := snapshot(t, s)
				if len(st.Audits) != 1 || st.Audits[0] != tt.wantAudit || !st.DeadLetters[0].Reprocessed {
					t.Errorf("state after reprocess: audits %+v, dead letters %+v", st.Audits, st.DeadLetters)
				}
			}
		})
	}
}

func deadLetter(s *Store, job string) {
	rec := pipeline.DeadLetterRecord{JobID: job, Tenant: "acme", Key: "acme:" + job + ":v1", Reason: pipeline.ReasonPermanent, Attempt: 1,
		At: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	if err := s.DeadLetter(context.Background(), rec); err != nil {
		panic(err)
	}
}

func TestOutbox(t *testing.T) {
	s := newStore(t, Options{})
	ctx := context.Background()
	for i := range 5 {
		key := "acme:d" + strconv.Itoa(i) + ":v1"
		if _, err := s.CommitResultWithEvent(ctx, req("j"+strconv.Itoa(i), key, "p", 1)); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(es []pipeline.Event) string {
		var out []string
		for _, e := range es {
			out = append(out, e.ID)
		}
		return strings.Join(out, ",")
	}
	pending := func(limit int) string {
		es, err := s.PendingEvents(ctx, limit)
		if err != nil {
			t.Fatal(err)
		}
		return ids(es)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := []struct {
		name string
		do   func() string
		want string
	}{
		{"pending in creation order", func() string { return pending(3) }, "ev:acme:d0:v1,ev:acme:d1:v1,ev:acme:d2:v1"},
		{"limit 0 is none", func() string { return pending(0) }, ""},
		{"mark two", func() string {
			return outcome(s.MarkPublished(ctx, []string{"ev:acme:d0:v1", "ev:acme:d2:v1", "ev:unknown"}, t0))
		}, "ok"},
		{"re-mark keeps the first time", func() string { return outcome(s.MarkPublished(ctx, []string{"ev:acme:d0:v1"}, t0.Add(time.Hour))) }, "ok"},
		{"pending skips published", func() string { return pending(-1) }, "ev:acme:d1:v1,ev:acme:d3:v1,ev:acme:d4:v1"},
		{"purge before t0 removes none", func() string { n, err := s.PurgePublished(ctx, t0); return fmt.Sprintf("%d %s", n, outcome(err)) }, "0 ok"},
		{"purge after t0 removes two", func() string {
			n, err := s.PurgePublished(ctx, t0.Add(time.Minute))
			return fmt.Sprintf("%d %s", n, outcome(err))
		}, "2 ok"},
		{"apply first", func() string {
			first, err := s.ApplyEvent(ctx, "ev:x", "c/1")
			return fmt.Sprintf("%v %s", first, outcome(err))
		}, "true ok"},
		{"apply again", func() string {
			first, err := s.ApplyEvent(ctx, "ev:x", "c/2")
			return fmt.Sprintf("%v %s", first, outcome(err))
		}, "false ok"},
		{"the first application asks again", func() string {
			first, err := s.ApplyEvent(ctx, "ev:x", "c/1")
			return fmt.Sprintf("%v %s", first, outcome(err))
		}, "true ok"},
	}
	for _, st := range steps {
		if got := st.do(); got != st.want {
			t.Fatalf("%s: got %q, want %q", st.name, got, st.want)
		}
	}
	st := snapshot(t, s)
	if got := ids(st.Events); got != "ev:acme:d1:v1,ev:acme:d3:v1,ev:acme:d4:v1" {
		t.Errorf("events after purge: %s", got)
	}
	if st.Applied["ev:x"] != 3 {
		t.Errorf("applied = %v, want ev:x three times", st.Applied)
	}
}

// TestMirrorsMemStore runs one script against MemStore and the Postgres store
// and wants the same outcome from every call and the same final state (event
// creation times aside: MemStore leaves them zero).
func TestMirrorsMemStore(t *testing.T) {
	for _, opts := range []Options{{}, {NoFence: true}, {KeyOnlyDedupe: true}} {
		t.Run(fmt.Sprintf("%+v", opts), func(t *testing.T) {
			ctx := context.Background()
			mem := pipeline.NewMemStore(pipeline.MemStoreOptions{NoFence: opts.NoFence, KeyOnlyDedupe: opts.KeyOnlyDedupe})
			pgs := newStore(t, opts)
			memOut, pgOut := mirrorScript(ctx, mem), mirrorScript(ctx, pgs)
			if !reflect.DeepEqual(memOut, pgOut) {
				t.Errorf("outcomes differ:\nmem: %q\npg:  %q", memOut, pgOut)
			}
			a, b := snapshot(t, mem), snapshot(t, pgs)
			for i := range b.Events {
				b.Events[i].CreatedAt = time.Time{}
			}
			if !reflect.DeepEqual(a, b) {
				t.Errorf("states differ:\nmem: %+v\npg:  %+v", a, b)
			}
		})
	}
}

func mirrorScript(ctx context.Context, s pipeline.Store) []string {
	var out []string
	add := func(v ...any) { out = append(out, fmt.Sprint(v...)) }
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	commit := func(r pipeline.CommitRequest) {
		deduped, err := s.CommitResultWithEvent(ctx, r)
		add("commit ", r.Key, " ", deduped, " ", outcome(err))
	}
	add("fence ", outcome(s.Fence(ctx, "j1", 2)))
	add("fence ", outcome(s.Fence(ctx, "j1", 1)))
	commit(req("j1", "acme:d1:v1", "p", 1))
	commit(req("j1", "acme:d1:v1", "p", 3))
	commit(req("j1", "acme:d1:v1", "p", 3))
	commit(req("j9", "acme:d1:v1", "other", 1))
	commit(req("j2", "zeta:d1:v1", "p", 1))
	commit(req("j3", "acme:d3:v1", "p", 1))
	add("fence ", outcome(s.Fence(ctx, "j1", 2)))
	dw := s.(pipeline.DualWriter)
	deduped, err := dw.WriteResult(ctx, req("j4", "acme:d4:v1", "p", 1))
	add("write result ", deduped, " ", outcome(err))
	add("write event ", outcome(dw.WriteEvent(ctx, req("j4", "acme:d4:v1", "p", 1))))
	add("write event ", outcome(dw.WriteEvent(ctx, req("j4", "acme:d4:v1", "p", 1))))
	for _, job := range []string{"j7", "j5", "j7"} {
		rec := pipeline.DeadLetterRecord{JobID: job, Tenant: "acme", Key: "acme:" + job + ":v1", Reason: pipeline.ReasonMaxAttempts, Attempt: 3, At: at}
		add("dead ", outcome(s.DeadLetter(ctx, rec)))
		at = at.Add(time.Second)
	}
	for _, job := range []string{"jB", "ja", "j6", "jB"} {
		add("cancel ", outcome(s.Cancel(ctx, job)))
	}
	for _, a := range []pipeline.Audit{
		{OldJob: "j7", NewJob: "j7.v2", At: at},
		{OldJob: "j6", NewJob: "j6.v2", Operator: "op", At: at},
		{OldJob: "j8", NewJob: "j8.v2", Operator: "op", At: at},
		{OldJob: "j7", NewJob: "j7.v2", Operator: "op", At: at},
		{OldJob: "j7", NewJob: "j7.v2", Operator: "other", At: at.Add(time.Hour)},
		{OldJob: "j5", NewJob: "j5.v2", Operator: "op", At: at},
	} {
		got, err := s.RecordReprocess(ctx, a)
		add("reprocess ", got, " ", outcome(err))
	}
	evs, err := s.PendingEvents(ctx, 2)
	add("pending ", len(evs), " ", outcome(err))
	add("mark ", outcome(s.MarkPublished(ctx, []string{"ev:acme:d1:v1"}, at)))
	add("mark ", outcome(s.MarkPublished(ctx, []string{"ev:acme:d1:v1", "ev:zeta:d1:v1"}, at.Add(time.Minute))))
	n, err := s.PurgePublished(ctx, at.Add(time.Second))
	add("purge ", n, " ", outcome(err))
	ledger := func(what string, led pipeline.Ledger, err error) { add(what, " ", led, " ", outcome(err)) }
	led, err := s.Begin(ctx, "jL", 2, "w1/1", 2)
	ledger("begin", led, err)
	led, err = s.Begin(ctx, "jL", 2, "w1/1", 2) // a retry counts once
	ledger("begin again", led, err)
	led, err = s.Begin(ctx, "jL", 1, "w2/1", 1) // stale: records nothing (but with NoFence)
	ledger("begin stale", led, err)
	led, err = s.End(ctx, "jL", "w1/1", true)
	ledger("end spent", led, err)
	led, err = s.End(ctx, "jL", "w1/1", false) // the first end counts
	ledger("end again", led, err)
	led, err = s.Begin(ctx, "jL", 3, "w3/1", 3)
	ledger("begin", led, err)
	led, err = s.End(ctx, "jL", "w4/1", false) // an end without a begin
	ledger("end unbegun", led, err)
	// Unended deliveries of attempts 1–3, by slots x and y: known dead once a
	// later incarnation of the slot starts, unsure before (and after an
	// older one starts).
	starts := s.(pipeline.Starts)
	for i, del := range []string{"x/1", "y.2/1", "x.1/1"} {
		led, err = s.Begin(ctx, "jK", uint64(i+1), del, i+1)
		ledger("begin "+del, led, err)
	}
	led, err = s.Begin(ctx, "jK", 4, "z/1", 4)
	ledger("begin z/1", led, err)
	for _, p := range []string{"x.1", "y.1", "y.3", "x"} {
		add("started ", p, " ", outcome(starts.Started(ctx, p)))
		led, err = s.Begin(ctx, "jK", 4, "z/1", 4)
		ledger("begin z/1 again", led, err)
	}
	led, err = s.Begin(ctx, "j1", 9, "w1/9", 9) // committed
	ledger("begin committed", led, err)
	led, err = s.Begin(ctx, "j7", 1, "w1/10", 1) // dead-lettered
	ledger("begin dead", led, err)
	led, err = s.Begin(ctx, "jB", 1, "w1/11", 1) // cancelled
	ledger("begin cancelled", led, err)
	for i, id := range []string{"ev:a", "ev:b", "ev:a", "ev:a"} {
		first, err := s.ApplyEvent(ctx, id, fmt.Sprint("c/", i%3))
		add("apply ", first, " ", outcome(err))
	}
	return out
}

// The transactional-ack profile: the queue's ack commits with the result, or
// neither does.
func TestCommitWithTransactionalAck(t *testing.T) {
	url := testURL(t)
	s := newStore(t, Options{})
	ctx := context.Background()
	q, err := pg.Open(ctx, url, "t"+randomSuffix(), pg.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := q.Drop(context.Background()); err != nil {
			t.Errorf("drop queue: %v", err)
		}
		q.Close()
	})
	job := adapters.Job{ID: "j1", Tenant: "acme", DocumentID: "d1", Version: 1, Payload: []byte("p"), MaxAttempts: 3}
	if err := q.Enqueue(ctx, job); err != nil {
		t.Fatal(err)
	}
	d, err := q.Lease(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r := req("j1", "acme:d1:v1", "p", d.Token)
	ack := func(ctx context.Context, tx pgx.Tx) error { return q.AckTx(ctx, tx, d) }

	// A crash mid-commit leaves the result, the event and the job as they were.
	cctx, cancel := context.WithCancel(ctx)
	r.BeforeCommit = func(context.Context) { cancel() }
	if _, err := s.CommitResultWithEventTx(cctx, r, ack); !errors.Is(err, context.Canceled) {
		t.Fatalf("crashed commit = %v, want context.Canceled", err)
	}
	inv, err := q.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st := snapshot(t, s); len(st.Results) != 0 || len(inv.InFlight) != 1 {
		t.Fatalf("after the crash: %d results, inventory %+v; want no result and the job in flight", len(st.Results), inv)
	}

	r.BeforeCommit = nil
	if deduped, err := s.CommitResultWithEventTx(ctx, r, ack); err != nil || deduped {
		t.Fatalf("commit = (%v, %v)", deduped, err)
	}
	inv, err = q.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st := snapshot(t, s); len(st.Results) != 1 || len(inv.InFlight)+len(inv.Queued) != 0 {
		t.Fatalf("after the commit: %d results, inventory %+v; want the result and no job", len(st.Results), inv)
	}
	if err := q.Ack(ctx, d); !errors.Is(err, adapters.ErrLeaseLost) {
		t.Errorf("Ack after the transactional ack = %v, want ErrLeaseLost", err)
	}
}
