package pipeline

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/adapters/mem"
	"github.com/durachk/durachk/history"
)

// script says how the n-th call of an operation goes: '.' as asked, 'u'
// refused (unavailable, not applied), 'a' applied and its reply lost, 'A' lost
// on the way (not applied, outcome unknown to the caller). A trailing '*'
// repeats the last mode forever; past the end, calls go as asked.
type script map[string]string

type scripted struct {
	mu    sync.Mutex
	s     script
	calls map[string]int
}

func newScripted(s script) *scripted { return &scripted{s: s, calls: map[string]int{}} }

func (sc *scripted) mode(op string) byte {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	n := sc.calls[op]
	sc.calls[op]++
	m := sc.s[op]
	if strings.HasSuffix(m, "*") && n >= len(m)-1 {
		return m[len(m)-2]
	}
	if n < len(m) {
		return m[n]
	}
	return '.'
}

// do applies the scripted outcome around f.
func (sc *scripted) do(op string, f func() error) error {
	switch sc.mode(op) {
	case 'u':
		return adapters.ErrUnavailable
	case 'A':
		return adapters.ErrAmbiguous
	case 'a':
		if err := f(); err != nil {
			return err
		}
		return adapters.ErrAmbiguous
	}
	return f()
}

// faultyQueue is the reference broker behind a scripted link; noCount hides
// its delivery count (a broker that cannot count deliveries).
type faultyQueue struct {
	q       *mem.Queue
	sc      *scripted
	noCount bool
}

func (f *faultyQueue) Enqueue(ctx context.Context, j adapters.Job) error {
	return f.sc.do("enqueue", func() error { return f.q.Enqueue(ctx, j) })
}

func (f *faultyQueue) Lease(ctx context.Context, l time.Duration) (adapters.Delivery, error) {
	var d adapters.Delivery
	err := f.sc.do("lease", func() (err error) { d, err = f.q.Lease(ctx, l); return err })
	if f.noCount {
		d.Attempt = 0
	}
	return d, err
}

func (f *faultyQueue) Ack(ctx context.Context, d adapters.Delivery) error {
	return f.sc.do("ack", func() error { return f.q.Ack(ctx, d) })
}

func (f *faultyQueue) Nack(ctx context.Context, d adapters.Delivery, delay time.Duration) error {
	return f.sc.do("nack", func() error { return f.q.Nack(ctx, d, delay) })
}

func (f *faultyQueue) Extend(ctx context.Context, d adapters.Delivery, l time.Duration) error {
	return f.sc.do("extend", func() error { return f.q.Extend(ctx, d, l) })
}

func (f *faultyQueue) DeadLetter(ctx context.Context, d adapters.Delivery, reason string) error {
	return f.sc.do("dead_letter", func() error { return f.q.DeadLetter(ctx, d, reason) })
}

func (f *faultyQueue) Capabilities() adapters.Capabilities { return f.q.Capabilities() }
func (f *faultyQueue) Close() error                        { return f.q.Close() }

// faultyStore is the in-memory store behind a scripted link.
type faultyStore struct {
	*MemStore
	sc *scripted
}

func (f *faultyStore) Begin(ctx context.Context, job string, tok uint64, del string, attempt int) (Ledger, error) {
	var led Ledger
	err := f.sc.do("begin", func() (err error) { led, err = f.MemStore.Begin(ctx, job, tok, del, attempt); return err })
	return led, err
}

func (f *faultyStore) End(ctx context.Context, job, del string, spent bool) (Ledger, error) {
	var led Ledger
	err := f.sc.do("end", func() (err error) { led, err = f.MemStore.End(ctx, job, del, spent); return err })
	return led, err
}

func (f *faultyStore) CommitResultWithEvent(ctx context.Context, req CommitRequest) (bool, error) {
	var deduped bool
	err := f.sc.do("commit", func() (err error) { deduped, err = f.MemStore.CommitResultWithEvent(ctx, req); return err })
	return deduped, err
}

func (f *faultyStore) DeadLetter(ctx context.Context, rec DeadLetterRecord) error {
	return f.sc.do("dead_letter", func() error { return f.MemStore.DeadLetter(ctx, rec) })
}

func (f *faultyStore) Cancel(ctx context.Context, job string) error {
	return f.sc.do("cancel", func() error { return f.MemStore.Cancel(ctx, job) })
}

// exitHooks end the worker's goroutine at the poison crash point, as a real
// worker dies there.
type exitHooks struct{}

