package cli

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/durachk/durachk/checker"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/reports"
)

// CheckOptions are the flags of `durachk check`.
type CheckOptions struct {
	History string // JSONL history (docs/checker.md)
	Final   string // final state; "": none, so the properties that rest on it are unknown
	// Result is a run's result.json: every verdict of the run is judged
	// again from the histories and final states beside it (History and Final
	// are then empty).
	Result string
	Format string // text (default) or json
	// Options set on the command line; nil: take the final-state file's.
	FIFO, FencedAck, RelayRan, ApproximateLeases *bool
	Canaries                                     []string
}

// overrides reports whether a flag sets a checker option.
func (o CheckOptions) overrides() bool {
	return o.FIFO != nil || o.FencedAck != nil || o.RelayRan != nil || o.ApproximateLeases != nil || len(o.Canaries) > 0
}

// apply sets the options the flags give.
func (o CheckOptions) apply(opts *checker.Options) {
	for _, f := range []struct {
		flag *bool
		opt  *bool
	}{{o.FIFO, &opts.FIFO}, {o.FencedAck, &opts.FencedAck}, {o.RelayRan, &opts.RelayRan}, {o.ApproximateLeases, &opts.ApproximateLeases}} {
		if f.flag != nil {
			*f.opt = *f.flag
		}
	}
	if len(o.Canaries) > 0 {
		opts.Canaries = o.Canaries
	}
}

// Check judges a recorded history (and its final state) with the checker and
// prints the verdict, each property's answer and the violations with their
// witnesses. A final-state file a run wrote (durachk.final/v1) names its
// contract: the verdict is then the engine's, as the run gave it (the
// contract's own properties, a cluster that did not settle, an outage, a run
// that did not drain, a claim not exercised). With Result, every verdict of
// a run is judged again (CheckResult). Exit codes as for run: 0 pass, 1
// violation, 2 unknown, 3 a file that cannot be read.
func Check(o CheckOptions, stdout io.Writer) error {
	switch o.Format {
	case "", "text", "json":
	default:
		return ConfigError(fmt.Errorf("--format %q: want text or json", o.Format))
	}
	if o.Result != "" {
		return CheckResult(o, stdout)
	}
	if _, err := os.Stat(o.History); err != nil {
		return ConfigError(fmt.Errorf("history: %w", err))
	}
	if o.Final != "" && reports.IsJudged(o.Final) {
		return checkJudged(o, stdout)
	}
	var ff checker.FinalFile
	opts := checker.Options{HistoryOnly: true}
	if o.Final != "" {
		var err error
		if ff, err = checker.ReadFinal(o.Final); err != nil {
			return ConfigError(err)
		}
		opts = checker.Options{}
		if ff.Check != nil {
			opts = *ff.Check
			opts.HistoryOnly = false
		}
	}
	o.apply(&opts)
	r, err := checker.CheckFile(o.History, ff.Final, opts)
	if err != nil {
		return ConfigError(fmt.Errorf("%s: %w", o.History, err))
	}
	if r.Ops == 0 {
		// Nothing to judge is not a verdict: an empty file, or one whose only
		// line was torn, is not a history.
		return ConfigError(fmt.Errorf("history %s: no operation: want one JSON record per line (docs/checker.md)", o.History))
	}
	if o.Format == "json" {
		if err := writeJSON(stdout, r); err != nil {
			return err
		}
	} else {
		writeCheck(stdout, o, r)
	}
	switch r.Valid {
	case checker.Invalid:
		return &ExitError{Code: ExitViolation, Err: fmt.Errorf("%d violation(s)", len(r.Violations))}
	case checker.Unknown:
		return &ExitError{Code: ExitUnknown, Err: errors.New("the history does not decide every property")}
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return ConfigError(err)
	}
	fmt.Fprintf(w, "%s\n", b)
	return nil
}

func writeCheck(w io.Writer, o CheckOptions, r checker.Result) {
	verdict := map[checker.Validity]string{checker.Valid: "pass", checker.Invalid: "violation", checker.Unknown: "unknown"}[r.Valid]
	fmt.Fprintf(w, "%s: %s (%d operations", o.History, verdict, r.Ops)
	if o.Final == "" {
		fmt.Fprint(w, ", no final state")
	}
	fmt.Fprintln(w, ")")
	writeProperties(w, r, nil)
	fmt.Fprintf(w, "\n%s\n", SeedColumns(r.Stats))
	for _, u := range r.Undecided {
		fmt.Fprintf(w, "undecided: %s\n", u)
	}
	for _, v := range r.Violations {
		fmt.Fprintln(w)
		_ = checker.WriteText(w, v, "")
	}
}

