package cli

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/pipeline"
	"github.com/durachk/durachk/reports"
)

// recorder is a Target that keeps the run and the execution of every Execute
// call by seed, so that a report can show the history behind a verdict. One
// recorder serves one trial of one contract.
type recorder struct {
	contracts.Target
	runs map[uint64]contracts.Run
	exs  map[uint64]*contracts.Execution
}

// Execute runs the inner target and records what it returned.
func (r *recorder) Execute(ctx context.Context, run contracts.Run) (contracts.Execution, error) {
	ex, err := r.Target.Execute(ctx, run)
	if r.runs == nil {
		r.runs, r.exs = map[uint64]contracts.Run{}, map[uint64]*contracts.Execution{}
	}
	r.runs[run.Seed] = run
	if err == nil {
		r.exs[run.Seed] = &ex
	}
	return ex, err
}

// evaluateTrial runs trial k of c on t and returns it with what it recorded.
func evaluateTrial(ctx context.Context, t *target, c *contracts.Contract, o RunOptions, k int) (contracts.Result, *recorder, error) {
	rec := &recorder{Target: t.Target}
	opts := contracts.Options{Seed: seedOf(o, c), Jobs: o.Jobs, Trials: o.Trials}
	if pi, ok := o.plans[c.ID]; ok && pi.sab != nil {
		r, err := contracts.EvaluateSabotageTrial(ctx, rec, c, *pi.sab, opts, k)
		return r, rec, err
	}
	r, err := contracts.EvaluateTrial(ctx, rec, c, opts, k)
	return r, rec, err
}

// evaluate runs every trial of c on t, one after the other, and returns the
// result as an entry of the document.
func evaluate(ctx context.Context, t *target, c *contracts.Contract, o RunOptions) (reports.Entry, error) {
	var runs []contracts.Result
	var recs []*recorder
	for k := range max(o.Trials, 1) {
		r, rec, err := evaluateTrial(ctx, t, c, o, k)
		if err != nil {
			return reports.Entry{Result: r}, err
		}
		runs, recs = append(runs, r), append(recs, rec)
	}
	return entryOf(t, c, o, runs, recs), nil
}

// entryOf makes the document's entry of a contract's trials: the verdict, the
// history sample of the run the result shows, its fault windows and the
// commands that reproduce it and each trial that did not pass.
func entryOf(t *target, c *contracts.Contract, o RunOptions, runs []contracts.Result, recs []*recorder) reports.Entry {
	res := contracts.Aggregate(runs)
	ev := reports.Evidence{Reproduce: reproduce(t, c, o, res.Seed), Scale: t.scale}
	for _, tr := range res.Trials {
		if tr.Verdict != contracts.Pass {
			if ev.ReproduceTrials == nil {
				ev.ReproduceTrials = map[uint64]string{}
			}
			ev.ReproduceTrials[tr.Seed] = reproduce(t, c, o, tr.Seed)
		}
	}
	// The execution the result shows first, then each other trial's: what
	// each verdict was judged on (a trial's verdict is its last seed's), for
	// re-judging.
	var judged []reports.Recorded
	shown := -1
	for k, rec := range recs {
		if seed := lastSeed(rec); seed == res.Seed && rec.exs[seed] != nil {
			shown = k
			judged = append(judged, recorded(t, c, o, seed, rec.runs[seed], rec.exs[seed]))
			break
		}
	}
	if shown < 0 {
		return reports.NewEntry(res, nil, ev)
	}
	for k, rec := range recs {
		if seed := lastSeed(rec); k != shown && rec.exs[seed] != nil {
			judged = append(judged, recorded(t, c, o, seed, rec.runs[seed], rec.exs[seed]))
		}
	}
	ex, run := recs[shown].exs[res.Seed], recs[shown].runs[res.Seed]
	observed := reports.ObservedWindows(ex.Ops)
	planned := reports.PlanWindows(run.Scenario.Plan, anchor(ex.Ops, run.Scenario, t.scale), t.scale)
	ev.Windows = reports.MergeWindows(planned, observed)
	e := reports.NewEntry(res, ex.Ops, ev)
	e.Judged = judged
	return e
}

