package explore

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/plans"
)

// Defaults of ShrinkOptions. A candidate fails when it raises the property
// in K of N runs: 1 of 1 on a deterministic target (the embedded one), and
// on real targets in every one of DefaultNReal runs (how these were chosen
// from measured replay rates: README, Explore and shrink). The final plan is
// replayed DefaultReplay times; on a real target a plan is kept only once it
// raised the property in DefaultMinRate of that many runs.
const (
	DefaultShrinkTries = 300
	DefaultShrinkTime  = 10 * time.Minute
	DefaultK           = 1
	DefaultNReal       = 3
	DefaultReplay      = 10
	DefaultMinRate     = 0.8
)

// ShrinkOptions bound a shrink.
type ShrinkOptions struct {
	Off bool
	// Tries bounds the candidates run (each up to N times); Time the wall
	// time of the search. When either is spent the search stops on the best
	// reproducing plan so far; confirming the last plan and the replay run
	// past the budget (at most 2×Replay runs).
	Tries int
	Time  time.Duration
	// A candidate fails when it raises the property in K of N runs (0: the
	// defaults, 1 of 1 on a deterministic target, DefaultNReal of
	// DefaultNReal otherwise; N alone means N of N).
	K, N int
	// Replay is how often the final plan is run to state its reproduction
	// rate (0: DefaultReplay). On a real target it is also the runs the plan
	// a search ends on must reproduce in, MinRate of them (0:
	// DefaultMinRate), before the shrink keeps it (its candidate runs count).
	Replay   int
	MinRate  float64
	Progress io.Writer
}

// Replay is how a plan replayed: Runs runs of it with its seed, of which
// Reproduced raised the property, NotAtRisk were unknown because they put
// less at risk than the plan's at_risk needs, and Other did neither (a pass,
// another unknown, only other properties).
type Replay struct {
	Property   contracts.Property
	Runs       int
	Reproduced int
	NotAtRisk  int
	Other      int
	MeasuredOn string
	// Deterministic: the target gives the same run for a seed every time
	// (the embedded one), so the rate is trivially all or nothing.
	Deterministic bool
	// AtRisk: the plan carries at_risk, so a replay that put too little at
	// risk is told apart (NotAtRisk) from one that did not reproduce.
	AtRisk bool
}

// Rated are the replays the rate is over: those that put at risk what the
// plan's at_risk needs (every replay, when it has none).
func (r Replay) Rated() int { return r.Runs - r.NotAtRisk }

// String reads "reproduces 9 of 10 on redis 7.0.15 (real processes)": the
// replays that reproduced of those that put at risk what at_risk needs,
// saying how many did not; without at_risk, of every replay (a replay that
// passed, having put nothing at risk perhaps, did not reproduce).
func (r Replay) String() string {
	s := fmt.Sprintf("reproduces %d of %d on %s", r.Reproduced, r.Rated(), r.MeasuredOn)
	if r.NotAtRisk > 0 {
		s += fmt.Sprintf(" (the replays that put at risk what at_risk needs; %d of %d put too little at risk: unknown, set aside)", r.NotAtRisk, r.Runs)
	}
	if r.Other > 0 {
		s += fmt.Sprintf("; %d did not raise %s", r.Other, r.Property)
	}
	if !r.AtRisk {
		s += " (no at_risk: the rate is over every replay, and one that passed did not reproduce it)"
	}
	if r.Deterministic {
		s += " (a deterministic target: every run of one seed is the same)"
	}
	return s
}

// Shrunk is the outcome of a shrink.
type Shrunk struct {
	Plan     *plans.Plan
	Property contracts.Property
	// Result and Ops are of a run of Plan that raised Property (one of the
	// replay's when any did).
	Result contracts.Result
	Ops    []history.Op
	// Candidates tried (distinct plans), Runs executed (candidates,
	// confirmations and the replay), the candidates' K of N.
	Candidates, Runs, K, N int
	// Confirmed counts the plans that reproduced in MinRate of Replay runs;
	// Unconfirmed those that did not, after which the shrink went back to
	// the newest plan before them that did.
	Confirmed, Unconfirmed int
	Wall                   time.Duration
	// Sizes before and after: jobs and faults.
	FromJobs, FromFaults, ToJobs, ToFaults int
	// Stopped says why shrinking stopped before it could go no further
	// (the budget of tries or time), "" when it went as far as it could.
	Stopped string
	// Replay is how the final plan replayed, with its at_risk.
	Replay Replay
}

