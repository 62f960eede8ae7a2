package explore

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/durachk/durachk/checker"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/plans"
)

// Defaults of Options.
const (
	DefaultJobs      = 400
	DefaultMaxFaults = 6
	DefaultEvery     = 5 * time.Second
)

// Options of an exploration.
type Options struct {
	Seed uint64
	// Duration bounds the exploration in wall time: no round starts after
	// it, and the rounds in flight then are ended (cut: their verdicts say
	// nothing and are not counted). The shrink of a finding comes after, in
	// its own budget (ShrinkOptions.Time). Rounds, if set, bounds the number
	// of rounds; one of them must be.
	Duration time.Duration
	Rounds   int
	// Jobs per round (DefaultJobs) and the most faults a round draws
	// (DefaultMaxFaults).
	Jobs, MaxFaults int
	// Pace: the producer sends Pace times as fast as the round draws (0: 1).
	Pace int
	// Kinds narrows the fault kinds drawn (nil: every kind the target
	// supports); a kind the target does not support is an error.
	Kinds []faults.Kind
	// Shard, if set, is the part of the seed space this exploration takes:
	// round i runs only in shard (i mod Shard.Of)+1. The
	// shards 1..Of of one seed and options together run exactly the rounds
	// one exploration over all would, each once.
	Shard Shard
	// Parallel rounds at a time (0: one per CPU on a deterministic target,
	// else one).
	Parallel int
	// Want, if set, are the properties a finding must raise; other
	// violations are counted and explored past.
	Want []contracts.Property
	// Sabotage breaks the pipeline (or embedded broker) of every round: a
	// negative control of explore itself.
	Sabotage *contracts.Sabotage
	// KeepGoing explores to the end after a finding (counting violations);
	// otherwise the first finding ends the exploration.
	KeepGoing bool
	// Progress receives a line every Every (DefaultEvery), and at the end.
	Progress io.Writer
	Every    time.Duration
	// Shrink shrinks the finding (unless Shrink.Off).
	Shrink ShrinkOptions
	// Found, if set, is called with the summary once the exploration ended
	// with a finding, before the shrink: a caller writes the finding down, so
	// that a shrink cut short (a kill, a long budget) loses nothing found.
	Found func(*Summary)
}

// Shard is part Index (1 to Of) of Of disjoint parts of an exploration's
// seed space; the zero Shard is the whole.
type Shard struct{ Index, Of int }

// String is "i/N", or "" for the whole.
func (s Shard) String() string {
	if s.Of <= 1 {
		return ""
	}
	return fmt.Sprintf("%d/%d", s.Index, s.Of)
}

// round is the number of the k-th round (from 0) of shard s.
func (s Shard) round(k int) int {
	if s.Of <= 1 {
		return k
	}
	return k*s.Of + s.Index - 1
}

// Finding is a round that raised a wanted property.
type Finding struct {
	Round    int
	Plan     *plans.Plan
	Result   contracts.Result
	Ops      []history.Op
	Property contracts.Property
}

// Summary is what an exploration did and found.
type Summary struct {
	Rounds int
	// Verdicts of the rounds; Violations by property, over every round.
	Verdicts   map[contracts.Verdict]int
	Violations map[string]int
	// Drawn counts the faults the nemesis drew by kind; Stats.Faults those
	// the rounds applied (by kind and place), summed with every count.
	Drawn map[string]int
	Stats contracts.Stats
	Ops   int
	Wall  time.Duration
	// Kinds drawn from, and why each other kind was not.
	Kinds    []faults.Kind
	NotDrawn map[faults.Kind]string
	// Finding is the first round (by number) to raise a wanted property;
	// Unknown the first round whose verdict was unknown.
	Finding *Finding
	Unknown *Finding
	Shrunk  *Shrunk
	// Cut counts the rounds in flight when the duration ran out, ended
	// before their verdict (not in Rounds).
	Cut int
	// ShrinkInterrupted: ctx ended while the finding was being shrunk (no
	// Shrunk; the finding stands).
	ShrinkInterrupted bool
}

// Verdict is a violation when a round raised one, else unknown when a
// round was unknown or none ended (the duration cut every round it
// started), else pass.
func (s *Summary) Verdict() contracts.Verdict {
	switch {
	case s.Finding != nil || s.Verdicts[contracts.Violated] > 0:
		return contracts.Violated
	case s.Verdicts[contracts.Unknown] > 0, s.Rounds == 0 && s.Cut > 0:
		return contracts.Unknown
	}
	return contracts.Pass
}

