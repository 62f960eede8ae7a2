package pipeline

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func req(job, key, hash string, token uint64) CommitRequest {
	return CommitRequest{JobID: job, Tenant: "acme", Key: key, Token: token, PayloadHash: hash, Result: "r", EventID: "ev:" + key}
}

func snap(t *testing.T, s *MemStore) State {
	t.Helper()
	st, err := s.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestMemStoreFence(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		opts    MemStoreOptions
		fences  []uint64 // applied in order; the last one is judged
		wantErr error
	}{
		{name: "first token", fences: []uint64{1}},
		{name: "higher token", fences: []uint64{1, 2}},
		{name: "same token again (idempotent)", fences: []uint64{3, 3}},
		{name: "lower token is stale", fences: []uint64{3, 2}, wantErr: adapters.ErrStaleToken},
		{name: "much lower token is stale", fences: []uint64{5, 1, 4, 1}, wantErr: adapters.ErrStaleToken},
		{name: "NoFence accepts a stale token", opts: MemStoreOptions{NoFence: true}, fences: []uint64{3, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewMemStore(tt.opts)
			var err error
			for _, tok := range tt.fences {
				err = s.Fence(ctx, "j1", tok)
			}
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Fence = %v, want %v", err, tt.wantErr)
			}
			// Fences are per job: another job is unaffected.
			if err := s.Fence(ctx, "j2", 1); err != nil {
				t.Fatalf("fence of another job: %v", err)
			}
		})
	}
}

