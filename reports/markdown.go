package reports

import (
	"fmt"
	"io"
	"strings"

	"github.com/durachk/durachk/contracts"
)

// MaxMarkdown is the size a Markdown summary never reaches: GitHub refuses a
// job summary of 1 MiB or more.
const MaxMarkdown = 1 << 20

// markdownBudget leaves room below MaxMarkdown for the closing lines.
const markdownBudget = MaxMarkdown - 16<<10

// WriteMarkdown renders a CI job summary: a headline, the verdict table
// (contracts × targets), then one <details> block per result that is not a
// pass, then the targets. However large the run, the output stays under
// MaxMarkdown: what does not fit is left out with a line saying so.
func WriteMarkdown(w io.Writer, d *Document) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## durachk: %d pass, %d violation, %d unknown, %d skipped\n\n",
		d.Summary["pass"], d.Summary["violation"], d.Summary["unknown"], d.Summary["skipped"])
	if note := PartialNote(d); note != "" {
		fmt.Fprintf(&b, "> **⚠ %s.** The verdicts below are those it had; the missing contracts have none.\n\n", mdEscape(note))
	}
	b.WriteString(gateMarkdown(d))
	m := NewMatrix([]*Document{d}, nil)
	m.WorstFirst()
	// The table may take at most half the budget.
	var table strings.Builder
	writeMatrixMarkdown(&table, m, -1)
	if table.Len() > markdownBudget/2 {
		rows := len(m.Contracts)
		for rows > 0 && table.Len() > markdownBudget/2 {
			rows = rows * 3 / 4
			table.Reset()
			writeMatrixMarkdown(&table, m, rows)
		}
	}
	b.WriteString(table.String())
	fmt.Fprintf(&b, "\n%s\n", VerdictLegend)
	cmd := PasteCommand(d.Command, nil)
	fmt.Fprintf(&b, "\nSeed %d · reproduce with `%s`\n", d.Seed, mdCode(cmd))
	if note := EnvNote(cmd); note != "" {
		fmt.Fprintf(&b, "(%s.)\n", note)
	}

	var notPass []int // violations first, then unknowns, then skips
	for _, i := range d.ReadingOrder() {
		if d.Results[i].Verdict != contracts.Pass {
			notPass = append(notPass, i)
		}
	}
	if len(notPass) > 0 {
		b.WriteString("\n### Details\n\n")
	}
	for n, i := range notPass {
		block := detailsBlock(d, d.Results[i])
		if b.Len()+len(block) > markdownBudget {
			fmt.Fprintf(&b, "\n… %d more results left out to keep this summary under 1 MiB; see report.html or result.json.\n", len(notPass)-n)
			break
		}
		b.WriteString(block)
	}
	targets := targetsMarkdown(d)
	if b.Len()+len(targets) <= markdownBudget {
		b.WriteString(targets)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func mdCode(s string) string { return strings.ReplaceAll(s, "`", "'") }

func detailsBlock(d *Document, r contracts.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<details><summary><b>%s</b> on <b>%s</b>: %s %s</summary>\n\n", htmlText(r.Contract), htmlText(r.Target), markSymbol(r.Verdict), htmlText(VerdictText(r)))
	fmt.Fprintf(&b, "%s\n\n", mdEscape(r.Claim))
	if r.Reason != "" {
		fmt.Fprintf(&b, "**Reason:** %s\n\n", mdEscape(clip(r.Reason, 2000)))
	}
	if line := d.DurabilityLine(r); line != "" {
		fmt.Fprintf(&b, "**Durability settings:** %s\n\n", mdEscape(clip(line, 2000)))
	}
	if ev := d.EvidenceFor(r.Target, r.Contract); ev.Replay != nil {
		fmt.Fprintf(&b, "**Reproduction:** %s\n\n", mdEscape(ev.Replay.Text))
	}
	if note := TrialsNote(r); note != "" {
		fmt.Fprintf(&b, "**Trials:** %s\n\n%s\n", note, trialsText(d, r, true))
	}
	ev := d.EvidenceFor(r.Target, r.Contract)
	if len(r.Planned) > 0 {
		fmt.Fprintf(&b, "**Faults planned** (%s): %s\n\n", PlannedLabel(ev), mdEscape(clip(strings.Join(r.Planned, "; "), 2000)))
	}
	if ws := WindowTexts(ev.Windows, historyStart(r, d.Histories[Key(r.Target, r.Contract)])); len(ws) > 0 {
		fmt.Fprintf(&b, "**Fault windows** (%s): %s\n\n", WindowsLabel, mdEscape(clip(strings.Join(ws, "; "), 2000)))
	}
	if line := ClusterLine(r.Cluster); line != "" {
		fmt.Fprintf(&b, "**Cluster:** %s\n\n", mdEscape(clip(line, 2000)))
	}
	if len(r.Stats.Faults) > 0 {
		fmt.Fprintf(&b, "**Faults applied:** %s\n\n", mdEscape(faultsApplied(r.Stats.Faults)))
	}
	if len(r.Violations) > 0 {
		fmt.Fprintf(&b, "**Witness** (%s):\n\n```\n", WitnessTimeNote)
		b.WriteString(clip(strings.ReplaceAll(witnessText(r, 20), "```", "'''"), 20000))
		b.WriteString("```\n\n")
	}
	if ev.Reproduce != "" {
		cmd := PasteCommand(ev.Reproduce, nil)
		fmt.Fprintf(&b, "Reproduce: `%s`\n\n", mdCode(cmd))
		if note := EnvNote(cmd); note != "" {
			fmt.Fprintf(&b, "(%s.)\n\n", note)
		}
	}
	b.WriteString("</details>\n\n")
	return b.String()
}

func targetsMarkdown(d *Document) string {
	var b strings.Builder
	b.WriteString("\n### Targets\n\n| target | measured on | endpoint | fingerprint |\n|---|---|---|---|\n")
	for _, t := range d.Targets {
		fmt.Fprintf(&b, "| %s | %s | %s | `%s` |\n", mdEscape(t.Name), mdEscape(t.MeasuredOn), t.Endpoint, t.Fingerprint)
	}
	if lines := d.DurabilityLines(); len(lines) > 0 {
		b.WriteString("\nDurability settings (each from the target's knob, its server, or durachk's default):\n\n")
		for _, l := range lines {
			fmt.Fprintf(&b, "- %s\n", mdEscape(clip(l, 2000)))
		}
	}
	fmt.Fprintf(&b, "\ndurachk %s\n", d.Version)
	return b.String()
}

func htmlText(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…\n"
}

// faultsApplied lists the faults applied, by kind, in a stable order.
func faultsApplied(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortStrings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s ×%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// maxGateLines bounds the differences the summary lists (result.json and
// the run's output have every one).
const maxGateLines = 50

// gateMarkdown is the baseline gate's verdict over the run, as the gate
// printed it: its summary line and one line per difference; "" for a run
// without a baseline.
func gateMarkdown(d *Document) string {
	if d.Gate == nil {
		return ""
	}
	var b strings.Builder
	diffs := d.GateDifferences()
	fmt.Fprintf(&b, "**%s** (`%s`", mdEscape(GateSummary(diffs)), mdCode(d.Gate.Baseline))
	if d.Gate.Updated != "" {
		fmt.Fprintf(&b, ", %s by this run", d.Gate.Updated)
	}
	b.WriteString(")\n\n")
	for i, diff := range diffs {
		if i == maxGateLines {
			fmt.Fprintf(&b, "- … %d more\n", len(diffs)-i)
			break
		}
		fmt.Fprintf(&b, "- %s\n", mdEscape(diff.String()))
	}
	if len(diffs) > 0 {
		b.WriteString("\n")
	}
	return b.String()
}
