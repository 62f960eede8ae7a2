package reports

import (
	"fmt"
	"html/template"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/checker"
	"github.com/durachk/durachk/contracts"
)

// WriteHTML renders the self-contained evidence page: the matrix, the targets,
// and per target and contract the verdict, the claim, the faults planned and
// applied, the witness history lines, a timeline (one lane per job, fault
// windows shaded), the per-job distributions, the queue depth over time and
// the command that reproduces the result. It uses no script and no external
// asset.
func WriteHTML(w io.Writer, d *Document) error {
	type section struct {
		Verdict                                                                       contracts.Verdict
		Anchor, Target, Contract, Mark, Claim, Reason, Scenario, Sabotage, MeasuredOn string
		Planned                                                                       []string
		Applied                                                                       string
		Stats                                                                         string
		Violations                                                                    []violation
		Timeline, Depth                                                               template.HTML
		Hists                                                                         []template.HTML
		Metrics                                                                       contracts.Metrics
		Reproduce, ReproduceNote, PlannedLabel                                        string
		HistoryNote                                                                   string
		Windows                                                                       []string
		Cluster                                                                       string
		Nodes                                                                         template.HTML
		TrialsNote                                                                    string
		Trials                                                                        []TrialLine
		Replay                                                                        string
		Durability                                                                    string
	}
	var secs []section
	for _, i := range d.ReadingOrder() {
		r := d.Results[i]
		k := Key(r.Target, r.Contract)
		ops := d.Histories[k]
		ev := d.EvidenceFor(r.Target, r.Contract)
		s := section{Anchor: Anchor(r.Target, r.Contract), Target: r.Target, Contract: r.Contract, Verdict: r.Verdict,
			Mark: VerdictText(r), Claim: r.Claim, Reason: r.Reason, Scenario: r.Scenario, Sabotage: r.Sabotage, MeasuredOn: r.MeasuredOn,
			Planned: r.Planned, Applied: faultsApplied(r.Stats.Faults), Metrics: r.Metrics, Reproduce: PasteCommand(ev.Reproduce, nil), PlannedLabel: PlannedLabel(ev),
			TrialsNote: TrialsNote(r), Trials: TrialLines(d, r), Durability: d.DurabilityLine(r)}
		if ev.Replay != nil {
			s.Replay = ev.Replay.Text
		}
		s.ReproduceNote = EnvNote(s.Reproduce)
		if r.Verdict != contracts.Skipped {
			st := r.Stats
			s.Stats = fmt.Sprintf("%d jobs accepted, %d lost, %d applied twice, %d repeats dropped, %d dead-lettered by design, %d otherwise; %d executions (%d spent by the jobs' own failures), %d committed, %d deduped, %d cancelled, %d events applied, duplicates %d explained / %d unexplained, %d stale commits rejected, max attempts %d; %d history operations",
				st.Accepted, st.Lost, st.AppliedTwice, st.RepeatsDropped, st.DeadLetteredByDesign, st.DeadLetteredOtherwise, st.Executions, st.SpentAttempts,
				st.Committed, st.Deduped, st.Cancelled, st.Applied, st.Explained, st.Unexplained, st.StaleRejected, st.MaxAttempts, r.HistoryLen)
		}
		for i, v := range r.Violations {
			if i == 20 {
				s.Violations = append(s.Violations, violation{Head: fmt.Sprintf("… %d more violations in result.json", len(r.Violations)-i)})
				break
			}
			vv := violation{Head: string(v.Property) + ": " + v.Message, Job: v.Job, Because: v.Because}
			for j, row := range checker.Rows(v) {
				if j == 60 {
					vv.More = fmt.Sprintf("… %d more operations in result.json", len(v.Witness)-j)
					break
				}
				vv.Rows = append(vv.Rows, row)
			}
			for _, f := range v.Facts {
				vv.Facts = append(vv.Facts, f.String())
			}
			s.Violations = append(s.Violations, vv)
		}
		s.Cluster = ClusterLine(r.Cluster)
		s.Windows = WindowTexts(ev.Windows, historyStart(r, ops))
		if len(ops) > 0 {
			s.Nodes = NodeLanes(ops)
			s.Timeline = Timeline(ops, ev.Windows)
			s.Depth = DepthChart(ops, ev.Windows)
			ds := Distribute(ops)
			s.Hists = []template.HTML{Histogram("queue wait (ms)", ds.QueueWait), Histogram("processing time (ms)", ds.Processing), Histogram("time to terminal state (ms)", ds.ToTerminal)}
			if len(ops) < ev.HistoryTotal {
				s.HistoryNote = fmt.Sprintf("pictures drawn from a sample of %d of %d history operations (whole jobs)", len(ops), ev.HistoryTotal)
			}
		} else if r.Verdict != contracts.Skipped && r.HistoryLen > 0 {
			s.HistoryNote = "no history sample in this document: timeline and distributions unavailable"
		}
		secs = append(secs, s)
	}
	type target struct {
		TargetInfo
		SettingsText string
		Caps         Caps
	}
	var ts []target
	for _, ti := range d.Targets {
		ts = append(ts, target{TargetInfo: ti, SettingsText: settingsText(ti.Settings), Caps: CapsOf(ti.Capabilities)})
	}
	counts := []string{}
	for _, v := range []string{"pass", "violation", "unknown", "skipped"} {
		counts = append(counts, fmt.Sprintf("%d %s", d.Summary[v], v))
	}
	var other []string
	for k := range sortedKeys(d.Summary) {
		if k != "pass" && k != "violation" && k != "unknown" && k != "skipped" {
			other = append(other, fmt.Sprintf("%d %s", d.Summary[k], k))
		}
	}
	sort.Strings(other)
	m := NewMatrix([]*Document{d}, nil)
	m.WorstFirst()
	cmd := PasteCommand(d.Command, nil)
	data := map[string]any{
		"Command":     cmd,
		"CommandNote": EnvNote(cmd),
		"Legend":      VerdictLegend,
		"WitnessTime": WitnessTimeNote,
		"WindowsTime": WindowsLabel,
		"Title":       "durachk evidence",
		"CSS":         template.CSS(css),
		"Doc":         d,
		"Counts":      strings.Join(append(counts, other...), ", "),
		"Matrix":      m,
		"Targets":     ts,
		"Sections":    secs,
		"Partial":     PartialNote(d),
	}
	return pageTmpl.ExecuteTemplate(w, "page", data)
}

