package reports

import (
	"fmt"
	"strings"

	"github.com/durachk/durachk/contracts"
)

// PartialNote says why d is not a complete run, or "" for a complete one.
// Every rendering shows it first: a partial document must never read as a
// run that had nothing to report.
func PartialNote(d *Document) string {
	if d.Complete {
		return ""
	}
	n := fmt.Sprintf("partial run: %d results", len(d.Results))
	if d.Planned > 0 {
		n = fmt.Sprintf("partial run: %d of %d results", len(d.Results), d.Planned)
	}
	switch {
	case d.Interrupted:
		n += "; " + d.Stopped
	case d.Stopped != "":
		n += "; stopped by an error: " + d.Stopped
	default:
		n += "; durachk did not finish it (killed, or still running)"
	}
	if d.Wall.RunID != "" {
		n += " (run " + d.Wall.RunID + ")"
	}
	return n
}

// TrialsNote sums up the trials of r ("violation in 1 of 5 trials", and
// ", unknown in 2" when others of a violation were unknown), or "" when r
// was one run. When trials ran more than one seed (a run that did not
// exercise the claim, or put too little at risk, tries the next), it says
// how many runs there were and how many of them the trials set aside:
// "violation in 10 of 10 trials (18 runs: 8 seeds did not exercise the
// claim)", so that the note never reads as a higher rate per run than was
// measured.
func TrialsNote(r contracts.Result) string {
	if len(r.Trials) < 2 {
		return ""
	}
	count := map[contracts.Verdict]int{}
	for _, t := range r.Trials {
		count[t.Verdict]++
	}
	note := fmt.Sprintf("%s in %d of %d trials", r.Verdict, count[r.Verdict], len(r.Trials))
	if n := count[contracts.Unknown]; r.Verdict == contracts.Violated && n > 0 {
		// A reproduction rate: the trials that could not tell (a plan's run
		// that put too little at risk) are not passes.
		note += fmt.Sprintf(", unknown in %d", n)
	}
	runs := 0
	for _, t := range r.Trials {
		runs += max(len(t.SeedsTried), 1)
	}
	if set := runs - len(r.Trials); set > 0 {
		seeds := "seeds"
		if set == 1 {
			seeds = "seed"
		}
		note += fmt.Sprintf(" (%d runs: %d %s did not exercise the claim)", runs, set, seeds)
	}
	return note
}

// TrialLine is one trial as reports list it.
type TrialLine struct {
	Seed       uint64
	Verdict    contracts.Verdict
	SeedsTried string // "1, 2, 3" when the trial tried more than one seed
	Reason     string
	Reproduce  string // for a trial that did not pass
}

// TrialLines lists the trials of r with the command that reruns each one
// that did not pass; nil when r was one run of one seed.
func TrialLines(d *Document, r contracts.Result) []TrialLine {
	ev := d.EvidenceFor(r.Target, r.Contract)
	var out []TrialLine
	for _, t := range r.Trials {
		l := TrialLine{Seed: t.Seed, Verdict: t.Verdict, Reason: t.Reason}
		if len(t.SeedsTried) > 1 {
			var ss []string
			for _, s := range t.SeedsTried {
				ss = append(ss, fmt.Sprint(s))
			}
			l.SeedsTried = strings.Join(ss, ", ")
		}
		if t.Verdict != contracts.Pass && ev.ReproduceTrials[t.Seed] != "" {
			l.Reproduce = PasteCommand(ev.ReproduceTrials[t.Seed], nil)
		}
		out = append(out, l)
	}
	return out
}

// trialsText is the trials of r as text lines (Markdown list items when md).
func trialsText(d *Document, r contracts.Result, md bool) string {
	lines := TrialLines(d, r)
	if len(lines) == 0 {
		return ""
	}
	var b strings.Builder
	for _, l := range lines {
		if md {
			b.WriteString("- ")
		} else {
			b.WriteString("  ")
		}
		fmt.Fprintf(&b, "seed %d: %s", l.Seed, l.Verdict)
		if l.SeedsTried != "" {
			fmt.Fprintf(&b, " (seeds tried: %s)", l.SeedsTried)
		}
		if l.Reason != "" && l.Verdict != contracts.Pass {
			reason := clip(l.Reason, 300)
			if md {
				reason = mdEscape(reason)
			}
			fmt.Fprintf(&b, ": %s", reason)
		}
		if l.Reproduce != "" {
			if md {
				fmt.Fprintf(&b, " · reproduce: `%s`", mdCode(l.Reproduce))
			} else {
				fmt.Fprintf(&b, "\n    reproduce: %s", l.Reproduce)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TrialsText is the trials of r, one per line with the reproduce command of
// each that did not pass, for text renderings.
func TrialsText(d *Document, r contracts.Result) string { return trialsText(d, r, false) }