// lastSeed is the seed a trial ran last (the seeds a trial tries grow): its
// verdict is that run's.
func lastSeed(rec *recorder) uint64 {
	var last uint64
	for seed := range rec.runs {
		last = max(last, seed)
	}
	return last
}

// recorded is what the verdict of one execution of c was judged on: its
// history, final state, the checker's options and the engine's own inputs
// (a plan contract's plan, a cluster that did not settle, an outage).
func recorded(t *target, c *contracts.Contract, o RunOptions, seed uint64, run contracts.Run, ex *contracts.Execution) reports.Recorded {
	j := reports.Judged{Contract: c.ID, Target: t.Name(), Seed: seed, Final: ex.Final, Check: ex.Check,
		Unsettled: ex.Unsettled, Unavailable: ex.Unavailable, OverBudget: ex.OverBudget}
	if run.Sabotage != nil {
		j.Sabotage = run.Sabotage.Name
	}
	if pi, ok := o.plans[c.ID]; ok && pi.plan != nil {
		if b, err := pi.plan.Marshal(true); err == nil {
			j.Plan = b
		}
	}
	return reports.Recorded{Judged: j, Ops: ex.Ops}
}

// anchor estimates the scenario's start in the history's clock: the producer
// sends the first job at start + that job's offset (scaled on real targets).
func anchor(ops []history.Op, sc contracts.Scenario, scale float64) int64 {
	first, any := int64(0), false
	for _, op := range ops {
		if op.F == history.Enqueue && op.Type == history.Invoke && (!any || op.T < first) {
			first, any = op.T, true
		}
	}
	if !any {
		for i, op := range ops {
			if i == 0 || op.T < first {
				first = op.T
			}
		}
		return first
	}
	var at time.Duration
	if len(sc.Jobs) > 0 {
		at = sc.Jobs[0].At
		for _, j := range sc.Jobs {
			at = min(at, j.At)
		}
	}
	return first - int64(float64(at)*scale)
}

// reproduce is the command that reruns one result (or one trial) alone.
func reproduce(t *target, c *contracts.Contract, o RunOptions, seed uint64) string {
	parts := []string{"durachk", "run", "--seed", fmt.Sprint(seed)}
	if t.spec != "mem" && t.spec != "" {
		parts = append(parts, "--target", reports.PasteURL(t.spec, t.refs))
	}
	if pi, ok := o.plans[c.ID]; ok {
		parts = append(parts, "--plan", shellQuote(pi.path))
	} else if strings.HasPrefix(c.ID, "scenario/") {
		parts = append(parts, "--scenario", strings.TrimPrefix(c.ID, "scenario/"))
	} else {
		parts = append(parts, "--contract", c.ID)
	}
	if o.Jobs > 0 {
		parts = append(parts, "--jobs", fmt.Sprint(o.Jobs))
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@=,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// progress reports a run's advance: one bar over target × contract when stderr
// is a terminal, one line per result otherwise. Safe for concurrent use.
type progress struct {
	mu      sync.Mutex
	bar     *progressbar.ProgressBar
	w       io.Writer
	total   int
	n       int
	running map[string]int
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func newProgress(w io.Writer, total int) *progress {
	p := &progress{w: w, total: total, running: map[string]int{}}
	if isTerminal(w) {
		p.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(w), progressbar.OptionShowCount(),
			progressbar.OptionSetWidth(30), progressbar.OptionClearOnFinish(), progressbar.OptionSetPredictTime(true),
			progressbar.OptionShowElapsedTimeOnFinish(), progressbar.OptionSetDescription("starting"))
	}
	return p
}

func (p *progress) start(target, contract string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.running[target+" "+contract]++
	p.describe(target + " " + contract)
}

// describe names a contract that runs (the latest started), and how many run.
func (p *progress) describe(latest string) {
	if p.bar == nil {
		return
	}
	n := 0
	for _, k := range p.running {
		n += k
	}
	if n > 1 {
		latest = fmt.Sprintf("%d running: %s, …", n, latest)
	}
	p.bar.Describe(latest)
}

func (p *progress) done(r contracts.Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	if p.bar != nil {
		_ = p.bar.Add(1)
		return
	}
	verdict := string(r.Verdict)
	if n := len(r.Trials); n > 1 {
		verdict += fmt.Sprintf(" (%d trials)", n)
	}
	fmt.Fprintf(p.w, "durachk: [%d/%d] %s %s: %s (%s)\n", p.n, p.total, r.Target, r.Contract, verdict, fmtMS(float64(r.Wall.Microseconds())/1000))
}

// ended counts off one trial of a contract.
func (p *progress) ended(target, contract string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k := target + " " + contract; p.running[k] > 1 {
		p.running[k]--
	} else {
		delete(p.running, k)
	}
	for k := range p.running {
		p.describe(k)
		break
	}
}

func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}

// logWriter writes the runner's progress lines, clearing the bar first. Safe
// for concurrent use: every Write is one line of one run.
type logWriter struct {
	mu sync.Mutex
	p  *progress
	w  io.Writer
}

func (l *logWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.p != nil {
		l.p.mu.Lock()
		defer l.p.mu.Unlock()
		if l.p.bar != nil {
			_ = l.p.bar.Clear()
		}
	}
	return l.w.Write(b)
}

func (l *logWriter) setProgress(p *progress) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.p = p
}