// settingsHTML is a column's settings as code words, those whose values
// differ between columns in bold.
func settingsHTML(s map[string]string, differing []string) template.HTML {
	var b strings.Builder
	for k := range sortedKeys(s) {
		if b.Len() > 0 {
			b.WriteString(" ")
		}
		kv := template.HTMLEscapeString(k + "=" + s[k])
		if slices.Contains(differing, k) {
			fmt.Fprintf(&b, "<b><code>%s</code></b>", kv)
		} else {
			fmt.Fprintf(&b, "<code>%s</code>", kv)
		}
	}
	return template.HTML(b.String())
}

// violation is a witness as the page shows it: a table of operations (time
// since the run started, process, operation, job, token/attempt, outcome),
// then the final-state facts and the because lines.
type violation struct {
	Head, Job string
	Rows      []checker.Row
	More      string
	Facts     []string
	Because   []string
}

func verdictClass(v contracts.Verdict) string {
	switch v {
	case contracts.Pass, contracts.Violated, contracts.Unknown, contracts.Skipped:
		return "v-" + string(v)
	case "":
		return "v-none"
	}
	return "v-unknown"
}

const css = `
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;padding:24px 32px;color:#1b1f23;background:#fafbfc}
h1{font-size:22px;margin:0 0 6px}h2{font-size:18px;margin:28px 0 10px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:0 0 8px}
table{border-collapse:collapse;background:#fff;font-size:13px}th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f0f3f6}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
pre{background:#f6f8fa;border:1px solid #d0d7de;padding:8px;overflow:auto;max-height:360px;white-space:pre}
.v-pass{background:#dafbe1;color:#116329}.v-violation{background:#ffebe9;color:#a40e26;font-weight:bold}
.v-unknown{background:#fff8c5;color:#7d4e00;font-weight:bold}.v-skipped{background:#eaeef2;color:#57606a}.v-none{color:#999}
td a{color:inherit;text-decoration:none;display:block}
.result{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:14px 16px;margin:16px 0}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px}
.meta{color:#57606a;font-size:13px;margin:4px 0}
.hists{display:flex;flex-wrap:wrap;gap:12px;margin-top:8px}
svg{display:block;border:1px solid #eaeef2;margin-top:8px;max-width:100%;height:auto}
.partial{background:#fff8c5;border:1px solid #d4a72c;border-radius:6px;padding:8px 12px;font-weight:bold;color:#7d4e00}
.witness{margin:8px 0 12px}.wt td,.wt th{font-size:12px;padding:2px 6px}
.facts,.because{margin:4px 0;padding-left:20px;font-size:13px}.because li{color:#57606a}
.caps{max-width:420px}.caps summary{cursor:pointer}.capt td{border:none;padding:1px 8px 1px 0;font-size:12px}.notes{margin:4px 0;padding-left:18px;font-size:12px;color:#57606a}
.differs{font-weight:normal;font-size:12px;color:#0550ae}
.cmd{background:#0d1117;color:#e6edf3;padding:6px 10px;border-radius:4px;display:block;white-space:pre-wrap;word-break:break-all}
`

