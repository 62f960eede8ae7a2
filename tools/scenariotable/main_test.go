package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/reports"
)

// The table shows the checker's own counts, here of a seed scenario run on
// the embedded target.
func TestTable(t *testing.T) {
	c, err := contracts.LookupScenario("poison-job")
	if err != nil {
		t.Fatal(err)
	}
	doc := reports.NewDocument(1, "durachk run --scenario poison-job", time.Now())
	r, err := contracts.Evaluate(context.Background(), contracts.MemTarget{}, c, contracts.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	doc.AddTarget(contracts.MemTarget{})
	doc.Add(r)
	path := filepath.Join(t.TempDir(), "result.json")
	if err := doc.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	rows, err := rowsOf(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("%d rows, want the one scenario", len(rows))
	}
	got, st := rows[0], r.Stats
	if got.Accepted != st.Accepted || got.Lost != st.Lost || got.Design != st.DeadLetteredByDesign || got.Other != st.DeadLetteredOtherwise ||
		got.Dropped != st.RepeatsDropped || got.Scenario != "poison-job" || got.Verdict != "pass" {
		t.Errorf("row %+v, stats %+v", got, st)
	}
	if got.Design != 2 {
		t.Errorf("poison-job dead-letters its 2 poison jobs by design, the row says %d", got.Design)
	}
	var out bytes.Buffer
	if err := run([]string{path}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "all (1 runs)") || !strings.Contains(out.String(), "poison-job") {
		t.Errorf("no row or totals line:\n%s", out.String())
	}
}