// Run carries out `durachk run`: every selected contract on every target,
// --parallel at a time, then result.json (with histories/), junit.xml,
// summary.md and report.html in o.Out, the summary appended to
// $GITHUB_STEP_SUMMARY when set, and the exit code (or the baseline's
// verdict).
//
// No result is lost: o.Out is made ready (an earlier run's files moved aside)
// before the first contract, and result.json is rewritten atomically after
// every result with complete false, so that a run killed at any moment leaves
// the results it had. SIGINT or SIGTERM (ctx) ends the contracts in flight
// (their namespaces are torn down), marks the run interrupted and writes every
// format; an interrupted run never exits 0 (see incompleteError).
func Run(ctx context.Context, o RunOptions, stdout, stderr io.Writer) error {
	formats, err := checkFormats(o.Formats)
	if err != nil {
		return err
	}
	cs, baseline, err := checkRun(&o)
	if err != nil {
		return err
	}
	lw := &logWriter{w: stderr}
	ts := o.resolved
	if ts == nil {
		if ts, err = resolveAll(ctx, &o, lw); err != nil {
			return err
		}
	}
	runID := newRunID()
	adopt(ts, runID)
	parallel := o.Parallel
	if parallel == 0 {
		parallel = DefaultParallel
	}
	planned := len(ts) * len(cs)
	trials := ""
	if o.Trials > 1 {
		trials = fmt.Sprintf(", %d trials each", o.Trials)
	}
	fmt.Fprintf(stderr, "durachk: run %s: %s on %s%s, up to %d at a time; results in %s\n",
		runID, plural(len(cs), "contract"), plural(len(ts), "target"), trials, min(parallel, planned*max(o.Trials, 1)), filepath.Join(o.Out, "result.json"))
	if err := prepareOut(o.Out, stderr); err != nil {
		return ConfigError(err)
	}
	keepLogs(ts, o.Out)
	doc := reports.NewDocument(o.Seed, o.Command, time.Now())
	doc.Jobs, doc.Planned, doc.Wall.RunID = o.Jobs, planned, runID
	if o.Trials > 1 {
		doc.Trials = o.Trials
	}
	var secrets []string
	for _, t := range ts {
		doc.AddTargetInfo(t.info)
		secrets = append(secrets, t.secrets...)
	}
	if err := doc.Scrub(secrets...); err != nil {
		return ConfigError(err)
	}
	resultPath := filepath.Join(o.Out, "result.json")
	if err := doc.WriteJSON(resultPath); err != nil {
		return ConfigError(err)
	}
	prog := newProgress(stderr, planned)
	lw.setProgress(prog)
	complete, runErr := evaluateAll(ctx, tasks(ts, cs, o.Trials), o, parallel, prog, func(slot int, e reports.Entry) error {
		if err := e.Scrub(secrets...); err != nil {
			return err
		}
		doc.Place(slot, e)
		if err := doc.WriteJSON(resultPath); err != nil {
			return err
		}
		if o.placed != nil {
			o.placed(len(doc.Results))
		}
		return nil
	}, func(slot int, rc reports.Recorded) (reports.KeptTrial, error) {
		// A trial that cannot become its result's: written now, not kept.
		return reports.WriteTrial(o.Out, slot, rc, secrets...)
	}, func(ids []string) { doc.Wall.CutShort = append(doc.Wall.CutShort, ids...) })
	prog.finish()
	doc.Finish(time.Now())
	switch {
	case complete && len(doc.Results) == planned:
		doc.Complete = true // a signal after the last result interrupts nothing
	case ctx.Err() != nil:
		doc.Interrupted, doc.Stopped = true, "interrupted: "+interruption(ctx)
	case runErr != nil:
		doc.Stopped = reports.ScrubString(runErr.Error(), secrets...)
	default:
		doc.Stopped = "the run ended before its last result"
	}
	PrintTable(stdout, doc)
	// The gate first: the reports judge the results as it does (the JUnit
	// file is red exactly when the gate fails), against the baseline as
	// --update-baseline leaves it.
	var gateLines bytes.Buffer
	err = verdictError(doc)
	if baseline != nil || o.createBaseline {
		err = gate(&gateLines, baseline, doc, o)
	}
	if werr := WriteOutputs(doc, o.Out, formats); werr != nil {
		return ConfigError(werr)
	}
	fmt.Fprintf(stdout, "\nresult: %s\n", resultPath)
	if !doc.Complete {
		fmt.Fprintf(stderr, "durachk: run %s is partial: %d of %d results in %s (%s)\n", runID, len(doc.Results), planned, resultPath, doc.Stopped)
	}
	if p := os.Getenv("GITHUB_STEP_SUMMARY"); p != "" {
		if err := appendSummary(p, doc); err != nil {
			fmt.Fprintf(stderr, "durachk: job summary: %v\n", err)
		}
	}
	_, _ = stdout.Write(gateLines.Bytes())
	if runErr != nil && !doc.Interrupted {
		return ConfigError(runErr)
	}
	if !doc.Complete && Code(err) == ExitPass {
		return incompleteError(doc)
	}
	return err
}

