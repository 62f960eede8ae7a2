// Package explore runs long randomized workloads against a target while a
// seeded nemesis draws faults from every kind the target supports, judges
// every round with every property of the checker, and shrinks a plan that
// raised a violation to a small one that still raises it (delta debugging).
//
// An exploration is a sequence of rounds. Each round is one plan (a mixed
// workload of a few hundred jobs and a handful of overlapping faults at
// random times) run on the target in a namespace of its own and judged whole
// by the streaming checker; its history is dropped once judged, unless it
// holds a violation. Memory is bounded by one round per concurrent run,
// whatever the duration.
package explore

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/pipeline"
	"github.com/durachk/durachk/plans"
)

// Nemesis draws the plan of each round from a seed: the workload and the
// faults, from the kinds it was given only.
type Nemesis struct {
	// Kinds the nemesis draws faults from.
	Kinds []faults.Kind
	// Jobs per round; MaxFaults bounds the faults of a round (at least one).
	Jobs, MaxFaults int
	// FIFO: the target claims FIFO, so some jobs share ordering groups.
	FIFO bool
	// Nodes: the target is replicated (node faults and the replication link).
	Nodes bool
	// Pace speeds the producer up: it sends Pace times as fast as drawn
	// (0 or 1: one job every 10 to 70 ms), so that a round on a real broker
	// puts it under load (a race needs load to show) without more rounds.
	Pace int
	// Costly, if above 0, bounds the slow and the poison jobs of a round
	// (Costly of each; the others are drawn normal): on a real target a slow
	// job holds a worker for seconds and a poison job kills one on every
	// delivery (a process started again). Their share (2% and 1%) grows
	// with the round: in a round of 1,600 jobs on Redis the slow ones held
	// the workers for 90 s of the 100 s they had (the round took 29 s, 6 s
	// without them) and the poison ones cost a third of its CPU time
	// (2026-12-06). A few of each exercise what they exercise; more add
	// wall and CPU time, not interleavings. explore.Run sets it on real
	// targets (the embedded one runs them in virtual time).
	Costly int
}

// DefaultCostly is Nemesis.Costly on real targets.
const DefaultCostly = 4

// Supported returns the fault kinds a target with capabilities c can apply,
// in contracts.FaultKinds order, and why each other kind cannot be.
func Supported(c adapters.Capabilities) (kinds []faults.Kind, why map[faults.Kind]string) {
	why = map[faults.Kind]string{}
	for _, k := range contracts.FaultKinds {
		if w := contracts.FaultNeeds(k, c); w != "" {
			why[k] = w
			continue
		}
		kinds = append(kinds, k)
	}
	return kinds, why
}

// NewNemesis draws from every kind a target with capabilities c supports.
func NewNemesis(c adapters.Capabilities, jobs, maxFaults int) *Nemesis {
	kinds, _ := Supported(c)
	return &Nemesis{Kinds: kinds, Jobs: jobs, MaxFaults: maxFaults, FIFO: c.FIFO, Nodes: c.NodeFaults}
}

// roundLimit bounds a round in scenario time: far past its last fault and
// its slowest jobs' work (virtual on the embedded target, where waiting costs
// nothing; real targets cap a run at two minutes anyway).
const roundLimit = 30 * time.Minute

var tenants = []string{"acme", "globex", "initech"}

// jobKinds are what a job does, with their weights out of 100: mostly
// ordinary jobs, then every way a job can go wrong.
var jobKinds = []struct {
	kind   string
	weight int
}{
	{"normal", 73}, {"flaky", 6}, {"near-budget", 4}, {"stubborn", 3}, {"permanent", 3},
	{"poison", 1}, {"poison-event", 2}, {"slow", 2}, {"fixed-later", 6},
}

func drawKind(r *rand.Rand, operator bool) string {
	total := 0
	for _, k := range jobKinds {
		if k.kind != "fixed-later" || operator { // fails until reprocessed: only where an operator reprocesses
			total += k.weight
		}
	}
	n := r.IntN(total)
	for _, k := range jobKinds {
		if k.kind == "fixed-later" && !operator {
			continue
		}
		if n < k.weight {
			return k.kind
		}
		n -= k.weight
	}
	return "normal"
}

