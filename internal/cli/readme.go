package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/durachk/durachk/contracts"
)

// README markers around the generated results table.
const (
	ReadmeBegin = "<!-- results:begin -->"
	ReadmeEnd   = "<!-- results:end -->"
)

// ReadmeResults is the README's results section: the whole catalogue on the
// embedded target with seed 1, as the code produces it today.
func ReadmeResults(ctx context.Context) (string, error) {
	rs, _ := contracts.Exercise(ctx, contracts.MemTarget{}, contracts.Options{Seed: 1})
	if len(rs) == 0 {
		return "", fmt.Errorf("the embedded target returned no results")
	}
	var b strings.Builder
	b.WriteString(ReadmeBegin + "\n")
	b.WriteString("Generated from `durachk run --seed 1` on the embedded target (`go test ./internal/cli -run TestReadmeResults -update` regenerates it).\n\n")
	b.WriteString("| contract | verdict | jobs | executions | duplicates explained / unexplained | faults applied |\n|---|---|---|---|---|---|\n")
	counts := map[contracts.Verdict]int{}
	for _, r := range rs {
		counts[r.Verdict]++
		fmt.Fprintf(&b, "| `%s` | %s | %d | %d | %d / %d | %d |\n", r.Contract, r.Verdict, r.Stats.Accepted, r.Stats.Executions,
			r.Stats.Explained, r.Stats.Unexplained, faultCount(r.Stats.Faults))
	}
	fmt.Fprintf(&b, "\n%d pass, %d violation, %d unknown, %d skipped.\n", counts[contracts.Pass], counts[contracts.Violated], counts[contracts.Unknown], counts[contracts.Skipped])
	b.WriteString(ReadmeEnd)
	return b.String(), nil
}

// ReplaceReadmeResults puts section between the markers of readme, or, if the
// README has none yet, appends it under "## Results on the embedded target".
func ReplaceReadmeResults(readme, section string) string {
	i := strings.Index(readme, ReadmeBegin)
	j := strings.Index(readme, ReadmeEnd)
	if i < 0 || j < i {
		return strings.TrimRight(readme, "\n") + "\n\n## Results on the embedded target\n\n" + section + "\n"
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
