package reports

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

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
	Measured string `json:"measured,omitempty"`
	// Run stamps the last invocation: the durachk that ran it, when, and
	// the machine (each profile's own is its stamp.json).
	Run      *AtlasRun      `json:"run,omitempty"`
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
	// Dir holds the profile's result.json and stamp.json, relative to
	// atlas.json.
	Dir string `json:"dir"`
	// Definition names the profile's definition in the profiles file
	// (ProfileDefinition): its stamp says which one it was measured with.
	Definition string `json:"definition,omitempty"`
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
	// Text is the verdict with its rate: "lost in 5 of 5", "pass in 3 of 3";
	// Short is the same for a table cell: "lost 5/5", "5/5".
	Text, Short string
	Reason      string
	Claim       string
	Witness     string
	Reproduce   string
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
	// Stamp is what the profile was measured with and on (nil: measured
	// before durachk wrote stamps, or not measured); Version and Started are
	// its result's, Trials its runs of each contract.
	Stamp   *AtlasStamp
	Version string
	Started time.Time
	Trials  int
	// Differs are the settings that tell it from the broker's other
	// columns, those it sets ("appendfsync=always").
	Differs []string
	// Partial: its run did not finish (the cells it has are shown).
	Partial bool
}

// AtlasGroup is a broker's configurations, in tables of those that set out
// to run the same contracts.
type AtlasGroup struct {
	AtlasBroker
	Columns []int // indices into Atlas.Columns
	Tables  []AtlasTable
	// MeasuredOn are the broker versions its configurations were measured
	// on, each once.
	MeasuredOn []string
}

// AtlasTable is the configurations of a broker that set out to run the same
// contracts (rows, indices into Atlas.Columns) and those contracts
// (columns, indices into Atlas.Contracts, violated first), with what the
// cells say to choose among them.
type AtlasTable struct {
	Rows      []int
	Contracts []int
	Choose    []string
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

// LoadAtlas reads atlas.json and each profile's result.json and stamp.json
// from dir.
func LoadAtlas(dir string) (*Atlas, error) {
	idx, err := ReadAtlasIndex(filepath.Join(dir, "atlas.json"))
	if err != nil {
		return nil, err
	}
	docs := map[string]*Document{}
	stamps := map[string]*AtlasStamp{}
	for _, p := range idx.Profiles {
		if p.NotRun != "" {
			continue
		}
		pdir := filepath.Join(dir, filepath.FromSlash(p.Dir))
		st, err := ReadStamp(pdir)
		if err != nil {
			return nil, fmt.Errorf("atlas: profile %s: %w", p.Name, err)
		}
		b, err := os.ReadFile(filepath.Join(pdir, "result.json"))
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
		if st != nil {
			stamps[p.Name] = st
		}
	}
	a := BuildAtlas(idx, docs)
	for i := range a.Columns {
		a.Columns[i].Stamp = stamps[a.Columns[i].Name]
	}
	return a, nil
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
				col.Version, col.Started, col.Trials = d.Version, d.Wall.StartedAt, max(d.Trials, 1)
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
		g := &a.Groups[gi]
		g.Tables = a.tables(*g)
		for _, c := range g.Columns {
			if v := brokerVersion(a.Columns[c].MeasuredOn); v != "" && !slices.Contains(g.MeasuredOn, v) {
				g.MeasuredOn = append(g.MeasuredOn, v)
			}
		}
	}
	return a
}

// brokerVersion is the broker and version of a "measured on" ("redis 7.0.15"
// of "redis 7.0.15, private cluster: … (real processes)").
func brokerVersion(on string) string {
	on, _, _ = strings.Cut(on, ", private cluster")
	return strings.TrimSpace(strings.TrimSuffix(on, " (real processes)"))
}