// RoundSeed is the seed of round i of an exploration with seed: readable,
// seed 3 round 17 is 3000017.
func RoundSeed(seed uint64, i int) uint64 { return seed*1_000_000 + uint64(i) }

// Deterministic reports whether target t gives the same result for one seed
// every time: the embedded target.
func Deterministic(t contracts.Target) bool { return t.Capabilities().Broker == "mem" }

// capture keeps the execution of the last Execute.
type capture struct {
	contracts.Target
	ex *contracts.Execution
}

func (c *capture) Execute(ctx context.Context, run contracts.Run) (contracts.Execution, error) {
	ex, err := c.Target.Execute(ctx, run)
	if err == nil {
		c.ex = &ex
	}
	return ex, err
}

// runPlan runs plan once on t as contract id with the plan's seed, and
// returns the result and the history.
func runPlan(ctx context.Context, t contracts.Target, p *plans.Plan, id string, sab *contracts.Sabotage) (contracts.Result, []history.Op, error) {
	c, err := p.AsContract(id)
	if err != nil {
		return contracts.Result{}, nil, err
	}
	cp := &capture{Target: t}
	opts := contracts.Options{Seed: p.Seed, Tries: 1}
	var r contracts.Result
	if sab != nil {
		r, err = contracts.EvaluateSabotage(ctx, cp, c, *sab, opts)
	} else {
		r, err = contracts.Evaluate(ctx, cp, c, opts)
	}
	var ops []history.Op
	if cp.ex != nil {
		ops = cp.ex.Ops
	}
	return r, ops, err
}

// raised returns the property a finding in r is about: of the properties r
// raised among want (any, if want is empty), the one it raised most often,
// ties in the checker's report order (checker.Properties). A fault's cause
// outnumbers what follows from it — a holder preempted 176 times
// (preempted) dead-letters a few healthy jobs on the crashes the
// preemptions look like (healthy_dead_lettered) — and a shrink for the cause
// keeps the plan it needs, not the longer one its consequence needs. The
// checker lists violations by name, which put the consequence first.
func raised(r contracts.Result, want []contracts.Property) (contracts.Property, bool) {
	var best contracts.Property
	found := false
	for _, v := range r.Violations {
		p := v.Property
		if len(want) > 0 && !slices.Contains(want, p) || found && !before(r, p, best) {
			continue
		}
		best, found = p, true
	}
	return best, found
}

// before reports whether r raised p more often than q, or as often and p
// comes first in the checker's report order.
func before(r contracts.Result, p, q contracts.Property) bool {
	if a, b := r.Stats.Violations[string(p)], r.Stats.Violations[string(q)]; a != b {
		return a > b
	}
	return reportOrder(p) < reportOrder(q)
}

// reportOrder is p's place in checker.Properties (a contract's own
// property, as token_reissued, after them all).
func reportOrder(p contracts.Property) int {
	if i := slices.IndexFunc(checker.Properties, func(s checker.Spec) bool { return s.Name == p }); i >= 0 {
		return i
	}
	return len(checker.Properties)
}