// Draw returns the plan of the round with seed: a mixed workload (normal,
// flaky, stubborn, permanent, poison and slow jobs, poison events, jobs
// with deadlines, sent twice, resent with another payload under the same
// key, tenants sharing document ids, FIFO groups where claimed, an operator
// reprocessing dead letters in some rounds) and 1 to MaxFaults faults of the
// nemesis's kinds at random, overlapping times.
func (n *Nemesis) Draw(seed uint64) *plans.Plan {
	r := rand.New(rand.NewPCG(seed, 0xe4b1))
	jobs := max(n.Jobs, 1)
	every := time.Duration(10+r.IntN(60)) * time.Millisecond / time.Duration(max(n.Pace, 1)) // the producer's pace
	span := time.Duration(jobs) * every
	p := &plans.Plan{Format: plans.Format, Name: fmt.Sprintf("explore round (seed %d)", seed), Contract: plans.Generic, Seed: seed,
		Workers: 3 + r.IntN(4), Operator: r.IntN(3) == 0, Limit: plans.Duration(roundLimit)}
	canary := fmt.Sprintf("CANARY-%d", seed)
	costly := map[string]int{}
	p.Canaries = []string{canary}
	for i := range jobs {
		j := plans.Job{ID: fmt.Sprintf("j%04d", i), Tenant: tenants[i%len(tenants)], Doc: fmt.Sprintf("doc-%04d", i/2),
			At: plans.Duration(time.Duration(i) * every), Text: fmt.Sprintf("invoice %d %s", r.IntN(100000), canary)}
		k := drawKind(r, p.Operator)
		if n.Costly > 0 && (k == "slow" || k == "poison") {
			// The draw is made whatever the bound: the plans under it
			// are those an unbounded nemesis draws.
			if costly[k] >= n.Costly {
				k = "normal"
			} else {
				costly[k]++
			}
		}
		if k != "normal" {
			j.Kind = k
		}
		switch x := r.IntN(100); {
		case x < 5:
			j.Twice = true
		case x < 10:
			// Its deadline passes while it waits, or while it runs.
			j.Deadline = j.At + plans.Duration(time.Duration(r.IntN(4000))*time.Millisecond)
		}
		if n.FIFO && r.IntN(3) == 0 {
			j.Group = fmt.Sprintf("g%d", r.IntN(4))
		}
		p.Jobs = append(p.Jobs, j)
		if r.IntN(50) == 0 {
			// The same key again with another payload: an idempotency conflict.
			again := j
			again.ID += "-again"
			again.At += plans.Duration(time.Second)
			again.Text += " (edited)"
			again.Twice, again.Deadline = false, 0
			p.Jobs = append(p.Jobs, again)
		}
	}
	slices.SortStableFunc(p.Jobs, func(a, b plans.Job) int { return cmp.Compare(a.At, b.At) })
	if len(n.Kinds) > 0 {
		for range 1 + r.IntN(max(n.MaxFaults, 1)) {
			p.Faults = append(p.Faults, n.fault(r, n.Kinds[r.IntN(len(n.Kinds))], span, jobs, p.Workers))
		}
	}
	return p
}

var crashPoints = []pipeline.CrashPoint{pipeline.AfterLease, pipeline.AfterExtract, pipeline.MidCommit,
	pipeline.AfterCommitBeforeAck, pipeline.AfterPublishBeforeMark}

// fault draws one fault of kind k for a round whose jobs are sent over span.
func (n *Nemesis) fault(r *rand.Rand, k faults.Kind, span time.Duration, jobs, workers int) plans.Fault {
	ms := func(lo, hi int) plans.Duration {
		return plans.Duration(time.Duration(lo+r.IntN(hi-lo+1)) * time.Millisecond)
	}
	at := plans.Duration(time.Duration(r.Int64N(int64(span) + 1)))
	links := []string{faults.LinkBroker, faults.LinkStore, faults.LinkChannel}
	if n.Nodes {
		links = append(links, faults.LinkReplication)
	}
	link := links[r.IntN(len(links))]
	f := plans.Fault{Kind: string(k)}
	switch k {
	case faults.CrashAt, faults.PauseAt:
		f.Point, f.Nth = string(crashPoints[r.IntN(len(crashPoints))]), 1+r.IntN(jobs)
		if k == faults.PauseAt {
			f.For = ms(12_000, 35_000) // past the lease: a zombie
		}
	case faults.Kill:
		f.Process, f.At = fmt.Sprintf("w%d", 1+r.IntN(workers)), at
	case faults.BrokerCrash, faults.PowerLoss:
		f.At, f.For = at, ms(500, 5000)
	case faults.LinkDown, faults.Blackhole:
		f.Link, f.At, f.For = link, at, ms(500, 20_000)
	case faults.Flap:
		f.Link, f.At, f.For = link, at, ms(5000, 40_000)
	case faults.ReplyLoss:
		f.Link, f.At, f.For, f.Rate = link, at, ms(2000, 60_000), float64(5+r.IntN(46))/100
		if link == faults.LinkStore && r.IntN(2) == 0 {
			f.Match = "commit"
		}
	case faults.Reset:
		f.Link, f.At, f.For, f.Rate = link, at, ms(2000, 30_000), float64(5+r.IntN(26))/100
	case faults.Latency:
		f.Link, f.At, f.For, f.Delay, f.Jitter = link, at, ms(2000, 30_000), ms(5, 2000), ms(0, 500)
	case faults.NodeKill:
		f.Node, f.At, f.For = []string{faults.SelPrimary, faults.SelReplica, faults.SelOne}[r.IntN(3)], at, ms(2000, 30_000)
	case faults.NodePartition:
		f.Node, f.At, f.For = []string{faults.SelPrimary, faults.SelMinority, faults.SelOne}[r.IntN(3)], at, ms(2000, 30_000)
	case faults.Failover:
		f.At = at
	}
	return f
}
