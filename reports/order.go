package reports

import (
	"slices"

	"github.com/durachk/durachk/contracts"
)

// Rank orders verdicts for a reader: violations first, then unknowns, then
// passes, then skips; anything else (a verdict this version does not know)
// with the unknowns, and no verdict (not run) last.
func Rank(v contracts.Verdict) int {
	switch v {
	case contracts.Violated:
		return 0
	case contracts.Pass:
		return 2
	case contracts.Skipped:
		return 3
	case "":
		return 4
	}
	return 1
}

// ReadingOrder is the order a person reads a document's results in: the
// indices of d.Results, violations first, then unknowns, passes and skips,
// each group in run order.
func (d *Document) ReadingOrder() []int {
	idx := make([]int, len(d.Results))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return Rank(d.Results[a].Verdict) - Rank(d.Results[b].Verdict) })
	return idx
}

// WorstFirst orders the matrix's rows by the worst verdict in each
// (violation, unknown, pass, skipped, not run), keeping the order of rows
// whose worst verdicts agree.
func (m *Matrix) WorstFirst() {
	worst := make([]int, len(m.Contracts))
	for r := range m.Contracts {
		worst[r] = Rank("")
		for _, c := range m.Cells[r] {
			worst[r] = min(worst[r], Rank(c.Verdict))
		}
	}
	idx := make([]int, len(m.Contracts))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return worst[a] - worst[b] })
	ids, cells := make([]string, len(idx)), make([][]Cell, len(idx))
	for i, r := range idx {
		ids[i], cells[i] = m.Contracts[r], m.Cells[r]
	}
	m.Contracts, m.Cells = ids, cells
}
