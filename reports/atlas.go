package reports

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/durachk/durachk/contracts"
)

// AtlasSchema names the version of atlas.json, the index `durachk atlas`
// writes beside one result.json per profile.
const AtlasSchema = "durachk.atlas/v1"

// AtlasIndex is atlas.json: what an atlas set out to measure. With the
// result.json of each profile (Dir) it is all the atlas is rendered from.
type AtlasIndex struct {
	Schema string `json:"schema"`
	// Title and Note head the rendered atlas (Note: what it was measured
	// with, in the profiles file's words).
	Title string `json:"title,omitempty"`
	Note  string `json:"note,omitempty"`
	Seed  uint64 `json:"seed"`
	// Trials is the --trials of every profile's run (0 or 1: one run).
	Trials int `json:"trials,omitempty"`
	// Command is the atlas command line (credentials redacted).
	Command string `json:"command"`
	// Measured says how the last invocation went: its wall time, the
	// machine's CPUs and load, the profiles it ran and kept.
	Measured string         `json:"measured,omitempty"`
	Brokers  []AtlasBroker  `json:"brokers"`
	Profiles []AtlasProfile `json:"profiles"`
}

// AtlasBroker is one group of columns.
type AtlasBroker struct {
	Name  string `json:"name"`
	Title string `json:"title,omitempty"`
	// Doc is the broker's page, relative to the repository root.
	Doc string `json:"doc,omitempty"`
}

// AtlasProfile is one configuration: a column.
type AtlasProfile struct {
	Name   string `json:"name"`
	Broker string `json:"broker"`
	// Choose is what a team would choose this configuration for.
	Choose string `json:"choose"`
	// Emulator: measured on an emulator of the broker, not the broker.
	Emulator bool `json:"emulator,omitempty"`
	// Contracts are the contracts the atlas runs on it.
	Contracts []string `json:"contracts"`
	// Dir holds the profile's result.json, relative to atlas.json.
	Dir string `json:"dir"`
	// NotRun says why the profile has no result (an unset environment
	// variable, a configuration error).
	NotRun string `json:"not_run,omitempty"`
}

// ReadAtlasIndex reads atlas.json.
func ReadAtlasIndex(path string) (AtlasIndex, error) {
	var idx AtlasIndex
	b, err := os.ReadFile(path)
	if err != nil {
		return idx, fmt.Errorf("read atlas: %w", err)
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return idx, fmt.Errorf("read atlas %s: %w", path, err)
	}
	if idx.Schema != AtlasSchema {
		return idx, fmt.Errorf("read atlas %s: schema %q, want %q", path, Clip(idx.Schema), AtlasSchema)
	}
	return idx, nil
}

