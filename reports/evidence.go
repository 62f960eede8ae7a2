package reports

import (
	"sort"
	"time"

	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/history"
)

// SampleHistory bounds a history to at most max operations, keeping its shape:
// every operation that names no job (faults, relay, ...) up to half the budget,
// then whole jobs in the order they first appear, so that each job kept has
// its whole story. The order of the kept operations is the history's.
func SampleHistory(ops []history.Op, max int) []history.Op {
	if len(ops) <= max || max <= 0 {
		return ops
	}
	perJob := map[string]int{}
	var order []string
	free := 0
	for _, op := range ops {
		if op.Job == "" {
			free++
			continue
		}
		if perJob[op.Job] == 0 {
			order = append(order, op.Job)
		}
		perJob[op.Job]++
	}
	budget := max
	freeKeep := min(free, max/2)
	budget -= freeKeep
	keep := map[string]bool{}
	for _, j := range order {
		if perJob[j] > budget {
			break
		}
		keep[j] = true
		budget -= perJob[j]
	}
	out := make([]history.Op, 0, max)
	for _, op := range ops {
		if op.Job == "" {
			if freeKeep > 0 || op.F == history.Fault {
				// fault records are kept while the budget lasts
				if freeKeep > 0 {
					freeKeep--
					out = append(out, op)
				}
			}
			continue
		}
		if keep[op.Job] {
			out = append(out, op)
		}
	}
	return out
}

// ObservedWindows reads the fault windows a history shows: a paused or
// stopped process until it resumed, a broker from its kill to its restart, a
// broker that stopped answering until it answered again.
// A window still open at the end of the history closes at its last op.
func ObservedWindows(ops []history.Op) []FaultWindow {
	if len(ops) == 0 {
		return nil
	}
	end := ops[0].T
	for _, op := range ops {
		end = max(end, op.T)
	}
	open := map[string]FaultWindow{}
	var out []FaultWindow
	for _, op := range ops {
		if op.F != history.Fault {
			continue
		}
		switch op.Value {
		case "pause", "stopped":
			k := "pause:" + op.Target
			if _, ok := open[k]; !ok {
				open[k] = FaultWindow{Kind: "pause", Target: op.Target, From: op.T}
			}
		case "resume", "continued":
			k := "pause:" + op.Target
			if w, ok := open[k]; ok {
				w.To = op.T
				out = append(out, w)
				delete(open, k)
			}
		case "broker_crash", "power_loss":
			if _, ok := open["broker"]; !ok {
				open["broker"] = FaultWindow{Kind: brokerDownKind(op.Value), Target: "broker", From: op.T}
			}
		case "broker_restart":
			if w, ok := open["broker"]; ok {
				w.To = op.T
				out = append(out, w)
				delete(open, "broker")
			}
		case "broker_unavailable": // an outage nobody planned (internal/runner)
			if _, ok := open["outage"]; !ok {
				open["outage"] = FaultWindow{Kind: "broker_unavailable", Target: "broker", From: op.T}
			}
		case "broker_available":
			if w, ok := open["outage"]; ok {
				w.To = op.T
				out = append(out, w)
				delete(open, "outage")
			}
		}
	}
	keys := make([]string, 0, len(open))
	for k := range open {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		w := open[k]
		w.To = end
		out = append(out, w)
	}
	sortWindows(out)
	return out
}

// brokerDownKind names the window of a broker fault: broker_down for a kill,
// power_loss for a power cut (the broker is down and lost what it never synced).
func brokerDownKind(fault string) string {
	if fault == string(faults.PowerLoss) {
		return "power_loss"
	}
	return "broker_down"
}

// PlanWindows turns the time-triggered faults of a plan into windows, anchored
// at start (nanoseconds, the history's clock) with every offset multiplied by
// scale (real targets run scenarios scaled, see internal/runner).
func PlanWindows(p faults.Plan, start int64, scale float64) []FaultWindow {
	if scale <= 0 {
		scale = 1
	}
	d := func(x time.Duration) int64 { return int64(float64(x) * scale) }
	var out []FaultWindow
	for _, f := range p.Faults {
		w := FaultWindow{Kind: string(f.Kind), Target: f.Link, From: start + d(f.At), To: start + d(f.At+f.For), Planned: true}
		switch f.Kind {
		case faults.LinkDown, faults.ReplyLoss, faults.Flap:
		case faults.BrokerCrash, faults.PowerLoss:
			w.Kind, w.Target = brokerDownKind(string(f.Kind)), "broker"
		default:
			continue
		}
		if f.For <= 0 {
			continue
		}
		out = append(out, w)
	}
	sortWindows(out)
	return out
}

