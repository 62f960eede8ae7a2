// Package cli carries out durachk's commands; cmd/durachk parses the flags.
package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/durachk/durachk/checker"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/config"
	"github.com/durachk/durachk/internal/loadavg"
	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/internal/targets"
	"github.com/durachk/durachk/reports"
)

// Exit codes.
const (
	ExitPass      = 0
	ExitViolation = 1
	ExitUnknown   = 2
	ExitConfig    = 3
)

// ExitError carries the process exit code of a failed command.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// ConfigError wraps err as a configuration or infrastructure error (exit 3).
func ConfigError(err error) error { return &ExitError{Code: ExitConfig, Err: err} }

// Code returns the exit code for err.
func Code(err error) int {
	var ee *ExitError
	switch {
	case err == nil:
		return ExitPass
	case errors.As(err, &ee):
		return ee.Code
	}
	return ExitConfig
}

// RunOptions are the flags of `durachk run` (and of selftest, doctor, cleanup).
type RunOptions struct {
	Targets   []string
	Config    string // durachk.yaml; its targets come before --target ones
	Contracts []string
	Scenarios []string
	Plans     []string // plan files (durachk run --plan)
	Seed      uint64
	SeedSet   bool // --seed was given: it wins over the file's seed
	Jobs      int
	Trials    int // runs of each contract, with successive seeds (0: one)
	Seeds     int // selftest: seeds each sabotage runs on, successive from Seed; each must catch it (0: one)
	Parallel  int // contracts evaluated at a time (0: DefaultParallel)
	Out       string
	Baseline  string
	// UpdateBaseline: after a complete run, the Baseline file expects the
	// verdicts that differed (improvements and regressions alike).
	UpdateBaseline bool
	Formats        []string // files to write besides result.json (default: all)
	Format         string   // list, doctor: what they print, text (default) or json
	Command        string   // the command line, for the report's reproduce line

	envVars map[string]string // the config file's ${VAR}s with their values (specs)
	// createBaseline: --update-baseline names a file that does not exist;
	// a complete run creates it (checkRun).
	createBaseline bool

	placed   func(n int)         // told after each result is written (tests)
	resolved []*target           // the targets, resolved already (tests)
	plans    map[string]planInfo // the --plan contracts by id, from checkRun
}

// target is a resolved target and how to describe and reproduce it.
type target struct {
	contracts.Target
	spec    string       // what --target takes (may hold credentials)
	parsed  targets.Spec // zero for mem
	info    reports.TargetInfo
	secrets []string
	// refs name the variable each credential came from (credential →
	// variable): a reproduce command writes ${VAR} for it.
	refs  map[string]string
	scale float64
}

// ResolveTarget turns a --target value into a Target: mem, or a broker URL
// whose broker is reached once to read its version and capabilities.
func ResolveTarget(ctx context.Context, spec string, log io.Writer) (contracts.Target, error) {
	t, err := resolve(ctx, spec, "", log)
	if err != nil {
		return nil, err
	}
	return t.Target, nil
}

func resolve(ctx context.Context, spec, store string, log io.Writer) (*target, error) {
	if spec == "" || spec == "mem" || strings.HasPrefix(spec, "mem?") {
		return resolveMem(spec)
	}
	if !strings.Contains(spec, "://") {
		return nil, ConfigError(fmt.Errorf("target %q: want mem or a broker URL", targets.Echo(spec)))
	}
	s, err := targets.Parse(spec)
	if err != nil {
		return nil, ConfigError(err)
	}
	if store != "" {
		s.StoreURL = store
	}
	rt, err := newTarget(ctx, s)
	if err != nil {
		if ctx.Err() != nil {
			return nil, &ExitError{Code: ExitUnknown, Err: fmt.Errorf("interrupted (%s) while reaching %s: nothing ran", interruption(ctx), s.Name)}
		}
		return nil, ConfigError(err)
	}
	rt.Log = log
	if k := rt.Scale / runner.DefaultScale; k > 1 && log != nil {
		fmt.Fprintf(log, "  %s: the machine is busy: scenario times run %.1f× slower than on an idle one (%s fixes the factor)\n", s.Name, k, loadavg.Env)
	}
	info := reports.DescribeTarget(rt, s.Kind, spec, s.Options)
	if d := durabilityInfo(rt.Durability()); d != nil {
		info.Durability = d
		info.Fingerprint = reports.Fingerprint(info) // the settings the server runs with enter it
	}
	t := &target{Target: rt, spec: spec, parsed: s, scale: rt.Scale,
		info: info, secrets: append(reports.Secrets(spec), reports.Secrets(s.StoreURL)...)}
	return t, nil
}