func (exitHooks) At(ctx context.Context, p CrashPoint, job string) {
	if p == Poison {
		runtime.Goexit()
	}
}

// rig is one worker on a virtual clock, one step at a time.
type rig struct {
	restarts  int  // of the worker, after it died at a crash point
	noRestart bool // a dead worker runs on under its name (no proof of its death)
	now       time.Time
	q         *mem.Queue
	store     *MemStore
	log       *history.Log
	w         *Worker
}

const testLease = 10 * time.Second

func newRig(qs, ss script, noCount bool) *rig {
	r := &rig{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), log: &history.Log{}}
	r.q = mem.New(mem.Options{Now: func() time.Time { return r.now }})
	r.store = NewMemStore(MemStoreOptions{})
	env := &Env{Process: "w1", Rec: r.log, Now: func() time.Time { return r.now },
		Sleep: func(ctx context.Context, d time.Duration) error { r.now = r.now.Add(d); return ctx.Err() }}
	r.w = &Worker{Env: env, Queue: &faultyQueue{q: r.q, sc: newScripted(qs), noCount: noCount},
		Store: &faultyStore{MemStore: r.store, sc: newScripted(ss)}, Hooks: exitHooks{},
		Lease: testLease, Poll: 200 * time.Millisecond, Policy: &Policy{Base: 500 * time.Millisecond, Max: 5 * time.Second}}
	return r
}

