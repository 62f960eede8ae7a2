package pipeline

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	transient := &TransientError{Err: errors.New("upstream busy")}
	tests := []struct {
		name        string
		err         error
		attempt     int
		maxAttempts int
		unbounded   bool
		want        Outcome
		wantReason  string
	}{
		{name: "transient below max", err: transient, attempt: 1, maxAttempts: 3, want: Retry},
		{name: "transient one below max", err: transient, attempt: 2, maxAttempts: 3, want: Retry},
		{name: "transient at max", err: transient, attempt: 3, maxAttempts: 3, want: DeadLetter, wantReason: ReasonMaxAttempts},
		{name: "transient above max", err: transient, attempt: 9, maxAttempts: 3, want: DeadLetter, wantReason: ReasonMaxAttempts},
		{name: "unknown error is transient", err: errors.New("connection reset"), attempt: 1, maxAttempts: 3, want: Retry},
		{name: "max attempts 1", err: transient, attempt: 1, maxAttempts: 1, want: DeadLetter, wantReason: ReasonMaxAttempts},
		{name: "permanent on first attempt", err: &PermanentError{Code: ReasonPermanent, Err: errors.New("bad pdf")}, attempt: 1, maxAttempts: 3, want: DeadLetter, wantReason: ReasonPermanent},
		{name: "permanent keeps its code", err: &PermanentError{Code: ReasonInvalidJob, Err: errors.New("bad json")}, attempt: 1, maxAttempts: 3, want: DeadLetter, wantReason: ReasonInvalidJob},
		{name: "permanent without code", err: &PermanentError{Err: errors.New("x")}, attempt: 1, maxAttempts: 3, want: DeadLetter, wantReason: ReasonPermanent},
		{name: "wrapped permanent", err: fmt.Errorf("extract: %w", &PermanentError{Code: ReasonPermanent, Err: errors.New("x")}), attempt: 2, maxAttempts: 3, want: DeadLetter, wantReason: ReasonPermanent},
		{name: "deadline passed cancels", err: ErrDeadlinePassed, attempt: 1, maxAttempts: 3, want: Cancel},
		{name: "wrapped deadline passed cancels at max", err: fmt.Errorf("lease: %w", ErrDeadlinePassed), attempt: 3, maxAttempts: 3, want: Cancel},
		{name: "idempotency conflict", err: &IdempotencyConflictError{Key: "acme:d:v1", ExistingHash: "aa", NewHash: "bb"}, attempt: 1, maxAttempts: 3, want: DeadLetter, wantReason: ReasonIdempotencyConflict},
		{name: "wrapped idempotency conflict", err: fmt.Errorf("commit: %w", &IdempotencyConflictError{Key: "k"}), attempt: 1, maxAttempts: 3, want: DeadLetter, wantReason: ReasonIdempotencyConflict},
		{name: "unbounded transient at max retries", err: transient, attempt: 3, maxAttempts: 3, unbounded: true, want: Retry},
		{name: "unbounded transient far past max retries", err: transient, attempt: 1000, maxAttempts: 3, unbounded: true, want: Retry},
		{name: "unbounded permanent still dead-letters", err: &PermanentError{Code: ReasonPermanent, Err: errors.New("x")}, attempt: 1, maxAttempts: 3, unbounded: true, want: DeadLetter, wantReason: ReasonPermanent},
		{name: "unbounded deadline still cancels", err: ErrDeadlinePassed, attempt: 1, maxAttempts: 3, unbounded: true, want: Cancel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &Policy{Base: 100 * time.Millisecond, Max: 2 * time.Second, Unbounded: tt.unbounded}
			got := p.Decide(tt.err, tt.attempt, tt.maxAttempts)
			if got.Outcome != tt.want {
				t.Fatalf("Decide(%v, %d, %d) = %s, want %s", tt.err, tt.attempt, tt.maxAttempts, got.Outcome, tt.want)
			}
			if got.Reason != tt.wantReason {
				t.Fatalf("Decide reason = %q, want %q", got.Reason, tt.wantReason)
			}
			if got.Outcome == Retry && got.Delay != p.Backoff(tt.attempt) {
				t.Fatalf("retry delay %v, want Backoff(%d) = %v", got.Delay, tt.attempt, p.Backoff(tt.attempt))
			}
			if got.Outcome != Retry && got.Delay != 0 {
				t.Fatalf("%s carries a delay %v", got.Outcome, got.Delay)
			}
			if got.Outcome == DeadLetter && !contains(ReasonCodes, got.Reason) {
				t.Fatalf("dead-letter reason %q is not a reason code", got.Reason)
			}
		})
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[Outcome]string{Retry: "retry", DeadLetter: "dead_letter", Cancel: "cancel"} {
		if o.String() != want {
			t.Errorf("Outcome(%d).String() = %q, want %q", o, o.String(), want)
		}
	}
}