// tables groups a broker's configurations by the contracts each set out to
// run (first appearance order), each table's columns those contracts in row
// order (violations first), and writes what to choose among each.
func (a *Atlas) tables(g AtlasGroup) []AtlasTable {
	var out []AtlasTable
	keys := map[string]int{}
	for _, c := range g.Columns {
		cs := slices.Clone(a.Columns[c].Contracts)
		sort.Strings(cs)
		k := strings.Join(cs, ",")
		i, ok := keys[k]
		if !ok {
			i = len(out)
			keys[k] = i
			t := AtlasTable{}
			for r, id := range a.Contracts {
				if slices.Contains(cs, id) {
					t.Contracts = append(t.Contracts, r)
				}
			}
			out = append(out, t)
		}
		out[i].Rows = append(out[i].Rows, c)
	}
	for i := range out {
		out[i].Choose = a.choose(g, out[i])
	}
	return out
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
		cell.Text, cell.Short = "skipped", "skip"
	case cell.Violated > 0:
		what, short := strings.Join(cell.Properties, ", "), "violation"
		if len(cell.Properties) > 0 {
			short = cell.Properties[0]
			if n := len(cell.Properties) - 1; n > 0 {
				short += fmt.Sprintf("+%d", n)
			}
		} else {
			what = "violation"
		}
		cell.Text = fmt.Sprintf("%s in %d of %d", what, cell.Violated, cell.Runs)
		cell.Short = fmt.Sprintf("%s %d/%d", short, cell.Violated, cell.Runs)
		if cell.Unknown > 0 {
			cell.Text += fmt.Sprintf(", unknown in %d", cell.Unknown)
			cell.Short += fmt.Sprintf(" ?%d", cell.Unknown)
		}
	case cell.Unknown > 0:
		cell.Text = fmt.Sprintf("unknown in %d of %d", cell.Unknown, cell.Runs)
		cell.Short = fmt.Sprintf("? %d/%d", cell.Unknown, cell.Runs)
	default:
		cell.Text = fmt.Sprintf("pass in %d of %d", cell.Pass, cell.Runs)
		cell.Short = fmt.Sprintf("%d/%d", cell.Pass, cell.Runs)
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

// choose writes what to choose among a table's configurations, from its
// cells alone, comparing only those that ran the same contracts (a contract
// skipped is not run): which held every one, which violated what (at what
// rate), which could not tell; and, apart, each that ran other contracts
// (not run, no result, skipped what the others ran), with why.
func (a *Atlas) choose(g AtlasGroup, t AtlasTable) []string {
	ran := map[int]string{}       // row: the contracts it ran
	skipped := map[int][]string{} // row: the contracts it skipped
	complete := map[int]bool{}    // row: a verdict on every contract
	for _, c := range t.Rows {
		var rs []string
		measured := 0
		for _, r := range t.Contracts {
			x := a.Cells[r][c]
			switch {
			case !x.Measured():
				continue
			case x.Verdict == contracts.Skipped:
				skipped[c] = append(skipped[c], "`"+x.Contract+"`")
			default:
				rs = append(rs, x.Contract)
			}
			measured++
		}
		ran[c], complete[c] = strings.Join(rs, ","), measured == len(t.Contracts) && a.Columns[c].NotRun == "" && len(rs) > 0
	}
	// The set compared: the configurations that ran what most of them ran
	// (on a tie, more contracts).
	counts := map[string]int{}
	for _, c := range t.Rows {
		if complete[c] {
			counts[ran[c]]++
		}
	}
	common := ""
	for k, n := range counts {
		if n > counts[common] || n == counts[common] && (len(k) > len(common) || len(k) == len(common) && k < common) {
			common = k
		}
	}
	var held, broke, unsure, apart []string
	var allSkipped []string
	for _, c := range t.Rows {
		col := a.Columns[c]
		name := "`" + col.Name + "`"
		switch {
		case col.NotRun != "":
			apart = append(apart, fmt.Sprintf("%s was not run (%s): nothing to compare", name, col.NotRun))
			continue
		case col.MeasuredOn == "":
			apart = append(apart, name+" has no result: nothing to compare")
			continue
		case !complete[c] && len(skipped[c]) < len(t.Contracts):
			apart = append(apart, name+"'s run did not finish: it has no verdict on every contract here, so it is not compared")
			continue
		case !complete[c] || ran[c] != common:
			apart = append(apart, fmt.Sprintf("%s skipped %s (it lacks what the contract needs; the evidence says what): "+
				"it did not run what the others ran, so it is not compared", name, strings.Join(skipped[c], ", ")))
			continue
		}
		allSkipped = skipped[c]
		var bad, unk []string
		for _, r := range t.Contracts {
			switch x := a.Cells[r][c]; {
			case x.Violated > 0:
				bad = append(bad, fmt.Sprintf("`%s` (%s)", x.Contract, x.Text))
			case x.Unknown > 0:
				unk = append(unk, fmt.Sprintf("`%s` (%s)", x.Contract, x.Text))
			}
		}
		switch {
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
	compared := len(held) + len(broke) + len(unsure)
	var out []string
	switch {
	case compared == 1 && len(held) == 1:
		out = append(out, held[0]+" held every contract it ran here; no other configuration ran the same ones to compare it with.")
	case len(held) == 1 && compared > 1:
		out = append(out, fmt.Sprintf("**Choose** %s: of the %d configurations that ran the same contracts here, it alone held them all.", held[0], compared))
	case len(held) > 1 && len(held) < compared:
		out = append(out, fmt.Sprintf("**Choose** among %s: of the %d configurations that ran the same contracts here, each held them all, where the others did not.", strings.Join(held, "; "), compared))
	case len(held) > 1:
		out = append(out, "Every configuration that ran the same contracts here held them all: "+strings.Join(held, "; ")+".")
	case compared > 1:
		out = append(out, fmt.Sprintf("None of the %d configurations that ran the same contracts here held them all.", compared))
	}
	if compared > 0 && len(allSkipped) > 0 {
		who := "They all"
		if compared == 1 {
			who = "It"
		}
		out = append(out, fmt.Sprintf("%s skipped %s (they lack what it needs: the evidence says what).", who, strings.Join(allSkipped, ", ")))
	}
	for _, s := range broke {
		out = append(out, s+".")
	}
	for _, s := range unsure {
		out = append(out, s+".")
	}
	for _, s := range apart {
		out = append(out, s+".")
	}
	return out
}

// markSymbol is a verdict's symbol alone ("❌").
func markSymbol(v contracts.Verdict) string {
	m := Mark(v)
	if i := strings.IndexByte(m, ' '); i > 0 && v != "" {
		return m[:i]
	}
	return m
}

// notRun are the contracts the broker's other tables ran and t's did not,
// in row order.
func (a *Atlas) notRun(g AtlasGroup, t AtlasTable) []string {
	var out []string
	for _, o := range g.Tables {
		for _, r := range o.Contracts {
			if !slices.Contains(t.Contracts, r) && !slices.Contains(out, a.Contracts[r]) {
				out = append(out, a.Contracts[r])
			}
		}
	}
	return out
}
