// Package history records what every process of a run did, as operations in the
// style of Jepsen: an invoke before an action, then ok, fail (it definitely did
// not happen) or info (indeterminate: the process died or the call timed out).
package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
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
	// observations, for the report's node lanes; and, without a Target, its
	// notes on how it timed its faults and what it measured them against
	// ("... held back ...", "flush window ...", "partition must outlast
	// ...": checker.FlushWindowNote, checker.OutlastNote). Not a fault.
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

// Check reports whether op is a record at all: a known type and a name of
// what it does (a line such as {} or {"foo": 1} decodes to an empty Op).
func (o *Op) Check() error {
	switch o.Type {
	case Invoke, OK, Fail, Info:
	default:
		return fmt.Errorf("type %q: want invoke, ok, fail or info", clip(string(o.Type)))
	}
	if o.F == "" {
		return fmt.Errorf("no f: want what the operation does (enqueue, lease, commit, ...)")
	}
	return nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// MaxLine bounds one record of a history file.
const MaxLine = 16 << 20

// Lines calls fn with each non-blank line of a JSONL history and its number;
// fn's error for a line ends the reading with that error, unless the line is
// torn: the last one, without its newline (its writer was killed mid-write:
// Writer ends every record with one), which is dropped. A garbage line with
// its newline is never dropped. The slice fn gets is reused.
func Lines(r io.Reader, fn func(line []byte, n int) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte
	n := 0
	for {
		b, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long[:0], b...)
			for errors.Is(err, bufio.ErrBufferFull) && len(long) <= MaxLine {
				b, err = br.ReadSlice('\n')
				long = append(long, b...)
			}
			if len(long) > MaxLine {
				return fmt.Errorf("history line %d: longer than %d bytes", n+1, MaxLine)
			}
			b = long
		}
		if len(b) > 0 {
			n++
			torn := b[len(b)-1] != '\n'
			if t := bytes.TrimSpace(b); len(t) > 0 {
				if ferr := fn(t, n); ferr != nil && !torn {
					return fmt.Errorf("history line %d: %w", n, ferr)
				}
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("history: %w", err)
		}
	}
}

// Read parses a JSONL history. A torn last line (the writer was killed
// mid-write, before the newline that ends every record) is dropped; a
// malformed line anywhere else, or one that is not a record (Check), is an
// error naming its line number.
func Read(r io.Reader) ([]Op, error) {
	var ops []Op
	err := Lines(r, func(line []byte, _ int) error {
		var op Op
		if err := json.Unmarshal(line, &op); err != nil {
			return err
		}
		if err := op.Check(); err != nil {
			return err
		}
		ops = append(ops, op)
		return nil
	})
	if err != nil {
		return nil, err
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
