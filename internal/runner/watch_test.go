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
	watch := newHistoryTail()
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
		watch.read([]string{path, filepath.Join(dir, "missing.jsonl")})
		if _, got := watch.over(); got != tt.want {
			t.Fatalf("%s: over = %v, want %v", tt.name, got, tt.want)
		}
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}

func TestHistoryTailFencesAndFaults(t *testing.T) {
	dir := t.TempDir()
	zombie, other := filepath.Join(dir, "w1.jsonl"), filepath.Join(dir, "w2.jsonl")
	wz, _ := history.Create(zombie)
	wo, _ := history.Create(other)
	defer wz.Close()
	defer wo.Close()
	wz.Record(history.Op{Process: "w1", Type: history.OK, F: history.Fence, Job: "j", Token: 1})
	wz.Record(history.Op{Process: "w1", Type: history.Info, F: history.Fault, Job: "j", Value: "pause"})
	tail := newHistoryTail()
	tail.read([]string{zombie, other})
	if got := tail.lastFault["w1"]; got != "j" {
		t.Fatalf("last fault of w1: %q, want j", got)
	}
	if tail.fencedByOther("j", "w1") {
		t.Fatal("the zombie's own fence counted as another holder's")
	}
	wo.Record(history.Op{Process: "w2", Type: history.OK, F: history.Fence, Job: "j", Token: 2})
	tail.read([]string{zombie, other})
	if !tail.fencedByOther("j", "w1") {
		t.Fatal("w2's fence of j not seen")
	}
}
