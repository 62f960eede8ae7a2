package runner

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/pipeline"
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
	poison := history.Op{Type: history.Info, F: history.Fault, Job: "j", Value: "crash", Key: string(pipeline.Poison)}
	failed := history.Op{Type: history.Fail, F: history.Extract, Job: "j", Err: "transient"}
	tests := []struct {
		name string
		ops  []history.Op
		want bool
	}{
		{"within budget", []history.Op{poison, failed, poison}, false},
		{"one over: a crash after the last attempt may explain it", []history.Op{poison}, false},
		// Executions the infrastructure cut short, or that succeeded, spend nothing.
		{"not the job's", []history.Op{
			{Type: history.Invoke, F: history.Extract, Job: "j"},
			{Type: history.OK, F: history.Extract, Job: "j"},
			{Type: history.Info, F: history.Fault, Job: "j", Value: "crash", Key: string(pipeline.AfterLease)},
			{Type: history.Fail, F: history.Extract, Job: "j", Err: "closed"},
		}, false},
		{"two over: a loop", []history.Op{poison}, true},
	}
	for _, tt := range tests {
		for _, op := range tt.ops {
			w.Record(op)
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

// The tail holds each file open and reads only what it gained: a line
// written in two pieces counts once, whole; a file whose writer has exited
// is read to its end once more, then closed and read no more; a file not yet
// created is opened once it is.
func TestHistoryTailPiecesAndExit(t *testing.T) {
	dir := t.TempDir()
	path, late := filepath.Join(dir, "w1.jsonl"), filepath.Join(dir, "w2.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	enq := func(job string) string {
		return `{"process":"producer","type":"ok","f":"enqueue","job":"` + job + `"}` + "\n"
	}
	tail := newHistoryTail()
	defer tail.close()
	write := func(s string) {
		t.Helper()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name       string
		write      string
		exited     bool
		unfinished int
	}{
		{"a whole line", enq("a"), false, 1},
		{"half a line", enq("b")[:20], false, 1},
		{"its other half and a whole one", enq("b")[20:] + enq("c"), false, 3},
		{"nothing new", "", false, 3},
		{"written before the exit", enq("d"), true, 4},
		{"written after the exit (never: the file is closed)", enq("e"), false, 4},
	}
	for _, s := range steps {
		write(s.write)
		if s.exited {
			tail.exited(path)
		}
		tail.read([]string{path, late})
		if tail.unfinished != s.unfinished {
			t.Fatalf("%s: %d jobs acknowledged and unfinished, want %d", s.name, tail.unfinished, s.unfinished)
		}
	}
	if _, open := tail.files[path]; open || !tail.done[path] {
		t.Fatalf("%s still read after its writer exited and it was read to its end", path)
	}
	if err := os.WriteFile(late, []byte(enq("z")), 0o644); err != nil {
		t.Fatal(err)
	}
	tail.read([]string{path, late})
	if tail.unfinished != 5 {
		t.Fatalf("a file created after the first reads: %d unfinished, want 5", tail.unfinished)
	}
	tail.exited(filepath.Join(dir, "never.jsonl")) // died before it wrote
	if !tail.done[filepath.Join(dir, "never.jsonl")] {
		t.Fatal("a file never opened whose writer exited is not done")
	}
}