func TestMemStoreCommitFenced(t *testing.T) {
	ctx := context.Background()
	s := NewMemStore(MemStoreOptions{})
	if err := s.Fence(ctx, "j1", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CommitResultWithEvent(ctx, req("j1", "acme:d:v1", "h", 1)); !errors.Is(err, adapters.ErrStaleToken) {
		t.Fatalf("commit with token 1 after fence 2: %v, want ErrStaleToken", err)
	}
	if st := snap(t, s); len(st.Results) != 0 || len(st.Events) != 0 {
		t.Fatalf("a stale commit wrote %d results, %d events", len(st.Results), len(st.Events))
	}
	// A stale commit does not count as a commit: the job may still be dead-lettered.
	if deduped, err := s.CommitResultWithEvent(ctx, req("j1", "acme:d:v1", "h", 2)); err != nil || deduped {
		t.Fatalf("commit with the current token: deduped=%v err=%v", deduped, err)
	}
	// The commit raised the fence: token 2 is current, token 1 stale.
	if err := s.Fence(ctx, "j1", 1); !errors.Is(err, adapters.ErrStaleToken) {
		t.Fatalf("fence 1 after a commit with token 2: %v", err)
	}
	// A commit with a higher token raises the fence too.
	if _, err := s.CommitResultWithEvent(ctx, req("j9", "acme:e:v1", "h", 7)); err != nil {
		t.Fatal(err)
	}
	if err := s.Fence(ctx, "j9", 6); !errors.Is(err, adapters.ErrStaleToken) {
		t.Fatalf("fence 6 after a commit with token 7: %v, want ErrStaleToken", err)
	}
}

func TestMemStoreDedupeAndConflict(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name        string
		opts        MemStoreOptions
		second      CommitRequest
		wantDeduped bool
		wantErr     bool // *IdempotencyConflictError
	}{
		{name: "same key same hash dedupes", second: req("j2", "acme:d:v1", "h1", 1), wantDeduped: true},
		{name: "same job again dedupes", second: req("j1", "acme:d:v1", "h1", 1), wantDeduped: true},
		{name: "same key other hash conflicts", second: req("j2", "acme:d:v1", "h2", 1), wantErr: true},
		{name: "other key is new", second: req("j2", "acme:d:v2", "h2", 1)},
		{name: "KeyOnlyDedupe silently reuses", opts: MemStoreOptions{KeyOnlyDedupe: true}, second: req("j2", "acme:d:v1", "h2", 1), wantDeduped: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewMemStore(tt.opts)
			if d, err := s.CommitResultWithEvent(ctx, req("j1", "acme:d:v1", "h1", 1)); d || err != nil {
				t.Fatalf("first commit: deduped=%v err=%v", d, err)
			}
			before := snap(t, s)
			deduped, err := s.CommitResultWithEvent(ctx, tt.second)
			var ce *IdempotencyConflictError
			if tt.wantErr {
				if !errors.As(err, &ce) {
					t.Fatalf("err = %v, want *IdempotencyConflictError", err)
				}
				if ce.Key != "acme:d:v1" || ce.ExistingHash != "h1" || ce.NewHash != "h2" {
					t.Fatalf("conflict = %+v", ce)
				}
				if deduped {
					t.Fatal("a conflict reported deduped")
				}
				if after := snap(t, s); !reflect.DeepEqual(before, after) {
					t.Fatalf("a conflict wrote something:\nbefore %+v\nafter  %+v", before, after)
				}
				// Nothing was committed for the conflicting job: it can be dead-lettered.
				if err := s.DeadLetter(ctx, DeadLetterRecord{JobID: tt.second.JobID, Reason: ReasonIdempotencyConflict}); err != nil {
					t.Fatalf("dead-letter after a conflict: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("second commit: %v", err)
			}
			if deduped != tt.wantDeduped {
				t.Fatalf("deduped = %v, want %v", deduped, tt.wantDeduped)
			}
			after := snap(t, s)
			if tt.wantDeduped {
				if !reflect.DeepEqual(before, after) {
					t.Fatalf("a deduped commit wrote something:\nbefore %+v\nafter  %+v", before, after)
				}
				if after.Results[0].Hash != "h1" || after.Results[0].JobID != "j1" {
					t.Fatalf("dedupe changed the stored result: %+v", after.Results[0])
				}
			} else if len(after.Results) != 2 || len(after.Events) != 2 {
				t.Fatalf("new commit: %d results, %d events, want 2, 2", len(after.Results), len(after.Events))
			}
			// A deduped commit counts as a commit of its job: no second terminal outcome.
			if err := s.DeadLetter(ctx, DeadLetterRecord{JobID: tt.second.JobID, Reason: ReasonPermanent}); !errors.Is(err, ErrAlreadyCommitted) {
				t.Fatalf("dead-letter of %s after its commit: %v, want ErrAlreadyCommitted", tt.second.JobID, err)
			}
		})
	}
}

func TestMemStoreConflictError(t *testing.T) {
	e := &IdempotencyConflictError{Key: "acme:d:v1", ExistingHash: "0123456789abcdef", NewHash: "fedcba9876543210"}
	want := "idempotency conflict on acme:d:v1: stored payload 0123456789ab, new payload fedcba987654"
	if e.Error() != want {
		t.Fatalf("Error() = %q, want %q", e.Error(), want)
	}
	if Classify(e) != Permanent || ReasonFor(e) != ReasonIdempotencyConflict {
		t.Fatalf("conflict classifies as %s/%s", Classify(e), ReasonFor(e))
	}
}

func TestMemStoreBeforeCommitSeesNothing(t *testing.T) {
	ctx := context.Background()
	s := NewMemStore(MemStoreOptions{})
	called := false
	r := req("j1", "acme:d:v1", "h", 1)
	r.BeforeCommit = func(ctx context.Context) {
		called = true
		st := snap(t, s)
		if len(st.Results) != 0 || len(st.Events) != 0 {
			t.Errorf("BeforeCommit sees %d results and %d events, want none", len(st.Results), len(st.Events))
		}
		if s.PendingCount() != 0 {
			t.Errorf("BeforeCommit sees %d pending events", s.PendingCount())
		}
	}
	if _, err := s.CommitResultWithEvent(ctx, r); err != nil {
		t.Fatal(err)
	}
	if !called {
		t.Fatal("BeforeCommit was not called")
	}
	if st := snap(t, s); len(st.Results) != 1 || len(st.Events) != 1 {
		t.Fatalf("after the commit: %d results, %d events", len(st.Results), len(st.Events))
	}
	// A deduped commit does not run the hook: nothing is staged.
	called = false
	if d, err := s.CommitResultWithEvent(ctx, r); err != nil || !d {
		t.Fatalf("repeat: deduped=%v err=%v", d, err)
	}
	if called {
		t.Fatal("BeforeCommit ran for a deduped commit")
	}
}

// A crash in BeforeCommit (the goroutine exits there) leaves neither row.
func TestMemStoreCrashInBeforeCommitLeavesNothing(t *testing.T) {
	ctx := context.Background()
	s := NewMemStore(MemStoreOptions{})
	r := req("j1", "acme:d:v1", "h", 1)
	r.BeforeCommit = func(ctx context.Context) { panic("crash") }
	func() {
		defer func() { _ = recover() }()
		_, _ = s.CommitResultWithEvent(ctx, r)
	}()
	if st := snap(t, s); len(st.Results) != 0 || len(st.Events) != 0 {
		t.Fatalf("crash mid-commit left %d results and %d events", len(st.Results), len(st.Events))
	}
	if err := s.DeadLetter(ctx, DeadLetterRecord{JobID: "j1", Reason: ReasonPermanent}); err != nil {
		t.Fatalf("the crashed commit counted as a commit: %v", err)
	}
}

func TestMemStoreTerminalAfterCommit(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		do   func(s *MemStore) error
	}{
		{"dead letter", func(s *MemStore) error {
			return s.DeadLetter(ctx, DeadLetterRecord{JobID: "j1", Reason: ReasonMaxAttempts})
		}},
		{"cancel", func(s *MemStore) error { return s.Cancel(ctx, "j1") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewMemStore(MemStoreOptions{})
			if _, err := s.CommitResultWithEvent(ctx, req("j1", "acme:d:v1", "h", 1)); err != nil {
				t.Fatal(err)
			}
			if err := tt.do(s); !errors.Is(err, ErrAlreadyCommitted) {
				t.Fatalf("%s after commit: %v, want ErrAlreadyCommitted", tt.name, err)
			}
			st := snap(t, s)
			if len(st.DeadLetters) != 0 || len(st.Cancelled) != 0 {
				t.Fatalf("a committed job got a second terminal outcome: %+v", st)
			}
		})
	}
}