// writeProperties is the table of every property's answer, then the
// contract's own properties that fired (own: the result's violations).
func writeProperties(w io.Writer, r checker.Result, own *contracts.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROPERTY\tVALID\tVIOLATIONS\tNOTE")
	for _, s := range checker.Properties {
		a := r.Properties[s.Name]
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", s.Name, a.Valid, a.Count, a.Reason)
	}
	if own != nil {
		for _, p := range ownProperties(*own) {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", p, checker.Invalid, own.Stats.Violations[string(p)], "the contract's own property")
		}
	}
	tw.Flush()
}

// ownProperties are the properties of r's violations the checker does not
// have (a contract's own: fencing.failover's token_reissued).
func ownProperties(r contracts.Result) []contracts.Property {
	var out []contracts.Property
	for _, v := range r.Violations {
		if _, ok := checker.Lookup(v.Property); !ok && !slices.Contains(out, v.Property) {
			out = append(out, v.Property)
		}
	}
	return out
}

// judgedCheck is what `durachk check --format json` prints for a final-state
// file a run wrote: the engine's result and the checker's answer.
type judgedCheck struct {
	Result  contracts.Result `json:"result"`
	Checker checker.Result   `json:"checker"`
}

// checkJudged judges o.History with a final-state file a run wrote, as the
// run's engine did; flags override the file's checker options.
func checkJudged(o CheckOptions, stdout io.Writer) error {
	j, err := reports.ReadJudged(o.Final)
	if err != nil {
		return ConfigError(err)
	}
	o.apply(&j.Check)
	ops, err := history.ReadFile(o.History)
	if err != nil {
		return ConfigError(err)
	}
	if len(ops) == 0 {
		return ConfigError(fmt.Errorf("history %s: no operation", o.History))
	}
	res, cr, err := reports.JudgeAgain(j, ops)
	if err != nil {
		return ConfigError(err)
	}
	if o.Format == "json" {
		if err := writeJSON(stdout, judgedCheck{Result: res, Checker: cr}); err != nil {
			return err
		}
		return verdictExit(res.Verdict, res.Reason)
	}
	note := ""
	if o.overrides() {
		note = ", with the options the flags set"
	}
	fmt.Fprintf(stdout, "%s: %s (%d operations; %s on %s, seed %d, judged as its run was%s)\n", o.History, res.Verdict, len(ops), j.Contract, j.Target, j.Seed, note)
	if res.Reason != "" {
		fmt.Fprintf(stdout, "reason: %s\n", res.Reason)
	}
	writeProperties(stdout, cr, &res)
	fmt.Fprintf(stdout, "\n%s\n", SeedColumns(res.Stats))
	for _, u := range cr.Undecided {
		fmt.Fprintf(stdout, "undecided: %s\n", u)
	}
	for _, v := range res.Violations {
		fmt.Fprintln(stdout)
		_ = checker.WriteText(stdout, v, "")
	}
	return verdictExit(res.Verdict, res.Reason)
}

func verdictExit(v contracts.Verdict, reason string) error {
	switch v {
	case contracts.Violated:
		return &ExitError{Code: ExitViolation, Err: fmt.Errorf("violation: %s", reason)}
	case contracts.Unknown:
		return &ExitError{Code: ExitUnknown, Err: fmt.Errorf("unknown: %s", reason)}
	}
	return nil
}

// CheckResult judges every verdict of a run again from the histories and
// final states its --out holds (reports.Rejudge), and says for each whether
// it is the run's: the verdict, the violations with their witnesses, and for
// a result its stats, metrics and cluster facts. Exit codes: rejudgedExit.
func CheckResult(o CheckOptions, stdout io.Writer) error {
	if o.History != "" || o.Final != "" || o.overrides() {
		return ConfigError(fmt.Errorf("check --result: takes no history, --final or checker option: each verdict is judged with the files and options its run recorded"))
	}
	doc, err := reports.ReadJSON(o.Result)
	if err != nil {
		return ConfigError(err)
	}
	rjs := reports.Rejudge(doc, filepath.Dir(o.Result))
	if o.Format == "json" {
		type out struct {
			reports.Rejudgement
			Err string `json:"error,omitempty"`
		}
		var all []out
		for _, rj := range rjs {
			x := out{Rejudgement: rj}
			if rj.Err != nil {
				x.Err = rj.Err.Error()
			}
			all = append(all, x)
		}
		if err := writeJSON(stdout, all); err != nil {
			return err
		}
	} else {
		writeRejudged(stdout, o.Result, rjs)
	}
	return rejudgedExit(doc, rjs)
}

