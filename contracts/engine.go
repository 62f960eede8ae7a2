package contracts

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/durachk/durachk/checker"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/history"
)

// Options of one evaluation.
type Options struct {
	Seed uint64
	Jobs int // 0: DefaultJobs
	// Trials runs the contract this many times with successive seeds (0: once).
	// The verdict is a violation if any trial violated, else unknown if any
	// trial was unknown, else pass.
	Trials int
	// Tries bounds the seeds one trial runs: a run that did not exercise its
	// claim (Contract.Exercised) tries another seed (see EvaluateTrial), up
	// to Tries runs in all, before the trial is unknown (0: DefaultTries).
	Tries int
}

// DefaultTries is Options.Tries when unset.
const DefaultTries = 3

// Evaluate runs contract c on target t and returns its verdict. A target that
// lacks a capability the contract needs gives Skipped with the reason; a target
// that cannot be reached (ErrUnavailable) gives Unknown with the reason; any
// other error means the run itself could not be carried out (infrastructure),
// not a verdict.
func Evaluate(ctx context.Context, t Target, c *Contract, opts Options) (Result, error) {
	return evaluate(ctx, t, c, opts, nil)
}

// EvaluateSabotage runs c against one of its deliberately broken variants.
func EvaluateSabotage(ctx context.Context, t Target, c *Contract, s Sabotage, opts Options) (Result, error) {
	return evaluate(ctx, t, c, opts, &s)
}

func evaluate(ctx context.Context, t Target, c *Contract, opts Options, sab *Sabotage) (Result, error) {
	runs := make([]Result, max(opts.Trials, 1))
	for k := range runs {
		r, err := evaluateTrial(ctx, t, c, opts, sab, k)
		if err != nil || r.Verdict == Skipped {
			return r, err
		}
		runs[k] = r
	}
	return Aggregate(runs), nil
}

// EvaluateTrial runs trial k (from 0) of opts.Trials of contract c on t: seed
// opts.Seed+k; a run that did not exercise the claim tries the seed n further
// (n the number of trials, so that no two trials share a seed; with one
// trial, the next seed), up to opts.Tries runs. The trial's own record is the
// result's only Trials entry. The trials of a contract may run concurrently;
// Aggregate makes the contract's result of them, in trial order.
func EvaluateTrial(ctx context.Context, t Target, c *Contract, opts Options, k int) (Result, error) {
	return evaluateTrial(ctx, t, c, opts, nil, k)
}

// EvaluateSabotageTrial is EvaluateTrial with s breaking the pipeline or the
// broker (a plan's negative control).
func EvaluateSabotageTrial(ctx context.Context, t Target, c *Contract, s Sabotage, opts Options, k int) (Result, error) {
	return evaluateTrial(ctx, t, c, opts, &s, k)
}

