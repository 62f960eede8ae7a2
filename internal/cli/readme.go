package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/durachk/durachk/contracts"
)

// Markers around the generated results table of docs/results.md.
const (
	ReadmeBegin = "<!-- results:begin -->"
	ReadmeEnd   = "<!-- results:end -->"
)

// ReadmeResults is docs/results.md's table: the whole catalogue and the
// seed scenarios on the embedded target with seed 1, as the code produces it
// today, with the seed design's columns.
func ReadmeResults(ctx context.Context) (string, error) {
	rs, _ := contracts.Exercise(ctx, contracts.MemTarget{}, contracts.Options{Seed: 1})
	if len(rs) == 0 {
		return "", fmt.Errorf("the embedded target returned no results")
	}
	for _, c := range contracts.SeedScenarios {
		r, err := contracts.Evaluate(ctx, contracts.MemTarget{}, c, contracts.Options{Seed: 1})
		if err != nil {
			return "", err
		}
		rs = append(rs, r)
	}
	var b strings.Builder
	b.WriteString(ReadmeBegin + "\n")
	b.WriteString("Generated from `durachk run --seed 1 --scenario all` and `durachk run --seed 1` on the embedded target (`go test ./internal/cli -run TestReadmeResults -update` regenerates it).\n\n")
	b.WriteString("| contract | verdict | accepted | lost | applied twice | repeats dropped | dead-lettered by design | dead-lettered otherwise | executions | faults applied |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	counts := map[contracts.Verdict]int{}
	for _, r := range rs {
		counts[r.Verdict]++
		st := r.Stats
		fmt.Fprintf(&b, "| `%s` | %s | %d | %d | %d | %d | %d | %d | %d | %d |\n", r.Contract, r.Verdict, st.Accepted, st.Lost, st.AppliedTwice,
			st.RepeatsDropped, st.DeadLetteredByDesign, st.DeadLetteredOtherwise, st.Executions, faultCount(st.Faults))
	}
	fmt.Fprintf(&b, "\n%d pass, %d violation, %d unknown, %d skipped.\n", counts[contracts.Pass], counts[contracts.Violated], counts[contracts.Unknown], counts[contracts.Skipped])
	b.WriteString(ReadmeEnd)
	return b.String(), nil
}

// ReplaceReadmeResults puts section between the markers of readme, or, if the
// page has none yet, appends it.
func ReplaceReadmeResults(readme, section string) string {
	i := strings.Index(readme, ReadmeBegin)
	j := strings.Index(readme, ReadmeEnd)
	if i < 0 || j < i {
		return strings.TrimRight(readme, "\n") + "\n\n" + section + "\n"
	}
	return readme[:i] + section + readme[j+len(ReadmeEnd):]
}

// ReadmeSection returns the part of readme between the markers, markers included.
func ReadmeSection(readme string) string {
	i := strings.Index(readme, ReadmeBegin)
	j := strings.Index(readme, ReadmeEnd)
	if i < 0 || j < i {
		return ""
	}
	return readme[i : j+len(ReadmeEnd)]
}