// Run explores target t: round after round, each drawn by the nemesis and
// judged by every property, until the duration or the round budget is spent,
// ctx ends, or (unless KeepGoing) a round raises a wanted property; then it
// shrinks that round's plan. An error is an infrastructure failure or a bad
// option; ctx ending returns what was explored with no error.
func Run(ctx context.Context, t contracts.Target, o Options) (*Summary, error) {
	if o.Duration <= 0 && o.Rounds <= 0 {
		return nil, fmt.Errorf("explore: give a duration or a number of rounds")
	}
	if sh := o.Shard; sh.Of > 1 && (sh.Index < 1 || sh.Index > sh.Of) {
		return nil, fmt.Errorf("explore: shard %d/%d: want 1 to %d", sh.Index, sh.Of, sh.Of)
	}
	caps := t.Capabilities()
	if sab := o.Sabotage; sab != nil {
		// It would skip every round: an exploration of nothing.
		if sab.MemOnly && caps.Broker != "mem" {
			return nil, fmt.Errorf("explore: sabotage %s breaks the embedded broker or store: it runs on mem only", sab.Name)
		}
		if sab.Needs != nil {
			if why := sab.Needs(caps); why != "" {
				return nil, fmt.Errorf("explore: sabotage %s: %s", sab.Name, why)
			}
		}
	}
	nem := NewNemesis(caps, cmp.Or(o.Jobs, DefaultJobs), cmp.Or(o.MaxFaults, DefaultMaxFaults))
	nem.Pace = o.Pace
	if !Deterministic(t) {
		nem.Costly = DefaultCostly
	}
	s := &Summary{Verdicts: map[contracts.Verdict]int{}, Violations: map[string]int{}, Drawn: map[string]int{},
		Stats: contracts.Stats{Faults: map[string]int{}, Redeliveries: map[string]int{}}}
	s.Kinds, s.NotDrawn = Supported(caps)
	if o.Kinds != nil {
		for _, k := range o.Kinds {
			if why, ok := s.NotDrawn[k]; ok {
				return nil, fmt.Errorf("explore: fault kind %s: %s", k, why)
			}
			if !slices.Contains(contracts.FaultKinds, k) {
				return nil, fmt.Errorf("explore: unknown fault kind %q", k)
			}
		}
		for _, k := range s.Kinds {
			if !slices.Contains(o.Kinds, k) {
				s.NotDrawn[k] = "left out (--faults)"
			}
		}
		s.Kinds = slices.Clone(o.Kinds)
		nem.Kinds = s.Kinds
	}
	parallel := o.Parallel
	if parallel <= 0 {
		parallel = 1
		if Deterministic(t) {
			parallel = runtime.GOMAXPROCS(0)
		}
	}
	begin := time.Now()
	var deadline time.Time
	// The rounds run under rctx, which the duration ends: a round in flight
	// then is cut, not waited for (a round of a real broker takes a minute).
	rctx, cut := context.WithCancel(ctx)
	defer cut()
	if o.Duration > 0 {
		deadline = begin.Add(o.Duration)
		defer time.AfterFunc(o.Duration, cut).Stop()
	}
	var mu sync.Mutex // guards s while the progress goroutine reads it
	stopProgress := make(chan struct{})
	var progressDone sync.WaitGroup
	if o.Progress != nil {
		progressDone.Add(1)
		go func() {
			defer progressDone.Done()
			tick := time.NewTicker(cmp.Or(o.Every, DefaultEvery))
			defer tick.Stop()
			for {
				select {
				case <-stopProgress:
					return
				case <-tick.C:
					mu.Lock()
					fmt.Fprintln(o.Progress, s.progressLine(time.Since(begin)))
					mu.Unlock()
				}
			}
		}()
	}
	type done struct {
		i     int
		plan  *plans.Plan
		r     contracts.Result
		ops   []history.Op
		err   error
		alone bool
		cut   bool // ended by the duration: its verdict says nothing
	}
	results := make(chan done)
	next, running := 0, 0
	var first error
	stop := false
	// A round whose faults act on what the rounds share (the target's own
	// broker under control commands) runs alone: it waits for the rounds in
	// flight, and none starts beside it. Every other round overlaps up to
	// parallel: each has its own namespace, processes and proxies.
	dist, _ := t.(contracts.Disturber)
	var waiting *done // drawn, waiting to run alone
	alone := false
	for {
		for !stop && first == nil && rctx.Err() == nil && running < parallel && !alone &&
			(deadline.IsZero() || time.Now().Before(deadline)) {
			if waiting == nil {
				if o.Rounds > 0 && o.Shard.round(next) >= o.Rounds {
					break
				}
				i := o.Shard.round(next)
				next++
				waiting = &done{i: i, plan: nem.Draw(RoundSeed(o.Seed, i))}
				if dist != nil {
					if sc, err := waiting.plan.Scenario(); err == nil && dist.Disturbs(sc) != "" {
						waiting.alone = true
					}
				}
			}
			if waiting.alone && running > 0 {
				break
			}
			d := *waiting
			waiting = nil
			running++
			alone = d.alone
			go func() {
				d.r, d.ops, d.err = runPlan(rctx, t, d.plan, "explore", o.Sabotage)
				d.cut = rctx.Err() != nil && ctx.Err() == nil
				results <- d
			}()
		}
		if running == 0 {
			break
		}
		d := <-results
		running--
		if d.alone {
			alone = false
		}
		if d.cut {
			mu.Lock()
			s.Cut++
			mu.Unlock()
			continue
		}
		if d.err != nil {
			if first == nil && ctx.Err() == nil {
				first = fmt.Errorf("explore round %d (seed %d): %w", d.i, d.plan.Seed, d.err)
			}
			continue
		}
		if ctx.Err() != nil {
			continue // cut short: its verdict says nothing
		}
		mu.Lock()
		s.add(d.plan, d.r)
		f := &Finding{Round: d.i, Plan: d.plan, Result: d.r, Ops: d.ops}
		if prop, ok := raised(d.r, o.Want); ok {
			f.Property = prop
			if s.Finding == nil || d.i < s.Finding.Round {
				s.Finding = f
			}
			stop = stop || !o.KeepGoing
		} else if d.r.Verdict == contracts.Unknown && (s.Unknown == nil || d.i < s.Unknown.Round) {
			s.Unknown = f
		}
		mu.Unlock()
	}
	s.Wall = time.Since(begin)
	close(stopProgress)
	progressDone.Wait()
	if o.Progress != nil {
		fmt.Fprintln(o.Progress, s.progressLine(s.Wall))
	}
	if first != nil {
		return s, first
	}
	if s.Finding != nil && !o.Shrink.Off && ctx.Err() == nil {
		if o.Found != nil {
			o.Found(s)
		}
		so := o.Shrink
		if so.Progress == nil {
			so.Progress = o.Progress
		}
		sh, err := Shrink(ctx, t, s.Finding, o.Sabotage, so)
		switch {
		case ctx.Err() != nil:
			// Interrupted: the finding stands (its verdict is in hand), its
			// shrink is not done.
			s.ShrinkInterrupted = true
		case err != nil:
			return s, err
		default:
			s.Shrunk = sh
		}
	}
	return s, nil
}

