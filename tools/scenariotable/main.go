// Command scenariotable prints the seed design's results table for the seed
// scenarios in one or more result.json files: accepted, lost, applied twice,
// repeats dropped, dead-lettered by design (poison, stubborn, permanent, or
// failing more often than its budget allows) and dead-lettered otherwise, with
// the reasons of the latter.
//
//	go run ./tools/scenariotable out-1/result.json out-2/result.json ...
//
// The counts come from each result's stats and violations; who was dead-lettered
// and why comes from the history beside result.json (the enqueue records carry
// each job's design, the dead-letter records their reason). A job the broker
// moved on its own has no dead-letter record: it counts as "otherwise".
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/pipeline"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "scenariotable:", err)
		os.Exit(1)
	}
}

type document struct {
	Seed     uint64   `json:"seed"`
	Results  []result `json:"results"`
	Evidence map[string]struct {
		History string `json:"history"`
	} `json:"evidence"`
}

type result struct {
	Contract string `json:"contract"`
	Target   string `json:"target"`
	Verdict  string `json:"verdict"`
	Seed     uint64 `json:"seed"`
	Stats    struct {
		Accepted     int            `json:"accepted"`
		DeadLettered int            `json:"dead_lettered"`
		Dropped      int            `json:"duplicates_dropped"`
		Violations   map[string]int `json:"violations"`
	} `json:"stats"`
}

// Row is one scenario run.
type Row struct {
	Seed                                          uint64
	Target, Scenario, Verdict                     string
	Accepted, Lost, Twice, Dropped, Design, Other int
	OtherReasons                                  map[string]int
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
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc document
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var rows []Row
	for _, r := range doc.Results {
		if !strings.HasPrefix(r.Contract, "scenario/") {
			continue
		}
		v := r.Stats.Violations
		row := Row{Seed: r.Seed, Target: r.Target, Scenario: strings.TrimPrefix(r.Contract, "scenario/"), Verdict: r.Verdict,
			Accepted: r.Stats.Accepted, Lost: v["lost"], Twice: v["duplicate_apply"] + v["duplicate_effect"],
			Dropped: r.Stats.Dropped, OtherReasons: map[string]int{}}
		ev, ok := doc.Evidence[r.Target+"/"+r.Contract]
		if !ok || ev.History == "" {
			return nil, fmt.Errorf("%s: no history for %s on %s", path, r.Contract, r.Target)
		}
		dead, err := deadLetters(filepath.Join(filepath.Dir(path), ev.History))
		if err != nil {
			return nil, err
		}
		for _, d := range dead {
			if d.design {
				row.Design++
			} else {
				row.OtherReasons[d.reason]++
			}
		}
		// Jobs the broker moved on its own are dead in the final state without a
		// pipeline record.
		row.Other = r.Stats.DeadLettered - row.Design
		if n := row.Other - sum(row.OtherReasons); n > 0 {
			row.OtherReasons["moved by the broker"] += n
		}
		rows = append(rows, row)
	}
	return rows, nil
}

type dead struct {
	design bool
	reason string
}

// deadLetters reads a history and returns, per job the pipeline dead-lettered,
// whether its design called for it and the reason recorded.
func deadLetters(path string) (map[string]dead, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	metas := map[string]pipeline.JobMeta{}
	out := map[string]dead{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var op history.Op
		if json.Unmarshal(sc.Bytes(), &op) != nil || op.Job == "" {
			continue
		}
		switch {
		case op.F == history.Enqueue && op.Type == history.Invoke:
			if _, seen := metas[op.Job]; !seen {
				var m pipeline.JobMeta
				_ = json.Unmarshal([]byte(op.Value), &m)
				metas[op.Job] = m
			}
		case op.F == history.DeadLetter && (op.Type == history.OK || op.Type == history.Info):
			// info: the record may have been written and its reply lost; the final
			// state decides, and its count is the result's stats.
			if _, seen := out[op.Job]; !seen {
				out[op.Job] = dead{design: byDesign(metas[op.Job]), reason: op.Value}
			}
		}
	}
	return out, sc.Err()
}

// byDesign: the job was written to end in the dead-letter queue.
func byDesign(m pipeline.JobMeta) bool {
	return m.Poison || m.Stubborn || m.Permanent || (m.MaxAttempts > 0 && m.FailTransient >= m.MaxAttempts)
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func print(out io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEED\tTARGET\tSCENARIO\tVERDICT\tACCEPTED\tLOST\tAPPLIED TWICE\tREPEATS DROPPED\tDLQ BY DESIGN\tDLQ OTHERWISE\tOTHERWISE WHY")
	var tot Row
	tot.OtherReasons = map[string]int{}
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", r.Seed, r.Target, r.Scenario, r.Verdict,
			r.Accepted, r.Lost, r.Twice, r.Dropped, r.Design, r.Other, reasons(r.OtherReasons))
		tot.Accepted += r.Accepted
		tot.Lost += r.Lost
		tot.Twice += r.Twice
		tot.Dropped += r.Dropped
		tot.Design += r.Design
		tot.Other += r.Other
		for k, v := range r.OtherReasons {
			tot.OtherReasons[k] += v
		}
	}
	fmt.Fprintf(tw, "\t\tall (%d runs)\t\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", len(rows), tot.Accepted, tot.Lost, tot.Twice, tot.Dropped,
		tot.Design, tot.Other, reasons(tot.OtherReasons))
	tw.Flush()
}

func reasons(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if v > 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s ×%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
