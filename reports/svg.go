package reports

import (
	"fmt"
	"html/template"
	"math"
	"sort"
	"strings"

	"github.com/durachk/durachk/history"
)

// The evidence page's pictures: inline SVG built from the history sample, with
// no script and no external asset.

const (
	svgWidth   = 960
	laneLeft   = 120
	laneRight  = 16
	laneTop    = 30
	laneHeight = 11
	maxLanes   = 80
)

var windowColour = map[string]string{
	"link_down":   "#d62728",
	"reply_loss":  "#ff7f0e",
	"flap":        "#9467bd",
	"broker_down": "#8c564b",
	"power_loss":  "#17becf",
	"pause":       "#7f7f7f",
	// An outage nobody planned (the broker stopped answering).
	"broker_unavailable": "#e377c2",
}

func esc(s string) string { return template.HTMLEscapeString(s) }

type timeScale struct {
	t0, t1 int64
	x0, x1 float64
}

func (s timeScale) x(t int64) float64 {
	if s.t1 <= s.t0 {
		return s.x0
	}
	t = min(max(t, s.t0), s.t1)
	return s.x0 + float64(t-s.t0)/float64(s.t1-s.t0)*(s.x1-s.x0)
}

func (s timeScale) label(t int64) string { return fmtDur(t - s.t0) }

func fmtDur(ns int64) string {
	ms := float64(ns) / 1e6
	switch {
	case ms < 1000:
		return fmt.Sprintf("%.0fms", ms)
	case ms < 60000:
		return fmt.Sprintf("%.1fs", ms/1000)
	}
	return fmt.Sprintf("%.1fmin", ms/60000)
}

func scaleFor(ops []history.Op) timeScale {
	s := timeScale{x0: laneLeft, x1: svgWidth - laneRight}
	for i, op := range ops {
		if i == 0 || op.T < s.t0 {
			s.t0 = op.T
		}
		if i == 0 || op.T > s.t1 {
			s.t1 = op.T
		}
	}
	return s
}