// MergeWindows joins planned and observed windows: an observed broker-down
// window replaces the planned one.
func MergeWindows(planned, observed []FaultWindow) []FaultWindow {
	hasObserved := map[string]bool{}
	for _, w := range observed {
		hasObserved[w.Kind] = true
	}
	out := append([]FaultWindow(nil), observed...)
	for _, w := range planned {
		if (w.Kind == "broker_down" || w.Kind == "power_loss") && hasObserved[w.Kind] {
			continue
		}
		out = append(out, w)
	}
	sortWindows(out)
	return out
}

func sortWindows(ws []FaultWindow) {
	sort.SliceStable(ws, func(i, j int) bool {
		if ws[i].From != ws[j].From {
			return ws[i].From < ws[j].From
		}
		return ws[i].Kind < ws[j].Kind
	})
}

// jobTimes are one job's times in a history, for distributions.
type jobTimes struct {
	id                   string
	enq, lease, end      int64
	first, last          int64
	terminal             string
	leases, acks, commit int
}

// perJob reads every job's first enqueue, first lease and first terminal op
// (ack, dead-letter or cancel), in the order jobs first appear.
func perJob(ops []history.Op) []*jobTimes {
	by := map[string]*jobTimes{}
	var order []*jobTimes
	for _, op := range ops {
		if op.Job == "" {
			continue
		}
		j := by[op.Job]
		if j == nil {
			j = &jobTimes{id: op.Job, first: op.T}
			by[op.Job] = j
			order = append(order, j)
		}
		j.last = max(j.last, op.T)
		if op.Type != history.OK {
			continue
		}
		switch op.F {
		case history.Enqueue:
			if j.enq == 0 {
				j.enq = op.T
			}
		case history.Lease:
			if j.lease == 0 {
				j.lease = op.T
			}
			j.leases++
		case history.Commit:
			j.commit++
		case history.Ack, history.DeadLetter, history.Cancel:
			if j.end == 0 {
				j.end, j.terminal = op.T, string(op.F)
			}
			if op.F == history.Ack {
				j.acks++
			}
		}
	}
	return order
}

// Distributions are the per-job samples behind the metrics, in milliseconds.
type Distributions struct {
	QueueWait, Processing, ToTerminal []float64
}

// Distribute computes per-job queue wait (enqueue → first lease), processing
// time (first lease → terminal) and time to terminal (enqueue → terminal).
func Distribute(ops []history.Op) Distributions {
	var d Distributions
	ms := func(x int64) float64 { return float64(x) / 1e6 }
	for _, j := range perJob(ops) {
		if j.enq == 0 {
			continue
		}
		if j.lease > 0 {
			d.QueueWait = append(d.QueueWait, ms(j.lease-j.enq))
		}
		if j.end > 0 && j.lease > 0 {
			d.Processing = append(d.Processing, ms(j.end-j.lease))
		}
		if j.end > 0 {
			d.ToTerminal = append(d.ToTerminal, ms(j.end-j.enq))
		}
	}
	return d
}

// DepthPoint is the queue depth after an event: jobs accepted and not yet
// leased (Queued), and accepted and not yet terminal (Open).
type DepthPoint struct {
	T            int64
	Queued, Open int
}

// QueueDepth computes the queue depth over time from a history.
func QueueDepth(ops []history.Op) []DepthPoint {
	type st struct{ enq, leased, done bool }
	by := map[string]*st{}
	var out []DepthPoint
	q, o := 0, 0
	idx := make([]int, len(ops))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return ops[idx[a]].T < ops[idx[b]].T })
	for _, i := range idx {
		op := ops[i]
		if op.Job == "" || op.Type != history.OK {
			continue
		}
		s := by[op.Job]
		if s == nil {
			s = &st{}
			by[op.Job] = s
		}
		changed := false
		switch op.F {
		case history.Enqueue:
			if !s.enq {
				s.enq, changed = true, true
				q++
				o++
			}
		case history.Lease:
			if s.enq && !s.leased && !s.done {
				s.leased, changed = true, true
				q--
			}
		case history.Ack, history.DeadLetter, history.Cancel:
			if s.enq && !s.done {
				s.done, changed = true, true
				if !s.leased {
					q--
				}
				o--
			}
		}
		if changed {
			out = append(out, DepthPoint{T: op.T, Queued: q, Open: o})
		}
	}
	return out
}

func sortStrings(s []string) { sort.Strings(s) }