func TestMemStoreDeadLetterAndCancelIdempotent(t *testing.T) {
	ctx := context.Background()
	s := NewMemStore(MemStoreOptions{})
	first := DeadLetterRecord{JobID: "j1", Tenant: "acme", Key: "acme:d:v1", Reason: ReasonMaxAttempts, Attempt: 3, At: t0}
	if err := s.DeadLetter(ctx, first); err != nil {
		t.Fatal(err)
	}
	second := first
	second.Reason, second.Attempt = ReasonPermanent, 4
	if err := s.DeadLetter(ctx, second); err != nil {
		t.Fatalf("repeat dead-letter: %v", err)
	}
	for range 2 {
		if err := s.Cancel(ctx, "j2"); err != nil {
			t.Fatal(err)
		}
	}
	st := snap(t, s)
	if len(st.DeadLetters) != 1 || st.DeadLetters[0] != first {
		t.Fatalf("dead letters = %+v, want only the first record", st.DeadLetters)
	}
	if !reflect.DeepEqual(st.Cancelled, []string{"j2"}) {
		t.Fatalf("cancelled = %v", st.Cancelled)
	}
}

func TestMemStoreRecordReprocess(t *testing.T) {
	ctx := context.Background()
	audit := func(old, op string) Audit {
		return Audit{OldJob: old, NewJob: old + ".v2", Operator: op, At: t0}
	}
	tests := []struct {
		name    string
		setup   func(s *MemStore)
		audit   Audit
		wantErr error
	}{
		{name: "dead job", setup: func(s *MemStore) {
			_ = s.DeadLetter(ctx, DeadLetterRecord{JobID: "j1", Reason: ReasonPermanent})
		}, audit: audit("j1", "op-alice")},
		{name: "no operator", setup: func(s *MemStore) {
			_ = s.DeadLetter(ctx, DeadLetterRecord{JobID: "j1", Reason: ReasonPermanent})
		}, audit: audit("j1", ""), wantErr: ErrOperatorRequired},
		{name: "unknown job", setup: func(s *MemStore) {}, audit: audit("j1", "op-alice"), wantErr: ErrNotDeadLettered},
		{name: "committed job", setup: func(s *MemStore) {
			_, _ = s.CommitResultWithEvent(ctx, req("j1", "acme:d:v1", "h", 1))
		}, audit: audit("j1", "op-alice"), wantErr: ErrNotDeadLettered},
		{name: "cancelled job", setup: func(s *MemStore) { _ = s.Cancel(ctx, "j1") }, audit: audit("j1", "op-alice"), wantErr: ErrCancelledJob},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewMemStore(MemStoreOptions{})
			tt.setup(s)
			got, err := s.RecordReprocess(ctx, tt.audit)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("RecordReprocess = %v, want %v", err, tt.wantErr)
				}
				st := snap(t, s)
				if len(st.Audits) != 0 {
					t.Fatalf("a refused reprocess wrote audits %+v", st.Audits)
				}
				for _, d := range st.DeadLetters {
					if d.Reprocessed {
						t.Fatalf("a refused reprocess marked %s reprocessed", d.JobID)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.audit {
				t.Fatalf("audit = %+v, want %+v", got, tt.audit)
			}
			st := snap(t, s)
			if len(st.Audits) != 1 || st.Audits[0] != tt.audit || !st.DeadLetters[0].Reprocessed {
				t.Fatalf("state after reprocess: %+v", st)
			}
		})
	}
}