// WriteAtlasIndex writes atlas.json atomically.
func WriteAtlasIndex(path string, idx AtlasIndex) error {
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

var seedArg = regexp.MustCompile(`--seed [0-9]+`)

// AtlasCell is one contract on one profile.
type AtlasCell struct {
	Profile, Contract string
	// Verdict is the result's (its worst trial's); "" when the profile did
	// not measure the contract.
	Verdict contracts.Verdict
	// Runs is the number of trials (1 without trials); Pass, Violated and
	// Unknown count them by verdict.
	Runs, Pass, Violated, Unknown int
	// Properties are the properties the violating trials raised, the most
	// frequent first.
	Properties []string
	// Text is the verdict with its rate: "lost in 5 of 5", "pass in 3 of 3".
	Text      string
	Reason    string
	Claim     string
	Witness   string
	Reproduce string
	// WitnessReproduce reruns the one trial the witness comes from (with
	// trials, when the cell did not pass).
	WitnessReproduce string
	// Report is the cell's evidence in the profile's report.html, relative
	// to atlas.json.
	Report string
}

// Anchor is the cell's id in atlas.md and atlas.html.
func (c AtlasCell) Anchor() string {
	return "c-" + strings.TrimPrefix(Anchor(c.Profile, c.Contract), "r-")
}

// Measured says the profile ran the contract.
func (c AtlasCell) Measured() bool { return c.Verdict != "" }

// AtlasColumn is a profile as the atlas shows it.
type AtlasColumn struct {
	AtlasProfile
	MeasuredOn string
	Settings   map[string]string
	// Differs are the settings that tell it from the broker's other
	// columns, those it sets ("appendfsync=always").
	Differs []string
	// Partial: its run did not finish (the cells it has are shown).
	Partial bool
}

// AtlasGroup is a broker's columns and what the cells say to choose.
type AtlasGroup struct {
	AtlasBroker
	Columns []int // indices into Atlas.Columns
	Choose  []string
}

// Atlas is the rendered matrix: rows contracts (worst first), columns
// profiles grouped by broker.
type Atlas struct {
	Index     AtlasIndex
	Columns   []AtlasColumn
	Groups    []AtlasGroup
	Contracts []string
	Cells     [][]AtlasCell // [row][column]
}

// LoadAtlas reads atlas.json and each profile's result.json from dir.
func LoadAtlas(dir string) (*Atlas, error) {
	idx, err := ReadAtlasIndex(filepath.Join(dir, "atlas.json"))
	if err != nil {
		return nil, err
	}
	docs := map[string]*Document{}
	for _, p := range idx.Profiles {
		if p.NotRun != "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p.Dir), "result.json"))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("atlas: profile %s: %w", p.Name, err)
		}
		d, err := DecodeJSON(b)
		if err != nil {
			return nil, fmt.Errorf("atlas: profile %s: %w", p.Name, err)
		}
		docs[p.Name] = d
	}
	return BuildAtlas(idx, docs), nil
}

// BuildAtlas lays out the atlas of idx from each profile's document (by
// profile name; a profile without one shows no cells).
func BuildAtlas(idx AtlasIndex, docs map[string]*Document) *Atlas {
	a := &Atlas{Index: idx}
	// Rows: every contract some profile runs, in catalogue order.
	want := map[string]bool{}
	for _, p := range idx.Profiles {
		for _, c := range p.Contracts {
			want[c] = true
		}
	}
	for _, c := range contracts.Catalogue {
		if want[c.ID] {
			a.Contracts = append(a.Contracts, c.ID)
			delete(want, c.ID)
		}
	}
	rest := make([]string, 0, len(want))
	for c := range want {
		rest = append(rest, c)
	}
	sort.Strings(rest)
	a.Contracts = append(a.Contracts, rest...)

	// Columns grouped by broker, in the order brokers are listed (then first
	// named by a profile), profiles in file order within one.
	brokers := slices.Clone(idx.Brokers)
	for _, p := range idx.Profiles {
		if !slices.ContainsFunc(brokers, func(b AtlasBroker) bool { return b.Name == p.Broker }) {
			brokers = append(brokers, AtlasBroker{Name: p.Broker})
		}
	}
	for _, b := range brokers {
		g := AtlasGroup{AtlasBroker: b}
		for _, p := range idx.Profiles {
			if p.Broker != b.Name {
				continue
			}
			col := AtlasColumn{AtlasProfile: p}
			if d := docs[p.Name]; d != nil {
				col.Partial = !d.Complete
				for _, t := range d.Targets {
					col.MeasuredOn, col.Settings = t.MeasuredOn, t.Settings
				}
			}
			g.Columns = append(g.Columns, len(a.Columns))
			a.Columns = append(a.Columns, col)
		}
		if len(g.Columns) > 0 {
			a.Groups = append(a.Groups, g)
		}
	}
	for _, g := range a.Groups {
		var ss []map[string]string
		var measured []int
		for _, i := range g.Columns {
			if a.Columns[i].MeasuredOn != "" {
				ss = append(ss, a.Columns[i].Settings)
				measured = append(measured, i)
			}
		}
		keys := DifferingSettings(ss)
		for _, i := range measured {
			for _, k := range keys {
				// Only what the column sets: the others' settings it lacks
				// are its broker's defaults, named in their own columns.
				if v, ok := a.Columns[i].Settings[k]; ok {
					a.Columns[i].Differs = append(a.Columns[i].Differs, k+"="+v)
				}
			}
		}
	}

	a.Cells = make([][]AtlasCell, len(a.Contracts))
	for r, id := range a.Contracts {
		a.Cells[r] = make([]AtlasCell, len(a.Columns))
		for c, col := range a.Columns {
			a.Cells[r][c] = cellOf(col.AtlasProfile, id, docs[col.Name])
		}
	}
	a.worstFirst()
	for gi := range a.Groups {
		a.Groups[gi].Choose = a.choose(a.Groups[gi])
	}
	return a
}

