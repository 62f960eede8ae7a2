package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/reports"
)

// recorder is a Target that keeps the run and the execution of its last
// Execute call, so that a report can show the history behind a verdict.
// Not safe for concurrent use: one evaluation at a time.
type recorder struct {
	contracts.Target
	run *contracts.Run
	ex  *contracts.Execution
}

// Execute runs the inner target and records what it returned.
func (r *recorder) Execute(ctx context.Context, run contracts.Run) (contracts.Execution, error) {
	ex, err := r.Target.Execute(ctx, run)
	r.run = &run
	if err == nil {
		r.ex = &ex
	}
	return ex, err
}

// evaluate runs c on t and adds the result, its history sample and its
// evidence to doc.
func evaluate(ctx context.Context, doc *reports.Document, t *target, c *contracts.Contract, o RunOptions) (contracts.Result, error) {
	rec := &recorder{Target: t.Target}
	res, err := contracts.Evaluate(ctx, rec, c, contracts.Options{Seed: o.Seed, Jobs: o.Jobs})
	if err != nil {
		return res, err
	}
	doc.Add(res)
	ev := reports.Evidence{Reproduce: reproduce(t, c, o)}
	if rec.ex == nil {
		doc.AddEvidence(res, nil, ev)
		return res, nil
	}
	observed := reports.ObservedWindows(rec.ex.Ops)
	planned := reports.PlanWindows(rec.run.Scenario.Plan, anchor(rec.ex.Ops, rec.run.Scenario, t.scale), t.scale)
	ev.Windows = reports.MergeWindows(planned, observed)
	doc.AddEvidence(res, rec.ex.Ops, ev)
	return res, nil
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

// reproduce is the command that reruns one result alone.
func reproduce(t *target, c *contracts.Contract, o RunOptions) string {
	parts := []string{"durachk", "run", "--seed", fmt.Sprint(o.Seed)}
	if t.spec != "mem" && t.spec != "" {
		parts = append(parts, "--target", shellQuote(reports.RedactURL(t.spec)))
	}
	if strings.HasPrefix(c.ID, "scenario/") {
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
// is a terminal, plain lines otherwise.
type progress struct {
	bar   *progressbar.ProgressBar
	w     io.Writer
	total int
	n     int
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
	p := &progress{w: w, total: total}
	if isTerminal(w) {
		p.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(w), progressbar.OptionShowCount(),
			progressbar.OptionSetWidth(30), progressbar.OptionClearOnFinish(), progressbar.OptionSetPredictTime(true),
			progressbar.OptionShowElapsedTimeOnFinish(), progressbar.OptionSetDescription("starting"))
	}
	return p
}

func (p *progress) start(target, contract string) {
	if p.bar != nil {
		p.bar.Describe(target + " " + contract)
	}
}

func (p *progress) done(r contracts.Result) {
	p.n++
	if p.bar != nil {
		_ = p.bar.Add(1)
		return
	}
	fmt.Fprintf(p.w, "durachk: [%d/%d] %s %s: %s (%s)\n", p.n, p.total, r.Target, r.Contract, r.Verdict, fmtMS(float64(r.Wall.Microseconds())/1000))
}

func (p *progress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}

// logWriter writes the runner's progress lines, clearing the bar first.
type logWriter struct {
	p *progress
	w io.Writer
}

func (l *logWriter) Write(b []byte) (int, error) {
	if l.p != nil && l.p.bar != nil {
		_ = l.p.bar.Clear()
	}
	return l.w.Write(b)
}

// Run carries out `durachk run`: every selected contract on every target,
// then result.json (with histories/), junit.xml, summary.md and report.html
// in o.Out, the summary appended to $GITHUB_STEP_SUMMARY when set, and the
// exit code (or the baseline's verdict).
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
	ts, err := resolveAll(ctx, &o, lw)
	if err != nil {
		return err
	}
	doc := reports.NewDocument(o.Seed, o.Command, time.Now())
	doc.Jobs = o.Jobs
	prog := newProgress(stderr, len(ts)*len(cs))
	lw.p = prog
	var secrets []string
	for _, t := range ts {
		doc.AddTargetInfo(t.info)
		secrets = append(secrets, t.secrets...)
		for _, c := range cs {
			if ctx.Err() != nil {
				prog.finish()
				return ConfigError(ctx.Err())
			}
			prog.start(t.Name(), c.ID)
			r, err := evaluate(ctx, doc, t, c, o)
			if err != nil {
				prog.finish()
				return ConfigError(err)
			}
			prog.done(r)
		}
	}
	prog.finish()
	doc.Finish(time.Now())
	if err := doc.Scrub(secrets...); err != nil {
		return ConfigError(err)
	}
	PrintTable(stdout, doc)
	if err := WriteOutputs(doc, o.Out, formats); err != nil {
		return ConfigError(err)
	}
	fmt.Fprintf(stdout, "\nresult: %s\n", filepath.Join(o.Out, "result.json"))
	if p := os.Getenv("GITHUB_STEP_SUMMARY"); p != "" {
		if err := appendSummary(p, doc); err != nil {
			fmt.Fprintf(stderr, "durachk: job summary: %v\n", err)
		}
	}
	if baseline != nil {
		return gate(stdout, stderr, baseline, doc)
	}
	return verdictError(doc)
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
	// History samples of an earlier run in the same directory would be stale.
	if err := os.RemoveAll(filepath.Join(dir, "histories")); err != nil {
		return err
	}
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
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := reports.Render(f, doc, format); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
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

// gate compares the run with the baseline: one line per difference, exit 1
// on any, 0 when every verdict is the expected one.
func gate(stdout, stderr io.Writer, bl reports.Baseline, doc *reports.Document) error {
	diffs := bl.Compare(doc)
	if len(diffs) == 0 {
		fmt.Fprintf(stdout, "baseline: every verdict as expected\n")
		return nil
	}
	fmt.Fprintf(stdout, "baseline: %d regression(s)\n", len(diffs))
	for _, d := range diffs {
		fmt.Fprintln(stdout, d.String())
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