func evaluateTrial(ctx context.Context, t Target, c *Contract, opts Options, sab *Sabotage, k int) (Result, error) {
	jobs := opts.Jobs
	if jobs <= 0 {
		jobs = DefaultJobs
	}
	n, tries := uint64(max(opts.Trials, 1)), opts.Tries
	if tries <= 0 {
		tries = DefaultTries
	}
	seed := opts.Seed + uint64(k)
	if c.Needs != nil {
		if why := c.Needs(t.Capabilities()); why != "" {
			res, _ := head(t, c, seed, jobs, sab)
			res.Verdict, res.Reason = Skipped, why
			return res, nil
		}
	}
	if sab != nil && sab.MemOnly && t.Capabilities().Broker != "mem" {
		res, _ := head(t, c, seed, jobs, sab)
		res.Verdict, res.Reason = Skipped, "this negative control breaks the embedded broker or store: it runs on mem only"
		return res, nil
	}
	if _, own := ownWorker(t); sab != nil && own && sab.Pipeline.InWorkerOnly() {
		res, _ := head(t, c, seed, jobs, sab)
		res.Verdict, res.Reason = Skipped, "this negative control breaks the reference pipeline's worker, which the target's own worker (worker.command) replaces: the worker's own sabotages run instead"
		return res, nil
	}
	if sab != nil && sab.Worker != "" && !own(t) {
		res, _ := head(t, c, seed, jobs, sab)
		res.Verdict, res.Reason = Skipped, "a sabotage of a worker of one's own: this target runs the reference pipeline"
		return res, nil
	}
	if sab != nil && sab.Needs != nil {
		if why := sab.Needs(t.Capabilities()); why != "" {
			res, _ := head(t, c, seed, jobs, sab)
			res.Verdict, res.Reason = Skipped, why
			return res, nil
		}
	}
	var (
		r          Result
		tr         Trial
		wall       time.Duration
		runIDs     []string
		skippedFor []string // why the earlier seeds did not count
	)
	for try := 1; ; try++ {
		var err error
		r, err = once(ctx, t, c, seed, jobs, sab)
		wall += r.Wall
		runIDs = append(runIDs, r.RunIDs...)
		if err != nil {
			r.RunIDs = runIDs
			return r, err
		}
		tr.SeedsTried = append(tr.SeedsTried, seed)
		why := notExercised(r, c)
		if why == "" || try >= tries {
			break
		}
		skippedFor = append(skippedFor, fmt.Sprintf("seed %d did not exercise the claim (%s)", seed, why))
		seed += n
	}
	if len(skippedFor) > 0 {
		note := strings.Join(skippedFor, "; ")
		switch {
		case r.Verdict == Pass:
			r.Reason = fmt.Sprintf("passed on seed %d; %s", r.Seed, note)
		case notExercised(r, c) != "":
			r.Reason = fmt.Sprintf("%s on each of %d seeds (%s)", r.Reason, len(tr.SeedsTried), seedList(tr.SeedsTried))
		default:
			r.Reason += "; " + note
		}
	} else {
		tr.SeedsTried = nil
	}
	tr.Seed, tr.Verdict, tr.Reason, tr.Violations = r.Seed, r.Verdict, r.Reason, r.Violations
	r.Trials, r.Wall, r.RunIDs = []Trial{tr}, wall, runIDs
	return r, nil
}

// head is a result without a verdict, what a run of c with seed is about, and
// the run's scenario.
func head(t Target, c *Contract, seed uint64, jobs int, sab *Sabotage) (Result, Scenario) {
	sc := c.Scenario(seed, jobs)
	res := Result{Contract: c.ID, Claim: c.Claim, Target: t.Name(), Broker: t.Capabilities().Broker,
		MeasuredOn: t.MeasuredOn(), Seed: seed, Scenario: sc.Name, Planned: planned(sc.Plan)}
	if sab != nil {
		res.Sabotage = sab.Name
	}
	return res, sc
}

// once runs c with one seed. A target that cannot be reached gives an
// unknown result, not an error.
func once(ctx context.Context, t Target, c *Contract, seed uint64, jobs int, sab *Sabotage) (Result, error) {
	res, sc := head(t, c, seed, jobs, sab)
	begin := time.Now()
	ex, err := t.Execute(ctx, Run{Contract: c.ID, Scenario: sc, Seed: seed, Sabotage: sab})
	res.Wall = time.Since(begin)
	if ex.RunID != "" {
		res.RunIDs = []string{ex.RunID}
	}
	if err != nil {
		if errors.Is(err, ErrUnavailable) && ctx.Err() == nil {
			res.Verdict, res.Reason = Unknown, err.Error()
			return res, nil
		}
		return res, fmt.Errorf("%s on %s: %w", c.ID, t.Name(), err)
	}
	judge(&res, ex, c.Exercised, c.Properties)
	return res, nil
}

// notExercised says why run r did not exercise c's claim, or "".
func notExercised(r Result, c *Contract) string {
	if r.Verdict != Unknown || c.Exercised == nil {
		return ""
	}
	if why := c.Exercised(r.Stats); why != "" && why == r.Reason {
		return why
	}
	return ""
}

// Aggregate is the result of a contract's trials (each from EvaluateTrial,
// in trial order): a violation if any trial violated, else unknown if any
// was, else pass; the details are those of the first violating trial, else
// the first unknown one, else the last. Trials lists every trial, unless there
// was one run of one seed.
func Aggregate(runs []Result) Result {
	rep := len(runs) - 1
	var bad []int
	for _, v := range []Verdict{Violated, Unknown} {
		for i, r := range runs {
			if r.Verdict == v {
				bad = append(bad, i)
			}
		}
		if len(bad) > 0 {
			rep = bad[0]
			break
		}
	}
	res := runs[rep]
	var ts []Trial
	res.Wall, res.RunIDs = 0, nil
	for _, r := range runs {
		ts = append(ts, r.Trials...)
		res.Wall += r.Wall
		res.RunIDs = append(res.RunIDs, r.RunIDs...)
	}
	res.Trials = ts
	if len(ts) <= 1 && (len(ts) == 0 || len(ts[0].SeedsTried) == 0) {
		res.Trials = nil
		return res
	}
	if len(ts) > 1 && len(bad) > 0 {
		seeds := make([]uint64, len(bad))
		for i, b := range bad {
			seeds[i] = runs[b].Seed
		}
		res.Reason = fmt.Sprintf("%s in %d of %d trials (seed %s): %s", res.Verdict, len(bad), len(ts), seedList(seeds), res.Reason)
	}
	return res
}

