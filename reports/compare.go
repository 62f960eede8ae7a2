package reports

import (
	"fmt"
	"html/template"
	"io"
	"maps"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/durachk/durachk/contracts"
)

// Column is one target (configuration) of a matrix.
type Column struct {
	Target      string `json:"target"`
	Fingerprint string `json:"fingerprint"`
	MeasuredOn  string `json:"measured_on"`
	// Source is the result.json the column came from ("" : this document).
	Source string `json:"source,omitempty"`
	// Kind is the target kind; Settings its effective knobs (TargetInfo).
	Kind     string            `json:"kind"`
	Settings map[string]string `json:"settings,omitempty"`
	// Differs tells this column from the others of its kind: each setting
	// whose value differs among them ("appendfsync=always", "appendfsync
	// unset"), then "on <measured on>" when the broker versions differ. Empty
	// when it is the only column of its kind or they all agree.
	Differs []string `json:"differs,omitempty"`
}

// Label is the column's heading: the target name, what tells it from the
// other columns of its kind, and its fingerprint.
func (c Column) Label() string {
	l := c.Target
	if len(c.Differs) > 0 {
		l += " [" + strings.Join(c.Differs, " ") + "]"
	}
	if c.Fingerprint == "" {
		return l
	}
	return l + " (" + c.Fingerprint[:min(7, len(c.Fingerprint))] + ")"
}