// tally counts the runs of one plan and those that raised the property.
type tally struct{ hits, runs int }

// hitRun is a run that raised the property.
type hitRun struct {
	r   contracts.Result
	ops []history.Op
}

type shrinker struct {
	ctx      context.Context
	t        contracts.Target
	prop     contracts.Property
	sab      *contracts.Sabotage
	o        ShrinkOptions
	det      bool // a deterministic target: one run decides, nothing to confirm
	deadline time.Time
	// decided: whether a plan fails (K of N; false once it did not confirm).
	decided map[string]bool
	tallies map[string]*tally
	// hits keeps a run that raised the property, of the plans of the chain
	// only (a history each).
	hits map[string]hitRun
	// chain is every plan the shrink adopted, in order, from the finding's
	// to the current one: where it goes back to when the current one does
	// not confirm.
	chain     []*plans.Plan
	confirmed map[string]bool
	reverts   int
	out       *Shrunk
}

var errBudget = fmt.Errorf("shrink budget spent")

// maxReverts bounds the times a shrink goes back along its chain and
// searches again; maxWalk the plans one settle confirms going back, before
// it keeps the one that reproduced best. Each confirmation costs up to
// Replay runs.
const (
	maxReverts = 4
	maxWalk    = 5
)

func key(p *plans.Plan) string {
	b, _ := p.Marshal(true)
	return string(b)
}

func (s *shrinker) tally(k string) *tally {
	t := s.tallies[k]
	if t == nil {
		t = &tally{}
		s.tallies[k] = t
	}
	return t
}

// run runs p once and counts it; it reports whether the run raised the
// property, keeping the run if so.
func (s *shrinker) run(p *plans.Plan, k string) (bool, contracts.Result, error) {
	r, ops, err := runPlan(s.ctx, s.t, p, "explore/shrunk", s.sab)
	s.out.Runs++
	if err != nil {
		return false, r, err
	}
	t := s.tally(k)
	t.runs++
	if _, ok := raised(r, []contracts.Property{s.prop}); ok {
		t.hits++
		s.hits[k] = hitRun{r: r, ops: ops}
		return true, r, nil
	}
	return false, r, nil
}

// spent says why the search budget is spent, or "".
func (s *shrinker) spent() string {
	switch {
	case s.out.Candidates >= s.o.Tries:
		return fmt.Sprintf("the budget of %d candidates was spent", s.o.Tries)
	case time.Now().After(s.deadline):
		return fmt.Sprintf("the time budget of %s was spent", s.o.Time)
	}
	return ""
}

// fails runs candidate p (K of N) and reports whether it raises the property.
// It returns errBudget once the budget is spent, and an infrastructure error
// as it is.
func (s *shrinker) fails(p *plans.Plan) (bool, error) {
	if _, err := p.Scenario(); err != nil {
		return false, nil // not a valid plan (a kill of a worker no longer there)
	}
	k := key(p)
	if v, ok := s.decided[k]; ok {
		if v {
			s.adopt(p, k)
		}
		return v, nil
	}
	if s.ctx.Err() != nil {
		return false, s.ctx.Err()
	}
	if why := s.spent(); why != "" {
		s.out.Stopped = why
		return false, errBudget
	}
	s.out.Candidates++
	t := s.tally(k)
	for t.hits < s.o.K && t.hits+(s.o.N-t.runs) >= s.o.K {
		if _, _, err := s.run(p, k); err != nil {
			return false, err
		}
	}
	ok := t.hits >= s.o.K
	s.decided[k] = ok
	if ok {
		s.adopt(p, k)
	} else {
		delete(s.hits, k)
	}
	return ok, nil
}

// adopt records that the shrink goes on from p (every plan fails says
// fails of is adopted: ddmin and the edits take it at once).
func (s *shrinker) adopt(p *plans.Plan, k string) {
	if n := len(s.chain); n > 0 && key(s.chain[n-1]) == k {
		return
	}
	s.chain = append(s.chain, p)
}