func cellOf(p AtlasProfile, contract string, d *Document) AtlasCell {
	cell := AtlasCell{Profile: p.Name, Contract: contract}
	if d == nil || !slices.Contains(p.Contracts, contract) {
		return cell
	}
	i := slices.IndexFunc(d.Results, func(r contracts.Result) bool { return r.Contract == contract })
	if i < 0 {
		return cell
	}
	r := d.Results[i]
	cell.Verdict, cell.Reason, cell.Claim = r.Verdict, r.Reason, r.Claim
	ev := d.EvidenceFor(r.Target, r.Contract)
	// The cell's command reruns the contract with the profile's seed and
	// trials; the witness's (the result's shown trial) is ev.Reproduce.
	if ev.Reproduce != "" {
		cell.Reproduce = seedArg.ReplaceAllString(ev.Reproduce, fmt.Sprintf("--seed %d", d.Seed))
		if d.Trials > 1 {
			cell.Reproduce += fmt.Sprintf(" --trials %d", d.Trials)
			if r.Verdict == contracts.Violated || r.Verdict == contracts.Unknown {
				cell.WitnessReproduce = ev.Reproduce
			}
		}
	}
	cell.Report = path.Join(p.Dir, "report.html") + "#" + Anchor(r.Target, r.Contract)
	props := map[string]int{}
	count := func(v contracts.Verdict, vs []contracts.Violation) {
		cell.Runs++
		switch v {
		case contracts.Pass:
			cell.Pass++
		case contracts.Violated:
			cell.Violated++
			seen := map[string]bool{}
			for _, x := range vs {
				if p := string(x.Property); !seen[p] {
					seen[p] = true
					props[p]++
				}
			}
		case contracts.Unknown:
			cell.Unknown++
		}
	}
	if len(r.Trials) > 0 {
		for _, t := range r.Trials {
			count(t.Verdict, t.Violations)
		}
	} else {
		count(r.Verdict, r.Violations)
	}
	for p := range props {
		cell.Properties = append(cell.Properties, p)
	}
	sort.Slice(cell.Properties, func(i, j int) bool {
		a, b := cell.Properties[i], cell.Properties[j]
		return props[a] > props[b] || props[a] == props[b] && a < b
	})
	if len(r.Violations) > 0 {
		// The first two violations: the rest are in the profile's report.
		shown := r
		shown.Violations = r.Violations[:min(2, len(r.Violations))]
		cell.Witness = witnessText(shown, 12)
		if n := len(r.Violations) - len(shown.Violations); n > 0 {
			cell.Witness += fmt.Sprintf("… %d more violations in %s\n", n, path.Join(p.Dir, "result.json"))
		}
	}
	switch {
	case r.Verdict == contracts.Skipped:
		cell.Text = "skipped"
	case cell.Violated > 0:
		what := strings.Join(cell.Properties, ", ")
		if what == "" {
			what = "violation"
		}
		cell.Text = fmt.Sprintf("%s in %d of %d", what, cell.Violated, cell.Runs)
		if cell.Unknown > 0 {
			cell.Text += fmt.Sprintf(", unknown in %d", cell.Unknown)
		}
	case cell.Unknown > 0:
		cell.Text = fmt.Sprintf("unknown in %d of %d", cell.Unknown, cell.Runs)
	default:
		cell.Text = fmt.Sprintf("pass in %d of %d", cell.Pass, cell.Runs)
	}
	return cell
}

