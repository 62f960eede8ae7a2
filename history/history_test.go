package history

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

func sample() []Op {
	return []Op{
		{T: 1, Process: "producer", Seq: 1, Type: Invoke, F: Enqueue, Job: "job-1", Key: "acme:d:v1", Value: `{"tenant":"acme"}`},
		{T: 2, Process: "producer", Seq: 2, Type: OK, F: Enqueue, Job: "job-1", Key: "acme:d:v1"},
		{T: 3, Process: "w1", Seq: 1, Type: OK, F: Lease, Job: "job-1", Key: "acme:d:v1", Token: 1, Attempt: 1, Value: "10000"},
		{T: 4, Process: "w1", Seq: 2, Type: Info, F: Commit, Job: "job-1", Token: 1, Err: "ambiguous"},
		{T: 5, Process: "controller", Seq: 1, Type: Info, F: Fault, Value: "crash", Key: "mid_commit", Target: "w1"},
		{T: 6, Process: "w2", Seq: 1, Type: Fail, F: DeadLetter, Job: "job-\"quoted\"\n", Value: "ünïcode ✓"},
	}
}

func TestWriterReadRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, op := range sample() {
		w.Record(op)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "\n"); n != len(sample()) {
		t.Fatalf("%d lines for %d records", n, len(sample()))
	}
	got, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sample()) {
		t.Fatalf("round trip:\n got %v\nwant %v", got, sample())
	}
}

func TestCreateReadFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w1.jsonl")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range sample() {
		w.Record(op)
		// Each record is on disk before Record returns: a SIGKILL loses nothing.
		b, _ := os.ReadFile(path)
		if !strings.HasSuffix(string(b), op.String()+"\n") {
			t.Fatalf("record %v not on disk after Record", op)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sample()) {
		t.Fatalf("round trip through a file differs:\n got %v\nwant %v", got, sample())
	}
}

func TestWriteFileReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.jsonl")
	if err := WriteFile(path, sample()); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sample()) {
		t.Fatal("WriteFile/ReadFile round trip differs")
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing.jsonl")); err == nil {
		t.Fatal("ReadFile of a missing file succeeded")
	}
}

func TestRead(t *testing.T) {
	good := sample()[0].String() + "\n" + sample()[1].String() + "\n"
	tests := []struct {
		name    string
		input   string
		want    int    // records, when no error
		wantErr string // substring of the error
	}{
		{name: "empty", input: "", want: 0},
		{name: "two records", input: good, want: 2},
		{name: "no final newline", input: strings.TrimSuffix(good, "\n"), want: 2},
		{name: "blank lines skipped", input: "\n" + sample()[0].String() + "\n\n" + sample()[1].String() + "\n", want: 2},
		{name: "torn last line dropped", input: good + `{"t":7,"process":"w1","se`, want: 2},
		{name: "torn last line after one record", input: sample()[0].String() + "\n" + `{"t":`, want: 1},
		{name: "torn only line", input: `{"t":1,"pro`, want: 0},
		{name: "malformed middle line", input: sample()[0].String() + "\n{not json}\n" + sample()[1].String() + "\n", wantErr: "line 2"},
		{name: "malformed first line", input: "garbage\n" + good, wantErr: "line 1"},
		{name: "malformed line 4 of 5", input: good + sample()[2].String() + "\n[1,2]\n" + sample()[3].String() + "\n", wantErr: "line 4"},
		{name: "wrong field type", input: `{"t":"yesterday"}` + "\n" + good, wantErr: "line 1"},
		{name: "malformed last line with its newline", input: good + "garbage\n", wantErr: "line 3"},
		{name: "malformed only line with its newline", input: "garbage\n", wantErr: "line 1"},
		{name: "an object that is no record", input: good + "{}\n", wantErr: `line 3: type ""`},
		{name: "an unknown type", input: `{"t":1,"process":"w1","type":"maybe","f":"lease"}` + "\n", wantErr: `type "maybe"`},
		{name: "no f", input: `{"t":1,"process":"w1","type":"ok"}` + "\n", wantErr: "no f"},
		{name: "torn record that is no record", input: good + `{}`, want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ops, err := Read(strings.NewReader(tt.input))
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("Read = %d records, want an error naming %q", len(ops), tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %q does not name %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(ops) != tt.want {
				t.Fatalf("Read = %d records, want %d", len(ops), tt.want)
			}
			for i, op := range ops {
				if !reflect.DeepEqual(op, sample()[i]) {
					t.Fatalf("record %d = %v, want %v", i, op, sample()[i])
				}
			}
		})
	}
}

func TestReadLongLine(t *testing.T) {
	op := Op{T: 1, Process: "p", Type: OK, F: Extract, Value: strings.Repeat("x", 1<<20)}
	ops, err := Read(strings.NewReader(op.String() + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 1 || len(ops[0].Value) != 1<<20 {
		t.Fatal("a 1 MiB record did not survive")
	}
}

func TestTee(t *testing.T) {
	var a, b Log
	var buf bytes.Buffer
	w := NewWriter(&buf)
	tee := Tee{&a, &b, w}
	for _, op := range sample() {
		tee.Record(op)
	}
	if !reflect.DeepEqual(a.Ops(), sample()) || !reflect.DeepEqual(b.Ops(), sample()) {
		t.Fatal("Tee did not pass every record to every log")
	}
	got, err := Read(&buf)
	if err != nil || !reflect.DeepEqual(got, sample()) {
		t.Fatalf("Tee → Writer: %v, %v", got, err)
	}
	Tee{}.Record(sample()[0]) // an empty Tee is fine
}

func TestLogOpsIsACopy(t *testing.T) {
	var l Log
	l.Record(sample()[0])
	ops := l.Ops()
	ops[0].Job = "mutated"
	if l.Ops()[0].Job != "job-1" {
		t.Fatal("Ops shares memory with the log")
	}
}

func TestLogConcurrent(t *testing.T) {
	var l Log
	var buf bytes.Buffer
	w := NewWriter(&buf)
	rec := Tee{&l, w}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				rec.Record(Op{T: int64(i), Process: string(rune('a' + g)), Seq: int64(i), Type: OK, F: Ack})
			}
		})
	}
	wg.Wait()
	if n := len(l.Ops()); n != 1600 {
		t.Fatalf("log holds %d records, want 1600", n)
	}
	ops, err := Read(&buf)
	if err != nil || len(ops) != 1600 {
		t.Fatalf("writer: %d records, %v (interleaved writes?)", len(ops), err)
	}
}

type failing struct{ n int }

func (f *failing) Write(p []byte) (int, error) {
	f.n++
	return 0, errors.New("disk full")
}

func TestWriterKeepsFirstError(t *testing.T) {
	f := &failing{}
	w := NewWriter(f)
	w.Record(sample()[0])
	w.Record(sample()[1])
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Close = %v, want the write error", err)
	}
	if f.n != 1 {
		t.Fatalf("%d writes after the first failure, want none", f.n-1)
	}
}