// need is the runs of n that must raise the property for a plan to
// reproduce.
func (s *shrinker) need(n int) int { return int(math.Ceil(s.o.MinRate*float64(n) - 1e-9)) }

// confirm runs p until it has Replay runs (its candidate runs count) or the
// outcome is certain, and reports whether it raised the property in MinRate
// of them.
func (s *shrinker) confirm(p *plans.Plan) (bool, error) {
	k := key(p)
	t := s.tally(k)
	n := max(s.o.Replay, t.runs)
	need := s.need(n)
	for t.hits < need && t.hits+(n-t.runs) >= need {
		if s.ctx.Err() != nil {
			return false, s.ctx.Err()
		}
		if _, _, err := s.run(p, k); err != nil {
			return false, err
		}
	}
	ok := t.hits >= need
	if s.o.Progress != nil {
		jobs, faults := p.Size()
		verdict := "confirmed"
		if !ok {
			verdict = "not reproducible enough"
		}
		fmt.Fprintf(s.o.Progress, "explore: shrink: %d jobs, %d faults raised %s in %d of %d runs: %s\n", jobs, faults, s.prop, t.hits, t.runs, verdict)
	}
	return ok, nil
}

// settle confirms the current plan, the last of the chain: kept when it
// reproduces (MinRate of Replay runs), else marked as not failing and the
// shrink goes back along the chain to the newest plan that reproduces (at
// most maxWalk confirmations; if none does, the round's own plan: a plan
// that did not confirm is never kept, however close it came). It returns
// errBudget when the budget is spent, unless final: the last settle runs
// past it.
func (s *shrinker) settle(cur **plans.Plan, final bool) error {
	if s.det || len(s.chain) == 0 {
		return nil // one run decides
	}
	if k := key(*cur); key(s.chain[len(s.chain)-1]) != k {
		s.chain = append(s.chain, *cur) // kept by a step without fails (cannot happen; be safe)
	}
	best := -1
	for i, walked := len(s.chain)-1, 0; i >= 0 && walked < maxWalk; i-- {
		p := s.chain[i]
		k := key(p)
		if i > 0 && !s.confirmed[k] {
			// (The finding's own plan is the last resort, not confirmed: the
			// replay states its rate.)
			if !final {
				if why := s.spent(); why != "" {
					s.out.Stopped = why
					return errBudget
				}
			}
			walked++
			ok, err := s.confirm(p)
			if err != nil {
				return err
			}
			if !ok {
				s.out.Unconfirmed++
				s.decided[k] = false
				continue
			}
			s.out.Confirmed++
			s.confirmed[k] = true
		}
		best = i
		break
	}
	if best < 0 {
		// None of the plans walked back over reproduced: the round's own
		// plan, the last resort, never one that did not confirm.
		best = 0
	}
	if best < len(s.chain)-1 {
		s.reverts++
	}
	s.chain = s.chain[:best+1]
	*cur = s.chain[best]
	s.prune()
	return nil
}

// prune drops the kept runs of every plan not in the chain.
func (s *shrinker) prune() {
	keep := map[string]bool{}
	for _, p := range s.chain {
		keep[key(p)] = true
	}
	for k := range s.hits {
		if !keep[k] {
			delete(s.hits, k)
		}
	}
}