func TestMemStoreRecordReprocessIdempotent(t *testing.T) {
	ctx := context.Background()
	s := NewMemStore(MemStoreOptions{})
	if err := s.DeadLetter(ctx, DeadLetterRecord{JobID: "j1", Reason: ReasonPermanent}); err != nil {
		t.Fatal(err)
	}
	first := Audit{OldJob: "j1", NewJob: "j1.v2", Operator: "op-alice", At: t0}
	if _, err := s.RecordReprocess(ctx, first); err != nil {
		t.Fatal(err)
	}
	repeat := Audit{OldJob: "j1", NewJob: "j1.v2-other", Operator: "op-bob", At: t0.Add(time.Hour)}
	got, err := s.RecordReprocess(ctx, repeat)
	if err != nil {
		t.Fatalf("repeat: %v", err)
	}
	if got != first {
		t.Fatalf("repeat returned %+v, want the first audit %+v", got, first)
	}
	if st := snap(t, s); len(st.Audits) != 1 || st.Audits[0] != first {
		t.Fatalf("audits after repeat = %+v", st.Audits)
	}
}

func TestMemStoreOutbox(t *testing.T) {
	ctx := context.Background()
	s := NewMemStore(MemStoreOptions{})
	for i, k := range []string{"acme:a:v1", "acme:b:v1", "acme:c:v1"} {
		if _, err := s.CommitResultWithEvent(ctx, req("j"+k, k, "h", uint64(i+1))); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(es []Event) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.ID)
		}
		return out
	}
	pending, _ := s.PendingEvents(ctx, 10)
	if want := []string{"ev:acme:a:v1", "ev:acme:b:v1", "ev:acme:c:v1"}; !reflect.DeepEqual(ids(pending), want) {
		t.Fatalf("pending = %v, want %v (creation order)", ids(pending), want)
	}
	if p, _ := s.PendingEvents(ctx, 2); len(p) != 2 {
		t.Fatalf("limit 2 returned %d events", len(p))
	}
	if s.PendingCount() != 3 {
		t.Fatalf("PendingCount = %d", s.PendingCount())
	}
	if err := s.MarkPublished(ctx, []string{"ev:acme:b:v1", "ev:unknown"}, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkPublished(ctx, []string{"ev:acme:b:v1"}, t0.Add(time.Hour)); err != nil { // idempotent
		t.Fatal(err)
	}
	if s.PendingCount() != 2 {
		t.Fatalf("PendingCount after mark = %d, want 2", s.PendingCount())
	}
	pending, _ = s.PendingEvents(ctx, 10)
	if want := []string{"ev:acme:a:v1", "ev:acme:c:v1"}; !reflect.DeepEqual(ids(pending), want) {
		t.Fatalf("pending after mark = %v, want %v", ids(pending), want)
	}
	st := snap(t, s)
	for _, e := range st.Events {
		if e.ID == "ev:acme:b:v1" && (!e.Published || !e.PublishedAt.Equal(t0)) {
			t.Fatalf("marked event = %+v, want published at %v (the first mark)", e, t0)
		}
	}
	if err := s.MarkPublished(ctx, []string{"ev:acme:a:v1"}, t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	// Purge: only events published before the cutoff.
	n, err := s.PurgePublished(ctx, t0.Add(time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("purge = %d, %v; want 1", n, err)
	}
	if n, _ := s.PurgePublished(ctx, t0.Add(time.Hour)); n != 0 {
		t.Fatalf("second purge removed %d", n)
	}
	st = snap(t, s)
	if want := []string{"ev:acme:a:v1", "ev:acme:c:v1"}; !reflect.DeepEqual(ids(st.Events), want) {
		t.Fatalf("events after purge = %v, want %v", ids(st.Events), want)
	}
	if len(st.Results) != 3 {
		t.Fatalf("purge touched results: %d left", len(st.Results))
	}
	pending, _ = s.PendingEvents(ctx, 10)
	if want := []string{"ev:acme:c:v1"}; !reflect.DeepEqual(ids(pending), want) {
		t.Fatalf("pending after purge = %v, want %v", ids(pending), want)
	}
	if err := s.MarkPublished(ctx, []string{"ev:acme:c:v1"}, t0); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.PendingEvents(ctx, 10); len(p) != 0 || s.PendingCount() != 0 {
		t.Fatalf("all published, still pending: %v (%d)", ids(p), s.PendingCount())
	}
}

func TestMemStoreApplyEvent(t *testing.T) {
	ctx := context.Background()
	s := NewMemStore(MemStoreOptions{})
	tests := []struct {
		name string
		id   string
		by   string
		want bool
	}{
		{"first", "ev:a", "c/1", true},
		{"repeat", "ev:a", "c/2", false},
		{"other event first", "ev:b", "c/3", true},
		{"third time", "ev:a", "c/4", false},
		// A lost reply, asked again under the same name: the first's answer.
		{"the first application asks again", "ev:a", "c/1", true},
	}
	for _, tt := range tests {
		first, err := s.ApplyEvent(ctx, tt.id, tt.by)
		if err != nil || first != tt.want {
			t.Fatalf("%s: ApplyEvent(%s, %s) = %v, %v; want %v", tt.name, tt.id, tt.by, first, err, tt.want)
		}
	}
	if st := snap(t, s); !reflect.DeepEqual(st.Applied, map[string]int{"ev:a": 4, "ev:b": 1}) {
		t.Fatalf("applied = %v", st.Applied)
	}
}

// The two sabotage options are broken exactly as documented.
func TestMemStoreSabotageNoFence(t *testing.T) {
	ctx := context.Background()
	s := NewMemStore(MemStoreOptions{NoFence: true})
	if err := s.Fence(ctx, "j1", 5); err != nil {
		t.Fatal(err)
	}
	if err := s.Fence(ctx, "j1", 2); err != nil {
		t.Fatalf("NoFence rejected a stale fence: %v", err)
	}
	if d, err := s.CommitResultWithEvent(ctx, req("j1", "acme:d:v1", "h", 2)); err != nil || d {
		t.Fatalf("NoFence: stale commit = %v, %v; want accepted as new", d, err)
	}
	st := snap(t, s)
	if len(st.Results) != 1 || st.Results[0].Token != 2 {
		t.Fatalf("NoFence: results = %+v, want the stale token's result", st.Results)
	}
}

func TestMemStoreSabotageKeyOnlyDedupe(t *testing.T) {
	ctx := context.Background()
	s := NewMemStore(MemStoreOptions{KeyOnlyDedupe: true})
	if _, err := s.CommitResultWithEvent(ctx, req("j1", "acme:d:v1", "h1", 1)); err != nil {
		t.Fatal(err)
	}
	d, err := s.CommitResultWithEvent(ctx, req("j2", "acme:d:v1", "h2", 1))
	if err != nil || !d {
		t.Fatalf("KeyOnlyDedupe: other payload = %v, %v; want a silent dedupe", d, err)
	}
	st := snap(t, s)
	if len(st.Results) != 1 || st.Results[0].Hash != "h1" {
		t.Fatalf("KeyOnlyDedupe: results = %+v, want the old result reused", st.Results)
	}
	// Fencing still works in this sabotage.
	_ = s.Fence(ctx, "j3", 4)
	if _, err := s.CommitResultWithEvent(ctx, req("j3", "acme:x:v1", "h", 3)); !errors.Is(err, adapters.ErrStaleToken) {
		t.Fatalf("KeyOnlyDedupe broke fencing: %v", err)
	}
}

func TestMemStoreDualWrite(t *testing.T) {
	ctx := context.Background()
	s := NewMemStore(MemStoreOptions{})
	r := req("j1", "acme:d:v1", "h", 1)
	if d, err := s.WriteResult(ctx, r); err != nil || d {
		t.Fatalf("WriteResult = %v, %v", d, err)
	}
	// The naive path can leave a result without its event: that is its point.
	if st := snap(t, s); len(st.Results) != 1 || len(st.Events) != 0 {
		t.Fatalf("after WriteResult: %d results, %d events; want 1, 0", len(st.Results), len(st.Events))
	}
	if err := s.WriteEvent(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteEvent(ctx, r); err != nil {
		t.Fatal(err)
	}
	if st := snap(t, s); len(st.Events) != 1 || s.PendingCount() != 1 {
		t.Fatalf("WriteEvent twice: %d events, %d pending; want 1, 1", len(st.Events), s.PendingCount())
	}
	if d, err := s.WriteResult(ctx, r); err != nil || !d {
		t.Fatalf("WriteResult repeat = %v, %v; want deduped", d, err)
	}
}

func TestMemStoreSnapshotIsACopy(t *testing.T) {
	ctx := context.Background()
	s := NewMemStore(MemStoreOptions{})
	_, _ = s.CommitResultWithEvent(ctx, req("j1", "acme:d:v1", "h", 1))
	_, _ = s.ApplyEvent(ctx, "ev:acme:d:v1", "c/1")
	st := snap(t, s)
	st.Results[0].Hash = "mutated"
	st.Events[0].Published = true
	st.Applied["ev:acme:d:v1"] = 99
	again := snap(t, s)
	if again.Results[0].Hash != "h" || again.Events[0].Published || again.Applied["ev:acme:d:v1"] != 1 {
		t.Fatalf("Snapshot shares memory with the store: %+v", again)
	}
}

func TestMemStoreLedger(t *testing.T) {
	ctx := context.Background()
	s := NewMemStore(MemStoreOptions{})
	if _, err := s.CommitResultWithEvent(ctx, req("jC", "acme:c:v1", "h", 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeadLetter(ctx, DeadLetterRecord{JobID: "jD", Reason: ReasonMaxAttempts}); err != nil {
		t.Fatal(err)
	}
	type call struct {
		name  string
		do    func() (Ledger, error)
		want  Ledger
		stale bool
	}
	begin := func(job string, tok uint64, del string, attempt ...int) func() (Ledger, error) {
		a := int(tok)
		if len(attempt) > 0 {
			a = attempt[0]
		}
		return func() (Ledger, error) { return s.Begin(ctx, job, tok, del, a) }
	}
	end := func(job, del string, spent bool) func() (Ledger, error) {
		return func() (Ledger, error) { return s.End(ctx, job, del, spent) }
	}
	start := func(process string) func() (Ledger, error) {
		return func() (Ledger, error) { return Ledger{}, s.Started(ctx, process) }
	}
	calls := []call{
		{name: "first delivery", do: begin("j", 1, "w1/1"), want: Ledger{}},
		{name: "a retry of the begin counts once", do: begin("j", 1, "w1/1"), want: Ledger{}},
		{name: "stale token records nothing", do: begin("j", 0, "w9/1"), stale: true},
		{name: "spent", do: end("j", "w1/1", true), want: Ledger{Seen: 1, Ended: 1, Spent: 1}},
		{name: "the first end counts", do: end("j", "w1/1", false), want: Ledger{Seen: 1, Ended: 1, Spent: 1}},
		{name: "second delivery sees the first", do: begin("j", 2, "w2/1"), want: Ledger{Seen: 1, Ended: 1, Spent: 1}},
		{name: "third sees one that never ended: w2 may be alive", do: begin("j", 3, "w3/1"), want: Ledger{Seen: 2, Ended: 1, Spent: 1, Unsure: 1}},
		{name: "an older incarnation of w2 proves nothing", do: start("w2"), want: Ledger{}},
		{name: "fourth: still unsure", do: begin("j", 4, "w4/1"), want: Ledger{Seen: 3, Ended: 1, Spent: 1, Unsure: 2}},
		{name: "w2 restarted", do: start("w2.1"), want: Ledger{}},
		{name: "fifth: w2 died holding it", do: begin("j", 5, "w5/1"), want: Ledger{Seen: 4, Ended: 1, Spent: 1, Crashed: 1, Unsure: 2}},
		{name: "released", do: end("j", "w3/1", false), want: Ledger{Seen: 5, Ended: 2, Spent: 1}},
		{name: "committed job", do: begin("jC", 2, "w1/2"), want: Ledger{Committed: true}},
		// A job sent twice: both copies' first deliveries spent, copy a's second
		// one running; copy b's second one sees no crash (it saw one: a healthy
		// job dead-lettered).
		{name: "copy a, attempt 1", do: begin("j2", 1, "a/1", 1), want: Ledger{}},
		{name: "copy b, attempt 1", do: begin("j2", 1, "b/1", 1), want: Ledger{Seen: 1}},
		{name: "a/1 spent", do: end("j2", "a/1", true), want: Ledger{Seen: 2, Ended: 1, Spent: 1}},
		{name: "b/1 spent", do: end("j2", "b/1", true), want: Ledger{Seen: 2, Ended: 2, Spent: 2}},
		{name: "copy a, attempt 2 (runs on)", do: begin("j2", 2, "a/2", 2), want: Ledger{Seen: 2, Ended: 2, Spent: 2}},
		{name: "copy b, attempt 2: a/2 is no crash", do: begin("j2", 2, "b/2", 2), want: Ledger{Seen: 3, Ended: 2, Spent: 2}},
		{name: "b/2 released", do: end("j2", "b/2", false), want: Ledger{Seen: 4, Ended: 3, Spent: 2}},
		{name: "copy b, attempt 3: attempt 2 had an end", do: begin("j2", 2, "b/3", 3), want: Ledger{Seen: 4, Ended: 3, Spent: 2}},
		// A crash loop: every attempt's worker died.
		{name: "loop 1", do: begin("jP", 1, "p/1", 1), want: Ledger{}},
		{name: "p restarts", do: start("p.1"), want: Ledger{}},
		{name: "loop 2", do: begin("jP", 2, "p.1/1", 2), want: Ledger{Seen: 1, Crashed: 1}},
		{name: "p restarts again", do: start("p.2"), want: Ledger{}},
		{name: "loop 3", do: begin("jP", 3, "p.2/1", 3), want: Ledger{Seen: 2, Crashed: 2}},
		{name: "a broker that does not count", do: begin("jP", 4, "p.2/2", 0), want: Ledger{Seen: 3}},
		{name: "dead job", do: begin("jD", 1, "w1/3"), want: Ledger{Terminal: true}},
	}
	for _, c := range calls {
		got, err := c.do()
		if c.stale {
			if !errors.Is(err, adapters.ErrStaleToken) {
				t.Fatalf("%s: err = %v, want ErrStaleToken", c.name, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Fatalf("%s: got %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
	if got := (Ledger{Seen: 3, Ended: 2}).Unended(); got != 1 {
		t.Errorf("Unended = %d, want 1", got)
	}
}
