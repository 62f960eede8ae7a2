package explore

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/durachk/durachk/contracts"
)

// seeds records the seed of every round a target runs.
type seeds struct {
	contracts.MemTarget
	mu   sync.Mutex
	seen []uint64
}

func (s *seeds) Execute(ctx context.Context, run contracts.Run) (contracts.Execution, error) {
	s.mu.Lock()
	s.seen = append(s.seen, run.Seed)
	s.mu.Unlock()
	return s.MemTarget.Execute(ctx, run)
}

// The shards 1/N..N/N of one exploration run disjoint sets of round seeds
// whose union is exactly the seeds one exploration over all runs, and their
// counts add up to its counts.
func TestShardsPartitionTheSeedSpace(t *testing.T) {
	const rounds = 11
	whole := &seeds{}
	all, err := Run(context.Background(), whole, Options{Seed: 3, Rounds: rounds, Jobs: 40, Shrink: ShrinkOptions{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Sorted(slices.Values(whole.seen))
	if len(want) != rounds {
		t.Fatalf("the whole exploration ran %d rounds, want %d", len(want), rounds)
	}
	for _, n := range []int{1, 2, 3, 4, 11, 12} {
		owner := map[uint64]int{}
		total := Summary{Stats: contracts.Stats{}}
		for i := 1; i <= n; i++ {
			sh := &seeds{}
			s, err := Run(context.Background(), sh, Options{Seed: 3, Rounds: rounds, Jobs: 40, Shard: Shard{Index: i, Of: n}, Shrink: ShrinkOptions{Off: true}})
			if err != nil {
				t.Fatal(err)
			}
			for _, seed := range sh.seen {
				if o, dup := owner[seed]; dup {
					t.Errorf("%d shards: seed %d ran in shard %d and %d", n, seed, o, i)
				}
				owner[seed] = i
				if r := int(seed - RoundSeed(3, 0)); r%n != i-1 {
					t.Errorf("%d shards: shard %d ran round %d", n, i, r)
				}
			}
			total.Rounds += s.Rounds
			total.Ops += s.Ops
			addStats(&total.Stats, s.Stats)
		}
		if got := slices.Sorted(maps.Keys(owner)); !slices.Equal(got, want) {
			t.Errorf("%d shards ran seeds %v, the whole exploration %v", n, got, want)
		}
		if total.Rounds != all.Rounds || total.Ops != all.Ops || total.Stats.Accepted != all.Stats.Accepted || total.Stats.Executions != all.Stats.Executions {
			t.Errorf("%d shards: %d rounds, %d ops, %d jobs, %d executions; the whole: %d, %d, %d, %d", n,
				total.Rounds, total.Ops, total.Stats.Accepted, total.Stats.Executions, all.Rounds, all.Ops, all.Stats.Accepted, all.Stats.Executions)
		}
	}
	if _, err := Run(context.Background(), contracts.MemTarget{}, Options{Rounds: 1, Shard: Shard{Index: 3, Of: 2}}); err == nil {
		t.Error("shard 3/2 ran")
	}
}