func seedList(seeds []uint64) string {
	parts := make([]string, len(seeds))
	for i, s := range seeds {
		parts[i] = fmt.Sprint(s)
	}
	return strings.Join(parts, ", ")
}

// Judge gives the verdict of one execution of c as the engine does: the
// checker's answer, c's own properties, a cluster's context, then the steps
// beyond the checker (a cluster that did not settle, a broker outage, a run
// that did not drain, a claim not exercised). It fills res's verdict, reason,
// violations, stats, metrics, history length and cluster facts, and returns
// the checker's own answer, each property under its name. `durachk check
// --result` re-judges a recorded run with it.
func Judge(res *Result, c *Contract, ex Execution) checker.Result {
	return judge(res, ex, c.Exercised, c.Properties)
}

// judge fills in the verdict: a run cut short by an unavailable broker is
// unknown; otherwise any violation wins; then anything undecided makes it
// unknown; a run that did not exercise the claim is unknown too, never pass.
// It returns the checker's answer.
func judge(res *Result, ex Execution, exercised func(Stats) string, own ...func([]history.Op, Final) []Violation) checker.Result {
	cr := checker.Check(ex.Ops, ex.Final, ex.Check)
	vs, st, undecided := cr.Violations, cr.Stats, cr.Undecided
	// The contract's own properties (fencing.failover: token_reissued).
	for _, p := range own {
		if p == nil {
			continue
		}
		for _, v := range p(ex.Ops, ex.Final) {
			if st.Violations == nil {
				st.Violations = map[string]int{}
			}
			st.Violations[string(v.Property)]++
			if st.Violations[string(v.Property)] <= maxPerProperty {
				vs = append(vs, v)
			}
		}
	}
	res.Cluster = clusterFacts(ex.Ops)
	if res.Cluster != nil {
		withClusterContext(ex.Ops, vs)
	}
	res.Violations, res.Stats, res.HistoryLen = vs, st, len(ex.Ops)
	res.Metrics = Measure(ex.Ops)
	switch {
	case ex.OverBudget != "":
		// Stopped before its end: what a cut-short history shows is no verdict.
		res.Verdict, res.Reason, res.Violations = Unknown, ex.OverBudget, nil
	case ex.Unsettled != "":
		res.Verdict, res.Reason = Unknown, "the cluster did not settle after the last fault: "+ex.Unsettled
	case ex.Unavailable != "":
		// The final state could not be read: what the checker finds in a
		// partial history is no verdict.
		res.Verdict, res.Reason, res.Violations = Unknown, ex.Unavailable, nil
	case len(vs) > 0:
		res.Verdict = Violated
		res.Reason = summarize(vs, st.Violations)
	case len(undecided) > 0:
		res.Verdict, res.Reason = Unknown, strings.Join(undecided, "; ")
	case !ex.Final.Drained:
		res.Verdict, res.Reason = Unknown, "the run hit its time limit before it drained"
	case exercised != nil && exercised(st) != "":
		res.Verdict, res.Reason = Unknown, exercised(st)
	default:
		res.Verdict = Pass
	}
	return cr
}

// Caught reports whether a sabotaged run r was caught: its verdict is a
// violation, and every property s declares fired with a witness. A run whose
// verdict is unknown (a cluster that did not settle, a broker gone) is not
// caught, whatever its violations: the verdict is what a user gates on.
// Otherwise it says what is missing, naming each property that did not fire.
func Caught(r Result, s Sabotage) (bool, string) {
	if len(s.Raises) == 0 {
		return false, "the sabotage declares no property it must raise"
	}
	var missing []string
	for _, p := range s.Raises {
		found := false
		for _, v := range r.Violations {
			if v.Property == p && (len(v.Witness) > 0 || len(v.Facts) > 0) {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, string(p))
		}
	}
	if len(missing) == 0 && r.Verdict == Violated {
		return true, ""
	}
	var got []string
	for _, v := range r.Violations {
		if !slices.Contains(got, string(v.Property)) {
			got = append(got, string(v.Property))
		}
	}
	raised := "nothing"
	if len(got) > 0 {
		raised = strings.Join(got, ", ")
	}
	if len(missing) == 0 {
		return false, fmt.Sprintf("raised %s, but the verdict is %s, not violation (%s)", raised, r.Verdict, r.Reason)
	}
	return false, fmt.Sprintf("must raise %s; raised %s (verdict %s)", strings.Join(missing, ", "), raised, r.Verdict)
}

