package checker

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/pipeline"
)

// want counts a violation of p and reports whether its witness is to be
// built: a disabled property never fires; past maxPerProperty violations of a
// property are only counted.
func (c *Checker) want(p Property) bool {
	if c.off[p] {
		return false
	}
	c.perKind[p]++
	return c.perKind[p] <= maxPerProperty
}

// report records a violation whose witness is ops (nil entries skipped; the
// job's enqueue invoke and ok always added) and facts, proved by because.
func (c *Checker) report(p Property, j *job, msg string, ops []*rop, facts []Fact, because ...string) {
	v := Violation{Property: p, Message: msg, Facts: facts, Because: because, T0: c.t0}
	all := make([]*rop, 0, len(ops)+2)
	for _, r := range ops {
		if r != nil {
			all = append(all, r)
		}
	}
	if j != nil {
		v.Job = j.id
		for _, r := range []*rop{j.enqInv, c.enqOK(j)} {
			if r != nil {
				all = append(all, r)
			}
		}
	}
	slices.SortStableFunc(all, func(a, b *rop) int { return int(int64(a.pos) - int64(b.pos)) })
	all = slices.CompactFunc(all, func(a, b *rop) bool { return a.pos == b.pos })
	for _, r := range all {
		v.Witness = append(v.Witness, c.op(r))
	}
	c.vs = append(c.vs, v)
}

// op turns a stored operation back into a history record.
func (c *Checker) op(r *rop) history.Op {
	o := history.Op{T: r.t, Seq: c.seqOf(r), Token: r.token, Value: c.val(r), Attempt: int(r.attempt),
		Process: c.strs.str(int(r.proc)), Target: c.strs.str(int(r.target)), Err: c.strs.str(int(r.err)),
		Type: history.Type(c.small.str(int(r.typ))), F: history.F(c.small.str(int(r.f)))}
	if r.job > 0 {
		o.Job = c.jobList[r.job-1].id
	}
	if r.key > 0 {
		o.Key = c.keyList[r.key-1].key
	}
	return o
}

// desc names a stored operation in a because line.
func (c *Checker) desc(r *rop) string {
	if r == nil {
		return "an unrecorded operation"
	}
	return Describe(c.op(r), c.t0)
}

// rel is a time of the history relative to its first operation.
func (c *Checker) rel(t int64) string { return Since(t, c.t0) }

