package reports

import (
	"fmt"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/history"
)

// A report shows times on two clocks, and labels each: the fault plan in
// scenario time (offsets from the scenario's start, as the plan gives them),
// and the witness, the fault windows and the timeline in the history's time
// since the run's first recorded operation (the wall clock on a real target,
// the virtual clock on the embedded one). On a busy machine a real target
// runs the scenario stretched (Evidence.Scale): its offsets come that many
// times later in wall time.

// WitnessTimeNote says what the TIME column of a witness holds.
const WitnessTimeNote = "TIME counts from the run's first recorded operation, " +
	"on the wall clock of a real target or the virtual clock of the embedded one"

// PlannedLabel names the clock of a result's faults planned.
func PlannedLabel(ev Evidence) string {
	l := "scenario time: offsets from the scenario's start"
	if ev.Scale > 1.001 {
		l += fmt.Sprintf("; this machine was busy, so they ran %.1f× later in wall time", ev.Scale)
	}
	return l
}

// WindowsLabel names the clock of a result's fault windows.
const WindowsLabel = "time since the run's first recorded operation, as the witness's TIME"

// WindowTexts are the fault windows of a result as a report lists them, each
// with its start and end since the history's first operation (t0; 0: unknown,
// durations only).
func WindowTexts(ws []FaultWindow, t0 int64) []string {
	var out []string
	for _, w := range ws {
		what := w.Kind
		if w.Target != "" {
			what += " " + w.Target
		}
		if w.Planned {
			what += " (planned)"
		}
		if t0 != 0 {
			out = append(out, fmt.Sprintf("%s from +%s to +%s (%s)", what, fmtDur(w.From-t0), fmtDur(w.To-t0), fmtDur(w.To-w.From)))
		} else {
			out = append(out, fmt.Sprintf("%s for %s", what, fmtDur(w.To-w.From)))
		}
	}
	return out
}

// historyStart is the time of a result's first recorded operation, which
// the witness's times count from: its violations' T0, else the first of the
// history sample (0 when neither is there).
func historyStart(r contracts.Result, ops []history.Op) int64 {
	for _, v := range r.Violations {
		if v.T0 != 0 {
			return v.T0
		}
	}
	var t0 int64
	for i, op := range ops {
		if i == 0 || op.T < t0 {
			t0 = op.T
		}
	}
	return t0
}
