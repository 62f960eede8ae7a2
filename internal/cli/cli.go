// Package cli carries out durachk's commands; cmd/durachk parses the flags.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/durachk/durachk/contracts"
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

// RunOptions are the flags of `durachk run`.
type RunOptions struct {
	Targets   []string
	Contracts []string
	Scenarios []string
	Seed      uint64
	Jobs      int
	Out       string
	Command   string // the command line, for the report's reproduce line
}

// ResolveTarget turns a --target value into a Target: mem, or a broker URL
// whose broker is reached once to read its version and capabilities.
func ResolveTarget(ctx context.Context, spec string, log io.Writer) (contracts.Target, error) {
	if spec == "" || spec == "mem" {
		return contracts.MemTarget{}, nil
	}
	if !strings.Contains(spec, "://") {
		return nil, ConfigError(fmt.Errorf("target %q: want mem or a broker URL", spec))
	}
	s, err := targets.Parse(spec)
	if err != nil {
		return nil, ConfigError(err)
	}
	t, err := runner.New(ctx, s)
	if err != nil {
		return nil, ConfigError(err)
	}
	t.Log = log
	return t, nil
}

// selection returns the contracts and scenarios a run asks for.
func selection(o RunOptions) ([]*contracts.Contract, error) {
	var out []*contracts.Contract
	if len(o.Contracts) > 0 || len(o.Scenarios) == 0 {
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

// Run carries out `durachk run`.
func Run(ctx context.Context, o RunOptions, stdout, stderr io.Writer) error {
	if len(o.Targets) == 0 {
		o.Targets = []string{"mem"}
	}
	var ts []contracts.Target
	for _, spec := range o.Targets {
		t, err := ResolveTarget(ctx, spec, stderr)
		if err != nil {
			return err
		}
		ts = append(ts, t)
	}
	cs, err := selection(o)
	if err != nil {
		return err
	}
	if o.Jobs < 0 {
		return ConfigError(fmt.Errorf("--jobs %d: want a positive number", o.Jobs))
	}
	doc := reports.NewDocument(o.Seed, o.Command, time.Now())
	for _, t := range ts {
		doc.AddTarget(t)
		for _, c := range cs {
			if ctx.Err() != nil {
				return ConfigError(ctx.Err())
			}
			r, err := contracts.Evaluate(ctx, t, c, contracts.Options{Seed: o.Seed, Jobs: o.Jobs})
			if err != nil {
				return ConfigError(err)
			}
			doc.Add(r)
		}
	}
	doc.Finish(time.Now())
	PrintTable(stdout, doc)
	path := filepath.Join(o.Out, "result.json")
	if err := doc.WriteJSON(path); err != nil {
		return ConfigError(err)
	}
	fmt.Fprintf(stdout, "\nresult: %s\n", path)
	return verdictError(doc)
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

// PrintTable writes the verdict table of a document.
func PrintTable(w io.Writer, doc *reports.Document) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tCONTRACT\tVERDICT\tJOBS\tEXECUTIONS\tDUPS EXPL/UNEXPL\tFAULTS\tTIME")
	for i, r := range doc.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d/%d\t%d\t%s\n", r.Target, r.Contract, r.Verdict, r.Stats.Accepted, r.Stats.Executions,
			r.Stats.Explained, r.Stats.Unexplained, faultCount(r.Stats.Faults), fmtMS(doc.Wall.Results[i].MS))
	}
	tw.Flush()
	for _, r := range doc.Results {
		if r.Contract != "" && strings.HasPrefix(r.Contract, "scenario/") {
			fmt.Fprintf(w, "%s: accepted %d, applied %d, dead-lettered %d, cancelled %d, duplicates dropped %d\n", r.Contract,
				r.Stats.Accepted, r.Stats.Applied, r.Stats.DeadLettered, r.Stats.Cancelled, r.Stats.DroppedRepeats)
		}
	}
	for _, r := range doc.Results {
		if r.Verdict != contracts.Pass {
			fmt.Fprintf(w, "%s %s: %s: %s\n", r.Target, r.Contract, r.Verdict, r.Reason)
		}
	}
	fmt.Fprintf(w, "\n%d pass, %d violation, %d unknown, %d skipped (seed %d, measured on %s)\n",
		doc.Summary["pass"], doc.Summary["violation"], doc.Summary["unknown"], doc.Summary["skipped"], doc.Seed, measuredOn(doc))
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

// List prints the catalogue.
func List(ctx context.Context, w io.Writer, specs []string) error {
	var ts []contracts.Target
	if len(specs) == 0 {
		specs = []string{"mem"}
	}
	for _, spec := range specs {
		t, err := ResolveTarget(ctx, spec, nil)
		if err != nil {
			return err
		}
		ts = append(ts, t)
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

// Selftest runs every sabotage of the selected contracts and shows that the
// checker flags each with a witness. It fails (exit 1) if any sabotage passes.
func Selftest(ctx context.Context, o RunOptions, stdout io.Writer) error {
	if len(o.Targets) == 0 {
		o.Targets = []string{"mem"}
	}
	cs, err := contracts.Select(o.Contracts)
	if err != nil {
		return ConfigError(err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tCONTRACT\tSABOTAGE\tCAUGHT\tVERDICT\tWITNESS")
	caught, total, skipped := 0, 0, 0
	var missed []string
	tried, contractMissed := map[string]bool{}, map[string]bool{}
	for _, spec := range o.Targets {
		t, err := ResolveTarget(ctx, spec, nil)
		if err != nil {
			return err
		}
		for _, c := range cs {
			for _, s := range c.Sabotages {
				r, err := contracts.EvaluateSabotage(ctx, t, c, s, contracts.Options{Seed: o.Seed, Jobs: o.Jobs})
				if err != nil {
					return ConfigError(err)
				}
				if r.Verdict == contracts.Skipped {
					skipped++
					fmt.Fprintf(tw, "%s\t%s\t%s\t-\tskipped\t%s\n", t.Name(), c.ID, s.Name, r.Reason)
					continue
				}
				total++
				tried[t.Name()+"/"+c.ID] = true
				ok := r.Verdict == contracts.Violated && len(r.Violations) > 0 && len(r.Violations[0].Witness) > 0
				witness := "-"
				if len(r.Violations) > 0 {
					witness = fmt.Sprintf("%s (%d lines)", r.Violations[0].Property, len(r.Violations[0].Witness))
				}
				mark := "yes"
				if ok {
					caught++
				} else {
					mark = "NO"
					contractMissed[t.Name()+"/"+c.ID] = true
					missed = append(missed, c.ID+"/"+s.Name)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Name(), c.ID, s.Name, mark, r.Verdict, witness)
			}
		}
	}
	tw.Flush()
	fmt.Fprintf(stdout, "\n%d of %d contracts caught every sabotage; %d of %d sabotages caught, each with a witness (%d skipped)\n",
		len(tried)-len(contractMissed), len(tried), caught, total, skipped)
	if len(missed) > 0 {
		return &ExitError{Code: ExitViolation, Err: fmt.Errorf("sabotages not caught: %s", strings.Join(missed, ", "))}
	}
	return nil
}

// Stderr is where commands report errors; a variable for tests.
var Stderr io.Writer = os.Stderr