var pageTmpl = template.Must(template.New("reports").Funcs(template.FuncMap{
	"vclass":   verdictClass,
	"mark":     func(v contracts.Verdict) string { return string(v) },
	"join":     strings.Join,
	"settings": settingsHTML,
}).Parse(`
{{define "matrix"}}<table class="matrix"><tr><th>contract</th>{{range .Columns}}<th>{{.Target}}{{if .Differs}}<br><span class="differs">{{join .Differs ", "}}</span>{{end}}<br><code>{{.Fingerprint}}</code></th>{{end}}</tr>
{{- $m := .}}{{range $r, $id := .Contracts}}<tr><td><code>{{$id}}</code></td>{{range (index $m.Cells $r)}}<td class="{{vclass .Verdict}}">{{if .Verdict}}<a href="{{.Link}}" title="{{.Reason}}">{{.Say}}</a>{{else}}—{{end}}</td>{{end}}</tr>
{{end}}</table>{{end}}

{{define "head"}}<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title><style>{{.CSS}}</style></head>{{end}}

{{define "matrixpage"}}{{template "head" .}}<body><h1>durachk compare</h1>
<p class="meta">contracts as rows, violations and unknowns first; targets and configurations as columns, with what tells each from the others of its kind and the fingerprint of their effective settings; each verdict links to its evidence.</p>{{if .Matrix.Differing}}
<p><b>Differ between columns:</b> {{join .Matrix.Differing ", "}}</p>{{end}}
{{template "matrix" .Matrix}}
<p class="meta">{{.Legend}}</p>
<h2>Columns</h2><table><tr><th>target</th><th>measured on</th><th>fingerprint</th><th>settings</th><th>from</th></tr>
{{range .Matrix.Columns}}<tr><td>{{.Target}}</td><td>{{.MeasuredOn}}</td><td><code>{{.Fingerprint}}</code></td><td>{{settings .Settings $.Matrix.Differing}}</td><td>{{.Source}}</td></tr>{{end}}</table>
</body></html>
{{end}}

{{define "page"}}{{template "head" .}}<body>
<h1>durachk evidence</h1>{{if .Partial}}
<p class="partial">⚠ {{.Partial}}. The verdicts below are those it had; the missing contracts have none.</p>{{end}}
<p class="meta">{{.Counts}} · seed {{.Doc.Seed}} · durachk {{.Doc.Version}}</p>
<p class="meta">Reproduce the whole run{{if .CommandNote}} ({{.CommandNote}}){{end}}:</p><code class="cmd">{{.Command}}</code>
<h2>Verdicts</h2>
<p class="meta">violations and unknowns first; each verdict links to its evidence below, in the same order.</p>
{{template "matrix" .Matrix}}
<p class="meta">{{.Legend}}</p>
<h2>Targets</h2>
<table><tr><th>target</th><th>measured on</th><th>endpoint</th><th>fingerprint</th><th>URL</th><th>settings</th><th>declared capabilities</th></tr>
{{range .Targets}}<tr><td>{{.Name}}</td><td>{{.MeasuredOn}}</td><td>{{.Endpoint}}</td><td><code>{{.Fingerprint}}</code></td><td><code>{{.URL}}</code></td><td><code>{{.SettingsText}}</code>{{if .Durability}}<br><span class="meta">durability {{.Durability.Line}}</span>{{end}}</td><td class="caps"><details><summary>{{.Caps.Summary}}</summary><table class="capt">{{range .Caps.All}}<tr><td>{{index . 0}}</td><td>{{index . 1}}</td></tr>{{end}}</table>{{if .Caps.Notes}}<ul class="notes">{{range .Caps.Notes}}<li>{{.}}</li>{{end}}</ul>{{end}}</details></td></tr>
{{end}}</table>
<h2>Evidence</h2>
{{range .Sections}}<div class="result" id="{{.Anchor}}">
<h3><code>{{.Contract}}</code> on {{.Target}} <span class="badge {{vclass .Verdict}}">{{.Mark}}</span></h3>
<p>{{.Claim}}</p>
{{if .Reason}}<p><b>Reason:</b> {{.Reason}}</p>{{end}}{{if .Durability}}<p><b>Durability settings:</b> {{.Durability}}</p>{{end}}{{if .Replay}}<p><b>Reproduction:</b> {{.Replay}}</p>{{end}}{{if .TrialsNote}}
<p><b>Trials:</b> {{.TrialsNote}}</p><table><tr><th>seed</th><th>verdict</th><th>seeds tried</th><th>reason</th><th>reproduce</th></tr>
{{range .Trials}}<tr><td>{{.Seed}}</td><td class="{{vclass .Verdict}}">{{mark .Verdict}}</td><td>{{.SeedsTried}}</td><td>{{if ne (mark .Verdict) "pass"}}{{.Reason}}{{end}}</td><td>{{if .Reproduce}}<code>{{.Reproduce}}</code>{{end}}</td></tr>
{{end}}</table>{{end}}
<p class="meta">scenario: {{.Scenario}}{{if .Sabotage}} · sabotage: {{.Sabotage}}{{end}} · measured on {{.MeasuredOn}}</p>
{{if .Planned}}<p class="meta"><b>Faults planned</b> ({{.PlannedLabel}}): {{range $i, $p := .Planned}}{{if $i}}; {{end}}{{$p}}{{end}}</p>{{end}}
{{if .Applied}}<p class="meta"><b>Faults applied:</b> {{.Applied}}</p>{{end}}
{{if .Windows}}<p class="meta"><b>Fault windows</b> ({{$.WindowsTime}}): {{range $i, $w := .Windows}}{{if $i}}; {{end}}{{$w}}{{end}}</p>{{end}}
{{if .Stats}}<p class="meta">{{.Stats}}</p>{{end}}{{if .Cluster}}<p class="meta"><b>Cluster:</b> {{.Cluster}}</p>{{end}}
{{range .Violations}}<div class="witness"><p><b>{{.Head}}</b>{{if .Job}} (job <code>{{.Job}}</code>){{end}}</p>
{{if .Rows}}<table class="wt" title="{{$.WitnessTime}}"><tr><th>time since the first operation</th><th>process</th><th>operation</th><th>job</th><th>token/attempt</th><th>outcome</th></tr>
{{range .Rows}}<tr><td>{{.At}}</td><td>{{.Process}}</td><td><code>{{.Op}}</code></td><td><code>{{.Job}}</code></td><td>{{.Token}}</td><td><code>{{.Outcome}}</code></td></tr>
{{end}}</table>{{end}}{{if .More}}<p class="meta">{{.More}}</p>{{end}}
{{if .Facts}}<ul class="facts">{{range .Facts}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{if .Because}}<ul class="because">{{range .Because}}<li>because {{.}}</li>{{end}}</ul>{{end}}</div>
{{end}}
{{if .Nodes}}{{.Nodes}}{{end}}{{if .Timeline}}{{.Timeline}}{{end}}
{{if .Hists}}<div class="hists">{{range .Hists}}{{.}}{{end}}</div>{{end}}
{{if .Depth}}{{.Depth}}{{end}}
{{if .Stats}}<table style="margin-top:8px"><tr><th>distribution</th><th>n</th><th>p50</th><th>p90</th><th>p99</th><th>max</th></tr>
<tr><td>queue wait (ms)</td><td>{{.Metrics.QueueWait.N}}</td><td>{{printf "%.1f" .Metrics.QueueWait.P50}}</td><td>{{printf "%.1f" .Metrics.QueueWait.P90}}</td><td>{{printf "%.1f" .Metrics.QueueWait.P99}}</td><td>{{printf "%.1f" .Metrics.QueueWait.Max}}</td></tr>
<tr><td>processing (ms)</td><td>{{.Metrics.Processing.N}}</td><td>{{printf "%.1f" .Metrics.Processing.P50}}</td><td>{{printf "%.1f" .Metrics.Processing.P90}}</td><td>{{printf "%.1f" .Metrics.Processing.P99}}</td><td>{{printf "%.1f" .Metrics.Processing.Max}}</td></tr>
<tr><td>time to terminal (ms)</td><td>{{.Metrics.ToTerminal.N}}</td><td>{{printf "%.1f" .Metrics.ToTerminal.P50}}</td><td>{{printf "%.1f" .Metrics.ToTerminal.P90}}</td><td>{{printf "%.1f" .Metrics.ToTerminal.P99}}</td><td>{{printf "%.1f" .Metrics.ToTerminal.Max}}</td></tr>
<tr><td>attempts per job</td><td>{{.Metrics.Attempts.N}}</td><td>{{printf "%.0f" .Metrics.Attempts.P50}}</td><td>{{printf "%.0f" .Metrics.Attempts.P90}}</td><td>{{printf "%.0f" .Metrics.Attempts.P99}}</td><td>{{printf "%.0f" .Metrics.Attempts.Max}}</td></tr></table>{{end}}
{{if .HistoryNote}}<p class="meta">{{.HistoryNote}}</p>{{end}}
{{if .Reproduce}}<p class="meta">Reproduce{{if .ReproduceNote}} ({{.ReproduceNote}}){{end}}:</p><code class="cmd">{{.Reproduce}}</code>{{end}}
</div>
{{end}}
</body></html>
{{end}}
`))