// add counts one round.
func (s *Summary) add(p *plans.Plan, r contracts.Result) {
	s.Rounds++
	s.Verdicts[r.Verdict]++
	s.Ops += r.HistoryLen
	for _, f := range p.Faults {
		s.Drawn[f.Kind]++
	}
	for k, n := range r.Stats.Violations {
		s.Violations[k] += n
	}
	addStats(&s.Stats, r.Stats)
}

// AddStats adds every count of b to a: the int fields and the maps of ints
// (MaxAttempts, a maximum, is the larger of the two).
func AddStats(a *contracts.Stats, b contracts.Stats) { addStats(a, b) }

// addStats adds every count of b to a: the int fields and the maps of ints.
func addStats(a *contracts.Stats, b contracts.Stats) {
	most := max(a.MaxAttempts, b.MaxAttempts) // a maximum, not a count
	av, bv := reflect.ValueOf(a).Elem(), reflect.ValueOf(b)
	for i := range av.NumField() {
		f, g := av.Field(i), bv.Field(i)
		switch f.Kind() {
		case reflect.Int:
			f.SetInt(f.Int() + g.Int())
		case reflect.Map:
			if g.Len() == 0 {
				continue
			}
			if f.IsNil() {
				f.Set(reflect.MakeMap(f.Type()))
			}
			for _, k := range g.MapKeys() {
				old := f.MapIndex(k)
				sum := g.MapIndex(k).Int()
				if old.IsValid() {
					sum += old.Int()
				}
				f.SetMapIndex(k, reflect.ValueOf(sum).Convert(f.Type().Elem()))
			}
		}
	}
	a.MaxAttempts = most
}

// progressLine: rounds, jobs and jobs per second, faults applied by kind,
// violations so far.
func (s *Summary) progressLine(wall time.Duration) string {
	secs := max(wall.Seconds(), 1e-3)
	var b strings.Builder
	fmt.Fprintf(&b, "explore: %s  %d rounds  %d jobs (%.0f jobs/s)  faults applied: %s  violations: %s",
		wall.Round(time.Second), s.Rounds, s.Stats.Accepted, float64(s.Stats.Accepted)/secs, byKind(s.Stats.Faults), violations(s.Violations))
	if n := s.Verdicts[contracts.Unknown]; n > 0 {
		fmt.Fprintf(&b, "  unknown rounds: %d", n)
	}
	if s.Cut > 0 {
		fmt.Fprintf(&b, "  cut at the end of the duration: %d", s.Cut)
	}
	return b.String()
}

// byKind sums applied faults by kind (the part of the key before ":").
func byKind(m map[string]int) string {
	sums := map[string]int{}
	for k, n := range m {
		kind, _, _ := strings.Cut(k, ":")
		sums[kind] += n
	}
	return Counts(sums, "none")
}

func violations(m map[string]int) string { return Counts(m, "0") }

// Counts writes m as "a 1, b 2" in key order, or none when it is empty.
func Counts(m map[string]int, none string) string {
	if len(m) == 0 {
		return none
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