// worstFirst orders the rows by their worst cell (violation, unknown, pass,
// skipped, not measured), keeping catalogue order among equals.
func (a *Atlas) worstFirst() {
	worst := make([]int, len(a.Contracts))
	for r := range a.Contracts {
		worst[r] = Rank("")
		for _, c := range a.Cells[r] {
			worst[r] = min(worst[r], Rank(c.Verdict))
		}
	}
	idx := make([]int, len(a.Contracts))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(x, y int) int { return worst[x] - worst[y] })
	ids, cells := make([]string, len(idx)), make([][]AtlasCell, len(idx))
	for i, r := range idx {
		ids[i], cells[i] = a.Contracts[r], a.Cells[r]
	}
	a.Contracts, a.Cells = ids, cells
}

// column returns the cells of column c, in row order.
func (a *Atlas) column(c int) []AtlasCell {
	out := make([]AtlasCell, 0, len(a.Contracts))
	for r := range a.Contracts {
		if a.Cells[r][c].Measured() {
			out = append(out, a.Cells[r][c])
		}
	}
	return out
}

// choose writes a broker's "what to choose" from its cells alone: which
// profiles held every contract they ran, which violated what (at what
// rate), which could not tell.
func (a *Atlas) choose(g AtlasGroup) []string {
	var held, broke, unsure, none []string
	for _, c := range g.Columns {
		col := a.Columns[c]
		cells := a.column(c)
		var bad, unk []string
		ran := 0
		for _, x := range cells {
			switch {
			case x.Violated > 0:
				bad = append(bad, fmt.Sprintf("`%s` (%s)", x.Contract, x.Text))
			case x.Unknown > 0:
				unk = append(unk, fmt.Sprintf("`%s` (%s)", x.Contract, x.Text))
			}
			if x.Verdict != contracts.Skipped {
				ran++
			}
		}
		name := "`" + col.Name + "`"
		switch {
		case ran == 0:
			why := "no result"
			if col.NotRun != "" {
				why = "not run: " + col.NotRun
			} else if len(cells) > 0 {
				why = "every contract skipped"
			}
			none = append(none, fmt.Sprintf("%s (%s)", name, why))
		case len(bad) > 0:
			s := fmt.Sprintf("%s violates %s", name, strings.Join(bad, ", "))
			if len(unk) > 0 {
				s += "; could not tell " + strings.Join(unk, ", ")
			}
			broke = append(broke, s)
		case len(unk) > 0:
			unsure = append(unsure, fmt.Sprintf("%s could not tell %s", name, strings.Join(unk, ", ")))
		default:
			held = append(held, fmt.Sprintf("%s (%s)", name, col.Choose))
		}
	}
	var out []string
	switch {
	case len(held) == 1 && len(broke) > 0:
		out = append(out, "**Choose** "+held[0]+": it held every contract it ran here, where the others did not.")
	case len(held) > 0 && len(broke) > 0:
		out = append(out, "**Choose** among "+strings.Join(held, "; ")+": each held every contract it ran here, where the others did not.")
	case len(held) > 0:
		out = append(out, "Every configuration that could tell held every contract it ran: "+strings.Join(held, ", ")+".")
	case len(broke) > 0:
		out = append(out, "No configuration measured here held every contract it ran.")
	}
	for _, s := range broke {
		out = append(out, s+".")
	}
	for _, s := range unsure {
		out = append(out, s+".")
	}
	for _, s := range none {
		out = append(out, s+".")
	}
	return out
}