func (r *rig) enqueue(t *testing.T, p Payload) adapters.Job {
	t.Helper()
	job := adapters.Job{ID: "job-1", Tenant: "acme", DocumentID: p.Doc, Version: 1, Payload: p.Encode(), CreatedAt: r.now, MaxAttempts: 3}
	if err := r.q.Enqueue(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	return job
}

// run steps the worker (a step that dies at a crash point ends there) until the
// queue is empty or steps run out; an idle step waits a lease. A worker that
// died is restarted as a supervisor would: the next incarnation of its slot
// (w1.1, w1.2, ...), unless noRestart.
func (r *rig) run(steps int) {
	for i := 0; i < steps && r.q.Live() > 0; i++ {
		worked, returned := false, false
		done := make(chan struct{})
		go func() {
			defer close(done)
			worked, _ = r.w.Step(context.Background())
			returned = true
		}()
		<-done
		if !returned && !r.noRestart {
			r.restarts++
			r.w.Env.Process = fmt.Sprintf("w1.%d", r.restarts)
			r.w.started, r.w.seq = false, 0
		}
		if !worked {
			r.now = r.now.Add(testLease)
		}
	}
}

// count counts records of f of type typ, and, if value is not "", that value.
func (r *rig) count(f history.F, typ history.Type, value string) int {
	n := 0
	for _, op := range r.log.Ops() {
		if op.F == f && op.Type == typ && (value == "" || op.Value == value) {
			n++
		}
	}
	return n
}

func (r *rig) state(t *testing.T) State {
	t.Helper()
	st, err := r.store.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestWorkerInfrastructureDoesNotSpendAttempts(t *testing.T) {
	tests := []struct {
		name       string
		queue      script
		store      script
		leases     int // deliveries the worker got
		acks       int // ack calls
		commitsNew int
	}{
		{name: "store refuses the begin", store: script{"begin": "uuuu"}, leases: 1, acks: 1, commitsNew: 1},
		{name: "store refuses the commit", store: script{"commit": "uuuuuu"}, leases: 1, acks: 1, commitsNew: 1},
		{name: "commit replies lost", store: script{"commit": "aaa"}, leases: 1, acks: 1, commitsNew: 0},
		{name: "commit requests lost", store: script{"commit": "AAA"}, leases: 1, acks: 1, commitsNew: 1},
		{name: "broker refuses the ack", queue: script{"ack": "uuuuu"}, leases: 1, acks: 6, commitsNew: 1},
		// Unknown ack outcome: the worker asks (an extension) before it acks again.
		{name: "ack request lost", queue: script{"ack": "A"}, leases: 1, acks: 2, commitsNew: 1},
		{name: "ack reply lost", queue: script{"ack": "a"}, leases: 1, acks: 1, commitsNew: 1},
		// A lost lease reply is a delivery the broker counts and no worker sees.
		{name: "lease replies lost", queue: script{"lease": "aaaa"}, leases: 1, acks: 1, commitsNew: 1},
		{name: "everything flaky", queue: script{"lease": "a.a", "ack": "uAu"}, store: script{"begin": "Au", "commit": "uaA"}, leases: 1, acks: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(tt.queue, tt.store, false)
			r.enqueue(t, Payload{Doc: "d1", FailTransient: 2}) // fails two attempts, succeeds on the third
			// Make the job's own two failures the only ones that may spend.
			r.run(60)
			st := r.state(t)
			if len(st.Results) != 1 || len(st.DeadLetters) != 0 || r.q.Live() != 0 {
				t.Fatalf("results %d, dead letters %+v, live %d; want the job committed and acked", len(st.Results), st.DeadLetters, r.q.Live())
			}
			if got := r.count(history.Extract, history.Fail, ""); got != 2 {
				t.Errorf("extract failed %d times, want 2 (its own two failures)", got)
			}
			if got := r.count(history.Settle, history.OK, "spent"); got != 2 {
				t.Errorf("attempts spent %d, want 2", got)
			}
			if got := r.count(history.Ack, history.Invoke, ""); got != tt.acks {
				t.Errorf("ack calls %d, want %d", got, tt.acks)
			}
			if got, want := r.count(history.Lease, history.OK, ""), 3*tt.leases; got != want {
				t.Errorf("deliveries seen %d, want %d (one per attempt)", got, want)
			}
			if tt.commitsNew > 0 && r.count(history.Commit, history.OK, "new") != tt.commitsNew {
				t.Errorf("new commits %d, want %d", r.count(history.Commit, history.OK, "new"), tt.commitsNew)
			}
		})
	}
}

func TestWorkerAgeBudget(t *testing.T) {
	tests := []struct {
		name       string
		store      script
		wantReason string // "" : parked, not dead-lettered
	}{
		// The store refuses every commit: past the budget, the job is
		// dead-lettered with its own reason.
		{name: "store refuses commits", store: script{"commit": "u*"}, wantReason: ReasonAgeExceeded},
		// The commit's outcome stays unknown: a dead letter would take it as a
		// failure, so the job is parked in the broker instead, never dropped.
		{name: "commit outcome unknown", store: script{"commit": "A*"}},
		// Past the budget the dead letter cannot be written either: parked.
		{name: "store refuses everything", store: script{"commit": "u*", "dead_letter": "u*"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(nil, tt.store, false)
			job := r.enqueue(t, Payload{Doc: "d1", AgeBudget: time.Minute})
			r.run(3)
			st := r.state(t)
			if r.count(history.Settle, history.OK, "spent") != 0 || r.count(history.Nack, history.Invoke, "") != 0 {
				t.Errorf("an infrastructure failure spent an attempt")
			}
			if tt.wantReason == "" {
				if len(st.DeadLetters) != 0 || r.q.Live() != 1 {
					t.Fatalf("dead letters %+v, live %d: want the job parked in the broker", st.DeadLetters, r.q.Live())
				}
				if r.count(history.Settle, history.OK, "released") == 0 {
					t.Errorf("the given-back delivery is not recorded as the infrastructure's")
				}
				return
			}
			if len(st.DeadLetters) != 1 || st.DeadLetters[0].Reason != tt.wantReason {
				t.Fatalf("dead letters %+v, want one with reason %s", st.DeadLetters, tt.wantReason)
			}
			if age := st.DeadLetters[0].At.Sub(job.CreatedAt); age <= time.Minute {
				t.Errorf("dead-lettered at age %v, within its budget", age)
			}
			if r.q.Live() != 0 {
				t.Errorf("the dead job is still in the broker")
			}
		})
	}
}

func TestWorkerAttemptBudget(t *testing.T) {
	tests := []struct {
		name       string
		p          Payload
		queue      script
		noCount    bool
		noRestart  bool
		extracts   int    // executions
		reason     string // "": not dead-lettered within the steps
		deliveries int    // if set, the deliveries it takes
	}{
		{name: "stubborn", p: Payload{FailTransient: -1}, extracts: 3, reason: ReasonMaxAttempts},
		{name: "stubborn, lease replies lost", p: Payload{FailTransient: -1}, queue: script{"lease": "a.aa.a"}, extracts: 3, reason: ReasonMaxAttempts},
		{name: "stubborn, no delivery count", p: Payload{FailTransient: -1}, noCount: true, extracts: 3, reason: ReasonMaxAttempts},
		{name: "permanent", p: Payload{FailPermanent: true}, extracts: 1, reason: ReasonPermanent},
		{name: "poison", p: Payload{Crash: true}, extracts: 3, reason: ReasonMaxAttempts, deliveries: 4},
		// Nothing proves the crash (the worker's slot never restarts): the job
		// is given back unrun, until the broker's cap.
		{name: "poison, no restart", p: Payload{Crash: true}, noRestart: true, extracts: 1, reason: ReasonMaxAttempts, deliveries: DeliveryCap(3) + 1},
		{name: "poison, lease replies lost", p: Payload{Crash: true}, queue: script{"lease": ".aa.a"}, extracts: 3, reason: ReasonMaxAttempts},
		// Nothing witnesses the crash loop: unbounded, as retry.bounded reports.
		{name: "poison, no delivery count", p: Payload{Crash: true}, noCount: true, extracts: 20},
		// The broker's count alone: the backstop against a loop the store never hears of.
		{name: "delivery cap", queue: script{"lease": strings.Repeat("a", DeliveryCap(3))}, extracts: 0, reason: ReasonMaxAttempts},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(tt.queue, nil, tt.noCount)
			r.noRestart = tt.noRestart
			tt.p.Doc = "d1"
			r.enqueue(t, tt.p)
			r.run(20 + DeliveryCap(3))
			if got := r.count(history.Lease, history.OK, ""); tt.deliveries > 0 && got != tt.deliveries {
				t.Errorf("%d deliveries, want %d", got, tt.deliveries)
			}
			if got := r.count(history.Extract, history.Invoke, ""); got != tt.extracts && !(tt.reason == "" && got >= tt.extracts) {
				t.Errorf("executed %d times, want %d", got, tt.extracts)
			}
			st := r.state(t)
			if tt.reason == "" {
				if len(st.DeadLetters) != 0 {
					t.Errorf("dead letters %+v, want none", st.DeadLetters)
				}
				return
			}
			if len(st.DeadLetters) != 1 || st.DeadLetters[0].Reason != tt.reason {
				t.Errorf("dead letters %+v, want one with reason %s", st.DeadLetters, tt.reason)
			}
		})
	}
}