// Caps are a target's declared capabilities as a report shows them: a
// one-line summary of what it has, every capability with its value, and the
// notes.
type Caps struct {
	Summary string
	All     [][2]string
	Notes   []string
}

// CapsOf describes c for a reader: the summary names what the target has
// (and how many notes follow), All lists each capability with its value.
func CapsOf(c adapters.Capabilities) Caps {
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	all := [][2]string{
		{"lease", string(c.Lease)}, {"lease extension", string(c.LeaseExtension)}, {"fencing token", string(c.Token)},
		{"fenced ack", yes(c.FencedAck)}, {"delivery count", string(c.DeliveryCount)}, {"dead letter", string(c.DeadLetter)},
		{"delayed nack", string(c.DelayedNack)}, {"FIFO", yes(c.FIFO)}, {"durable", yes(c.Durable)},
		{"broker kill", yes(c.BrokerKill)}, {"power loss", yes(c.PowerLoss)},
		{"node faults", yes(c.NodeFaults)}, {"node partitions", yes(c.NodePartitions)},
	}
	var has []string
	for _, kv := range all {
		switch kv[1] {
		case "", "no", string(adapters.None):
		case "yes":
			has = append(has, kv[0])
		default:
			has = append(has, kv[0]+" "+kv[1])
		}
	}
	sum := strings.Join(has, " · ")
	if sum == "" {
		sum = "none declared"
	}
	if n := len(c.Notes); n > 0 {
		sum += fmt.Sprintf(" (%d notes)", n)
	}
	for i := range all {
		if all[i][1] == "" {
			all[i][1] = string(adapters.None)
		}
	}
	return Caps{Summary: sum, All: all, Notes: c.Notes}
}
