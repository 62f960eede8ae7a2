package explore

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/plans"
)

// Defaults of ShrinkOptions: the budget, and how often a candidate must
// raise the property to count as failing — once in one run on a
// deterministic target (the embedded one), once in three elsewhere.
const (
	DefaultShrinkTries = 300
	DefaultShrinkTime  = 5 * time.Minute
	DefaultK           = 1
	DefaultNReal       = 3
)

// ShrinkOptions bound a shrink.
type ShrinkOptions struct {
	Off bool
	// Tries bounds the candidates run (each up to N times); Time the wall
	// time. When either is spent the smallest failing plan so far is kept.
	Tries int
	Time  time.Duration
	// A candidate fails when it raises the property in K of N runs (0: the
	// defaults, 1 of 1 on a deterministic target, 1 of 3 otherwise).
	K, N     int
	Progress io.Writer
}

// Shrunk is the outcome of a shrink.
type Shrunk struct {
	Plan     *plans.Plan
	Property contracts.Property
	// Result and Ops are of a run of Plan that raised Property.
	Result contracts.Result
	Ops    []history.Op
	// Candidates tried (distinct plans), Runs executed, the budget's K of N.
	Candidates, Runs, K, N int
	Wall                   time.Duration
	// Sizes before and after: jobs and faults.
	FromJobs, FromFaults, ToJobs, ToFaults int
	// Stopped says why shrinking stopped before it could go no further
	// (the budget of tries or time), "" when it went as far as it could.
	Stopped string
}

type shrinker struct {
	ctx      context.Context
	t        contracts.Target
	prop     contracts.Property
	sab      *contracts.Sabotage
	o        ShrinkOptions
	deadline time.Time
	seen     map[string]bool
	out      *Shrunk
	shown    string // the plan whose run out.Result is
}

var errBudget = fmt.Errorf("shrink budget spent")

// fails runs candidate p (K of N) and reports whether it raises the property;
// the last failing run is kept. It returns errBudget once the budget is
// spent, and an infrastructure error as it is.
func (s *shrinker) fails(p *plans.Plan) (bool, error) {
	if _, err := p.Scenario(); err != nil {
		return false, nil // not a valid plan (a kill of a worker no longer there)
	}
	b, _ := p.Marshal(true)
	key := string(b)
	if v, ok := s.seen[key]; ok {
		return v, nil
	}
	if s.ctx.Err() != nil {
		return false, s.ctx.Err()
	}
	if s.out.Candidates >= s.o.Tries {
		s.out.Stopped = fmt.Sprintf("the budget of %d candidates was spent", s.o.Tries)
		return false, errBudget
	}
	if time.Now().After(s.deadline) {
		s.out.Stopped = fmt.Sprintf("the time budget of %s was spent", s.o.Time)
		return false, errBudget
	}
	s.out.Candidates++
	hits := 0
	for n := range s.o.N {
		if hits+(s.o.N-n) < s.o.K {
			break // cannot reach K any more
		}
		r, ops, err := runPlan(s.ctx, s.t, p, "explore/shrunk", s.sab)
		s.out.Runs++
		if err != nil {
			return false, err
		}
		if _, ok := raised(r, []contracts.Property{s.prop}); ok {
			hits++
			if hits >= s.o.K {
				s.out.Result, s.out.Ops, s.shown = r, ops, key
				break
			}
		}
	}
	ok := hits >= s.o.K
	s.seen[key] = ok
	return ok, nil
}

// Shrink reduces plan p, which raised prop on t, to a smaller plan that
// still raises it: delta debugging over the faults, then the jobs, then
// simpler jobs (no second send, no deadline, no group, ordinary behaviour),
// then shorter and earlier fault windows, fewer workers, no operator; again
// while anything shrinks and the budget lasts. Every candidate runs on t
// with the plan's seed. The result is never larger than p, and always a plan
// that raised prop (p itself, when nothing smaller does).
func Shrink(ctx context.Context, t contracts.Target, p *plans.Plan, prop contracts.Property, sab *contracts.Sabotage, o ShrinkOptions) (*Shrunk, error) {
	if o.Tries <= 0 {
		o.Tries = DefaultShrinkTries
	}
	if o.Time <= 0 {
		o.Time = DefaultShrinkTime
	}
	if o.K <= 0 {
		o.K = DefaultK
	}
	if o.N <= 0 {
		o.N = 1
		if !Deterministic(t) {
			o.N = DefaultNReal
		}
	}
	o.K = min(o.K, o.N)
	begin := time.Now()
	out := &Shrunk{Plan: p.Clone(), Property: prop, K: o.K, N: o.N}
	out.FromJobs, out.FromFaults = p.Size()
	s := &shrinker{ctx: ctx, t: t, prop: prop, sab: sab, o: o, deadline: begin.Add(o.Time), seen: map[string]bool{}, out: out}
	cur := out.Plan
	ok, err := s.fails(cur)
	switch {
	case err == errBudget:
		ok = false
	case err != nil:
		return nil, err
	}
	if !ok {
		out.Wall = time.Since(begin)
		if out.Stopped == "" {
			out.Stopped = fmt.Sprintf("the plan did not raise %s again in %d of %d runs: kept as found", prop, o.K, o.N)
		}
		out.ToJobs, out.ToFaults = cur.Size()
		return out, nil
	}
	err = s.loop(&cur)
	if b, _ := cur.Marshal(true); string(b) != s.shown && ctx.Err() == nil {
		// The run shown must be of the plan kept (a cached verdict ran none):
		// one more, past the budget.
		delete(s.seen, string(b))
		s.o.Tries, s.deadline = out.Candidates+1, time.Now().Add(time.Hour)
		if _, ferr := s.fails(cur); ferr != nil {
			return nil, ferr
		}
	}
	out.Plan, out.Wall = cur, time.Since(begin)
	out.ToJobs, out.ToFaults = cur.Size()
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "explore: shrunk %s from %d jobs, %d faults to %d jobs, %d faults (%d candidates, %d runs, %s)\n",
			prop, out.FromJobs, out.FromFaults, out.ToJobs, out.ToFaults, out.Candidates, out.Runs, out.Wall.Round(time.Millisecond))
	}
	if err != nil && err != errBudget {
		return out, err
	}
	return out, nil
}

// loop applies every reduction until none shrinks the plan further.
func (s *shrinker) loop(cur **plans.Plan) error {
	// Faults first: a crash at the 150th arrival at a point needs 150
	// jobs until it is made the first.
	steps := []func(**plans.Plan) error{s.dropFaults, s.simplerFaults, s.dropJobs, s.simplerJobs, s.simplerPlan}
	for {
		before, _ := (*cur).Marshal(true)
		for _, step := range steps {
			if err := step(cur); err != nil {
				return err
			}
		}
		after, _ := (*cur).Marshal(true)
		if string(before) == string(after) {
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
