package explore

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/faults"
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

// disturbing runs rounds on the embedded target, of which those with a
// broker crash disturb the others (as a broker killed under control commands
// does); it records how many rounds ran at once and whether a disturbing
// one ever had company.
type disturbing struct {
	contracts.MemTarget
	mu                 sync.Mutex
	now, most, aloneIn int
	company            []uint64 // seeds of disturbing rounds that had company
	disturbers         int
}

func (d *disturbing) Disturbs(sc contracts.Scenario) string {
	for _, f := range sc.Plan.Faults {
		if f.Kind == faults.BrokerCrash {
			return "a broker crash"
		}
	}
	return ""
}

func (d *disturbing) Execute(ctx context.Context, run contracts.Run) (contracts.Execution, error) {
	dist := d.Disturbs(run.Scenario) != ""
	d.mu.Lock()
	d.now++
	d.most = max(d.most, d.now)
	if dist {
		d.disturbers++
		if d.now > 1 {
			d.company = append(d.company, run.Seed)
		}
		d.aloneIn++
	} else if d.aloneIn > 0 {
		d.company = append(d.company, run.Seed)
	}
	d.mu.Unlock()
	time.Sleep(5 * time.Millisecond) // long enough for rounds to overlap
	ex, err := d.MemTarget.Execute(ctx, run)
	d.mu.Lock()
	d.now--
	if dist {
		d.aloneIn--
	}
	d.mu.Unlock()
	return ex, err
}

// Rounds overlap up to Parallel, except a round that disturbs the others:
// it starts only once the rounds in flight ended, and none starts beside it.
func TestDisturbingRoundsRunAlone(t *testing.T) {
	d := &disturbing{}
	s, err := Run(context.Background(), d, Options{Seed: 2, Rounds: 40, Jobs: 20, Parallel: 4, Kinds: []faults.Kind{faults.BrokerCrash, faults.Kill},
		KeepGoing: true, Shrink: ShrinkOptions{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Rounds != 40 || d.disturbers == 0 || d.disturbers == 40 {
		t.Fatalf("%d rounds, %d of them disturbing: want 40, some disturbing and some not", s.Rounds, d.disturbers)
	}
	if d.most < 2 {
		t.Errorf("at most %d rounds at once with Parallel 4: the rounds that disturb nothing did not overlap", d.most)
	}
	if len(d.company) > 0 {
		t.Errorf("disturbing rounds ran beside others (seeds %v)", d.company)
	}
}