// Shrink reduces the plan of finding f, which raised f.Property on t, to a
// smaller plan that still raises it: delta debugging over the faults, then
// the jobs, then simpler jobs (no second send, no deadline, no group,
// ordinary behaviour), then shorter and earlier fault windows, fewer
// workers, no operator; again while anything shrinks and the budget lasts.
// Every candidate runs on t with the plan's seed and counts as failing when
// it raises the property in K of N runs. On a real target the plan the
// search ends on is kept only when it reproduces (MinRate of Replay runs);
// otherwise the shrink goes back along the plans it took to the newest one
// that does and searches again from there, so that neither the search nor
// its budget ends it on a plan that does not reproduce. The final plan carries
// what its violation needs at risk (plans.RisksFor) and is replayed Replay
// times; Shrunk.Replay states the rate. The result is never larger than the
// finding's plan.
func Shrink(ctx context.Context, t contracts.Target, f *Finding, sab *contracts.Sabotage, o ShrinkOptions) (*Shrunk, error) {
	det := Deterministic(t)
	if o.Tries <= 0 {
		o.Tries = DefaultShrinkTries
	}
	if o.Time <= 0 {
		o.Time = DefaultShrinkTime
	}
	if o.N <= 0 {
		o.N = 1
		if !det {
			o.N = DefaultNReal
		}
	}
	if o.K <= 0 {
		o.K = DefaultK
		if !det {
			o.K = o.N // every run
		}
	}
	o.K = min(o.K, o.N)
	if o.Replay <= 0 {
		o.Replay = DefaultReplay
	}
	if o.MinRate <= 0 || o.MinRate > 1 {
		o.MinRate = DefaultMinRate
	}
	begin := time.Now()
	prop := f.Property
	out := &Shrunk{Plan: f.Plan.Clone(), Property: prop, K: o.K, N: o.N}
	out.FromJobs, out.FromFaults = f.Plan.Size()
	s := &shrinker{ctx: ctx, t: t, prop: prop, sab: sab, o: o, det: det, deadline: begin.Add(o.Time),
		decided: map[string]bool{}, tallies: map[string]*tally{}, hits: map[string]hitRun{}, confirmed: map[string]bool{}, out: out}
	cur := out.Plan
	ok, err := s.fails(cur)
	switch {
	case err == errBudget:
		ok = false
	case err != nil:
		return nil, err
	}
	if ok {
		err = s.loop(&cur)
		if err != nil && err != errBudget {
			return out, err
		}
		if ctx.Err() == nil {
			// The budget may have ended the search on a plan not confirmed.
			if err := s.settle(&cur, true); err != nil {
				return out, err
			}
			if out.Unconfirmed > 0 && key(cur) == key(s.chain[0]) && out.Stopped == "" {
				out.Stopped = fmt.Sprintf("no smaller plan reproduced %s in %d of %d runs: kept the round's own plan", prop, s.need(o.Replay), o.Replay)
			}
		}
	} else if out.Stopped == "" {
		out.Stopped = fmt.Sprintf("the plan did not raise %s again in %d of %d runs: kept as found", prop, o.K, o.N)
	}
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	// What the violation needs at risk, from a run of the final plan that
	// raised it (the finding's own run when none did).
	k := key(cur)
	shown, hit := s.hits[k]
	st := f.Result.Stats
	if hit {
		st = shown.r.Stats
	}
	final := cur.Clone()
	final.AtRisk = plans.RisksFor(prop, st)
	rp, first, err := s.replay(final)
	if err != nil {
		return out, err
	}
	if first != nil {
		shown, hit = *first, true
	}
	if hit {
		out.Result, out.Ops = shown.r, shown.ops
	} else {
		out.Result, out.Ops = f.Result, f.Ops
	}
	out.Plan, out.Replay, out.Wall = final, rp, time.Since(begin)
	out.ToJobs, out.ToFaults = final.Size()
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "explore: shrunk %s from %d jobs, %d faults to %d jobs, %d faults (%d candidates, %d runs, %s); %s\n",
			prop, out.FromJobs, out.FromFaults, out.ToJobs, out.ToFaults, out.Candidates, out.Runs, out.Wall.Round(time.Millisecond), rp)
	}
	return out, nil
}

// replay runs the final plan Replay times with its seed and counts what each
// run did; it returns the first run that raised the property.
func (s *shrinker) replay(p *plans.Plan) (Replay, *hitRun, error) {
	rp := Replay{Property: s.prop, MeasuredOn: s.t.MeasuredOn(), Deterministic: s.det, AtRisk: len(p.AtRisk) > 0}
	var first *hitRun
	for range s.o.Replay {
		if s.ctx.Err() != nil {
			return rp, first, s.ctx.Err()
		}
		r, ops, err := runPlan(s.ctx, s.t, p, "explore/shrunk", s.sab)
		s.out.Runs++
		if err != nil {
			return rp, first, err
		}
		rp.Runs++
		_, ok := raised(r, []contracts.Property{s.prop})
		switch {
		case ok:
			rp.Reproduced++
			if first == nil {
				first = &hitRun{r: r, ops: ops}
			}
		case r.Verdict == contracts.Unknown && strings.HasPrefix(r.Reason, plans.NotAtRisk):
			rp.NotAtRisk++
		default:
			rp.Other++
		}
	}
	return rp, first, nil
}

