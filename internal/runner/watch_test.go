package runner

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/durachk/durachk/history"
)

func TestBudgetWatchStopsACrashLoop(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w1.jsonl")
	w, err := history.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Record(history.Op{Type: history.Invoke, F: history.Enqueue, Job: "j", Value: `{"tenant":"acme","doc":"d","v":1,"max":3,"hash":"h"}`})
	watch := newBudgetWatch()
	tests := []struct {
		name       string
		executions int
		want       bool
	}{
		{"within budget", 3, false},
		{"one over: a crash after the last attempt may explain it", 1, false},
		{"two over: a loop", 1, true},
	}
	for _, tt := range tests {
		for range tt.executions {
			w.Record(history.Op{Type: history.Invoke, F: history.Extract, Job: "j"})
		}
		if _, got := watch.over([]string{path, filepath.Join(dir, "missing.jsonl")}); got != tt.want {
			t.Fatalf("%s: over = %v, want %v", tt.name, got, tt.want)
		}
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}
