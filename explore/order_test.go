package explore_test

import (
	"context"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/explore"
)

// heldRound is the embedded target with one round held back: its execution
// waits until release is closed (or a minute passes: the test then fails on
// the order it asserts, never hangs).
type heldRound struct {
	contracts.MemTarget
	seed    uint64
	release chan struct{}
}

func (h heldRound) Execute(ctx context.Context, run contracts.Run) (contracts.Execution, error) {
	if run.Seed == h.seed {
		select {
		case <-h.release:
		case <-time.After(time.Minute):
		case <-ctx.Done():
		}
	}
	return h.MemTarget.Execute(ctx, run)
}

// roundsSeen closes release once a progress line counts at least n rounds:
// the exploration has judged and counted them.
type roundsSeen struct {
	n       int
	release chan struct{}
	once    sync.Once
}

var roundsRE = regexp.MustCompile(`  (\d+) rounds  `)

func (r *roundsSeen) Write(p []byte) (int, error) {
	if m := roundsRE.FindSubmatch(p); m != nil {
		if k, _ := strconv.Atoi(string(m[1])); k >= r.n {
			r.once.Do(func() { close(r.release) })
		}
	}
	return len(p), nil
}

// A parallel exploration reports the lowest-numbered round that raised a
// finding, whatever order the rounds finish in: round 0, held back until
// rounds 1 and 2 (violations both) were judged and counted, finishes last
// and is still the finding. Deterministic: the hold is a seam, not a race.
// (Killed by hand the mutant that keeps the first finding to arrive, which
// an exploration test caught 3 runs in 9.)
func TestParallelFindingIsTheLowestRound(t *testing.T) {
	c, _ := contracts.Lookup("tenant.isolation") // key-without-tenant: every round violates
	sab := c.Sabotages[0]
	const seed = 1
	release := make(chan struct{})
	target := heldRound{seed: explore.RoundSeed(seed, 0), release: release}
	s, err := explore.Run(context.Background(), target, explore.Options{Seed: seed, Rounds: 3, Jobs: 100, Parallel: 3,
		Want: sab.Raises, Sabotage: &sab, Shrink: explore.ShrinkOptions{Off: true},
		Progress: &roundsSeen{n: 2, release: release}, Every: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if s.Rounds != 3 || s.Verdicts[contracts.Violated] != 3 {
		t.Fatalf("setup: %d rounds, verdicts %v: want 3 rounds, each a violation", s.Rounds, s.Verdicts)
	}
	select {
	case <-release:
	default:
		t.Fatalf("round 0 ran before rounds 1 and 2 were counted: the test did not hold it back")
	}
	switch {
	case s.Finding == nil:
		t.Errorf("no finding: want round 0")
	case s.Finding.Round != 0:
		t.Errorf("finding: round %d (%s): want round 0, the lowest-numbered round that raised one, though it finished last", s.Finding.Round, s.Finding.Property)
	}
}
