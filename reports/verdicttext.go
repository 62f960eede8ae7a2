package reports

import (
	"fmt"
	"sort"
	"strings"

	"github.com/durachk/durachk/checker"
	"github.com/durachk/durachk/contracts"
)

// maxCellProperties bounds the properties a verdict cell names; the rest are
// counted ("+2 more").
const maxCellProperties = 2

// PropertyCounts are the properties a result raised, each with the number of
// its violations ("lost ×20"), in the checker's report order: from the
// result's counts (every violation, also those beyond the witnesses kept),
// else from its violations.
func PropertyCounts(r contracts.Result) []string {
	counts := r.Stats.Violations
	if len(counts) == 0 && len(r.Violations) > 0 {
		counts = map[string]int{}
		for _, v := range r.Violations {
			counts[string(v.Property)]++
		}
	}
	var out []string
	seen := map[string]bool{}
	for _, spec := range checker.Properties {
		if n := counts[string(spec.Name)]; n > 0 {
			out = append(out, fmt.Sprintf("%s ×%d", spec.Name, n))
			seen[string(spec.Name)] = true
		}
	}
	var rest []string
	for p, n := range counts {
		if n > 0 && !seen[p] {
			rest = append(rest, fmt.Sprintf("%s ×%d", p, n))
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// VerdictText is a result's verdict as a cell of a table says it: a
// violation by the properties it raised with their counts ("lost ×20",
// "lost ×3, duplicate_effect ×1 +1 more"), the other verdicts by name; with
// trials, how many of them had that verdict ("lost ×20 (2 of 5 trials)": the
// counts are those of the first violating trial, whose witness is shown).
func VerdictText(r contracts.Result) string {
	text := string(r.Verdict)
	if r.Verdict == contracts.Violated {
		if ps := PropertyCounts(r); len(ps) > 0 {
			text = strings.Join(ps[:min(len(ps), maxCellProperties)], ", ")
			if n := len(ps) - maxCellProperties; n > 0 {
				text += fmt.Sprintf(" +%d more", n)
			}
		}
	}
	if n := len(r.Trials); n > 1 && r.Verdict != contracts.Skipped {
		k := 0
		for _, t := range r.Trials {
			if t.Verdict == r.Verdict {
				k++
			}
		}
		text += fmt.Sprintf(" (%d of %d trials)", k, n)
	}
	return text
}

// VerdictLegend says what a verdict cell holds, for the line under a table.
const VerdictLegend = "Each cell is a verdict: pass, unknown (the run could not tell: its reason says why), skipped " +
	"(the target lacks a capability the contract needs), or a violation named by the properties it raised, " +
	"each with its number of violations (`lost ×20`: 20 jobs accepted and lost; docs/checker.md lists the " +
	"properties); with --trials, how many trials had that verdict. — : not run there."
