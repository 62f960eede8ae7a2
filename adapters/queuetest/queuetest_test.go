package queuetest

import (
	"context"
	"errors"
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
			err := Check(tt.open, tt.f)
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
