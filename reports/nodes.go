package reports

import (
	"fmt"
	"html/template"
	"slices"
	"strings"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/history"
)

// ClusterLine sums up what a run on a replicated target adds to its result,
// in one line; "" for other targets.
func ClusterLine(f *contracts.ClusterFacts) string {
	if f == nil {
		return ""
	}
	parts := []string{f.Topology}
	if len(f.Primaries) > 0 {
		parts = append(parts, "primary: "+strings.Join(f.Primaries, " → "))
	}
	parts = append(parts, fmt.Sprintf("%d failover(s)", f.Failovers))
	if f.Recovered > 0 {
		parts = append(parts, fmt.Sprintf("%d recovered (ambiguous enqueues delivered anyway: %s)", f.Recovered, strings.Join(f.RecoveredJobs, ", ")))
	}
	if len(f.Regressions) > 0 {
		parts = append(parts, "delivery count regressions: "+strings.Join(f.Regressions, "; "))
	}
	if f.Settled != "" {
		parts = append(parts, f.Settled)
	}
	return strings.Join(parts, " · ")
}

// nodeSpan is one state of one node over [from, to).
type nodeSpan struct {
	node     string
	from, to int64
	state    string // "primary", "down", "cut"
}

// nodeSpans reads the controller's node records: who was primary when, which
// node was down (killed to restarted) or cut off (partitioned to healed).
func nodeSpans(ops []history.Op) ([]string, []nodeSpan) {
	var nodes []string
	add := func(n string) {
		if n != "" && !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	var spans []nodeSpan
	open := map[string]int{} // node+state → index into spans
	begin := func(n, state string, t int64) {
		add(n)
		if _, ok := open[n+state]; ok {
			return
		}
		open[n+state] = len(spans)
		spans = append(spans, nodeSpan{node: n, from: t, to: -1, state: state})
	}
	end := func(n, state string, t int64) {
		if i, ok := open[n+state]; ok {
			spans[i].to = t
			delete(open, n+state)
		}
	}
	var last int64
	primary := ""
	for _, op := range ops {
		last = max(last, op.T)
		switch {
		case op.F == history.Node && op.Value == "primary":
			if primary != "" {
				end(primary, "primary", op.T)
			}
			primary = op.Target
			begin(op.Target, "primary", op.T)
		case op.F == history.Fault && op.Value == "node_kill":
			begin(op.Target, "down", op.T)
		case op.F == history.Fault && op.Value == "node_restart":
			end(op.Target, "down", op.T)
		case op.F == history.Fault && op.Value == "node_partition":
			begin(op.Target, "cut", op.T)
		case op.F == history.Fault && op.Value == "node_heal":
			end(op.Target, "cut", op.T)
		}
	}
	for i := range spans {
		if spans[i].to < 0 {
			spans[i].to = last
		}
	}
	slices.Sort(nodes)
	return nodes, spans
}

// NodeLanes draws one lane per node of a replicated target: when it was the
// primary (or its queue's leader), down, or cut off by a partition. "" for a
// history without node records.
func NodeLanes(ops []history.Op) template.HTML {
	nodes, spans := nodeSpans(ops)
	if len(nodes) == 0 {
		return ""
	}
	s := scaleFor(ops)
	lane := map[string]int{}
	for i, n := range nodes {
		lane[n] = i
	}
	const h = 14
	bottom := float64(laneTop + h*len(nodes))
	height := bottom + 40
	colors := map[string]string{"primary": "#2e7d32", "down": "#c62828", "cut": "#ef6c00"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="nodes" xmlns="http://www.w3.org/2000/svg" width="%d" height="%.0f" viewBox="0 0 %d %.0f" role="img" aria-label="nodes">`, svgWidth, height, svgWidth, height)
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%.0f" fill="#ffffff"/>`, svgWidth, height)
	x := laneLeft
	for _, st := range []struct{ state, label string }{{"primary", "primary (or queue leader)"}, {"down", "down (killed)"}, {"cut", "cut off (partitioned)"}} {
		fmt.Fprintf(&b, `<rect x="%d" y="8" width="12" height="8" fill="%s" opacity="0.8"/><text x="%d" y="16" font-size="10" fill="#333">%s</text>`, x, colors[st.state], x+16, st.label)
		x += 16 + 7*len(st.label) + 14
	}
	for i, n := range nodes {
		y := float64(laneTop + i*h)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="9" text-anchor="end" fill="#333">%s</text>`, laneLeft-4, y+10, esc(n))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`, s.x0, y+7, s.x1, y+7)
	}
	for _, sp := range spans {
		y := float64(laneTop + lane[sp.node]*h)
		off, height := 2.0, 10.0
		if sp.state != "primary" {
			off, height = 4, 6
		}
		x0, x1 := s.x(sp.from), s.x(sp.to)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" opacity="0.8"><title>%s %s from %s to %s</title></rect>`,
			x0, y+off, max(x1-x0, 1), height, colors[sp.state], esc(sp.node), sp.state, s.label(sp.from), s.label(sp.to))
	}
	axis(&b, s, bottom+4)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