// incompleteError is the exit of a run that ended early without a finding:
// 2, like an unknown verdict (it cannot say pass). A violation (or a baseline
// difference) among the results it has exits 1 as usual.
func incompleteError(doc *reports.Document) error {
	return &ExitError{Code: ExitUnknown, Err: fmt.Errorf("the run is partial: %d of %d results (%s)", len(doc.Results), doc.Planned, doc.Stopped)}
}

// interruption names what ended ctx: the signal, where the context says.
func interruption(ctx context.Context) string {
	if c := context.Cause(ctx); c != nil && c != ctx.Err() {
		return c.Error()
	}
	return ctx.Err().Error()
}

// DefaultParallel is how many contracts a run evaluates at a time without
// --parallel. The Postgres budget (pgBudget) is what bounds it on real
// targets; on the embedded target runs take milliseconds.
const DefaultParallel = 8

// pgBudget is the number of Postgres connections the contracts of one run
// may hold together, by estimate (pgConns): the shared server allows 100 for
// everyone, and `make test` may run beside. A contract that needs more than
// the budget still runs, alone.
const pgBudget = 48

// pgConns estimates the Postgres connections a contract on t holds at its
// peak, as measured (ss over the process tree of `durachk run`): on a
// postgres target up to 14 (controller, producer, workers, relay, each with a
// queue and an effect store pool), on other brokers up to 8 (the effect
// store's), on the embedded target none.
func pgConns(t *target) int {
	switch t.info.Kind {
	case "mem":
		return 0
	case "postgres":
		return 14
	}
	return 8
}

// task is one trial of one contract on one target; slot is the contract's
// place in the document (target order × contract order).
type task struct {
	slot, trial int
	t           *target
	c           *contracts.Contract
}

