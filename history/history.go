// Package history records what every process of a run did, as operations in the
// style of Jepsen: an invoke before an action, then ok, fail (it definitely did
// not happen) or info (indeterminate: the process died or the call timed out).
package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
)

// Type of an operation record.
type Type string

const (
	Invoke Type = "invoke"
	OK     Type = "ok"
	Fail   Type = "fail"
	Info   Type = "info"
)

// F names what an operation does.
type F string

const (
	Enqueue    F = "enqueue"
	Lease      F = "lease"
	Fence      F = "fence"
	Extend     F = "extend"
	Extract    F = "extract"
	Commit     F = "commit"
	Ack        F = "ack"
	Nack       F = "nack"
	DeadLetter F = "dead_letter"
	Cancel     F = "cancel"
	Publish    F = "publish"
	Mark       F = "mark"
	Apply      F = "apply"
	Reprocess  F = "reprocess"
	Fault      F = "fault"
	Probe      F = "probe"      // the relay's cheap test of its channel
	Circuit    F = "circuit"    // the relay's breaker: value open or closed
	EventDead  F = "event_dead" // the relay parked a rejected outbox event for good
	// Node is what a node of a replicated target was (value "primary", "up",
	// "down", "started ..."; Target names the node): the controller's
	// observations, for the report's node lanes. Not a fault.
	Node F = "node"
	// Settle: the worker recorded in the effect store how its delivery ended
	// without a terminal outcome: value "spent" (the job's own failure spent an
	// attempt) or "released" (given back after an infrastructure failure).
	Settle F = "settle"
)

// Op is one history record. T is nanoseconds since the Unix epoch (virtual time on
// the embedded target). Seq orders records of one process.
type Op struct {
	T       int64  `json:"t"`
	Process string `json:"process"`
	Seq     int64  `json:"seq"`
	Type    Type   `json:"type"`
	F       F      `json:"f"`
	Job     string `json:"job,omitempty"`
	Key     string `json:"key,omitempty"`
	Token   uint64 `json:"token,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	Value   string `json:"value,omitempty"`
	Err     string `json:"err,omitempty"`
	// Target is the process a fault hit (F == Fault).
	Target string `json:"target,omitempty"`
}

func (o Op) String() string {
	b, _ := json.Marshal(o)
	return string(b)
}

// Recorder accepts operation records. Implementations are safe for concurrent use.
type Recorder interface {
	Record(op Op)
}

// Log is an in-memory history, safe for concurrent use. It keeps its
// records in blocks of logBlock, so that a long history grows without copying
// what it already holds (10,000 jobs record about 200,000 operations).
type Log struct {
	mu     sync.Mutex
	blocks [][]Op
	n      int
}

const logBlock = 4096

// Record appends op.
func (l *Log) Record(op Op) {
	l.mu.Lock()
	if len(l.blocks) == 0 || len(l.blocks[len(l.blocks)-1]) == logBlock {
		l.blocks = append(l.blocks, make([]Op, 0, logBlock))
	}
	last := &l.blocks[len(l.blocks)-1]
	*last = append(*last, op)
	l.n++
	l.mu.Unlock()
}

// Ops returns a copy of the records so far, in the order they were recorded.
func (l *Log) Ops() []Op {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == 0 {
		return nil
	}
	out := make([]Op, 0, l.n)
	for _, b := range l.blocks {
		out = append(out, b...)
	}
	return out
}

// Writer appends JSONL records to a file and flushes each one before Record
// returns, so that a record announcing an action is on disk before the action
// and a SIGKILL right after it loses nothing. Safe for concurrent use.
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	f   *os.File
	err error
}

// NewWriter writes to w; every record is one Write call.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Create opens (truncating) a history file.
func Create(path string) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	return &Writer{w: f, f: f}, nil
}

// Record writes op as one line. The first write error is kept and returned by Close.
func (w *Writer) Record(op Op) {
	b, err := json.Marshal(op)
	if err != nil {
		panic(err) // Op has only plain fields
	}
	b = append(b, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		_, w.err = w.w.Write(b)
	}
}

// Close closes the file, if the Writer opened one, and reports the first error.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f != nil {
		if err := w.f.Close(); err != nil && w.err == nil {
			w.err = err
		}
	}
	return w.err
}

// Tee records to every recorder in turn.
type Tee []Recorder

// Record passes op on.
func (t Tee) Record(op Op) {
	for _, r := range t {
		r.Record(op)
	}
}

// Read parses a JSONL history. A torn last line (the writer was killed mid-write)
// is dropped; a malformed line elsewhere is an error naming its line number.
func Read(r io.Reader) ([]Op, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	var ops []Op
	var pending error
	line := 0
	for sc.Scan() {
		line++
		if pending != nil {
			return nil, pending
		}
		if len(sc.Bytes()) == 0 {
			continue
		}
		var op Op
		if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
			pending = fmt.Errorf("history line %d: %w", line, err)
			continue
		}
		ops = append(ops, op)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	return ops, nil
}

// ReadFile reads a JSONL history file.
func ReadFile(path string) ([]Op, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	return Read(f)
}

// WriteFile writes ops as a JSONL file.
func WriteFile(path string, ops []Op) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	bw := bufio.NewWriter(f)
	enc := json.NewEncoder(bw)
	for _, op := range ops {
		if err := enc.Encode(op); err != nil {
			f.Close()
			return fmt.Errorf("history: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("history: %w", err)
	}
	return f.Close()
}
