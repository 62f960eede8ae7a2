package runner

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
)

// scriptedInspector answers each Inspect with the next error of its script
// (nil: an answer); past its end, it answers.
type scriptedInspector struct {
	errs []error
	n    int
}

func (s *scriptedInspector) Inspect(context.Context) (adapters.Inventory, error) {
	i := s.n
	s.n++
	if i < len(s.errs) {
		return adapters.Inventory{}, s.errs[i]
	}
	return adapters.Inventory{}, nil
}

// One failed probe is a slow answer, not an outage; probeFails in a row are
// an outage from the first one's start, and so is a failed probe followed by
// one unanswered past its limit.
func TestProbeOutageNeedsFailuresInARow(t *testing.T) {
	refused := errors.New("connection refused")
	tests := []struct {
		name     string
		errs     []error
		probes   int
		inFlight bool // a last probe started and unanswered past the limit
		down     bool
	}{
		{name: "answers", errs: nil, probes: 3},
		{name: "one slow answer", errs: []error{refused}, probes: 3},
		{name: "one failure, then answers", errs: []error{refused, nil, refused}, probes: 3},
		{name: "two in a row", errs: []error{refused, refused}, probes: 2, down: true},
		{name: "answers, then two in a row", errs: []error{nil, refused, refused}, probes: 3, down: true},
		{name: "one failure, the next unanswered", errs: []error{refused}, probes: 1, inFlight: true, down: true},
		{name: "unanswered alone", probes: 0, inFlight: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &probe{q: &scriptedInspector{errs: tt.errs}, timeout: time.Second}
			t0 := time.Unix(1000, 0)
			now := t0
			for range tt.probes {
				p.tick(context.Background(), now, false)
				for { // the probe runs in its own goroutine
					p.mu.Lock()
					r := p.running
					p.mu.Unlock()
					if !r {
						break
					}
					time.Sleep(time.Millisecond)
				}
				now = now.Add(probeEvery)
			}
			if tt.inFlight {
				p.mu.Lock()
				p.running, p.started = true, now
				p.mu.Unlock()
				now = now.Add(2 * time.Second)
			}
			from, _ := p.down(now)
			if got := !from.IsZero(); got != tt.down {
				t.Fatalf("down %v (from %v), want %v", got, from, tt.down)
			}
			if tt.down && !tt.inFlight && from.Before(t0) {
				t.Errorf("down from %v, before the first probe", from)
			}
		})
	}
}

// The target's probe tries a failed open or teardown again on a fresh
// connection (a starved broker's missed heartbeats end a connection, not the
// broker), at most probeAttempts times, and never once its context is done.
func TestTryProbe(t *testing.T) {
	boom := errors.New("read tcp: i/o timeout")
	tests := []struct {
		name      string
		failures  int // calls that fail before one succeeds
		cancel    bool
		wantCalls int
		wantErr   bool
	}{
		{"first call succeeds", 0, false, 1, false},
		{"two failures, then success", 2, false, 3, false},
		{"fails every time", 10, false, probeAttempts, true},
		{"context done after the first failure", 10, true, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			calls := 0
			err := tryProbe(ctx, func() error {
				calls++
				if tt.cancel {
					cancel()
				}
				if calls <= tt.failures {
					return boom
				}
				return nil
			})
			if calls != tt.wantCalls || (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, boom)) {
				t.Fatalf("%d calls, err %v; want %d calls, error %v", calls, err, tt.wantCalls, tt.wantErr)
			}
		})
	}
}