// durabilityInfo is what a report shows of a target's private instance.
func durabilityInfo(d *targets.Durability) *reports.Durability {
	if d == nil {
		return nil
	}
	out := &reports.Durability{Private: d.Private, Server: d.Server}
	for _, s := range d.Settings {
		out.Settings = append(out.Settings, reports.Setting{Name: s.Name, Value: s.Value, Source: s.Source, ServerValue: s.ServerValue, Note: s.Note})
	}
	return out
}

// newTarget is runner.New, given up on half a second after ctx ends: a broker
// that does not answer may not heed ctx, and an interrupted command ends
// within 2 s (the probe's namespace, if New is cut off, is cleanup's).
func newTarget(ctx context.Context, s targets.Spec) (*runner.Target, error) {
	type res struct {
		t   *runner.Target
		err error
	}
	ch := make(chan res, 1)
	go func() {
		t, err := runner.New(ctx, s)
		ch <- res{t, err}
	}()
	select {
	case r := <-ch:
		return r.t, r.err
	case <-ctx.Done():
	}
	select {
	case r := <-ch:
		return r.t, r.err
	case <-time.After(500 * time.Millisecond):
		return nil, ctx.Err()
	}
}

// specs returns the target specs of a command: the config file's, then the
// --target ones; mem when there are none. It also returns the store and seed
// the file sets.
func specs(o *RunOptions) ([]string, string, error) {
	var out []string
	store := ""
	if err := checkSpecs(o.Targets); err != nil {
		return nil, "", err
	}
	if o.Config != "" {
		c, err := config.Load(o.Config)
		if err != nil {
			return nil, "", ConfigError(err)
		}
		for _, t := range c.Targets {
			out = append(out, t.URL)
		}
		store, o.envVars = c.Store, c.Vars
		if c.HasSeed && !o.SeedSet {
			o.Seed = c.Seed
		}
	}
	out = append(out, o.Targets...)
	if len(out) == 0 {
		out = []string{"mem"}
	}
	return out, store, nil
}

func resolveAll(ctx context.Context, o *RunOptions, log io.Writer) ([]*target, error) {
	ss, store, err := specs(o)
	if err != nil {
		return nil, err
	}
	var ts []*target
	names := map[string]bool{}
	for _, spec := range ss {
		t, err := resolve(ctx, spec, store, log)
		if err != nil {
			return nil, err
		}
		if names[t.Name()] {
			return nil, ConfigError(fmt.Errorf("target name %q used twice: name each target (name: in durachk.yaml, name= in a URL)", t.Name()))
		}
		names[t.Name()] = true
		for name, v := range o.envVars {
			if slices.Contains(t.secrets, v) {
				if t.refs == nil {
					t.refs = map[string]string{}
				}
				t.refs[v] = name
			}
		}
		ts = append(ts, t)
	}
	return ts, nil
}

// selection returns the contracts and scenarios a run asks for.
func selection(o RunOptions) ([]*contracts.Contract, error) {
	var out []*contracts.Contract
	if len(o.Contracts) > 0 || len(o.Scenarios) == 0 && len(o.Plans) == 0 {
		cs, err := contracts.Select(o.Contracts)
		if err != nil {
			return nil, ConfigError(err)
		}
		out = append(out, cs...)
	}
	for _, name := range o.Scenarios {
		if name == "all" {
			out = append(out, contracts.SeedScenarios...)
			continue
		}
		sc, err := contracts.LookupScenario(name)
		if err != nil {
			return nil, ConfigError(err)
		}
		out = append(out, sc)
	}
	return out, nil
}

