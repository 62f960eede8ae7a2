package reports

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/contracts"
)

// oneViolationAmong19 is a run of the catalogue on one target where the
// 15th contract (durability.power-loss) is the only violation, the 17th an
// unknown and the last four skipped: the page the issue measured.
func oneViolationAmong19() *Document {
	d := NewDocument(1, "durachk run", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	d.AddTargetInfo(DescribeTarget(fakeTarget{name: "mem", on: "mem", caps: adapters.Capabilities{Broker: "mem"}}, "mem", ""))
	ops := synthHistory(4)
	for i, c := range contracts.Catalogue {
		r := contracts.Result{Target: "mem", Contract: c.ID, Claim: c.Claim, Verdict: contracts.Pass, Broker: "mem", HistoryLen: len(ops)}
		switch {
		case c.ID == "durability.power-loss":
			r.Verdict, r.Reason = contracts.Violated, "lost ×1: accepted by the broker, never finished, and no longer in the broker"
			r.Violations = []contracts.Violation{{Property: "lost", Job: "job-001", Message: "accepted by the broker, never finished, and no longer in the broker", Witness: ops[5:7], T0: ops[0].T}}
		case i == 16:
			r.Verdict, r.Reason = contracts.Unknown, "the run hit its time limit before it drained"
		case i >= len(contracts.Catalogue)-4:
			r.Verdict, r.Reason = contracts.Skipped, "the target is not a replicated topology"
		}
		d.Add(r)
		if r.Verdict == contracts.Skipped {
			d.AddEvidence(r, nil, Evidence{})
		} else {
			d.AddEvidence(r, ops, Evidence{})
		}
	}
	d.Complete = true
	return d
}

// Every rendering puts the violation first, then the unknown, and the
// passes before the skips.
func TestViolationsAndUnknownsFirst(t *testing.T) {
	d := oneViolationAmong19()
	if len(d.Results) != 19 || d.Results[14].Contract != "durability.power-loss" {
		t.Fatalf("the document has %d results, the 15th %s: want the catalogue of 19 with durability.power-loss 15th", len(d.Results), d.Results[14].Contract)
	}
	viol, unk := "durability.power-loss", d.Results[16].Contract
	first, last := d.Results[0].Contract, d.Results[18].Contract
	order := func(name, out string, ids ...string) {
		t.Helper()
		at := -1
		for _, id := range ids {
			i := strings.Index(out, id)
			if i < 0 {
				t.Errorf("%s: %s is missing", name, id)
				return
			}
			if i < at {
				t.Errorf("%s: %s comes before the results it should follow (%v)", name, id, ids)
			}
			at = i
		}
	}
	got := d.ReadingOrder()
	if got[0] != 14 || got[1] != 16 || got[len(got)-1] != 18 {
		t.Errorf("ReadingOrder = %v, want 14, 16, the passes, the skips", got)
	}
	m := NewMatrix([]*Document{d}, nil)
	m.WorstFirst()
	if m.Contracts[0] != viol || m.Contracts[1] != unk || m.Contracts[2] != first || m.Contracts[18] != last {
		t.Errorf("matrix rows %v: want %s, %s, then the rest in run order", m.Contracts, viol, unk)
	}

	html := string(render(t, d, "html"))
	matrix, evidence, _ := strings.Cut(html, "<h2>Targets</h2>")
	rows := regexp.MustCompile(`<tr><td><code>([^<]+)</code></td><td class="(v-[a-z]+)"`).FindAllStringSubmatch(matrix, -1)
	if len(rows) != 19 || rows[0][1] != viol || rows[0][2] != "v-violation" || rows[1][1] != unk {
		t.Errorf("html verdict table rows %v: want %s first", rows, viol)
	}
	secs := regexp.MustCompile(`<div class="result" id="([^"]+)"`).FindAllStringSubmatch(evidence, -1)
	if len(secs) != 19 || secs[0][1] != Anchor("mem", viol) || secs[1][1] != Anchor("mem", unk) {
		t.Errorf("html evidence sections %v: want %s first, then %s", secs, Anchor("mem", viol), Anchor("mem", unk))
	}
	md := string(render(t, d, "md"))
	table, details, _ := strings.Cut(md, "### Details")
	order("md table", table, "`"+viol+"`", "`"+unk+"`", "`"+first+"`", "`"+last+"`")
	order("md details", details, "<b>"+viol+"</b>", "<b>"+unk+"</b>", "<b>"+last+"</b>")
	junit := string(render(t, d, "junit"))
	order("junit", junit, fmt.Sprintf(`name="%s"`, viol), fmt.Sprintf(`name="%s"`, unk), fmt.Sprintf(`name="%s"`, first), fmt.Sprintf(`name="%s"`, last))
	if !slices.Contains(m.Contracts, "lease.redelivery") {
		t.Error("the matrix lost a row")
	}
}