// loop applies every reduction until none shrinks the plan further.
func (s *shrinker) loop(cur **plans.Plan) error {
	// Faults first: a crash at the 150th arrival at a point needs 150
	// jobs until it is made the first.
	steps := []func(**plans.Plan) error{s.dropFaults, s.simplerFaults, s.dropJobs, s.simplerJobs, s.simplerPlan}
	for {
		before := key(*cur)
		for _, step := range steps {
			if err := step(cur); err != nil {
				return err
			}
		}
		if key(*cur) != before {
			continue
		}
		// As far as it goes: the plan must reproduce. When it does not, the
		// shrink goes back along its chain and searches again from there
		// (what did not confirm is now known not to fail), as often as
		// maxReverts allows.
		if err := s.settle(cur, false); err != nil {
			return err
		}
		if key(*cur) == before || s.reverts > maxReverts {
			return nil
		}
	}
}

// try adopts candidate c when it still fails.
func (s *shrinker) try(cur **plans.Plan, c *plans.Plan) (bool, error) {
	ok, err := s.fails(c)
	if err != nil || !ok {
		return false, err
	}
	*cur = c
	return true, nil
}

func (s *shrinker) dropFaults(cur **plans.Plan) error {
	return dropSome(s, cur, 0, func(p *plans.Plan) *[]plans.Fault { return &p.Faults })
}

func (s *shrinker) dropJobs(cur **plans.Plan) error {
	return dropSome(s, cur, 1, func(p *plans.Plan) *[]plans.Job { return &p.Jobs })
}

// dropSome delta-debugs the list of the plan that list names down to a
// smallest failing subset of at least least items.
func dropSome[T any](s *shrinker, cur **plans.Plan, least int, list func(*plans.Plan) *[]T) error {
	p := *cur
	all := *list(p)
	keep, err := ddmin(len(all), least, func(idx []int) (bool, error) {
		c := p.Clone()
		*list(c) = pick(all, idx)
		return s.fails(c)
	})
	c := p.Clone()
	*list(c) = pick(all, keep) // failing, also when the budget ran out
	*cur = c
	return err
}

// simplerJobs makes each job plainer, one change at a time.
func (s *shrinker) simplerJobs(cur **plans.Plan) error {
	edits := []func(j *plans.Job) bool{
		func(j *plans.Job) bool { ch := j.Twice; j.Twice = false; return ch },
		func(j *plans.Job) bool { ch := j.Deadline != 0; j.Deadline = 0; return ch },
		// Past already when it is leased: the shortest deadline window.
		func(j *plans.Job) bool { ch := j.Deadline > 1; j.Deadline = 1; return ch },
		func(j *plans.Job) bool { ch := j.Group != ""; j.Group = ""; return ch },
		func(j *plans.Job) bool {
			plain := plans.Job{ID: j.ID, Tenant: j.Tenant, Doc: j.Doc, PayloadDoc: j.PayloadDoc, Version: j.Version, MaxAttempts: j.MaxAttempts,
				Group: j.Group, At: j.At, Deadline: j.Deadline, Twice: j.Twice, Text: j.Text, Count: j.Count, Every: j.Every}
			ch := *j != plain
			*j = plain
			return ch
		},
		func(j *plans.Job) bool { ch := j.Text != ""; j.Text = ""; return ch },
		func(j *plans.Job) bool { ch := j.At != 0; j.At = 0; return ch },
		func(j *plans.Job) bool { ch := j.At != 0; j.At /= 2; return ch },
	}
	for i := range (*cur).Jobs {
		for _, edit := range edits {
			if err := s.repeat(cur, 1, func(c *plans.Plan) bool { return edit(&c.Jobs[i]) }); err != nil {
				return err
			}
		}
	}
	return nil
}