// DifferingSettings returns, sorted, the keys whose values differ among
// several targets' settings: a key one of them lacks differs from any value
// the others give it. With fewer than two, none differ.
func DifferingSettings(settings []map[string]string) []string {
	if len(settings) < 2 {
		return nil
	}
	keys := map[string]bool{}
	for _, s := range settings {
		for k := range s {
			keys[k] = true
		}
	}
	var out []string
	for k := range keys {
		v0, ok0 := settings[0][k]
		for _, s := range settings[1:] {
			if v, ok := s[k]; ok != ok0 || v != v0 {
				out = append(out, k)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// distinguish fills each column's Differs: among the columns of one kind,
// the settings whose values differ, and the broker version when it does. It
// returns what differs, once each, sorted ("broker version" for versions).
func distinguish(cols []Column) []string {
	differ := map[string]bool{}
	byKind := map[string][]int{}
	for i, c := range cols {
		byKind[c.Kind] = append(byKind[c.Kind], i)
	}
	for _, idx := range byKind {
		if len(idx) < 2 {
			continue
		}
		var ss []map[string]string
		versions := map[string]bool{}
		for _, i := range idx {
			ss = append(ss, cols[i].Settings)
			versions[cols[i].MeasuredOn] = true
		}
		keys := DifferingSettings(ss)
		for _, k := range keys {
			differ[k] = true
		}
		if len(versions) > 1 {
			differ["broker version"] = true
		}
		for _, i := range idx {
			var d []string
			for _, k := range keys {
				if v, ok := cols[i].Settings[k]; ok {
					d = append(d, k+"="+v)
				} else {
					d = append(d, k+" unset")
				}
			}
			if len(versions) > 1 {
				d = append(d, "on "+cols[i].MeasuredOn)
			}
			cols[i].Differs = d
		}
	}
	out := make([]string, 0, len(differ))
	for k := range differ {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Cell is one verdict of a matrix; an empty Verdict: not run there.
type Cell struct {
	Verdict contracts.Verdict `json:"verdict,omitempty"`
	// Text is the verdict as the cell says it (VerdictText: "lost ×20").
	Text   string `json:"text,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Link points at the evidence: report.html beside the result.json the
	// verdict came from, at the result's anchor.
	Link string `json:"link,omitempty"`
}

// Say is the cell's text: the verdict as VerdictText says it ("-" where
// not run).
func (c Cell) Say() string {
	switch {
	case c.Verdict == "":
		return "-"
	case c.Text == "":
		return string(c.Verdict)
	}
	return c.Text
}

// Marked is the cell's text after the verdict's symbol: "❌ lost ×20".
func (c Cell) Marked() string {
	if c.Verdict == "" {
		return Mark("")
	}
	return markSymbol(c.Verdict) + " " + c.Say()
}

// Matrix has contracts as rows and targets (configurations) as columns.
type Matrix struct {
	Contracts []string `json:"contracts"`
	Columns   []Column `json:"columns"`
	Cells     [][]Cell `json:"cells"` // [row][column]
	// Differing names what differs between columns of one kind: their
	// settings (DifferingSettings) and "broker version"; each column's
	// Differs gives its values.
	Differing []string `json:"differing,omitempty"`
}

// NewMatrix builds the matrix of one or more documents. sources[i] is the path
// docs[i] was read from ("" for a document rendered on its own: links are
// then anchors in the same page).
func NewMatrix(docs []*Document, sources []string) Matrix {
	var m Matrix
	row := map[string]int{}
	type colKey struct {
		doc    int
		target string
	}
	col := map[colKey]int{}
	for i, d := range docs {
		src := ""
		if i < len(sources) {
			src = sources[i]
		}
		for _, ti := range d.Targets {
			col[colKey{i, ti.Name}] = len(m.Columns)
			kind := ti.Kind
			if kind == "" {
				kind = ti.Broker
			}
			m.Columns = append(m.Columns, Column{Target: ti.Name, Fingerprint: ti.Fingerprint, MeasuredOn: ti.MeasuredOn, Source: src,
				Kind: kind, Settings: withDurability(ti)})
		}
		for _, r := range d.Results {
			if _, ok := row[r.Contract]; !ok {
				row[r.Contract] = len(m.Contracts)
				m.Contracts = append(m.Contracts, r.Contract)
			}
			if _, ok := col[colKey{i, r.Target}]; !ok {
				col[colKey{i, r.Target}] = len(m.Columns)
				m.Columns = append(m.Columns, Column{Target: r.Target, MeasuredOn: r.MeasuredOn, Source: src, Kind: r.Broker})
			}
		}
	}
	m.Differing = distinguish(m.Columns)
	m.Cells = make([][]Cell, len(m.Contracts))
	for r := range m.Cells {
		m.Cells[r] = make([]Cell, len(m.Columns))
	}
	for i, d := range docs {
		for _, r := range d.Results {
			c := col[colKey{i, r.Target}]
			link := "#" + Anchor(r.Target, r.Contract)
			if src := m.Columns[c].Source; src != "" {
				link = path.Join(filepath.ToSlash(filepath.Dir(src)), "report.html") + link
			}
			m.Cells[row[r.Contract]][c] = Cell{Verdict: r.Verdict, Text: VerdictText(r), Reason: r.Reason, Link: link}
		}
	}
	return m
}

// Anchor is the HTML id of a result in report.html.
func Anchor(target, contract string) string {
	clean := func(s string) string {
		b := []byte(s)
		for i, c := range b {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
				b[i] = '_'
			}
		}
		return string(b)
	}
	return "r-" + clean(target) + "--" + clean(contract)
}

// Mark is a verdict with a symbol, for tables read by people.
func Mark(v contracts.Verdict) string {
	switch v {
	case contracts.Pass:
		return "✅ pass"
	case contracts.Violated:
		return "❌ violation"
	case contracts.Unknown:
		return "❓ unknown"
	case contracts.Skipped:
		return "⏭️ skipped"
	case "":
		return "—"
	}
	return "❓ " + string(v)
}

// WriteMatrixText renders the matrix as an aligned text table.
func WriteMatrixText(w io.Writer, m Matrix) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "CONTRACT")
	for _, c := range m.Columns {
		fmt.Fprint(tw, "\t"+c.Label())
	}
	fmt.Fprintln(tw)
	for r, id := range m.Contracts {
		fmt.Fprint(tw, id)
		for c := range m.Columns {
			fmt.Fprint(tw, "\t"+m.Cells[r][c].Say())
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, strings.ReplaceAll(strings.ReplaceAll(VerdictLegend, "`", ""), "— :", "- :"))
	if len(m.Differing) > 0 {
		fmt.Fprintf(w, "differ between columns: %s\n", strings.Join(m.Differing, ", "))
	}
	for _, c := range m.Columns {
		src := ""
		if c.Source != "" {
			src = " from " + c.Source
		}
		fmt.Fprintf(w, "%s: measured on %s, fingerprint %s%s", c.Target, c.MeasuredOn, c.Fingerprint, src)
		if s := settingsText(c.Settings); s != "" {
			fmt.Fprintf(w, "; settings %s", s)
		}
		fmt.Fprintln(w)
	}
	return nil
}

// settingsText is a target's settings as k=v words, sorted.
// withDurability is a target's settings with the effective value of each
// durability setting of its private instance, under its knob's name
// (private-instance.<name>) where no knob gave it: two servers configured
// otherwise differ there.
func withDurability(ti TargetInfo) map[string]string {
	if ti.Durability == nil || len(ti.Durability.Settings) == 0 {
		return ti.Settings
	}
	out := maps.Clone(ti.Settings)
	if out == nil {
		out = map[string]string{}
	}
	for _, st := range ti.Durability.Settings {
		if _, ok := out["private-instance."+st.Name]; !ok {
			out["private-instance."+st.Name] = st.Value
		}
	}
	return out
}

func settingsText(s map[string]string) string {
	var kv []string
	for k := range sortedKeys(s) {
		kv = append(kv, k+"="+s[k])
	}
	return strings.Join(kv, " ")
}

func mdEscape(s string) string {
	r := strings.NewReplacer("|", "\\|", "\n", " ", "<", "&lt;", ">", "&gt;")
	return r.Replace(s)
}

// WriteMatrixMarkdown renders the matrix as a Markdown table whose cells link
// to their evidence.
func WriteMatrixMarkdown(w io.Writer, m Matrix) error {
	var b strings.Builder
	writeMatrixMarkdown(&b, m, -1)
	fmt.Fprintf(&b, "\n%s\n", VerdictLegend)
	if len(m.Differing) > 0 {
		fmt.Fprintf(&b, "\nDiffer between columns: %s.\n", mdEscape(strings.Join(m.Differing, ", ")))
	}
	b.WriteString("\n| column | measured on | fingerprint | settings | from |\n|---|---|---|---|---|\n")
	for _, c := range m.Columns {
		fmt.Fprintf(&b, "| %s | %s | `%s` | %s | %s |\n", mdEscape(c.Target), mdEscape(c.MeasuredOn), c.Fingerprint,
			mdEscape(settingsText(c.Settings)), mdEscape(c.Source))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeMatrixMarkdown writes at most maxRows rows (-1: all) and says how many it left out.
func writeMatrixMarkdown(b *strings.Builder, m Matrix, maxRows int) {
	b.WriteString("| contract |")
	for _, c := range m.Columns {
		fmt.Fprintf(b, " %s `%s`", mdEscape(c.Target), c.Fingerprint)
		if len(c.Differs) > 0 {
			fmt.Fprintf(b, "<br>%s", mdEscape(strings.Join(c.Differs, ", ")))
		}
		b.WriteString(" |")
	}
	b.WriteString("\n|---|")
	for range m.Columns {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for r, id := range m.Contracts {
		if maxRows >= 0 && r >= maxRows {
			fmt.Fprintf(b, "\n… %d more rows left out to keep this summary small; see result.json.\n", len(m.Contracts)-r)
			return
		}
		fmt.Fprintf(b, "| `%s` |", id)
		for c := range m.Columns {
			cell := m.Cells[r][c]
			if cell.Verdict == "" || cell.Link == "" || strings.HasPrefix(cell.Link, "#") {
				fmt.Fprintf(b, " %s |", mdEscape(cell.Marked()))
			} else {
				fmt.Fprintf(b, " [%s](%s) |", mdEscape(cell.Marked()), cell.Link)
			}
		}
		b.WriteString("\n")
	}
}

// WriteMatrixHTML renders the matrix as a self-contained HTML page.
func WriteMatrixHTML(w io.Writer, m Matrix) error {
	return pageTmpl.ExecuteTemplate(w, "matrixpage", map[string]any{"Title": "durachk compare", "Matrix": m, "CSS": template.CSS(css), "Legend": VerdictLegend})
}