// WriteAtlasMarkdown renders the atlas as Markdown (docs/atlas.md): per
// broker a table of contracts (worst first) × configurations, each cell its
// verdict and rate linking to its evidence further down, and what to choose;
// then the configurations with what they were measured on, then each cell's
// evidence (witness, reason, the command that reproduces it).
func WriteAtlasMarkdown(w io.Writer, a *Atlas) error {
	var b strings.Builder
	title := a.Index.Title
	if title == "" {
		title = "The guarantees atlas"
	}
	fmt.Fprintf(&b, "# %s\n\n", mdEscape(title))
	b.WriteString("<!-- generated by durachk atlas; do not edit: regenerate it (see the note below) -->\n\n")
	if a.Index.Note != "" {
		b.WriteString(strings.TrimSpace(a.Index.Note) + "\n\n")
	}
	trials := max(a.Index.Trials, 1)
	fmt.Fprintf(&b, "Seed %d, %s per cell. Generated by `%s`", a.Index.Seed, plural(trials, "trial", "trials"), mdCode(a.Index.Command))
	if a.Index.Measured != "" {
		fmt.Fprintf(&b, ": %s", mdEscape(a.Index.Measured))
	}
	b.WriteString(".\n\n")
	b.WriteString("Each cell is the contract's verdict on the configuration with its rate over the trials " +
		"(`lost in 2 of 3`: the property `lost` was violated in 2 of 3 trials); it links to its evidence below. " +
		"— : not measured on that configuration. Rows: violations first.\n\n")
	for _, g := range a.Groups {
		head := g.Title
		if head == "" {
			head = g.Name
		}
		fmt.Fprintf(&b, "## %s\n\n", mdEscape(head))
		if g.Doc != "" {
			fmt.Fprintf(&b, "How each contract maps onto it: [%s](%s).\n\n", g.Doc, relDoc(g.Doc))
		}
		b.WriteString("| contract |")
		for _, c := range g.Columns {
			col := a.Columns[c]
			fmt.Fprintf(&b, " `%s`", col.Name)
			if len(col.Differs) > 0 {
				fmt.Fprintf(&b, "<br>%s", mdEscape(strings.Join(col.Differs, " ")))
			}
			if col.Emulator {
				b.WriteString("<br>(emulator)")
			}
			b.WriteString(" |")
		}
		b.WriteString("\n|---|")
		for range g.Columns {
			b.WriteString("---|")
		}
		b.WriteString("\n")
		for r, id := range a.Contracts {
			measured := false
			for _, c := range g.Columns {
				measured = measured || a.Cells[r][c].Measured()
			}
			if !measured {
				continue
			}
			fmt.Fprintf(&b, "| `%s` |", id)
			for _, c := range g.Columns {
				cell := a.Cells[r][c]
				if !cell.Measured() {
					b.WriteString(" — |")
					continue
				}
				fmt.Fprintf(&b, " [%s %s](#%s) |", markSymbol(cell.Verdict), mdEscape(cell.Text), cell.Anchor())
			}
			b.WriteString("\n")
		}
		b.WriteString("\n**What to choose** (from the cells above):\n\n")
		for _, s := range g.Choose {
			fmt.Fprintf(&b, "- %s\n", s)
		}
		b.WriteString("\n")
	}
	b.WriteString("## The configurations\n\n| configuration | broker | measured on | what a team would choose it for | settings |\n|---|---|---|---|---|\n")
	for _, col := range a.Columns {
		on := col.MeasuredOn
		switch {
		case col.NotRun != "":
			on = "not run: " + col.NotRun
		case on == "":
			on = "no result"
		case col.Partial:
			on += " (run partial)"
		}
		if col.Emulator {
			on += " — **an emulator**: its verdicts are the emulator's"
		}
		fmt.Fprintf(&b, "| <a id=\"p-%s\"></a>`%s` | %s | %s | %s | %s |\n", anchorText(col.Name), col.Name, mdEscape(col.Broker), mdEscape(on), mdEscape(col.Choose), mdEscape(settingsText(col.Settings)))
	}
	b.WriteString("\n## Evidence\n\nEvery measured cell, violations first: its reason or witness and the command that reproduces it.\n\n")
	for _, cell := range a.evidenceOrder() {
		fmt.Fprintf(&b, "### <a id=\"%s\"></a>`%s` on `%s`: %s %s\n\n", cell.Anchor(), cell.Contract, cell.Profile, markSymbol(cell.Verdict), mdEscape(cell.Text))
		if cell.Reason != "" && cell.Verdict != contracts.Pass {
			fmt.Fprintf(&b, "%s\n\n", mdEscape(clip(cell.Reason, 600)))
		}
		if cell.Witness != "" {
			b.WriteString("```\n" + clip(strings.ReplaceAll(cell.Witness, "```", "'''"), 4000) + "```\n\n")
		}
		if cell.Reproduce != "" {
			fmt.Fprintf(&b, "Reproduce: `%s`\n\n", mdCode(cell.Reproduce))
		}
		if cell.WitnessReproduce != "" {
			fmt.Fprintf(&b, "The witness's trial alone: `%s`\n\n", mdCode(cell.WitnessReproduce))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// evidenceOrder is every measured cell, violations first, then unknowns,
// passes and skips, each in table order (broker, row, column).
func (a *Atlas) evidenceOrder() []AtlasCell {
	var out []AtlasCell
	for _, g := range a.Groups {
		for r := range a.Contracts {
			for _, c := range g.Columns {
				if a.Cells[r][c].Measured() {
					out = append(out, a.Cells[r][c])
				}
			}
		}
	}
	slices.SortStableFunc(out, func(x, y AtlasCell) int { return Rank(x.Verdict) - Rank(y.Verdict) })
	return out
}

// relDoc turns a repository path into a link from docs/atlas.md.
func relDoc(doc string) string {
	if rest, ok := strings.CutPrefix(doc, "docs/"); ok {
		return rest
	}
	return "../" + doc
}

func anchorText(s string) string {
	return strings.TrimSuffix(strings.TrimPrefix(Anchor(s, ""), "r-"), "--")
}

func markSymbol(v contracts.Verdict) string {
	m := Mark(v)
	if i := strings.IndexByte(m, ' '); i > 0 && v != "" {
		return m[:i]
	}
	return m
}

// WriteAtlasHTML renders the atlas as one self-contained page: a single
// matrix, contracts as rows (worst first) and configurations as columns
// grouped by broker, each cell its verdict and rate linking to the
// profile's report.html; what to choose per broker; the configurations; the
// evidence of every cell that did not pass.
func WriteAtlasHTML(w io.Writer, a *Atlas) error {
	type cellView struct {
		AtlasCell
		Class, Mark string
	}
	type rowView struct {
		Contract string
		Cells    []cellView
	}
	var rows []rowView
	for r, id := range a.Contracts {
		rv := rowView{Contract: id}
		for _, c := range a.Cells[r] {
			rv.Cells = append(rv.Cells, cellView{AtlasCell: c, Class: verdictClass(c.Verdict), Mark: markSymbol(c.Verdict)})
		}
		rows = append(rows, rv)
	}
	var ev []cellView
	for _, c := range a.evidenceOrder() {
		if c.Verdict != contracts.Pass && c.Verdict != contracts.Skipped {
			ev = append(ev, cellView{AtlasCell: c, Class: verdictClass(c.Verdict), Mark: markSymbol(c.Verdict)})
		}
	}
	title := a.Index.Title
	if title == "" {
		title = "The guarantees atlas"
	}
	data := struct {
		Title, Note, Command string
		Seed                 uint64
		Trials               int
		Atlas                *Atlas
		Rows                 []rowView
		Evidence             []cellView
	}{title, a.Index.Note, a.Index.Command, a.Index.Seed, max(a.Index.Trials, 1), a, rows, ev}
	return atlasHTML.Execute(w, data)
}

var atlasHTML = template.Must(template.New("atlas").Funcs(template.FuncMap{
	"join":     strings.Join,
	"settings": settingsText,
	"md":       func(s string) template.HTML { return template.HTML(mdToHTML(s)) },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em;color:#1f2328}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #d0d7de;padding:4px 8px;vertical-align:top;text-align:left}
th{background:#f6f8fa}th.broker{text-align:center}
td a{color:inherit;text-decoration:none;white-space:nowrap}.diff{display:inline-block;max-width:16em}
.v-pass{background:#dafbe1;color:#116329}.v-violation{background:#ffebe9;color:#a40e26;font-weight:bold}
.v-unknown{background:#fff8c5;color:#7d4e00;font-weight:bold}.v-skipped{background:#eaeef2;color:#57606a}.v-none{color:#999}
.diff{font-weight:normal;font-size:12px;color:#57606a}.emu{font-weight:normal;font-size:12px;color:#9a6700}
pre{background:#f6f8fa;padding:8px;overflow-x:auto;font-size:12px}
code{font-size:13px}
</style></head><body>
<h1>{{.Title}}</h1>
{{if .Note}}<p>{{md .Note}}</p>{{end}}
<p>Seed {{.Seed}}, {{.Trials}} trial(s) per cell. Generated by <code>{{.Command}}</code>{{if .Atlas.Index.Measured}}: {{.Atlas.Index.Measured}}{{end}}. Each cell: the verdict with its rate over the trials; it links to the evidence in the configuration's report. Rows: violations first.</p>
<table id="atlas">
<thead><tr><th rowspan="2">contract</th>{{range .Atlas.Groups}}<th class="broker" colspan="{{len .Columns}}">{{if .Title}}{{.Title}}{{else}}{{.Name}}{{end}}</th>{{end}}</tr>
<tr>{{range .Atlas.Columns}}<th><code>{{.Name}}</code>{{if .Differs}}<br><span class="diff">{{join .Differs " "}}</span>{{end}}{{if .Emulator}}<br><span class="emu">emulator</span>{{end}}</th>{{end}}</tr></thead>
<tbody>
{{range .Rows}}<tr><td><code>{{.Contract}}</code></td>{{range .Cells}}<td class="{{.Class}}" id="{{.Anchor}}"{{if .Reproduce}} title="{{.Reproduce}}"{{end}}>{{if .Measured}}<a href="{{.Report}}">{{.Mark}} {{.Text}}</a>{{else}}—{{end}}</td>{{end}}</tr>
{{end}}</tbody></table>
<h2>What to choose</h2>
{{range .Atlas.Groups}}<h3>{{if .Title}}{{.Title}}{{else}}{{.Name}}{{end}}</h3><ul>{{range .Choose}}<li>{{md .}}</li>{{end}}</ul>
{{end}}
<h2>The configurations</h2>
<table><tr><th>configuration</th><th>broker</th><th>measured on</th><th>what a team would choose it for</th><th>settings</th></tr>
{{range .Atlas.Columns}}<tr><td><code>{{.Name}}</code></td><td>{{.Broker}}</td><td>{{if .NotRun}}not run: {{.NotRun}}{{else if .MeasuredOn}}{{.MeasuredOn}}{{if .Partial}} (run partial){{end}}{{else}}no result{{end}}{{if .Emulator}} — <b>an emulator</b>: its verdicts are the emulator's{{end}}</td><td>{{.Choose}}</td><td>{{settings .Settings}}</td></tr>
{{end}}</table>
<h2>Evidence of what did not pass</h2>
{{range .Evidence}}<div class="evidence" id="e-{{.Anchor}}"><h3 class="{{.Class}}"><code>{{.Contract}}</code> on <code>{{.Profile}}</code>: {{.Mark}} {{.Text}}</h3>
{{if .Reason}}<p>{{.Reason}}</p>{{end}}{{if .Witness}}<pre>{{.Witness}}</pre>{{end}}
{{if .Reproduce}}<p>Reproduce: <code>{{.Reproduce}}</code>{{if .WitnessReproduce}} · the witness's trial alone: <code>{{.WitnessReproduce}}</code>{{end}} · <a href="{{.Report}}">the whole evidence</a></p>{{end}}</div>
{{end}}
</body></html>
`))

// mdToHTML turns the little Markdown the choose lines hold (`code`, **bold**)
// into escaped HTML.
func mdToHTML(s string) string {
	s = template.HTMLEscapeString(s)
	var b strings.Builder
	code, bold := false, false
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '`':
			if code {
				b.WriteString("</code>")
			} else {
				b.WriteString("<code>")
			}
			code = !code
		case !code && strings.HasPrefix(s[i:], "**"):
			if bold {
				b.WriteString("</b>")
			} else {
				b.WriteString("<b>")
			}
			bold = !bold
			i++
		default:
			b.WriteByte(s[i])
		}
	}
	if code {
		b.WriteString("</code>")
	}
	if bold {
		b.WriteString("</b>")
	}
	return b.String()
}