func TestBackoffWithoutJitter(t *testing.T) {
	p := &Policy{Base: 100 * time.Millisecond, Max: time.Second}
	tests := []struct {
		attempt int
		want    time.Duration
	}{
		{0, 100 * time.Millisecond},
		{1, 100 * time.Millisecond},
		{2, 200 * time.Millisecond},
		{3, 400 * time.Millisecond},
		{4, 800 * time.Millisecond},
		{5, time.Second},
		{6, time.Second},
		{64, time.Second},
		{1 << 30, time.Second},
	}
	for _, tt := range tests {
		if got := p.Backoff(tt.attempt); got != tt.want {
			t.Errorf("Backoff(%d) = %v, want %v", tt.attempt, got, tt.want)
		}
	}
}

func TestBackoffJitterWithinBounds(t *testing.T) {
	p := &Policy{Base: 100 * time.Millisecond, Max: 3 * time.Second, Rand: rand.New(rand.NewPCG(1, 2))}
	nominal := (&Policy{Base: p.Base, Max: p.Max}).Backoff
	sawBelow := false
	for attempt := 1; attempt <= 12; attempt++ {
		d := nominal(attempt)
		for range 200 {
			got := p.Backoff(attempt)
			if got < d/2 || got > d {
				t.Fatalf("Backoff(%d) = %v, want within [%v, %v]", attempt, got, d/2, d)
			}
			if got > p.Max {
				t.Fatalf("Backoff(%d) = %v exceeds Max %v", attempt, got, p.Max)
			}
			if got < d {
				sawBelow = true
			}
		}
	}
	if !sawBelow {
		t.Fatal("jitter never shortened a delay: the generator is not used")
	}
}

func TestBackoffCapNotPowerOfTwo(t *testing.T) {
	// Max is not Base·2ⁿ: the doubling overshoots it and must be capped.
	p := &Policy{Base: 300 * time.Millisecond, Max: time.Second, Rand: rand.New(rand.NewPCG(9, 9))}
	for range 1000 {
		if got := p.Backoff(10); got > time.Second || got < 500*time.Millisecond {
			t.Fatalf("Backoff(10) = %v, want within [500ms, 1s]", got)
		}
	}
}

func TestBackoffSeededJitterIsDeterministic(t *testing.T) {
	seq := func(seed uint64) []time.Duration {
		p := &Policy{Base: 500 * time.Millisecond, Max: 5 * time.Second, Rand: rand.New(rand.NewPCG(seed, 1001))}
		var out []time.Duration
		for attempt := 1; attempt <= 40; attempt++ {
			out = append(out, p.Backoff(attempt%6+1))
		}
		return out
	}
	a, b := seq(42), seq(42)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, delay %d differs: %v vs %v", i, a[i], b[i])
		}
	}
	c := seq(43)
	differs := false
	for i := range a {
		if a[i] != c[i] {
			differs = true
		}
	}
	if !differs {
		t.Fatal("seeds 42 and 43 gave the same 40 delays: the jitter ignores the seed")
	}
}

func TestUnboundedNeverDeadLettersTransient(t *testing.T) {
	p := &Policy{Base: time.Millisecond, Max: time.Second, Unbounded: true, Rand: rand.New(rand.NewPCG(3, 3))}
	for attempt := 1; attempt <= 500; attempt++ {
		d := p.Decide(&TransientError{Err: errors.New("busy")}, attempt, 3)
		if d.Outcome != Retry {
			t.Fatalf("attempt %d: Unbounded policy decided %s for a transient error", attempt, d.Outcome)
		}
		if d.Delay <= 0 || d.Delay > time.Second {
			t.Fatalf("attempt %d: delay %v out of (0, Max]", attempt, d.Delay)
		}
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Class
	}{
		{"nil-free unknown", errors.New("boom"), Transient},
		{"transient", &TransientError{Err: errors.New("x")}, Transient},
		{"permanent", &PermanentError{Err: errors.New("x")}, Permanent},
		{"conflict", &IdempotencyConflictError{Key: "k"}, Permanent},
		{"deadline", ErrDeadlinePassed, Cancelled},
		{"deadline wins over permanent", &PermanentError{Err: ErrDeadlinePassed}, Cancelled},
	}
	for _, tt := range tests {
		if got := Classify(tt.err); got != tt.want {
			t.Errorf("%s: Classify = %s, want %s", tt.name, got, tt.want)
		}
	}
}
