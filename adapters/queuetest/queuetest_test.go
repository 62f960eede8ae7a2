package queuetest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/adapters/mem"
)

// The reference broker conforms to the suite: adapters/mem's TestConformance.

// unfencedAck is the reference broker with its ack fence removed: a stale or
// finished delivery acks fine.
type unfencedAck struct{ *mem.Queue }

func (q unfencedAck) Ack(ctx context.Context, d adapters.Delivery) error {
	if err := q.Queue.Ack(ctx, d); errors.Is(err, adapters.ErrStaleToken) || errors.Is(err, adapters.ErrLeaseLost) {
		return nil
	}
	return nil
}

// ownsPipelineDeadLetters is the reference broker reporting every dead letter,
// the pipeline's too, as its own doing.
type ownsPipelineDeadLetters struct{ *mem.Queue }

func (q ownsPipelineDeadLetters) Inspect(ctx context.Context) (adapters.Inventory, error) {
	inv, err := q.Queue.Inspect(ctx)
	inv.Moved = nil
	for _, id := range inv.DeadLettered {
		inv.Moved = append(inv.Moved, adapters.BrokerAction{Job: id, Action: adapters.ActionDeadLettered})
	}
	return inv, err
}

// hidesMoves is the reference broker keeping quiet about what it did on its own.
type hidesMoves struct{ *mem.Queue }

func (q hidesMoves) Inspect(ctx context.Context) (adapters.Inventory, error) {
	inv, err := q.Queue.Inspect(ctx)
	inv.Moved = nil
	return inv, err
}