// The extract's invoke carries the job's attempt number, which counts the
// job's failures only.
func TestWorkerAttemptNumbers(t *testing.T) {
	r := newRig(script{"lease": "a.a", "ack": "u"}, script{"commit": "u"}, false)
	r.enqueue(t, Payload{Doc: "d1", FailTransient: 1})
	r.run(20)
	var got []string
	for _, op := range r.log.Ops() {
		if op.F == history.Extract && op.Type == history.Invoke {
			got = append(got, op.Value)
		}
	}
	if strings.Join(got, ",") != "1,2" {
		t.Errorf("extract attempts %v, want [1 2]", got)
	}
}

func TestLedgerCountsCrashesOnlyWhereTheBrokerCounts(t *testing.T) {
	led := Ledger{Seen: 3, Ended: 1, Crashed: 2}
	tests := []struct {
		name    string
		attempt int
		led     Ledger
		want    int
	}{
		{"two deliveries died", 4, led, 2},
		{"the broker counted fewer", 2, led, 1},
		{"no delivery count", 0, led, 0},
		{"committed", 4, Ledger{Seen: 3, Committed: true}, 0},
		{"all ended", 4, Ledger{Seen: 3, Ended: 3}, 0},
		// Another copy's delivery running now: unended, but its attempt ended
		// elsewhere, so no crash (Ledger.Crashed).
		{"a copy running", 2, Ledger{Seen: 3, Ended: 2, Spent: 2}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := crashes(adapters.Delivery{Attempt: tt.attempt}, tt.led); got != tt.want {
				t.Errorf("crashes = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestAgeBudgetOf(t *testing.T) {
	tests := []struct {
		name    string
		payload []byte
		want    time.Duration
	}{
		{"named", Payload{AgeBudget: time.Minute}.Encode(), time.Minute},
		{"default", Payload{}.Encode(), DefaultAgeBudget},
		{"undecodable", []byte("{"), DefaultAgeBudget},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := AgeBudgetOf(adapters.Job{Payload: tt.payload}); got != tt.want {
				t.Errorf("AgeBudgetOf = %v, want %v", got, tt.want)
			}
		})
	}
	born := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if m := MetaOf(adapters.Job{Payload: Payload{AgeBudget: time.Minute}.Encode(), CreatedAt: born}); m.AgeBudget != int64(time.Minute) || m.Created != born.UnixNano() {
		t.Errorf("MetaOf carries age budget %d and creation %d, want %d and %d", m.AgeBudget, m.Created, time.Minute, born.UnixNano())
	}
}

// A job's own failure whose spend the store never confirms is not given back
// as the infrastructure's past the age budget: the delivery stays unended, and
// the next one counts it.
func TestWorkerSpendNeverReleased(t *testing.T) {
	r := newRig(nil, script{"end": "A*"}, false)
	r.enqueue(t, Payload{Doc: "d1", FailTransient: -1, AgeBudget: time.Minute})
	r.run(8)
	ran := map[uint64]bool{} // the deliveries that executed the job, by token
	for _, op := range r.log.Ops() {
		if op.F == history.Extract && op.Type == history.Invoke {
			ran[op.Token] = true
		}
	}
	for _, op := range r.log.Ops() {
		if op.F == history.Settle && op.Type == history.Invoke && op.Value == "released" && ran[op.Token] {
			t.Errorf("delivery %d given back as released after the job's own failure", op.Token)
		}
	}
	if got := r.count(history.Extract, history.Invoke, ""); got > 3 {
		t.Errorf("executed %d times, budget 3", got)
	}
}

// heldByX records what worker x did with job, through the rig's queue and
// store: two attempts spent, a third begun and never ended; the broker
// counted three deliveries.
func (r *rig) heldByX(t *testing.T, job adapters.Job) {
	t.Helper()
	ctx := context.Background()
	for a := 1; a <= 3; a++ {
		d, err := r.q.Lease(ctx, testLease)
		if err != nil {
			t.Fatal(err)
		}
		del := fmt.Sprintf("x/%d", a)
		if _, err := r.store.Begin(ctx, job.ID, d.Token, del, d.Attempt); err != nil {
			t.Fatal(err)
		}
		if a < 3 {
			if _, err := r.store.End(ctx, job.ID, del, true); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.q.Nack(ctx, d, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// A crash is believed only when it is known: an unended delivery whose
// holder's slot has not restarted may be a live holder that infrastructure
// stalled (found by explore: its store replies lost, its lease lapsed), its
// outcome still on its way. Until then the job is given back unrun.
func TestWorkerCrashNeedsProof(t *testing.T) {
	for _, tt := range []struct {
		name        string
		ends        string // the store's script for End (the worker's give-back)
		then        func(ctx context.Context, s *MemStore, job string) error
		wantResults int
		wantDead    int
	}{
		{name: "the stalled holder ends its delivery", wantResults: 1,
			then: func(ctx context.Context, s *MemStore, job string) error {
				_, err := s.End(ctx, job, "x/3", false)
				return err
			}},
		// The worker's own give-back lands though the store refuses it once
		// and loses it once: left unended, it would be a live holder's.
		{name: "the give-back is retried", ends: "uA", wantResults: 1,
			then: func(ctx context.Context, s *MemStore, job string) error {
				_, err := s.End(ctx, job, "x/3", false)
				return err
			}},
		{name: "the holder's slot restarts: it died", wantDead: 1,
			then: func(ctx context.Context, s *MemStore, job string) error { return s.Started(ctx, "x.1") }},
		{name: "nothing is heard of the holder",
			then: func(context.Context, *MemStore, string) error { return nil }},
		// The holder's dead-letter (a permanent error) lands late: the job is
		// not run again (permanent_retried, found by explore on Redis).
		{name: "the holder's dead-letter lands", wantDead: 1,
			then: func(ctx context.Context, s *MemStore, job string) error {
				return s.DeadLetter(ctx, DeadLetterRecord{JobID: job, Tenant: "acme", Reason: ReasonPermanent})
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r := newRig(nil, script{"end": tt.ends}, false)
			job := r.enqueue(t, Payload{Doc: "d1", FailTransient: 2})
			r.heldByX(t, job)
			if worked, err := r.w.Step(ctx); !worked || err != nil {
				t.Fatalf("step: %v, %v", worked, err)
			}
			if st := r.state(t); len(st.DeadLetters) != 0 || r.count(history.Extract, history.Invoke, "") != 0 ||
				r.count(history.Settle, history.OK, "released") != 1 || r.count(history.Nack, history.OK, testLease.String()) != 1 {
				t.Fatalf("dead letters %+v, executions %d, released %d, nacks for a lease %d: want the job given back unrun", st.DeadLetters,
					r.count(history.Extract, history.Invoke, ""), r.count(history.Settle, history.OK, "released"), r.count(history.Nack, history.OK, testLease.String()))
			}
			if err := tt.then(ctx, r.store, job.ID); err != nil {
				t.Fatal(err)
			}
			r.now = r.now.Add(testLease)
			r.run(5)
			st := r.state(t)
			if len(st.Results) != tt.wantResults || len(st.DeadLetters) != tt.wantDead {
				t.Fatalf("results %d, dead letters %+v; want %d and %d", len(st.Results), st.DeadLetters, tt.wantResults, tt.wantDead)
			}
			switch {
			case tt.wantResults > 0 && r.count(history.Extract, history.Invoke, "3") != 1:
				t.Errorf("the job's third attempt did not run")
			case tt.wantResults == 0 && r.count(history.Extract, history.Invoke, "") != 0:
				t.Errorf("the job ran %d times, want none: its budget may be spent", r.count(history.Extract, history.Invoke, ""))
			case tt.wantResults+tt.wantDead == 0 && r.count(history.Settle, history.OK, "released") < 2:
				t.Errorf("given back %d times, want it given back again while nothing is known", r.count(history.Settle, history.OK, "released"))
			}
		})
	}
}

// slowLease is a queue whose lease answers come delay after they were asked
// for, on the rig's clock (a commit waiting for a synchronous standby through
// a failover).
type slowLease struct {
	*faultyQueue
	r     *rig
	delay time.Duration
}

func (s slowLease) Lease(ctx context.Context, l time.Duration) (adapters.Delivery, error) {
	d, err := s.faultyQueue.Lease(ctx, l)
	s.r.now = s.r.now.Add(s.delay)
	return d, err
}

// The lease runs from when it was asked for: an answer that came a third of
// the lease or more after it renews the lease before the work.
func TestWorkerRenewsALeaseAnsweredLate(t *testing.T) {
	for _, tc := range []struct {
		delay time.Duration
		want  int // extends
	}{
		{delay: 0, want: 0},
		{delay: testLease / 4, want: 0},
		{delay: testLease/3 + time.Second, want: 1},
	} {
		t.Run(tc.delay.String(), func(t *testing.T) {
			r := newRig(script{}, script{}, false)
			r.w.Queue = slowLease{faultyQueue: r.w.Queue.(*faultyQueue), r: r, delay: tc.delay}
			r.enqueue(t, Payload{Doc: "doc-1", Text: "invoice 1"})
			r.run(3)
			if got := r.count(history.Extend, history.OK, ""); got != tc.want {
				t.Errorf("%d extends, want %d", got, tc.want)
			}
			if got := r.count(history.Ack, history.OK, ""); got != 1 {
				t.Errorf("%d acks, want 1: the job was not done", got)
			}
		})
	}
}

// A delivery that finds a holder not known dead waits for it in place, the
// ledger read again: the holder's slot restarting meanwhile settles it within
// the same delivery. Given back at once instead, a broker that redelivers a
// nack immediately (RabbitMQ) counted a delivery every time, up to its
// delivery limit.
func TestWorkerAwaitsAnUnsureHolderInPlace(t *testing.T) {
	ctx := context.Background()
	r := newRig(nil, nil, false)
	job := r.enqueue(t, Payload{Doc: "d1", FailTransient: 2})
	r.heldByX(t, job)
	sleep, sleeps := r.w.Env.Sleep, 0
	r.w.Env.Sleep = func(ctx context.Context, d time.Duration) error {
		if sleeps++; sleeps == 3 { // x's slot restarts while the delivery waits
			if err := r.store.Started(ctx, "x.2"); err != nil {
				t.Fatal(err)
			}
		}
		return sleep(ctx, d)
	}
	if worked, err := r.w.Step(ctx); !worked || err != nil {
		t.Fatalf("step: %v, %v", worked, err)
	}
	st := r.state(t)
	if len(st.DeadLetters) != 1 || r.count(history.Extract, history.Invoke, "") != 0 || r.count(history.Nack, history.Invoke, "") != 0 {
		t.Fatalf("dead letters %+v, executions %d, nacks %d: want the job dead-lettered by the one delivery, unrun (x died: 3 attempts spent)",
			st.DeadLetters, r.count(history.Extract, history.Invoke, ""), r.count(history.Nack, history.Invoke, ""))
	}
	if got := r.count(history.Fence, history.OK, ""); got < 3 {
		t.Errorf("the ledger was read %d times, want it read again while the delivery waited", got)
	}
}