// rejudgedExit is the exit of check --result: 3 when a file is missing or
// broken; 1 when a verdict judged again differs from the run's, or a verdict
// is a violation (judged again, or as the run judged it where nothing was
// recorded to judge it from: an exploration's); else 2 when one is unknown,
// the run is partial (interrupted, or stopped before its last result), or a
// result that ran has nothing recorded to judge it again from; else 0. Every
// result counts, whatever its order.
func rejudgedExit(doc *reports.Document, rjs []reports.Rejudgement) error {
	violated, unknown := false, false
	var broken, differ, unjudged []string
	for _, rj := range rjs {
		name := rj.Target + " " + rj.Contract
		if rj.Trial {
			name += fmt.Sprintf(" (trial seed %d)", rj.Seed)
		}
		v := rj.Again.Verdict
		switch {
		case rj.Err != nil && !errors.Is(rj.Err, reports.ErrNotRecorded):
			broken = append(broken, name+": "+rj.Err.Error())
			continue
		case rj.Err != nil:
			// Nothing to judge again: the run's verdict stands, and a
			// result that ran without its evidence cannot say pass.
			v = rj.Run.Verdict
			if v != contracts.Skipped {
				unjudged = append(unjudged, name)
			}
		case rj.Differs != "":
			differ = append(differ, name)
		}
		violated = violated || v == contracts.Violated
		unknown = unknown || v == contracts.Unknown
	}
	switch {
	case len(broken) > 0:
		return ConfigError(fmt.Errorf("check --result: %s", strings.Join(broken, "; ")))
	case len(differ) > 0:
		return &ExitError{Code: ExitViolation, Err: fmt.Errorf("judged again, %d verdict(s) differ from the run's: %s", len(differ), strings.Join(differ, ", "))}
	case violated:
		return &ExitError{Code: ExitViolation, Err: errors.New("violation, as the run judged it")}
	case unknown:
		return &ExitError{Code: ExitUnknown, Err: errors.New("unknown, as the run judged it")}
	case !doc.Complete:
		return &ExitError{Code: ExitUnknown, Err: fmt.Errorf("the run is partial: %d of %d results (%s)", len(doc.Results), doc.Planned, cmp.Or(doc.Stopped, "it did not finish"))}
	case len(unjudged) > 0:
		return &ExitError{Code: ExitUnknown, Err: fmt.Errorf("%d verdict(s) have nothing recorded to judge them again from: %s", len(unjudged), strings.Join(unjudged, ", "))}
	}
	return nil
}

// writeRejudged prints one line per verdict judged again, then for each that
// is not a pass the properties that do not hold and the witnesses, then the
// count.
func writeRejudged(w io.Writer, path string, rjs []reports.Rejudgement) {
	fmt.Fprintf(w, "%s: every verdict judged again from the histories and final states beside it\n", path)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tCONTRACT\tSEED\tRUN\tJUDGED AGAIN\tSAME")
	same, differ, notRecorded := 0, 0, 0
	for _, rj := range rjs {
		contract := rj.Contract
		if rj.Trial {
			contract += " (trial)"
		}
		again, mark := "-", ""
		switch {
		case errors.Is(rj.Err, reports.ErrNotRecorded):
			notRecorded++
			mark = "not recorded"
		case rj.Err != nil:
			differ++
			mark = "cannot: " + rj.Err.Error()
		case rj.Differs != "":
			differ++
			again, mark = string(rj.Again.Verdict), "NO: "+rj.Differs
		default:
			same++
			again, mark = string(rj.Again.Verdict), "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", rj.Target, contract, rj.Seed, rj.Run.Verdict, again, mark)
	}
	tw.Flush()
	for _, rj := range rjs {
		if rj.Trial {
			continue // a row each; the result's details stand for its trials
		}
		if rj.Err != nil || rj.Again.Verdict == contracts.Pass {
			if errors.Is(rj.Err, reports.ErrNotRecorded) && rj.Run.Verdict != contracts.Skipped {
				fmt.Fprintf(w, "\n%s %s: %v\n", rj.Target, rj.Contract, rj.Err)
			}
			continue
		}
		fmt.Fprintf(w, "\n%s %s: %s: %s\n", rj.Target, rj.Contract, rj.Again.Verdict, rj.Again.Reason)
		for _, s := range checker.Properties {
			if a := rj.Checker.Properties[s.Name]; a.Valid == checker.Invalid || a.Valid == checker.Unknown {
				note := ""
				if a.Reason != "" {
					note = ": " + a.Reason
				}
				fmt.Fprintf(w, "  %s %s ×%d%s\n", s.Name, a.Valid, a.Count, note)
			}
		}
		for _, p := range ownProperties(rj.Again) {
			fmt.Fprintf(w, "  %s false ×%d (the contract's own property)\n", p, rj.Again.Stats.Violations[string(p)])
		}
		for i, v := range rj.Again.Violations {
			if i == maxWitnessesShown {
				fmt.Fprintf(w, "  … %d more violations (--format json has every one)\n", len(rj.Again.Violations)-i)
				break
			}
			_ = checker.WriteText(w, v, "  ")
		}
	}
	fmt.Fprintf(w, "\n%d verdicts judged again: %d the run's, %d not", same+differ, same, differ)
	if notRecorded > 0 {
		fmt.Fprintf(w, "; %d not recorded for re-judging (nothing ran, or no final state was kept)", notRecorded)
	}
	fmt.Fprintln(w)
}