// noFIFO ignores Options.FIFO.
func noFIFO(o Options) (adapters.Queue, error) {
	o.FIFO = false
	return reference(o), nil
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name     string
		open     func(o Options) (adapters.Queue, error)
		f        Features
		wantErrs []string // each must be in the joined error; none: nil
	}{
		{name: "an unfenced ack claiming fencing is caught", open: func(o Options) (adapters.Queue, error) { return unfencedAck{reference(o)}, nil },
			wantErrs: []string{`the stale holder is refused/queue: step 4 ack : got "ok", want "stale"`, `lease then ack/queue: step 5 ack : got "ok", want "lost"`}},
		{name: "a queue that is not FIFO skips the FIFO scripts", open: noFIFO},
		{name: "the pipeline's dead letters reported as the broker's are caught", open: func(o Options) (adapters.Queue, error) { return ownsPipelineDeadLetters{reference(o)}, nil },
			f: Features{Patience: 50 * time.Millisecond},
			wantErrs: []string{`dead letter moves the job/queue: step 6 inspect : got "queued=[b] inflight=[] dead=[a] moved=[a:dead_lettered] ok", want "queued=[b] inflight=[] dead=[a] ok"`,
				`the broker's dead letter is listed as moved, the pipeline's is not/queue: step 9 inspect : got "queued=[] inflight=[] dead=[a b] moved=[a:dead_lettered b:dead_lettered] ok"`}},
		{name: "a broker that hides its own dead letters is caught", open: func(o Options) (adapters.Queue, error) { return hidesMoves{reference(o)}, nil },
			f:        Features{Patience: 50 * time.Millisecond},
			wantErrs: []string{`delivery limit dead-letters on lease/queue: step 7 inspect : got "queued=[] inflight=[b] dead=[a] ok", want "queued=[] inflight=[b] dead=[a] moved=[a:dead_lettered] ok"`}},
		{name: "a deviation not declared is a difference", open: func(o Options) (adapters.Queue, error) { return reference(o), nil },
			f: Features{NackIsNewMessage: true}, wantErrs: []string{`nack at once/queue: step 4 nack : got "stale", want "lost"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// A case that wants differences runs the scripts they name: the
			// whole catalogue takes most of a minute of wall time, and the
			// case that wants none runs it all (Check as a user calls it).
			var keep func(Script) bool
			if len(tt.wantErrs) > 0 {
				keep = func(sc Script) bool {
					for _, w := range tt.wantErrs {
						if strings.HasPrefix(w, sc.Name+"/") {
							return true
						}
					}
					return false
				}
			}
			err := check(tt.open, tt.f, keep)
			if len(tt.wantErrs) == 0 {
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Check = nil, want differences")
			}
			for _, w := range tt.wantErrs {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check = %v\nlacks %q", err, w)
				}
			}
		})
	}
}

func TestProject(t *testing.T) {
	tests := []struct {
		name string
		f    Features
		caps adapters.Capabilities
		in   string
		want string
	}{
		{"reference keeps everything", Features{}, adapters.Capabilities{DeliveryCount: adapters.Native}, "queued=[a] inflight=[b c] dead=[] ok", "queued=[a] inflight=[b c] dead=[] ok"},
		{"stale is lost", Features{StaleIsLost: true}, adapters.Capabilities{}, "stale", "lost"},
		{"no delivery count hides the attempt", Features{}, adapters.Capabilities{DeliveryCount: adapters.None}, "a a3 t2", "a a- t2"},
		{"in flight counted", Features{InFlightUnnamed: true}, adapters.Capabilities{}, "queued=[a] inflight=[b c] dead=[d] ok", "queued=[a] inflight=2 dead=[d] ok"},
		{"unnamed: emptiness only", Features{Unnamed: true}, adapters.Capabilities{}, "queued=[a] inflight=[] dead=[d] ok", "drained=false dead=[d] ok"},
		{"moved passes through", Features{InFlightUnnamed: true}, adapters.Capabilities{}, "queued=[a] inflight=[b] dead=[d] moved=[d:dead_lettered *2:trimmed] ok", "queued=[a] inflight=1 dead=[d] moved=[d:dead_lettered *2:trimmed] ok"},
		{"unnamed and empty", Features{Unnamed: true}, adapters.Capabilities{}, "queued=[] inflight=[] dead=[] ok", "drained=true dead=[] ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := (env{Features: tt.f, caps: tt.caps}).project(tt.in, 0); got != tt.want {
				t.Errorf("project(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestOutcome(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{&adapters.OpError{Err: adapters.ErrStaleToken}, "stale"},
		{adapters.ErrLeaseLost, "lost"},
		{adapters.ErrNoJob, "none"},
		{adapters.ErrClosed, "closed"},
		{adapters.ErrUnavailable, "unavailable"},
		{adapters.ErrAmbiguous, "ambiguous"},
		{errors.New("boom"), "error: boom"},
	}
	for _, tt := range tests {
		if got := Outcome(tt.err); got != tt.want {
			t.Errorf("Outcome(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
}

func TestLoadFactor(t *testing.T) {
	t.Setenv(LoadEnv, "2.5")
	if got := LoadFactor(); got != 2.5 {
		t.Errorf("with %s=2.5: %v", LoadEnv, got)
	}
	t.Setenv(LoadEnv, "0.2")
	if got := LoadFactor(); got != 1 {
		t.Errorf("with %s=0.2: %v, want 1", LoadEnv, got)
	}
	t.Setenv(LoadEnv, "")
	if got := LoadFactor(); got < 1 || got > MaxLoadFactor {
		t.Errorf("from the load average: %v, want 1 to %d", got, MaxLoadFactor)
	}
}

// Every duration of a script stretches alike with the load; a broker's coarse
// lease unit is kept where the load asks for less.
func TestScaleStretchesWithLoad(t *testing.T) {
	tests := []struct {
		name string
		e    env
		in   time.Duration
		want time.Duration
	}{
		{"idle", env{load: 1}, short, short},
		{"unset load is idle", env{}, past, past},
		{"load 3", env{load: 3}, past, 3 * past},
		{"load 3, a lease of 4 short", env{load: 3}, 4 * short, 12 * short},
		{"a 1 s lease unit", env{Features: Features{LeaseUnit: time.Second}, load: 1}, short, time.Second},
		{"a 1 s lease unit outweighs load 2", env{Features: Features{LeaseUnit: time.Second}, load: 2}, short, time.Second},
		{"load 8 outweighs a 1 s lease unit", env{Features: Features{LeaseUnit: time.Second}, load: 8}, short, 8 * short},
	}
	for _, tt := range tests {
		if got := tt.e.scale(tt.in); got != tt.want {
			t.Errorf("%s: scale(%v) = %v, want %v", tt.name, tt.in, got, tt.want)
		}
	}
	if got := (env{load: 2}).patience(); got != 20*time.Second {
		t.Errorf("patience at load 2: %v, want 20s", got)
	}
	if got := (env{Features: Features{Patience: 50 * time.Millisecond}, load: 3}).patience(); got != 150*time.Millisecond {
		t.Errorf("patience 50ms at load 3: %v, want 150ms", got)
	}
}

// The timed scripts keep their margins when every call is slow (a busy
// machine's scheduling delays): on a reference broker whose every call takes
// 200 ms (stretched by the load like the scripts), a lease meant to stay live
// stays live and a nack's delay outlasts the lease after it. Its negative
// control: calls slower than the margin (400 ms before an extension of a
// lease of 900 ms, 600 ms in) are caught as an expired lease.
func TestSlowCallsKeepTheMargins(t *testing.T) {
	load := LoadFactor()
	for _, tt := range []struct {
		name   string
		script string
		steps  int // the first steps only; 0: all
		delay  time.Duration
		want   string // in the difference; "": none
	}{
		{"extend within the margin", "extend keeps a live lease", 0, 200 * time.Millisecond, ""},
		{"nack within the margin", "nack with delay", 0, 200 * time.Millisecond, ""},
		// Up to the extension: what follows a lost lease waits its patience out.
		{"extend beyond the margin", "extend keeps a live lease", 4, 400 * time.Millisecond, `step 3 extend : got "lost", want "ok"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			i := slices.IndexFunc(catalogue, func(sc Script) bool { return sc.Name == tt.script })
			if i < 0 {
				t.Fatalf("no script %q", tt.script)
			}
			sc := catalogue[i]
			steps := sc.Steps
			if tt.steps > 0 {
				steps = steps[:tt.steps]
			}
			d := time.Duration(float64(tt.delay) * load)
			e := newEnv(Features{}, slowCalls{reference(sc.Options), d})
			e.load = load
			var errs []string
			for _, err := range e.run(steps) {
				errs = append(errs, err.Error())
			}
			got := strings.Join(errs, "; ")
			switch {
			case tt.want == "" && got != "":
				t.Errorf("calls of %v: %s", d, got)
			case tt.want != "" && !strings.Contains(got, tt.want):
				t.Errorf("calls of %v: differences %q, want %q", d, got, tt.want)
			}
		})
	}
}

// slowCalls is the reference broker with a delay before every call that
// takes or gives back a delivery.
type slowCalls struct {
	*mem.Queue
	d time.Duration
}

func (q slowCalls) Lease(ctx context.Context, d time.Duration) (adapters.Delivery, error) {
	time.Sleep(q.d)
	return q.Queue.Lease(ctx, d)
}

func (q slowCalls) Ack(ctx context.Context, d adapters.Delivery) error {
	time.Sleep(q.d)
	return q.Queue.Ack(ctx, d)
}

func (q slowCalls) Nack(ctx context.Context, d adapters.Delivery, delay time.Duration) error {
	time.Sleep(q.d)
	return q.Queue.Nack(ctx, d, delay)
}

func (q slowCalls) Extend(ctx context.Context, d adapters.Delivery, l time.Duration) error {
	time.Sleep(q.d)
	return q.Queue.Extend(ctx, d, l)
}