func summarize(vs []Violation, counts map[string]int) string {
	var order []Property
	for _, v := range vs {
		if len(order) == 0 || order[len(order)-1] != v.Property {
			order = append(order, v.Property)
		}
	}
	parts := make([]string, len(order))
	for i, p := range order {
		parts[i] = fmt.Sprintf("%s ×%d", p, counts[string(p)])
	}
	return strings.Join(parts, ", ") + ": " + vs[0].Message
}

func planned(p faults.Plan) []string {
	out := make([]string, len(p.Faults))
	for i, f := range p.Faults {
		out[i] = f.String()
	}
	return out
}

// Measure computes the per-job time distributions from a history.
func Measure(ops []history.Op) Metrics {
	type times struct{ enq, lease, end int64 }
	byJob := map[string]*times{}
	attempts := map[string]int{}
	var order []string
	for i := range ops {
		op := &ops[i]
		if op.Job == "" || op.Type != history.OK {
			continue
		}
		t := byJob[op.Job]
		if t == nil {
			t = &times{}
			byJob[op.Job] = t
			order = append(order, op.Job)
		}
		switch op.F {
		case history.Enqueue:
			if t.enq == 0 {
				t.enq = op.T
			}
		case history.Lease:
			if t.lease == 0 {
				t.lease = op.T
			}
			attempts[op.Job]++
		case history.Ack, history.DeadLetter:
			if t.end == 0 {
				t.end = op.T
			}
		}
	}
	var wait, proc, total, att []float64
	ms := func(d int64) float64 { return float64(d) / 1e6 }
	for _, id := range order {
		t := byJob[id]
		if t.enq == 0 {
			continue
		}
		if t.lease > 0 {
			wait = append(wait, ms(t.lease-t.enq))
			att = append(att, float64(attempts[id]))
		}
		if t.end > 0 && t.lease > 0 {
			proc = append(proc, ms(t.end-t.lease))
			total = append(total, ms(t.end-t.enq))
		}
	}
	return Metrics{QueueWait: dist(wait), Processing: dist(proc), ToTerminal: dist(total), Attempts: dist(att)}
}

func dist(xs []float64) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	slices.Sort(xs)
	q := func(p float64) float64 { return xs[min(len(xs)-1, int(p*float64(len(xs))))] }
	return Dist{N: len(xs), P50: q(0.5), P90: q(0.9), P99: q(0.99), Max: xs[len(xs)-1]}
}

// Exercise runs every contract of the catalogue (or those named) against t and
// returns every result. The error joins every violation, unknown verdict and
// failed run, so a caller can treat the whole catalogue as one assertion; skipped
// contracts are not errors.
func Exercise(ctx context.Context, t Target, opts Options, ids ...string) ([]Result, error) {
	cs, err := Select(ids)
	if err != nil {
		return nil, err
	}
	var results []Result
	var errs []error
	for _, c := range cs {
		r, err := Evaluate(ctx, t, c, opts)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		results = append(results, r)
		if r.Verdict == Violated || r.Verdict == Unknown {
			errs = append(errs, &VerdictError{Contract: c.ID, Target: t.Name(), Verdict: r.Verdict, Reason: r.Reason})
		}
	}
	return results, errors.Join(errs...)
}

// Select returns the contracts named by ids, or the whole catalogue for none.
func Select(ids []string) ([]*Contract, error) {
	if len(ids) == 0 {
		return Catalogue, nil
	}
	out := make([]*Contract, 0, len(ids))
	for _, id := range ids {
		c, err := Lookup(id)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// VerdictError is a contract that did not pass on a target.
type VerdictError struct {
	Contract string
	Target   string
	Verdict  Verdict
	Reason   string
}

func (e *VerdictError) Error() string {
	return fmt.Sprintf("%s on %s: %s: %s", e.Contract, e.Target, e.Verdict, e.Reason)
}
