// Command scenariotable prints the seed design's results table for the seed
// scenarios in one or more result.json files, one row per run and a total:
// accepted, lost, applied twice, repeats dropped, dead-lettered by design
// (poison, stubborn, permanent, or failing more often than its budget allows)
// and dead-lettered otherwise, with the properties that explain the latter.
// Every number is the checker's (the result's stats), so the table and the
// verdicts cannot disagree.
//
//	go run ./tools/scenariotable out-1/result.json out-2/result.json ...
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/durachk/durachk/checker"
	"github.com/durachk/durachk/reports"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "scenariotable:", err)
		os.Exit(1)
	}
}

// Row is one scenario run.
type Row struct {
	Seed                                          uint64
	Target, Scenario, Verdict                     string
	Accepted, Lost, Twice, Dropped, Design, Other int
	// Why counts the violations that say why jobs ended in a dead-letter
	// queue otherwise than by design.
	Why map[string]int
}

func run(args []string, out io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: scenariotable result.json ...")
	}
	var rows []Row
	for _, path := range args {
		rs, err := rowsOf(path)
		if err != nil {
			return err
		}
		rows = append(rows, rs...)
	}
	print(out, rows)
	return nil
}

func rowsOf(path string) ([]Row, error) {
	doc, err := reports.ReadJSON(path)
	if err != nil {
		return nil, err
	}
	var rows []Row
	for _, r := range doc.Results {
		name, ok := strings.CutPrefix(r.Contract, "scenario/")
		if !ok {
			continue
		}
		st := r.Stats
		row := Row{Seed: r.Seed, Target: r.Target, Scenario: name, Verdict: string(r.Verdict),
			Accepted: st.Accepted, Lost: st.Lost, Twice: st.AppliedTwice, Dropped: st.RepeatsDropped,
			Design: st.DeadLetteredByDesign, Other: st.DeadLetteredOtherwise, Why: map[string]int{}}
		for _, p := range []checker.Property{checker.HealthyDeadLettered, checker.MovedByBroker} {
			if n := st.Violations[string(p)]; n > 0 {
				row.Why[string(p)] = n
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func print(out io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEED\tTARGET\tSCENARIO\tVERDICT\tACCEPTED\tLOST\tAPPLIED TWICE\tREPEATS DROPPED\tDLQ BY DESIGN\tDLQ OTHERWISE\tOTHERWISE WHY")
	tot := Row{Why: map[string]int{}}
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", r.Seed, r.Target, r.Scenario, r.Verdict,
			r.Accepted, r.Lost, r.Twice, r.Dropped, r.Design, r.Other, reasons(r.Why))
		tot.Accepted += r.Accepted
		tot.Lost += r.Lost
		tot.Twice += r.Twice
		tot.Dropped += r.Dropped
		tot.Design += r.Design
		tot.Other += r.Other
		for k, v := range r.Why {
			tot.Why[k] += v
		}
	}
	fmt.Fprintf(tw, "\t\tall (%d runs)\t\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", len(rows), tot.Accepted, tot.Lost, tot.Twice, tot.Dropped,
		tot.Design, tot.Other, reasons(tot.Why))
	tw.Flush()
}

func reasons(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s ×%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
