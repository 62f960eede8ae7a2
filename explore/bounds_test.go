package explore_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/explore"
	"github.com/durachk/durachk/plans"
)

// slow is a real-looking target whose rounds take a minute of wall time
// unless their context ends first: a round of a real broker in flight when
// the exploration's duration runs out.
type slow struct{ started atomic.Int32 }

func (s *slow) Name() string       { return "slow" }
func (s *slow) MeasuredOn() string { return "slow 1.0 (a round takes a minute)" }
func (s *slow) Capabilities() adapters.Capabilities {
	c := contracts.MemTarget{}.Capabilities()
	c.Broker = "slow"
	return c
}

func (s *slow) Execute(ctx context.Context, run contracts.Run) (contracts.Execution, error) {
	s.started.Add(1)
	select {
	case <-ctx.Done():
		return contracts.Execution{}, ctx.Err()
	case <-time.After(time.Minute):
	}
	return contracts.MemTarget{}.Execute(ctx, run)
}

// --duration bounds the exploration: no round starts after it, and the
// rounds in flight then end with it (their verdicts say nothing and are not
// counted). An exploration none of whose rounds ended is unknown, not a pass.
// Before, the round in flight ran its minute to the end.
func TestDurationEndsRoundsInFlight(t *testing.T) {
	tg := &slow{}
	begin := time.Now()
	s, err := explore.Run(context.Background(), tg, explore.Options{Seed: 1, Duration: 300 * time.Millisecond, Jobs: 10, Parallel: 2,
		Shrink: explore.ShrinkOptions{Off: true}})
	took := time.Since(begin)
	if err != nil {
		t.Fatal(err)
	}
	// A bound a loaded machine keeps: the rounds take a minute.
	if took > 20*time.Second {
		t.Fatalf("a 300ms exploration took %s: the rounds in flight ran on past the duration", took)
	}
	if n := int(tg.started.Load()); s.Rounds != 0 || s.Cut != n || n != 2 {
		t.Errorf("%d rounds judged, %d cut, %d started; want 0 judged, the 2 started cut", s.Rounds, s.Cut, n)
	}
	if v := s.Verdict(); v != contracts.Unknown {
		t.Errorf("no round ended, verdict %s: want unknown", v)
	}
}

// unknownTarget ends every round unknown: the broker never answers.
type unknownTarget struct{ slow }

func (u *unknownTarget) Execute(ctx context.Context, run contracts.Run) (contracts.Execution, error) {
	return contracts.Execution{}, fmt.Errorf("%w: the broker does not answer", contracts.ErrUnavailable)
}

// An exploration whose every round ended unknown is unknown, and names the
// first such round.
func TestAllRoundsUnknown(t *testing.T) {
	s, err := explore.Run(context.Background(), &unknownTarget{}, explore.Options{Seed: 1, Rounds: 3, Jobs: 10, Shrink: explore.ShrinkOptions{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Verdict() != contracts.Unknown || s.Verdicts[contracts.Unknown] != 3 || s.Unknown == nil || s.Unknown.Round != 0 {
		t.Errorf("verdict %s, verdicts %v, first unknown %+v; want unknown, 3 unknown rounds, round 0", s.Verdict(), s.Verdicts, s.Unknown)
	}
}

// A round that raised a cause and its consequence (no heartbeat: holders
// preempted, and a job dead-lettered on the crashes the preemptions look
// like) is shrunk for the property it raised most often, the preemption,
// not for the one whose name sorts first; --property still decides when
// given.
func TestFindingIsTheMostFrequentProperty(t *testing.T) {
	sab, err := plans.LookupSabotage("no-heartbeat")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		want []contracts.Property
		prop contracts.Property
	}{
		{nil, contracts.PropPreempted},
		{[]contracts.Property{contracts.PropHealthyDead}, contracts.PropHealthyDead},
		{[]contracts.Property{contracts.PropHealthyDead, contracts.PropPreempted}, contracts.PropPreempted},
	} {
		s, err := explore.Run(context.Background(), contracts.MemTarget{}, explore.Options{Seed: 1, Rounds: 10, Jobs: 60, Parallel: 1,
			Sabotage: sab, Want: c.want, Shrink: explore.ShrinkOptions{Off: true}})
		if err != nil {
			t.Fatal(err)
		}
		f := s.Finding
		if f == nil {
			t.Fatalf("want %v: no finding in %d rounds", c.want, s.Rounds)
		}
		counts := f.Result.Stats.Violations
		if counts[string(contracts.PropHealthyDead)] == 0 || counts[string(contracts.PropPreempted)] <= counts[string(contracts.PropHealthyDead)] {
			t.Fatalf("round %d raised %v: the test needs preempted more often than healthy_dead_lettered, and both", f.Round, counts)
		}
		if f.Property != c.prop {
			t.Errorf("want %v: the finding is %s (round %d raised %v), want %s", c.want, f.Property, f.Round, counts, c.prop)
		}
	}
}

// SIGINT (ctx ending) during the shrink of a finding: the exploration ends
// with the finding in hand and no error — a violation, not an
// infrastructure failure — and no shrunk plan.
func TestShrinkInterruptedKeepsTheFinding(t *testing.T) {
	c, _ := contracts.Lookup("outbox.atomic")
	sab := c.Sabotages[0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := explore.Run(ctx, contracts.MemTarget{}, explore.Options{Seed: 1, Rounds: 20, Jobs: 100, Parallel: 1, Sabotage: &sab,
		Shrink: explore.ShrinkOptions{N: 100, K: 100}, Found: func(*explore.Summary) { time.AfterFunc(50*time.Millisecond, cancel) }})
	if err != nil {
		t.Fatalf("interrupted shrink: error %v, want none", err)
	}
	if s.Finding == nil || s.Shrunk != nil || s.Verdict() != contracts.Violated || !s.ShrinkInterrupted {
		t.Errorf("finding %v, shrunk %v, verdict %s, shrink interrupted %v: want the finding, no shrunk plan, a violation, interrupted",
			s.Finding != nil, s.Shrunk != nil, s.Verdict(), s.ShrinkInterrupted)
	}
}

// A sabotage that cannot break the target's pipeline (one of the embedded
// broker's, on another broker) would skip every round: it is refused before
// any round runs.
func TestSabotageTheTargetCannotTake(t *testing.T) {
	sab, err := plans.LookupSabotage("broker-delivery-limit")
	if err != nil {
		t.Fatal(err)
	}
	if !sab.MemOnly {
		t.Fatal("broker-delivery-limit is no longer an embedded-broker sabotage: pick another")
	}
	tg := &flaky{hit: func(string, int) bool { return false }, runs: map[string]int{}}
	_, err = explore.Run(context.Background(), tg, explore.Options{Seed: 1, Rounds: 2, Jobs: 10, Sabotage: sab, Shrink: explore.ShrinkOptions{Off: true}})
	if err == nil || !strings.Contains(err.Error(), "embedded") {
		t.Errorf("error %v, want the sabotage refused", err)
	}
	if len(tg.runs) != 0 {
		t.Errorf("%d rounds ran", len(tg.runs))
	}
}