func bands(b *strings.Builder, s timeScale, ws []FaultWindow, top, bottom float64, labels bool) {
	for _, w := range ws {
		if w.To < s.t0 || w.From > s.t1 {
			continue
		}
		x0, x1 := s.x(w.From), s.x(w.To)
		col := windowColour[w.Kind]
		if col == "" {
			col = "#bcbd22"
		}
		what := w.Kind
		if w.Target != "" {
			what += " " + w.Target
		}
		if w.Planned {
			what += " (planned)"
		}
		fmt.Fprintf(b, `<rect class="band" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.16"><title>%s %s–%s</title></rect>`,
			x0, top, math.Max(x1-x0, 1.5), bottom-top, col, esc(what), s.label(w.From), s.label(w.To))
		if labels {
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="9" fill="%s">%s</text>`, x0+1, top-3, col, esc(what))
		}
	}
}

func axis(b *strings.Builder, s timeScale, y float64) {
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999"/>`, s.x0, y, s.x1, y)
	for i := 0; i <= 5; i++ {
		t := s.t0 + (s.t1-s.t0)*int64(i)/5
		x := s.x(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999"/><text x="%.1f" y="%.1f" font-size="9" text-anchor="middle" fill="#555">%s</text>`,
			x, y, x, y+3, x, y+13, s.label(t))
	}
}

// Timeline draws one lane per job (first maxLanes in order of appearance):
// lease bars and enqueue, commit, ack, nack, dead-letter and cancel marks, with
// the fault windows shaded across every lane and worker kills as dashed lines.
func Timeline(ops []history.Op, ws []FaultWindow) template.HTML {
	if len(ops) == 0 {
		return ""
	}
	s := scaleFor(ops)
	jobs := perJob(ops)
	shown := jobs
	if len(shown) > maxLanes {
		shown = shown[:maxLanes]
	}
	lane := map[string]int{}
	for i, j := range shown {
		lane[j.id] = i
	}
	bottom := float64(laneTop + laneHeight*max(len(shown), 1))
	height := bottom + 56
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="%d" height="%.0f" viewBox="0 0 %d %.0f" role="img" aria-label="timeline">`, svgWidth, height, svgWidth, height)
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%.0f" fill="#ffffff"/>`, svgWidth, height)
	for i := range shown {
		if i%2 == 1 {
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#f4f6f8"/>`, laneLeft, laneTop+i*laneHeight, svgWidth-laneLeft-laneRight, laneHeight)
		}
	}
	bands(&b, s, ws, laneTop, bottom, true)
	for i, j := range shown {
		y := float64(laneTop + i*laneHeight)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="8.5" text-anchor="end" fill="#333">%s</text>`, laneLeft-4, y+8, esc(clipRunes(j.id, 22)))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ccc"/>`, s.x(j.first), y+5.5, s.x(j.last), y+5.5)
	}
	// Lease bars: from a lease to that holder's next ack/nack/dead-letter/cancel
	// of the job, or to the job's next lease, or to the job's last op.
	type holder struct {
		proc  string
		from  int64
		token uint64
	}
	open := map[string]*holder{}
	closeBar := func(job string, to int64, ended string) {
		h := open[job]
		if h == nil {
			return
		}
		delete(open, job)
		i, ok := lane[job]
		if !ok {
			return
		}
		y := float64(laneTop + i*laneHeight)
		x0, x1 := s.x(h.from), s.x(to)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="7" fill="#9ecae1"><title>%s holds %s (token %d) %s–%s%s</title></rect>`,
			x0, y+2, math.Max(x1-x0, 1), esc(h.proc), esc(job), h.token, s.label(h.from), s.label(to), esc(ended))
	}
	last := map[string]int64{}
	for _, j := range jobs {
		last[j.id] = j.last
	}
	for _, op := range ops {
		if op.Job == "" {
			continue
		}
		switch {
		case op.F == history.Lease && op.Type == history.OK:
			closeBar(op.Job, op.T, ", lease taken over")
			open[op.Job] = &holder{proc: op.Process, from: op.T, token: op.Token}
		case (op.F == history.Ack || op.F == history.Nack || op.F == history.DeadLetter || op.F == history.Cancel) && op.Type != history.Invoke:
			if h := open[op.Job]; h != nil && h.proc == op.Process {
				closeBar(op.Job, op.T, ", then "+string(op.F)+" "+string(op.Type))
			}
		}
	}
	for job := range sortedKeys(open) {
		closeBar(job, last[job], ", until the end")
	}
	// Marks.
	for _, op := range ops {
		i, ok := lane[op.Job]
		if !ok || op.Type == history.Invoke {
			continue
		}
		x, y := s.x(op.T), float64(laneTop+i*laneHeight)+5.5
		tip := fmt.Sprintf("%s %s %s %s attempt %d token %d at %s", op.Process, op.F, op.Type, op.Job, op.Attempt, op.Token, s.label(op.T))
		if op.Err != "" {
			tip += ": " + op.Err
		}
		tip = esc(tip)
		failed := op.Type != history.OK
		switch op.F {
		case history.Enqueue:
			if !failed {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2" fill="#636363"><title>%s</title></circle>`, x, y, tip)
			}
		case history.Commit:
			if failed {
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="5" height="5" fill="none" stroke="#d62728"><title>%s</title></rect>`, x-2.5, y-2.5, tip)
			} else {
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="5" height="5" fill="#2ca02c"><title>%s</title></rect>`, x-2.5, y-2.5, tip)
			}
		case history.Ack:
			if failed {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="none" stroke="#d62728"><title>%s</title></circle>`, x, y, tip)
			} else {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="#006d2c"><title>%s</title></circle>`, x, y, tip)
			}
		case history.Nack:
			fmt.Fprintf(&b, `<path d="M%.1f %.1fl3 5h-6z" fill="#ff7f0e"><title>%s</title></path>`, x, y-3, tip)
		case history.DeadLetter:
			if !failed {
				fmt.Fprintf(&b, `<path d="M%.1f %.1fl6 6M%.1f %.1fl-6 6" stroke="#d62728" stroke-width="2"><title>%s</title></path>`, x-3, y-3, x+3, y-3, tip)
			}
		case history.Cancel:
			if !failed {
				fmt.Fprintf(&b, `<path d="M%.1f %.1fl3.5 3.5l-3.5 3.5l-3.5 -3.5z" fill="#756bb1"><title>%s</title></path>`, x, y-3.5, tip)
			}
		case history.Fault:
			fmt.Fprintf(&b, `<path d="M%.1f %.1fv10" stroke="#000" stroke-width="2"><title>fault %s %s</title></path>`, x, y-5, esc(op.Value+" "+op.Target+" "+op.Key), s.label(op.T))
		}
	}
	// Worker kills and crashes that name no job: dashed lines over all lanes.
	for _, op := range ops {
		if op.F == history.Fault && op.Job == "" && (op.Value == "kill" || op.Value == "crash") {
			x := s.x(op.T)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#000" stroke-dasharray="3 2"><title>%s %s at %s</title></line>`,
				x, laneTop, x, bottom, esc(op.Value), esc(op.Target), s.label(op.T))
		}
	}
	axis(&b, s, bottom+2)
	ly := bottom + 30
	legend := []string{
		`<rect x="0" y="-6" width="14" height="7" fill="#9ecae1"/><text x="18" y="0">lease held</text>`,
		`<circle cx="4" cy="-3" r="2" fill="#636363"/><text x="10" y="0">enqueue</text>`,
		`<rect x="0" y="-6" width="5" height="5" fill="#2ca02c"/><text x="9" y="0">commit</text>`,
		`<circle cx="3" cy="-3" r="3" fill="#006d2c"/><text x="9" y="0">ack</text>`,
		`<circle cx="3" cy="-3" r="3" fill="none" stroke="#d62728"/><text x="9" y="0">rejected ack</text>`,
		`<path d="M3 -6l3 5h-6z" fill="#ff7f0e"/><text x="9" y="0">nack</text>`,
		`<path d="M0 -6l6 6M6 -6l-6 6" stroke="#d62728" stroke-width="2"/><text x="10" y="0">dead-letter</text>`,
		`<path d="M3 -7l3.5 3.5l-3.5 3.5l-3.5 -3.5z" fill="#756bb1"/><text x="9" y="0">cancel</text>`,
		`<line x1="3" y1="-8" x2="3" y2="2" stroke="#000" stroke-dasharray="3 2"/><text x="8" y="0">kill</text>`,
		`<rect x="0" y="-7" width="12" height="8" fill="#d62728" fill-opacity="0.16"/><text x="16" y="0">fault window</text>`,
	}
	widths := []int{80, 70, 65, 45, 90, 50, 80, 60, 45, 90}
	x := laneLeft
	for i, l := range legend {
		fmt.Fprintf(&b, `<g transform="translate(%d %.0f)" font-size="10" fill="#333">%s</g>`, x, ly, l)
		x += widths[i]
	}
	if len(jobs) > len(shown) {
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" font-size="10" fill="#555">showing %d of %d jobs</text>`, laneLeft, ly+16, len(shown), len(jobs))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func sortedKeys[V any](m map[string]V) func(func(string) bool) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return func(yield func(string) bool) {
		for _, k := range keys {
			if !yield(k) {
				return
			}
		}
	}
}

func clipRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// Histogram draws a distribution as 20 bars from 0 to its maximum, with its
// percentiles marked.
func Histogram(title string, xs []float64) template.HTML {
	const w, h, left, bottom = 300, 130, 30, 28
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="hist" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`, w, h, w, h, esc(title))
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/><text x="4" y="12" font-size="11" fill="#222">%s</text>`, w, h, esc(title))
	if len(xs) == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11" fill="#888">no data</text></svg>`, left, h/2)
		return template.HTML(b.String())
	}
	v := append([]float64(nil), xs...)
	sort.Float64s(v)
	hi := v[len(v)-1]
	if hi <= 0 {
		hi = 1
	}
	const bins = 20
	counts := make([]int, bins)
	for _, x := range v {
		i := int(x / hi * bins)
		counts[min(max(i, 0), bins-1)]++
	}
	top := 0
	for _, c := range counts {
		top = max(top, c)
	}
	plotW, plotH := float64(w-left-8), float64(h-bottom-20)
	bw := plotW / bins
	for i, c := range counts {
		bh := float64(c) / float64(top) * plotH
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#4c78a8"><title>%.1f–%.1f ms: %d</title></rect>`,
			float64(left)+float64(i)*bw+0.5, float64(h-bottom)-bh, bw-1, bh, hi*float64(i)/bins, hi*float64(i+1)/bins, c)
	}
	q := func(p float64) float64 { return v[min(len(v)-1, int(p*float64(len(v))))] }
	for i, p := range []struct {
		name string
		v    float64
	}{{"p50", q(0.5)}, {"p90", q(0.9)}, {"p99", q(0.99)}} {
		x := float64(left) + p.v/hi*plotW
		// A label past the middle reads leftwards from its line, so that one
		// near the right edge is not cut; each label has its own row, so
		// that close quantiles do not print over each other.
		lx, anchor := x+2, "start"
		if x > float64(left)+plotW/2 {
			lx, anchor = x-2, "end"
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="18" x2="%.1f" y2="%d" stroke="#e45756" stroke-dasharray="2 2"/><text x="%.1f" y="%d" font-size="8" text-anchor="%s" fill="#e45756">%s</text>`,
			x, x, h-bottom, lx, 26+9*i, anchor, p.name)
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`, left, h-bottom, w-8, h-bottom)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="9" fill="#555">0</text><text x="%d" y="%d" font-size="9" text-anchor="end" fill="#555">%s ms</text>`,
		left, h-bottom+12, w-8, h-bottom+12, fmtNum(hi))
	sum := fmt.Sprintf("n=%d p50=%s p90=%s p99=%s max=%s ms", len(v), fmtNum(q(0.5)), fmtNum(q(0.9)), fmtNum(q(0.99)), fmtNum(hi))
	fit := ""
	if room := w - left - 4; len(sum)*5 > room { // about 5 px a character at 9 px
		fit = fmt.Sprintf(` textLength="%d" lengthAdjust="spacingAndGlyphs"`, room)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="9" fill="#555"%s>%s</text>`, left, h-4, fit, esc(sum))
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func fmtNum(x float64) string {
	if x >= 100 {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.1f", x)
}

// DepthChart draws the queue depth over time on the timeline's time axis:
// jobs waiting to be leased and jobs not yet terminal, with the fault windows.
func DepthChart(ops []history.Op, ws []FaultWindow) template.HTML {
	pts := QueueDepth(ops)
	if len(pts) == 0 {
		return ""
	}
	s := scaleFor(ops)
	const h, top, bottom = 140, 22, 110
	peak := 1
	for _, p := range pts {
		peak = max(peak, p.Open, p.Queued)
	}
	y := func(n int) float64 { return bottom - float64(n)/float64(peak)*(bottom-top) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="depth" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="queue depth">`, svgWidth, h, svgWidth, h)
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/><text x="4" y="12" font-size="11" fill="#222">queue depth over time</text>`, svgWidth, h)
	bands(&b, s, ws, top, bottom, false)
	line := func(get func(DepthPoint) int, colour, name string) {
		var p strings.Builder
		fmt.Fprintf(&p, "M%.1f %.1f", s.x(s.t0), y(0))
		for _, pt := range pts {
			fmt.Fprintf(&p, " H%.1f V%.1f", s.x(pt.T), y(get(pt)))
		}
		fmt.Fprintf(&p, " H%.1f", s.x(s.t1))
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.5"><title>%s</title></path>`, p.String(), colour, name)
	}
	line(func(p DepthPoint) int { return p.Open }, "#4c78a8", "accepted, not yet terminal")
	line(func(p DepthPoint) int { return p.Queued }, "#f58518", "waiting for a first lease")
	fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="9" text-anchor="end" fill="#555">%d</text><text x="%d" y="%.1f" font-size="9" text-anchor="end" fill="#555">0</text>`,
		laneLeft-4, y(peak)+3, peak, laneLeft-4, y(0)+3)
	axis(&b, s, bottom)
	fmt.Fprintf(&b, `<g font-size="10" fill="#333"><rect x="%d" y="6" width="12" height="3" fill="#4c78a8"/><text x="%d" y="11">not yet terminal</text><rect x="%d" y="6" width="12" height="3" fill="#f58518"/><text x="%d" y="11">waiting for a first lease</text></g>`,
		svgWidth-330, svgWidth-314, svgWidth-200, svgWidth-184)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