// tasks produces every trial of every contract of every target in the order
// they start: the longest first, so that no long one starts last (those that
// start a private broker, RabbitMQ's the slowest, then by the span of the
// scenario's faults and jobs), one contract of each target in turn, so that
// concurrent runs spread over the brokers; the trials of a contract together.
// Lazily: memory does not grow with the number of trials.
func tasks(ts []*target, cs []*contracts.Contract, trials int) iter.Seq[task] {
	var pairs []task
	for j, c := range cs {
		for i, t := range ts {
			pairs = append(pairs, task{slot: i*len(cs) + j, t: t, c: c})
		}
	}
	span := map[*contracts.Contract]time.Duration{}
	for _, c := range cs {
		span[c] = scenarioSpan(c.Scenario(1, contracts.DefaultJobs))
	}
	tier := func(tk task) int {
		switch {
		case !startsBroker(tk.c):
			return 0
		case tk.t.info.Kind == "amqp":
			return 2
		}
		return 1
	}
	slices.SortStableFunc(pairs, func(a, b task) int {
		if d := tier(b) - tier(a); d != 0 {
			return d
		}
		return cmp.Compare(span[b.c], span[a.c])
	})
	return func(yield func(task) bool) {
		for _, p := range pairs {
			for k := range max(trials, 1) {
				p.trial = k
				if !yield(p) {
					return
				}
			}
		}
	}
}

// scenarioSpan is how long a scenario's faults and jobs go on (virtual
// time): an estimate of how long a run of it takes, for the order of tasks.
func scenarioSpan(sc contracts.Scenario) time.Duration {
	var span time.Duration
	for _, f := range sc.Plan.Faults {
		span = max(span, f.At+f.For)
	}
	for _, j := range sc.Jobs {
		end := j.At
		if p, err := pipeline.DecodePayload(j.Job.Payload); err == nil {
			end += p.Slow
		}
		span = max(span, end)
	}
	return span
}

func startsBroker(c *contracts.Contract) bool {
	for _, l := range c.Labels {
		if l == "fault:broker-kill" {
			return true
		}
	}
	return false
}

// trialSet gathers the trials of one contract as they end, in any order.
// Only the trials that may become the contract's result (the first violating,
// the first unknown, the last: see contracts.Aggregate) are kept whole, with
// what they recorded; the others keep what the result lists of every trial.
type trialSet struct {
	runs map[int]contracts.Result
	recs map[int]*recorder
	// The trials that may become the result: the first violating, the
	// first unknown, the last; -1: none.
	violated, unknown, last int
	// spill, if set, writes a trial that can no longer become the result
	// (its history and final state, for re-judging) before it is dropped.
	spill func(rec *recorder) ([]reports.KeptTrial, error)
	kept  []reports.KeptTrial
}

func (s *trialSet) add(k int, r contracts.Result, rec *recorder) error {
	if s.runs == nil {
		s.runs, s.recs = map[int]contracts.Result{}, map[int]*recorder{}
		s.violated, s.unknown, s.last = -1, -1, -1
	}
	s.runs[k], s.recs[k] = r, rec
	dropped := []int{k}
	first := func(at *int) {
		if *at < 0 || k < *at {
			dropped = append(dropped, *at)
			*at = k
		}
	}
	switch r.Verdict {
	case contracts.Violated:
		first(&s.violated)
	case contracts.Unknown:
		first(&s.unknown)
	}
	if k > s.last {
		dropped = append(dropped, s.last)
		s.last = k
	}
	for _, i := range dropped {
		if i < 0 || i == s.violated || i == s.unknown || i == s.last || s.recs[i] == nil {
			continue
		}
		if s.spill != nil {
			kept, err := s.spill(s.recs[i])
			if err != nil {
				return err
			}
			s.kept = append(s.kept, kept...)
		}
		r := s.runs[i]
		s.runs[i] = contracts.Result{Contract: r.Contract, Target: r.Target, Verdict: r.Verdict, Seed: r.Seed, Reason: r.Reason,
			Trials: r.Trials, Wall: r.Wall, RunIDs: r.RunIDs}
		delete(s.recs, i)
	}
	return nil
}