// simplerFaults shortens and brings forward each fault, and makes its
// arrival count smaller, halving while the plan still fails.
func (s *shrinker) simplerFaults(cur **plans.Plan) error {
	edits := []func(f *plans.Fault) bool{
		func(f *plans.Fault) bool { ch := f.Nth > 1; f.Nth = 1; return ch },
		func(f *plans.Fault) bool { ch := f.Nth > 1; f.Nth = max(f.Nth/2, 1); return ch },
		func(f *plans.Fault) bool { ch := f.At != 0; f.At = 0; return ch },
		func(f *plans.Fault) bool { ch := f.At != 0; f.At /= 2; return ch },
		func(f *plans.Fault) bool { ch := f.For > plans.Duration(100*time.Millisecond); f.For /= 2; return ch },
		func(f *plans.Fault) bool { ch := f.Delay > plans.Duration(time.Millisecond); f.Delay /= 2; return ch },
		func(f *plans.Fault) bool { ch := f.Jitter != 0; f.Jitter = 0; return ch },
		func(f *plans.Fault) bool { ch := f.Match != ""; f.Match = ""; return ch },
	}
	for i := range (*cur).Faults {
		for _, edit := range edits {
			// halving: at most 20 times
			if err := s.repeat(cur, 20, func(c *plans.Plan) bool { return edit(&c.Faults[i]) }); err != nil {
				return err
			}
		}
	}
	return nil
}

// simplerPlan: fewer workers, no operator, no canaries.
func (s *shrinker) simplerPlan(cur **plans.Plan) error {
	edits := []func(p *plans.Plan) bool{
		func(p *plans.Plan) bool {
			w := p.Workers
			if w == 0 {
				w = plans.DefaultWorkers
			}
			p.Workers = max(w/2, 1)
			return p.Workers != w
		},
		func(p *plans.Plan) bool { ch := p.Operator; p.Operator = false; return ch },
		func(p *plans.Plan) bool { ch := len(p.Canaries) > 0; p.Canaries = nil; return ch },
	}
	for _, edit := range edits {
		if err := s.repeat(cur, 8, edit); err != nil {
			return err
		}
	}
	return nil
}

// repeat applies edit to a copy of the plan and keeps the copy while the edit
// changes something and the copy still fails, at most n times.
func (s *shrinker) repeat(cur **plans.Plan, n int, edit func(*plans.Plan) bool) error {
	for range n {
		c := (*cur).Clone()
		if !edit(c) {
			return nil
		}
		ok, err := s.try(cur, c)
		if err != nil || !ok {
			return err
		}
	}
	return nil
}

func pick[T any](xs []T, idx []int) []T {
	out := make([]T, len(idx))
	for i, j := range idx {
		out[i] = xs[j]
	}
	return out
}

// ddmin is Zeller's delta debugging: a smallest-it-can-find subset (by
// index, in order, of at least least elements) of 0..n-1 that still fails.
// The whole set is known to fail. It stops early, returning what it has,
// when the budget is spent.
func ddmin(n, least int, fails func(idx []int) (bool, error)) ([]int, error) {
	cur := make([]int, n)
	for i := range cur {
		cur[i] = i
	}
	if least == 0 && n > 0 {
		ok, err := fails(nil)
		if err != nil {
			return cur, err
		}
		if ok {
			return nil, nil
		}
	}
	gran := 2
	for len(cur) >= 2 && len(cur) > least {
		chunks := split(cur, gran)
		reduced := false
		for _, c := range chunks {
			if len(c) < least {
				continue
			}
			ok, err := fails(c)
			if err != nil {
				return cur, err
			}
			if ok {
				cur, gran, reduced = c, 2, true
				break
			}
		}
		if !reduced && gran > 2 {
			for i := range chunks {
				var comp []int
				for j, c := range chunks {
					if j != i {
						comp = append(comp, c...)
					}
				}
				if len(comp) < least {
					continue
				}
				ok, err := fails(comp)
				if err != nil {
					return cur, err
				}
				if ok {
					cur, gran, reduced = comp, max(gran-1, 2), true
					break
				}
			}
		}
		if !reduced {
			if gran >= len(cur) {
				break
			}
			gran = min(2*gran, len(cur))
		}
	}
	return cur, nil
}

func split(xs []int, n int) [][]int {
	var out [][]int
	size, rest := len(xs)/n, len(xs)%n
	i := 0
	for k := range n {
		m := size
		if k < rest {
			m++
		}
		if m > 0 {
			out = append(out, xs[i:i+m])
		}
		i += m
	}
	return out
}