// Since formats t relative to t0 as "+1.920s"; with t0 0, t as it is.
func Since(t, t0 int64) string {
	if t0 == 0 {
		return fmt.Sprintf("t=%d", t)
	}
	d := t - t0
	sign := "+"
	if d < 0 {
		sign, d = "-", -d
	}
	return fmt.Sprintf("%s%d.%03ds", sign, d/1e9, d%1e9/1e6)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func fmtDur(ns int64) string {
	return fmt.Sprintf("%d.%03ds", ns/1e9, ns%1e9/1e6)
}

// Describe is one operation as a because line names it:
// "w1 commit ok new (token 1) at +1.920s".
func Describe(o history.Op, t0 int64) string {
	s := o.Process + " " + Operation(o)
	if out := Outcome(o, t0); out != "" {
		s += " " + out
	}
	if o.Token > 0 {
		s += fmt.Sprintf(" (token %d)", o.Token)
	}
	return s + " at " + Since(o.T, t0)
}

// Operation names what an operation does: its function, or the fault.
func Operation(o history.Op) string {
	if o.F == history.Fault {
		s := "fault " + o.Value
		if o.Key != "" {
			s += "@" + o.Key
		}
		if o.Target != "" {
			s += " → " + o.Target
		}
		return s
	}
	return string(o.F)
}

// Outcome is an operation's type with what it returned: its error code, or
// the value that matters for its function. t0 places an enqueue's deadline.
func Outcome(o history.Op, t0 int64) string {
	if o.F == history.Fault {
		return ""
	}
	s := string(o.Type)
	if o.Err != "" {
		s += " " + o.Err
	}
	switch o.F {
	case history.Enqueue:
		if o.Type == history.Invoke {
			s += " " + metaSummary(o.Value, t0)
		}
	case history.Commit, history.Apply, history.DeadLetter, history.Reprocess, history.Nack:
		if o.Value != "" && o.Type != history.Invoke || o.F == history.DeadLetter && o.Value != "" && o.Type == history.Invoke {
			s += " " + clip(o.Value, 60)
		}
	case history.Ack, history.Circuit:
		if o.Value != "" {
			s += " " + o.Value
		}
	}
	return s
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// metaSummary is the part of an enqueue's metadata a reader of a witness needs.
func metaSummary(v string, t0 int64) string {
	var m pipeline.JobMeta
	parseMeta(v, &m)
	parts := []string{}
	if m.Tenant != "" {
		parts = append(parts, "tenant "+m.Tenant)
	}
	if m.Version > 0 {
		parts = append(parts, fmt.Sprintf("v%d", m.Version))
	}
	parts = append(parts, fmt.Sprintf("max %d", m.MaxAttempts))
	if m.Deadline > 0 {
		parts = append(parts, "deadline "+Since(m.Deadline, t0))
	}
	if m.Group != "" {
		parts = append(parts, "group "+m.Group)
	}
	for _, f := range []struct {
		on   bool
		name string
	}{{m.Poison, "poison"}, {m.Stubborn, "stubborn"}, {m.Permanent, "permanent"}} {
		if f.on {
			parts = append(parts, f.name)
		}
	}
	if m.FailTransient > 0 {
		parts = append(parts, fmt.Sprintf("fails %d times", m.FailTransient))
	}
	if m.AgeBudget > 0 {
		parts = append(parts, "age budget "+fmtDur(m.AgeBudget))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// Row is one line of a witness table.
type Row struct {
	At      string `json:"at"` // since the history's first operation
	Process string `json:"process"`
	Op      string `json:"op"`
	Job     string `json:"job"`
	Token   string `json:"token"` // token/attempt
	Outcome string `json:"outcome"`
}

// Rows is the witness of v as a table.
func Rows(v Violation) []Row {
	rows := make([]Row, len(v.Witness))
	for i, o := range v.Witness {
		r := Row{At: Since(o.T, v.T0), Process: o.Process, Op: Operation(o), Job: o.Job, Outcome: Outcome(o, v.T0)}
		if o.Token > 0 || o.Attempt > 0 {
			r.Token = fmt.Sprintf("%d/%d", o.Token, o.Attempt)
		}
		rows[i] = r
	}
	return rows
}

// WriteText writes v as text: the headline, the witness table, the facts and
// the because lines, each line prefixed with indent.
func WriteText(w io.Writer, v Violation, indent string) error {
	var b strings.Builder
	head := string(v.Property)
	if v.Job != "" {
		head += " (job " + v.Job + ")"
	}
	fmt.Fprintf(&b, "%s%s: %s\n", indent, head, v.Message)
	if len(v.Witness) > 0 {
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "%s  TIME\tPROCESS\tOPERATION\tJOB\tTOKEN/ATTEMPT\tOUTCOME\n", indent)
		for _, r := range Rows(v) {
			fmt.Fprintf(tw, "%s  %s\t%s\t%s\t%s\t%s\t%s\n", indent, r.At, r.Process, r.Op, r.Job, dash(r.Token), r.Outcome)
		}
		tw.Flush()
	}
	// tabwriter pads a column followed by an empty last one: trim it.
	text := b.String()
	b.Reset()
	for _, line := range strings.SplitAfter(text, "\n") {
		if strings.HasSuffix(line, "\n") {
			line = strings.TrimRight(line[:len(line)-1], " ") + "\n"
		}
		b.WriteString(line)
	}
	for _, f := range v.Facts {
		fmt.Fprintf(&b, "%s  fact: %s\n", indent, f)
	}
	for _, l := range v.Because {
		fmt.Fprintf(&b, "%s  because %s\n", indent, l)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ReplayWitness re-checks a violation's witness alone: its operations, and its
// facts turned back into a final state, with the same options. A witness
// proves itself when that raises the same property; ReplayWitness returns an
// error naming what it raised instead.
func ReplayWitness(v Violation, opts Options) error {
	r := Check(v.Witness, FinalFromFacts(v.Facts), opts)
	var got []string
	for _, w := range r.Violations {
		if w.Property == v.Property {
			return nil
		}
		got = append(got, string(w.Property))
	}
	return fmt.Errorf("the witness of %s (job %s: %s) alone raises %v, not %s", v.Property, v.Job, v.Message, got, v.Property)
}