// entry is the contract's entry of the trials it has, in trial order; of
// fewer than planned, its reason says so.
func (s *trialSet) entry(t *target, c *contracts.Contract, o RunOptions, planned int) reports.Entry {
	ks := slices.Sorted(maps.Keys(s.runs))
	runs := make([]contracts.Result, len(ks))
	var recs []*recorder
	for i, k := range ks {
		runs[i] = s.runs[k]
		if rec := s.recs[k]; rec != nil {
			recs = append(recs, rec)
		}
	}
	e := entryOf(t, c, o, runs, recs)
	e.Keep(s.kept)
	if len(ks) < planned {
		note := fmt.Sprintf("cut short after %d of %d trials", len(ks), planned)
		if e.Result.Reason != "" {
			note += ": " + e.Result.Reason
		}
		e.Result.Reason = note
	}
	return e
}

// evaluateAll runs the tasks (trials) in order, taking each from next only
// as it starts, at most parallel at a time and within the Postgres budget,
// each as soon as it fits; once every trial of a contract is in, it hands the
// contract's entry to place, from this goroutine only. A broker that does
// not answer is a verdict (unknown), never an error, so that it ends only the
// contracts it touches. An error (of the harness or the effect store, or of
// place) stops the tasks not yet started and the ones in flight (their run
// ids go to cutShort); it is returned once every task in flight has ended.
// ctx ending does the same and returns nil: the caller tells an interruption
// by ctx. Either way every result that ended is placed, a contract of which
// only some trials ended with those (its reason says so), and complete is
// false.
func evaluateAll(ctx context.Context, next iter.Seq[task], o RunOptions, parallel int, prog *progress, place func(slot int, e reports.Entry) error, keep func(slot int, rc reports.Recorded) (reports.KeptTrial, error), cutShort func(runIDs []string)) (complete bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pull, stop := iter.Pull(next)
	defer stop()
	type done struct {
		task
		r   contracts.Result
		rec *recorder
		err error
	}
	type slot struct {
		trialSet
		t *target
		c *contracts.Contract
		n int
	}
	trials := max(o.Trials, 1)
	slots := map[int]*slot{}
	results := make(chan done)
	pending, more := pull()
	running, conns, cut := 0, 0, 0
	var first error
	placeErr := func(err error) {
		if first == nil {
			first = err
		}
		cancel()
	}
	for {
		// In order: a task waits for room rather than let later ones pass it
		// for ever (a postgres target's heavier runs would starve).
		for ctx.Err() == nil && more && running < max(parallel, 1) && (running == 0 || conns+pgConns(pending.t) <= pgBudget) {
			tk := pending
			pending, more = pull()
			running++
			conns += pgConns(tk.t)
			prog.start(tk.t.Name(), tk.c.ID)
			go func() {
				r, rec, err := evaluateTrial(ctx, tk.t, tk.c, o, tk.trial)
				if err == nil && ctx.Err() != nil {
					// It ended after the signal (or the error that stops
					// the run): what it measured may be the interruption's
					// doing (a target that gave up on a broker as its
					// connections were cut reads unknown). Cut short, like
					// the trials the signal found running: a run that
					// was interrupted is never complete.
					err = context.Cause(ctx)
				}
				results <- done{task: tk, r: r, rec: rec, err: err}
			}()
		}
		if running == 0 {
			break
		}
		d := <-results
		running--
		conns -= pgConns(d.t)
		prog.ended(d.t.Name(), d.c.ID)
		if d.err != nil {
			if first == nil && ctx.Err() == nil {
				first = d.err
			}
			cut++
			cutShort(d.r.RunIDs)
			cancel()
			continue
		}
		sl := slots[d.slot]
		if sl == nil {
			sl = &slot{t: d.t, c: d.c}
			if keep != nil {
				t, c, at := d.t, d.c, d.slot
				sl.spill = func(rec *recorder) ([]reports.KeptTrial, error) {
					seed := lastSeed(rec)
					if rec.exs[seed] == nil {
						return nil, nil
					}
					kt, err := keep(at, recorded(t, c, o, seed, rec.runs[seed], rec.exs[seed]))
					return []reports.KeptTrial{kt}, err
				}
			}
			slots[d.slot] = sl
		}
		if err := sl.add(d.trial, d.r, d.rec); err != nil {
			placeErr(err)
			continue
		}
		if sl.n++; sl.n < trials {
			continue
		}
		delete(slots, d.slot)
		e := sl.entry(d.t, d.c, o, trials)
		if err := place(d.slot, e); err != nil {
			placeErr(err)
			continue
		}
		prog.done(e.Result)
	}
	// A signal after the last result interrupts nothing.
	complete = !more && len(slots) == 0 && cut == 0
	// What was cut short keeps the trials it had.
	for _, k := range slices.Sorted(maps.Keys(slots)) {
		sl := slots[k]
		e := sl.entry(sl.t, sl.c, o, trials)
		if err := place(k, e); err != nil {
			placeErr(err)
			break
		}
		prog.done(e.Result)
	}
	return complete && first == nil, first
}

