package reports

import (
	"fmt"
	"html/template"
	"io"
	"path"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/durachk/durachk/contracts"
)

// Column is one target (configuration) of a matrix.
type Column struct {
	Target      string
	Fingerprint string
	MeasuredOn  string
	// Source is the result.json the column came from ("" : this document).
	Source string
}

// Label is the column's heading: the target name and its fingerprint.
func (c Column) Label() string {
	if c.Fingerprint == "" {
		return c.Target
	}
	return c.Target + " (" + c.Fingerprint[:min(7, len(c.Fingerprint))] + ")"
}

// Cell is one verdict of a matrix; an empty Verdict: not run there.
type Cell struct {
	Verdict contracts.Verdict
	Reason  string
	// Link points at the evidence: report.html beside the result.json the
	// verdict came from, at the result's anchor.
	Link string
}

// Matrix has contracts as rows and targets (configurations) as columns.
type Matrix struct {
	Contracts []string
	Columns   []Column
	Cells     [][]Cell // [row][column]
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
			m.Columns = append(m.Columns, Column{Target: ti.Name, Fingerprint: ti.Fingerprint, MeasuredOn: ti.MeasuredOn, Source: src})
		}
		for _, r := range d.Results {
			if _, ok := row[r.Contract]; !ok {
				row[r.Contract] = len(m.Contracts)
				m.Contracts = append(m.Contracts, r.Contract)
			}
			if _, ok := col[colKey{i, r.Target}]; !ok {
				col[colKey{i, r.Target}] = len(m.Columns)
				m.Columns = append(m.Columns, Column{Target: r.Target, MeasuredOn: r.MeasuredOn, Source: src})
			}
		}
	}
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
			m.Cells[row[r.Contract]][c] = Cell{Verdict: r.Verdict, Reason: r.Reason, Link: link}
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
			v := string(m.Cells[r][c].Verdict)
			if v == "" {
				v = "-"
			}
			fmt.Fprint(tw, "\t"+v)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range m.Columns {
		src := ""
		if c.Source != "" {
			src = " from " + c.Source
		}
		fmt.Fprintf(w, "%s: measured on %s, fingerprint %s%s\n", c.Target, c.MeasuredOn, c.Fingerprint, src)
	}
	return nil
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
	_, err := io.WriteString(w, b.String())
	return err
}

// writeMatrixMarkdown writes at most maxRows rows (-1: all) and says how many it left out.
func writeMatrixMarkdown(b *strings.Builder, m Matrix, maxRows int) {
	b.WriteString("| contract |")
	for _, c := range m.Columns {
		fmt.Fprintf(b, " %s `%s` |", mdEscape(c.Target), c.Fingerprint)
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
				fmt.Fprintf(b, " %s |", Mark(cell.Verdict))
			} else {
				fmt.Fprintf(b, " [%s](%s) |", Mark(cell.Verdict), cell.Link)
			}
		}
		b.WriteString("\n")
	}
}

// WriteMatrixHTML renders the matrix as a self-contained HTML page.
func WriteMatrixHTML(w io.Writer, m Matrix) error {
	return pageTmpl.ExecuteTemplate(w, "matrixpage", map[string]any{"Title": "durachk compare", "Matrix": m, "CSS": template.CSS(css)})
}
