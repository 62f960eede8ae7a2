package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/durachk/durachk/checker"
)

// CheckOptions are the flags of `durachk check`.
type CheckOptions struct {
	History string // JSONL history (docs/checker.md)
	Final   string // final state; "": none, so the properties that rest on it are unknown
	Format  string // text (default) or json
	// Options set on the command line; nil: take the final-state file's.
	FIFO, FencedAck, RelayRan, ApproximateLeases *bool
	Canaries                                     []string
}

// Check judges a recorded history (and its final state) with the checker and
// prints the verdict, each property's answer and the violations with their
// witnesses. Exit codes as for run: 0 pass, 1 violation, 2 unknown, 3 a file
// that cannot be read.
func Check(o CheckOptions, stdout io.Writer) error {
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
	if _, err := os.Stat(o.History); err != nil {
		return ConfigError(fmt.Errorf("history: %w", err))
	}
	r, err := checker.CheckFile(o.History, ff.Final, opts)
	if err != nil {
		return ConfigError(fmt.Errorf("%s: %w", o.History, err))
	}
	if r.Ops == 0 {
		// Nothing to judge is not a verdict: an empty file, or one whose only
		// line was torn, is not a history.
		return ConfigError(fmt.Errorf("history %s: no operation: want one JSON record per line (docs/checker.md)", o.History))
	}
	switch o.Format {
	case "", "text":
		writeCheck(stdout, o, r)
	case "json":
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return ConfigError(err)
		}
		fmt.Fprintf(stdout, "%s\n", b)
	default:
		return ConfigError(fmt.Errorf("--format %q: want text or json", o.Format))
	}
	switch r.Valid {
	case checker.Invalid:
		return &ExitError{Code: ExitViolation, Err: fmt.Errorf("%d violation(s)", len(r.Violations))}
	case checker.Unknown:
		return &ExitError{Code: ExitUnknown, Err: errors.New("the history does not decide every property")}
	}
	return nil
}

func writeCheck(w io.Writer, o CheckOptions, r checker.Result) {
	verdict := map[checker.Validity]string{checker.Valid: "pass", checker.Invalid: "violation", checker.Unknown: "unknown"}[r.Valid]
	fmt.Fprintf(w, "%s: %s (%d operations", o.History, verdict, r.Ops)
	if o.Final == "" {
		fmt.Fprint(w, ", no final state")
	}
	fmt.Fprintln(w, ")")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROPERTY\tVALID\tVIOLATIONS\tNOTE")
	for _, s := range checker.Properties {
		a := r.Properties[s.Name]
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", s.Name, a.Valid, a.Count, a.Reason)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%s\n", SeedColumns(r.Stats))
	for _, u := range r.Undecided {
		fmt.Fprintf(w, "undecided: %s\n", u)
	}
	for _, v := range r.Violations {
		fmt.Fprintln(w)
		_ = checker.WriteText(w, v, "")
	}
}
