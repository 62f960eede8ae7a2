package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTable(t *testing.T) {
	dir := t.TempDir()
	hist := strings.Join([]string{
		`{"type":"invoke","f":"enqueue","job":"poison","value":"{\"max\":3,\"poison\":true}"}`,
		`{"type":"invoke","f":"enqueue","job":"healthy","value":"{\"max\":3}"}`,
		`{"type":"invoke","f":"enqueue","job":"fails-twice","value":"{\"max\":3,\"fail_transient\":2}"}`,
		`{"type":"ok","f":"dead_letter","job":"poison","value":"max_attempts_exceeded"}`,
		`{"type":"info","f":"dead_letter","job":"healthy","value":"age_budget_exceeded"}`,
	}, "\n") + "\n"
	if err := os.MkdirAll(filepath.Join(dir, "histories"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "histories", "s.jsonl"), []byte(hist), 0o644); err != nil {
		t.Fatal(err)
	}
	result := `{"seed":4,"results":[
		{"contract":"scenario/x","target":"mem","verdict":"pass","seed":4,"stats":{"accepted":3,"dead_lettered":3,"duplicates_dropped":7,"violations":{"lost":1,"duplicate_apply":1,"duplicate_effect":1}}},
		{"contract":"lease.redelivery","target":"mem","verdict":"pass","seed":4,"stats":{}}],
		"evidence":{"mem/scenario/x":{"history":"histories/s.jsonl"}}}`
	path := filepath.Join(dir, "result.json")
	if err := os.WriteFile(path, []byte(result), 0o644); err != nil {
		t.Fatal(err)
	}
	rows, err := rowsOf(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("%d rows, want the one scenario", len(rows))
	}
	r := rows[0]
	if r.Accepted != 3 || r.Lost != 1 || r.Twice != 2 || r.Dropped != 7 || r.Design != 1 || r.Other != 2 {
		t.Errorf("row %+v", r)
	}
	if r.OtherReasons["age_budget_exceeded"] != 1 || r.OtherReasons["moved by the broker"] != 1 {
		t.Errorf("otherwise reasons %v", r.OtherReasons)
	}
	var out bytes.Buffer
	if err := run([]string{path}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "all (1 runs)") {
		t.Errorf("no totals line:\n%s", out.String())
	}
}