// outputs are the files a run writes in its --out directory.
var outputs = []string{"result.json", "histories", "junit.xml", "summary.md", "report.html", brokerLogs}

// brokerLogs is the directory of --out where the logs of a private broker
// that did not start are kept (its run directory goes with the run).
const brokerLogs = "broker-logs"

// keepLogs has the real targets keep such logs in out.
func keepLogs(ts []*target, out string) {
	for _, t := range ts {
		if rt, ok := t.Target.(*runner.Target); ok {
			rt.KeepLogs = filepath.Join(out, brokerLogs)
		}
	}
}

// prepareOut creates dir and moves the files of an earlier run there aside,
// into previous-<time of its result.json>, so that nothing stale is read as
// this run's; leftover temporary files of a killed run are removed.
func prepareOut(dir string, stderr io.Writer) error {
	if dir == "" {
		return fmt.Errorf("--out: want a directory")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmps, _ := filepath.Glob(filepath.Join(dir, ".*.tmp"))
	for _, f := range tmps {
		os.Remove(f)
	}
	var found []string
	stamp := time.Now()
	for _, n := range outputs {
		st, err := os.Lstat(filepath.Join(dir, n))
		if err != nil {
			continue
		}
		if len(found) == 0 || n == "result.json" {
			stamp = st.ModTime()
		}
		found = append(found, n)
	}
	if len(found) == 0 || !slices.ContainsFunc(found, func(n string) bool { return n == "result.json" || n == "histories" }) {
		return nil // reports alone are overwritten; nothing could be read as this run's results
	}
	base := filepath.Join(dir, "previous-"+stamp.Format("20060102-150405"))
	aside := base
	for i := 2; ; i++ {
		err := os.Mkdir(aside, 0o755)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) {
			return err
		}
		aside = fmt.Sprintf("%s-%d", base, i)
	}
	for _, n := range found {
		if err := os.Rename(filepath.Join(dir, n), filepath.Join(aside, n)); err != nil {
			return err
		}
	}
	fmt.Fprintf(stderr, "durachk: %s held an earlier run: moved %s aside to %s\n", dir, strings.Join(found, ", "), aside)
	return nil
}

func checkFormats(fs []string) ([]string, error) {
	if len(fs) == 0 {
		return reports.Formats, nil
	}
	var out []string
	for _, f := range fs {
		for _, x := range strings.Split(f, ",") {
			x = strings.TrimSpace(strings.ToLower(x))
			switch x {
			case "markdown":
				x = "md"
			case "xml":
				x = "junit"
			}
			if reports.FileName(x) == "" {
				return nil, ConfigError(fmt.Errorf("--format %q: want %s", x, strings.Join(reports.Formats, ", ")))
			}
			out = append(out, x)
		}
	}
	return out, nil
}