// PrintTable writes the verdict table of a document.
func PrintTable(w io.Writer, doc *reports.Document) {
	if note := reports.PartialNote(doc); note != "" {
		fmt.Fprintf(w, "!! %s: the verdicts below are those it had; the missing contracts have none.\n\n", note)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tCONTRACT\tVERDICT\tJOBS\tEXECUTIONS\tDUPS EXPL/UNEXPL\tFAULTS\tTIME")
	order := doc.ReadingOrder() // violations first, then unknowns
	for _, i := range order {
		r := doc.Results[i]
		verdict := reports.VerdictText(r)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d/%d\t%d\t%s\n", r.Target, r.Contract, verdict, r.Stats.Accepted, r.Stats.Executions,
			r.Stats.Explained, r.Stats.Unexplained, faultCount(r.Stats.Faults), fmtMS(doc.WallMS(i)))
	}
	tw.Flush()
	fmt.Fprintln(w, TableLegend)
	for _, r := range doc.Results {
		if r.Contract != "" && strings.HasPrefix(r.Contract, "scenario/") {
			fmt.Fprintf(w, "%s: %s; cancelled %d, events dead-lettered %d, circuit opened %d\n", r.Contract, SeedColumns(r.Stats),
				r.Stats.Cancelled, r.Stats.EventsDeadLettered, r.Stats.CircuitOpens)
		}
	}
	for _, l := range doc.DurabilityLines() {
		fmt.Fprintln(w, l)
	}
	for _, i := range order {
		if r := doc.Results[i]; r.Verdict != contracts.Pass {
			fmt.Fprintf(w, "%s %s: %s: %s\n", r.Target, r.Contract, r.Verdict, r.Reason)
			if len(r.Trials) > 1 {
				fmt.Fprint(w, reports.TrialsText(doc, r))
			}
			for i, v := range r.Violations {
				if i == maxWitnessesShown {
					fmt.Fprintf(w, "  … %d more violations in result.json and report.html\n", len(r.Violations)-i)
					break
				}
				_ = checker.WriteText(w, v, "  ")
			}
		}
	}
	fmt.Fprintf(w, "\n%d pass, %d violation, %d unknown, %d skipped (seed %d, measured on %s)\n",
		doc.Summary["pass"], doc.Summary["violation"], doc.Summary["unknown"], doc.Summary["skipped"], doc.Seed, measuredOn(doc))
}

// TableLegend says what each column of PrintTable's table holds (README and
// reports/SCHEMA.md say it too).
const TableLegend = `VERDICT: pass, unknown, skipped, or a violation by the properties it raised with their counts (lost ×20);
  with --trials, how many trials had it. JOBS: jobs the broker accepted. EXECUTIONS: times a worker started
  a job's work (retries and redeliveries included). DUPS EXPL/UNEXPL: deliveries of a job after an earlier
  one, explained (a fault, lost reply, nack, expired lease, broker restart or second enqueue) / unexplained
  (the property unexplained_duplicate). FAULTS: faults applied (kills, pauses, partitions, crashes; resumes
  not counted). TIME: wall time of the result, all its trials. Witness TIME: since the run's first operation.`

// maxWitnessesShown bounds the witnesses printed per result.
const maxWitnessesShown = 2

// SeedColumns are the seed design's counts: accepted, lost, applied twice,
// repeats dropped, dead-lettered by design and otherwise.
func SeedColumns(st contracts.Stats) string {
	return fmt.Sprintf("accepted %d, lost %d, applied twice %d, repeats dropped %d, dead-lettered by design %d, dead-lettered otherwise %d",
		st.Accepted, st.Lost, st.AppliedTwice, st.RepeatsDropped, st.DeadLetteredByDesign, st.DeadLetteredOtherwise)
}

func measuredOn(doc *reports.Document) string {
	var parts []string
	for _, t := range doc.Targets {
		parts = append(parts, t.MeasuredOn)
	}
	return strings.Join(parts, "; ")
}

func faultCount(m map[string]int) int {
	n := 0
	for k, v := range m {
		if !strings.Contains(k, ":") && k != "resume" {
			n += v
		}
	}
	return n
}

