package pipeline

import (
	"math"
	"math/rand/v2"
	"time"
)

// Outcome is what the retry policy decides. There is no fourth outcome.
type Outcome int

const (
	Retry Outcome = iota
	DeadLetter
	Cancel
)

func (o Outcome) String() string { return [...]string{"retry", "dead_letter", "cancel"}[o] }

// Decision is an outcome with its delay (Retry) or reason code (DeadLetter).
type Decision struct {
	Outcome Outcome
	Delay   time.Duration
	Reason  string
}

// Policy is the retry policy. Its generator makes the jitter seeded; a Policy is
// not safe for concurrent use (each worker has its own).
type Policy struct {
	Base, Max time.Duration
	Rand      *rand.Rand
	// Unbounded retries transient errors forever: the negative control of
	// retry.bounded. Never set it otherwise.
	Unbounded bool
	// RetryPermanent retries permanent errors like transient ones: the
	// negative control of permanent_retried. Never set it otherwise.
	RetryPermanent bool
}

// Decide resolves an error on attempt (1-based) of a job with maxAttempts.
func (p *Policy) Decide(err error, attempt, maxAttempts int) Decision {
	switch Classify(err) {
	case Cancelled:
		return Decision{Outcome: Cancel}
	case Permanent:
		if !p.RetryPermanent {
			return Decision{Outcome: DeadLetter, Reason: ReasonFor(err)}
		}
	}
	if attempt >= maxAttempts && !p.Unbounded {
		return Decision{Outcome: DeadLetter, Reason: ReasonMaxAttempts}
	}
	return Decision{Outcome: Retry, Delay: p.Backoff(attempt)}
}

// Backoff is exponential from Base, capped at Max (an hour if Max is 0), with up
// to 50 % seeded jitter.
func (p *Policy) Backoff(attempt int) time.Duration {
	limit := p.Max
	if limit <= 0 {
		limit = time.Hour
	}
	d := max(p.Base, 0)
	for i := 1; i < attempt && d < limit && d <= math.MaxInt64/2; i++ {
		d *= 2
	}
	d = min(d, limit)
	if p.Rand != nil && d > 1 {
		d = d/2 + time.Duration(p.Rand.Int64N(int64(d/2)+1))
	}
	return d
}

// InfraDeliveries is how many deliveries beyond its attempt budget the broker
// may count for a job before the worker dead-letters it on that count alone.
// The budget counts what the job did (see Ledger); the broker's count also
// holds what the infrastructure did to it (lease replies lost, leases lost in a
// partition, workers killed), so its cap is larger. It is the backstop for a
// crash loop that kills the worker before the store hears of the delivery.
const InfraDeliveries = 10

// DeliveryCap is the most deliveries the broker may count for a job with
// maxAttempts attempts before the worker dead-letters it without running it.
func DeliveryCap(maxAttempts int) int { return max(maxAttempts, 0) + InfraDeliveries }