// WriteOutputs writes result.json (always, with its histories) and every
// other format into dir.
func WriteOutputs(doc *reports.Document, dir string, formats []string) error {
	if err := doc.WriteJSON(filepath.Join(dir, "result.json")); err != nil {
		return err
	}
	for _, f := range formats {
		if f == "json" {
			continue
		}
		if err := writeFile(filepath.Join(dir, reports.FileName(f)), doc, f); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, doc *reports.Document, format string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	var b bytes.Buffer
	if err := reports.Render(&b, doc, format); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return reports.WriteFileAtomic(path, b.Bytes())
}

func appendSummary(path string, doc *reports.Document) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if err := reports.WriteMarkdown(f, doc); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// gate compares the run with the baseline and records it in the document
// (doc.Gate), writing the gate's lines to w: exit 1 on a difference in a
// result the run has, 0 when every verdict is the expected one. A partial run
// whose only differences are expected results it did not reach exits 2 (it
// cannot say; Run: never 0). With --update-baseline a complete run rewrites
// the file to expect what it measured, or creates it (o.createBaseline), and
// passes; a partial run never touches the file.
func gate(w io.Writer, bl reports.Baseline, doc *reports.Document, o RunOptions) error {
	if o.createBaseline {
		if !doc.Complete {
			fmt.Fprintf(w, "baseline: %s not created: the run is partial\n", o.Baseline)
			return verdictError(doc)
		}
		first := reports.BaselineOf(doc)
		if err := first.Write(o.Baseline); err != nil {
			return ConfigError(fmt.Errorf("--update-baseline: %w", err))
		}
		doc.Gate = &reports.Gate{Baseline: o.Baseline, Expected: first, Updated: "created"}
		fmt.Fprintf(w, "baseline: created %s, expecting the %d verdict(s) of this run\n", o.Baseline, len(doc.Results))
		return nil
	}
	doc.Gate = &reports.Gate{Baseline: o.Baseline, Expected: bl}
	diffs := bl.Compare(doc)
	fmt.Fprintln(w, reports.GateSummary(diffs))
	if len(diffs) == 0 {
		return nil
	}
	for _, d := range diffs {
		fmt.Fprintln(w, d.String())
		for _, r := range doc.Results {
			if r.Target == d.Target && r.Contract == d.Contract && len(r.Trials) > 1 {
				fmt.Fprintf(w, "  %s\n%s", reports.TrialsNote(r), reports.TrialsText(doc, r))
			}
		}
	}
	if o.UpdateBaseline && doc.Complete {
		// The verdicts measured become the expected ones: the gate passes.
		updated := bl.Updated(diffs)
		if err := updated.Write(o.Baseline); err != nil {
			return ConfigError(fmt.Errorf("--update-baseline: %w", err))
		}
		doc.Gate.Expected, doc.Gate.Updated = updated, "updated"
		fmt.Fprintf(w, "baseline: updated %s to expect the %d verdict(s) above\n", o.Baseline, len(diffs))
		return nil
	}
	if o.UpdateBaseline {
		fmt.Fprintf(w, "baseline: %s not updated: the run is partial\n", o.Baseline)
	}
	if !reports.Measured(diffs) {
		return incompleteError(doc)
	}
	return &ExitError{Code: ExitViolation, Err: fmt.Errorf("%d verdict(s) differ from the baseline", len(diffs))}
}

func verdictError(doc *reports.Document) error {
	switch {
	case doc.Summary[string(contracts.Violated)] > 0:
		return &ExitError{Code: ExitViolation, Err: fmt.Errorf("%d violation(s)", doc.Summary[string(contracts.Violated)])}
	case doc.Summary[string(contracts.Unknown)] > 0:
		return &ExitError{Code: ExitUnknown, Err: fmt.Errorf("%d unknown verdict(s)", doc.Summary[string(contracts.Unknown)])}
	}
	return nil
}

// adopt makes every run of ts a run of the command runID names: their
// registry entries record it (targets.Spec.Parent), and `durachk cleanup
// --run runID` reaches them.
func adopt(ts []*target, runID string) {
	for _, t := range ts {
		if rt, ok := t.Target.(*runner.Target); ok {
			rt.Spec.Parent = runID
		}
	}
}

// newRunID names one run of durachk (the namespaces its targets make have
// run ids of their own, recorded per result, and name it as their parent).
func newRunID() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
