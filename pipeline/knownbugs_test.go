package pipeline

import (
	"context"
	"math"
	"testing"
	"time"
)

// Regression tests of bugs found in review; each failed before its fix.

// store.go says "the store keeps one terminal outcome per job", but MemStore
// refuses a second outcome only after a commit: DeadLetter then Cancel (or
// Cancel then DeadLetter), and a commit after either, all succeed.
func TestKnownBugMemStoreOneTerminalOutcome(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		do   []func(s *MemStore) error
	}{
		{"dead letter then cancel", []func(s *MemStore) error{
			func(s *MemStore) error {
				return s.DeadLetter(ctx, DeadLetterRecord{JobID: "j", Reason: ReasonMaxAttempts})
			},
			func(s *MemStore) error { return s.Cancel(ctx, "j") },
		}},
		{"cancel then dead letter", []func(s *MemStore) error{
			func(s *MemStore) error { return s.Cancel(ctx, "j") },
			func(s *MemStore) error {
				return s.DeadLetter(ctx, DeadLetterRecord{JobID: "j", Reason: ReasonMaxAttempts})
			},
		}},
		{"dead letter then commit", []func(s *MemStore) error{
			func(s *MemStore) error {
				return s.DeadLetter(ctx, DeadLetterRecord{JobID: "j", Reason: ReasonMaxAttempts})
			},
			func(s *MemStore) error {
				_, err := s.CommitResultWithEvent(ctx, req("j", "acme:d:v1", "h", 1))
				return err
			},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewMemStore(MemStoreOptions{})
			for _, do := range tt.do {
				_ = do(s)
			}
			st := snap(t, s)
			n := len(st.Results) + len(st.DeadLetters) + len(st.Cancelled)
			if n != 1 {
				t.Fatalf("job j has %d terminal outcomes: %d results, %d dead letters, %d cancellations",
					n, len(st.Results), len(st.DeadLetters), len(st.Cancelled))
			}
		})
	}
}

// Backoff doubles d while d < Max: with a Max above MaxInt64/2 the doubling
// overflows and the delay becomes negative (policy.go, Backoff).
func TestKnownBugBackoffOverflow(t *testing.T) {
	p := &Policy{Base: time.Second, Max: time.Duration(math.MaxInt64)}
	for attempt := 1; attempt <= 100; attempt++ {
		if d := p.Backoff(attempt); d < p.Base {
			t.Fatalf("Backoff(%d) = %v, below Base %v", attempt, d, p.Base)
		}
	}
}