func fmtMS(ms float64) string {
	if ms < 1000 {
		return fmt.Sprintf("%.0fms", ms)
	}
	return fmt.Sprintf("%.1fs", ms/1000)
}

// List prints the catalogue: as a table, or with o.Format json as one JSON
// document.
func List(ctx context.Context, w io.Writer, o RunOptions) error {
	if err := checkFormat("list", cmp.Or(o.Format, "text"), "text", "json"); err != nil {
		return err
	}
	rs, err := resolveAll(ctx, &o, nil)
	if err != nil {
		return err
	}
	var ts []contracts.Target
	for _, t := range rs {
		ts = append(ts, t.Target)
	}
	if strings.EqualFold(o.Format, "json") {
		return listJSON(w, ts)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTRACT\tSUPPORTED ON\tCLAIM")
	for _, c := range append(append([]*contracts.Contract{}, contracts.Catalogue...), contracts.SeedScenarios...) {
		var on []string
		for _, t := range ts {
			if c.Needs == nil || c.Needs(t.Capabilities()) == "" {
				on = append(on, t.Name())
			} else {
				on = append(on, "not "+t.Name()+" ("+c.Needs(t.Capabilities())+")")
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.ID, strings.Join(on, ", "), c.Claim)
	}
	return tw.Flush()
}

// Selftest runs every sabotage of the selected contracts (and of the seed
// scenarios that carry one) on o.Seeds seeds (0: one), successive from
// o.Seed, and shows that the checker flags each run with the properties the
// sabotage declares, each with a witness, in a violation verdict. It prints
// per sabotage how many seeds caught it, and fails (exit 1) naming every
// sabotage a seed did not catch, that seed and the properties that stayed
// silent or the verdict that was not a violation.
func Selftest(ctx context.Context, o RunOptions, stdout io.Writer) error {
	if err := checkJobs("selftest", o.Jobs); err != nil {
		return err
	}
	if err := noRepeats("contract", o.Contracts); err != nil {
		return err
	}
	seeds := cmp.Or(o.Seeds, 1) // the Go API's zero value; the flag refuses --seeds 0
	if err := checkBounds("selftest", map[string]int64{"seeds": int64(seeds)}); err != nil {
		return err
	}
	rs := o.resolved
	if rs == nil {
		var err error
		if rs, err = resolveAll(ctx, &o, nil); err != nil {
			return err
		}
	}
	cs, err := contracts.SelfTestContracts(o.Contracts)
	if err != nil {
		return ConfigError(err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tCONTRACT\tSABOTAGE\tMUST RAISE\tCAUGHT\tVERDICT\tRAISED")
	var all []contracts.SabotageResult
	for _, rt := range rs {
		res, err := contracts.SelfTest(ctx, rt.Target, cs, contracts.Options{Seed: o.Seed, Jobs: o.Jobs, Trials: seeds})
		if err != nil {
			return ConfigError(err)
		}
		for _, r := range res {
			must := propertyList(r.Sabotage.Raises)
			switch {
			case r.Skipped():
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t-\tskipped\t%s\n", rt.Name(), r.Contract, r.Sabotage.Name, must, r.Result.Reason)
			default:
				// The verdict and what was raised: of the first seed not caught,
				// else of the last.
				mark := "yes"
				if !r.Caught {
					mark = "NO"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s %d/%d\t%s\t%s\n", rt.Name(), r.Contract, r.Sabotage.Name, must, mark, r.CaughtOn(), len(r.Seeds), r.Result.Verdict, raised(r.Result))
			}
		}
		all = append(all, res...)
	}
	tw.Flush()
	caught, total, skipped := 0, 0, 0
	shown := map[contracts.Property]bool{}
	for _, r := range all {
		switch {
		case r.Skipped():
			skipped++
		case r.Caught:
			caught++
			total++
			for _, p := range r.Sabotage.Raises {
				shown[p] = true
			}
		default:
			total++
			fmt.Fprintln(stdout)
			for _, sd := range r.Seeds {
				if !sd.Caught {
					fmt.Fprintf(stdout, "not caught: %s/%s on %s, seed %d%s: %s\n", r.Contract, r.Sabotage.Name, r.Result.Target, sd.Seed, ranNote(sd.Ran), sd.Why)
				}
			}
		}
	}
	var silent []string
	for _, spec := range checker.Properties {
		if !shown[spec.Name] {
			silent = append(silent, string(spec.Name))
		}
	}
	on := "on seed " + fmt.Sprint(o.Seed)
	if seeds > 1 {
		on = fmt.Sprintf("on every one of %d seeds (%d to %d)", seeds, o.Seed, o.Seed+uint64(seeds)-1)
	}
	fmt.Fprintf(stdout, "\n%d of %d sabotages caught %s by the properties they declare, each in a violation verdict with a witness (%d skipped); %d of %d properties shown to fire",
		caught, total, on, skipped, len(checker.Properties)-len(silent), len(checker.Properties))
	if len(silent) > 0 && len(o.Contracts) == 0 {
		fmt.Fprintf(stdout, " (not shown here: %s)", strings.Join(silent, ", "))
	}
	fmt.Fprintln(stdout)
	if err := contracts.Missed(all); err != nil {
		return &ExitError{Code: ExitViolation, Err: err}
	}
	return nil
}

// ranNote names the other seeds run for one seed, whose runs ended unknown.
func ranNote(ran []uint64) string {
	if len(ran) < 2 {
		return ""
	}
	parts := make([]string, len(ran))
	for i, s := range ran {
		parts[i] = fmt.Sprint(s)
	}
	return " (runs ended unknown; seeds tried " + strings.Join(parts, ", ") + ")"
}

func propertyList(ps []contracts.Property) string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = string(p)
	}
	return strings.Join(out, ", ")
}

// raised lists the properties a result raised, with their counts.
func raised(r contracts.Result) string {
	if len(r.Stats.Violations) == 0 {
		return "-"
	}
	return strings.Join(reports.PropertyCounts(r), ", ")
}

// Stderr is where commands report errors; a variable for tests.
var Stderr io.Writer = os.Stderr

// namedMem is the embedded target under another name (mem?name=...), so that
// one run can hold several embedded configurations. Safe for concurrent use.
type namedMem struct {
	contracts.MemTarget
	name string
}

func (m namedMem) Name() string { return m.name }

// maxDeliveryLimit bounds mem's delivery_limit knob: far above any job's
// attempt budget.
const maxDeliveryLimit = 1000

// memKnobs are the embedded target's knobs: name and delivery_limit (the
// broker's own dead-lettering after n deliveries).
func resolveMem(spec string) (*target, error) {
	mt := contracts.MemTarget{}
	if spec == "" || spec == "mem" {
		return &target{Target: mt, spec: "mem", info: reports.DescribeTarget(mt, "mem", ""), scale: 1}, nil
	}
	q, err := url.ParseQuery(strings.TrimPrefix(spec, "mem?"))
	if err != nil {
		return nil, ConfigError(fmt.Errorf("target %q: %v", reports.Clip(spec), err))
	}
	echo := reports.Clip(spec)
	settings := map[string]string{}
	for k := range q {
		if len(q[k]) > 1 {
			return nil, ConfigError(fmt.Errorf("%w: %s: setting %q given %d times", targets.ErrBadTarget, echo, reports.Clip(k), len(q[k])))
		}
		switch k {
		case "name":
		case "delivery_limit":
			n, err := strconv.Atoi(q.Get(k))
			if err != nil || n < 0 || n > maxDeliveryLimit {
				return nil, ConfigError(fmt.Errorf("target %s: delivery_limit=%q: want 0 (none) to %d", echo, reports.Clip(q.Get(k)), maxDeliveryLimit))
			}
			mt.DeliveryLimit = n
			settings[k] = q.Get(k)
		default:
			return nil, ConfigError(fmt.Errorf("%w: %s: unknown setting %q (mem takes name and delivery_limit)", targets.ErrBadTarget, echo, reports.Clip(k)))
		}
	}
	var t contracts.Target = mt
	if name := q.Get("name"); name != "" && name != "mem" {
		t = namedMem{MemTarget: mt, name: name}
	}
	info := reports.DescribeTarget(t, "mem", "", settings)
	return &target{Target: t, spec: spec, info: info, scale: 1}, nil
}
