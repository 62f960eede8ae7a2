package checker

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"unicode/utf8"

	"github.com/durachk/durachk/history"
)

// ReadOps streams a JSONL history (one history.Op per line, the format
// history.Writer writes) from r and calls fn with each operation in order. fn
// must not keep op: it is reused. A torn last line (its writer was killed
// mid-write, before the record's newline) is dropped; a malformed line
// elsewhere, or one that is no record (history.Op.Check), is an error naming
// its line number (history.Lines). It returns the number of operations read.
func ReadOps(r io.Reader, fn func(op *history.Op)) (int, error) {
	d := &decoder{}
	var op history.Op
	n := 0
	err := history.Lines(r, func(line []byte, _ int) error {
		if err := d.parse(line, &op); err != nil {
			return err
		}
		if err := op.Check(); err != nil {
			return err
		}
		fn(&op)
		n++
		return nil
	})
	return n, err
}

// CheckReader judges a JSONL history read from r, operation by operation, with
// its final state.
func CheckReader(r io.Reader, final Final, opts Options) (Result, error) {
	c := New(opts)
	if _, err := ReadOps(r, c.observe); err != nil {
		return Result{}, err
	}
	return c.Finish(final), nil
}

// CheckFile judges the JSONL history at path with its final state.
func CheckFile(path string, final Final, opts Options) (Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return Result{}, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	return CheckReader(f, final, opts)
}

// FinalFile is what a final-state file may hold: a Final, or a recorded run
// (the checker's testdata) wrapping one with the check options and the
// expected properties.
type FinalFile struct {
	Final Final `json:"final"`
	// Check are the options the run's target claims.
	Check *Options `json:"check,omitempty"`
	// Want are the properties a recorded run is expected to raise (none: a
	// clean run); Contract, Sabotage, Target and Seed say where it came from.
	Want     []Property `json:"want,omitempty"`
	Contract string     `json:"contract,omitempty"`
	Sabotage string     `json:"sabotage,omitempty"`
	Target   string     `json:"target,omitempty"`
	Seed     uint64     `json:"seed,omitempty"`
}

// ReadFinal reads a final-state file: either a Final ({"store", "broker",
// "drained"}) or a FinalFile ({"final": {...}, "check": {...}}).
func ReadFinal(path string) (FinalFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return FinalFile{}, fmt.Errorf("final state: %w", err)
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return FinalFile{}, fmt.Errorf("final state %s: %w", path, err)
	}
	var ff FinalFile
	if _, wrapped := probe["final"]; wrapped {
		err = json.Unmarshal(b, &ff)
	} else {
		err = json.Unmarshal(b, &ff.Final)
	}
	if err != nil {
		return FinalFile{}, fmt.Errorf("final state %s: %w", path, err)
	}
	return ff, nil
}

// decoder parses the flat JSON object of one history.Op without reflection,
// sharing the strings that repeat, and falls back to encoding/json for
// anything unusual.
type decoder struct {
	// recent holds strings seen lately (jobs, keys, short values), direct
	// mapped by a hash of their bytes: the operations of a few jobs interleave,
	// so most are repeats and need no allocation.
	recent [1024]string
}

func (d *decoder) reuse(raw []byte) string {
	h := uint32(2166136261)
	for _, c := range raw {
		h = (h ^ uint32(c)) * 16777619
	}
	slot := &d.recent[h%uint32(len(d.recent))]
	if *slot == string(raw) {
		return *slot
	}
	*slot = string(raw)
	return *slot
}

func (d *decoder) parse(line []byte, op *history.Op) error {
	*op = history.Op{}
	if d.fast(line, op) {
		return nil
	}
	*op = history.Op{}
	if err := json.Unmarshal(line, op); err != nil {
		return err
	}
	return nil
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// fast reports whether it parsed line into op.
func (d *decoder) fast(b []byte, op *history.Op) bool {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipWS(b, i+1) == len(b)
	}
	for {
		key, ni, ok := rawString(b, i)
		if !ok {
			return false
		}
		i = skipWS(b, ni)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipWS(b, i+1)
		switch string(key) {
		case "t", "seq", "token", "attempt":
			n, neg, ni, ok := number(b, i)
			if !ok || string(key) != "token" && (n > math.MaxInt64 && !neg || n > 1<<63) {
				return false // out of int64: encoding/json decides (and refuses it)
			}
			i = ni
			switch string(key) {
			case "t":
				op.T = signed(n, neg)
			case "seq":
				op.Seq = signed(n, neg)
			case "token":
				if neg {
					return false
				}
				op.Token = n
			default:
				op.Attempt = int(signed(n, neg))
			}
		case "process", "type", "f", "err", "target", "job", "key", "value":
			s, ni, ok := d.str(b, i, string(key) == "type" || string(key) == "f")
			if !ok {
				return false
			}
			i = ni
			switch string(key) {
			case "process":
				op.Process = s
			case "type":
				op.Type = history.Type(s)
			case "f":
				op.F = history.F(s)
			case "err":
				op.Err = s
			case "target":
				op.Target = s
			case "job":
				op.Job = s
			case "key":
				op.Key = s
			default:
				op.Value = s
			}
		default:
			return false // an unknown field: let encoding/json decide
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case '}':
			return skipWS(b, i+1) == len(b)
		default:
			return false
		}
	}
}

func signed(n uint64, neg bool) int64 {
	if neg {
		return -int64(n)
	}
	return int64(n)
}

// number reads a JSON integer.
func number(b []byte, i int) (uint64, bool, int, bool) {
	neg := false
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	start := i
	if i+1 < len(b) && b[i] == '0' && b[i+1] >= '0' && b[i+1] <= '9' {
		return 0, false, i, false // a leading zero is not JSON: encoding/json refuses it
	}
	var n uint64
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		d := uint64(b[i] - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false, i, false
		}
		n = n*10 + d
		i++
	}
	if i == start || i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		return 0, false, i, false
	}
	return n, neg, i, true
}

// rawString reads a string without escapes (a field name).
func rawString(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, i, false
	}
	j := i + 1
	for j < len(b) && b[j] != '"' {
		if b[j] == '\\' || b[j] < 0x20 {
			return nil, i, false
		}
		j++
	}
	if j >= len(b) {
		return nil, i, false
	}
	return b[i+1 : j], j + 1, true
}

// str reads a JSON string value; named says it is a type or function name.
func (d *decoder) str(b []byte, i int, named bool) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", i, false
	}
	j := i + 1
	escaped, ascii := false, true
	for j < len(b) && b[j] != '"' {
		switch {
		case b[j] == '\\':
			escaped = true
			j += 2
			continue
		case b[j] < 0x20:
			return "", i, false
		case b[j] >= 0x80:
			ascii = false
		}
		j++
	}
	if j >= len(b) {
		return "", i, false
	}
	raw := b[i+1 : j]
	if !ascii && !utf8.Valid(raw) {
		return "", i, false // encoding/json replaces invalid UTF-8: let it
	}
	if escaped {
		s, ok := unescape(raw)
		if !ok {
			var v string
			if json.Unmarshal(b[i:j+1], &v) != nil {
				return "", i, false
			}
			s = v
		}
		return s, j + 1, true
	}
	if named {
		if s, ok := known(raw); ok {
			return s, j + 1, true
		}
	}
	if len(raw) <= 64 {
		return d.reuse(raw), j + 1, true
	}
	return string(raw), j + 1, true
}

// unescape decodes the simple escapes; \u escapes are left to encoding/json.
func unescape(raw []byte) (string, bool) {
	out := make([]byte, 0, len(raw))
	for k := 0; k < len(raw); k++ {
		c := raw[k]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		k++
		if k >= len(raw) {
			return "", false
		}
		switch raw[k] {
		case '"', '\\', '/':
			out = append(out, raw[k])
		case 'n':
			out = append(out, '\n')
		case 't':
			out = append(out, '\t')
		case 'r':
			out = append(out, '\r')
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		default:
			return "", false
		}
	}
	return string(out), true
}

// known returns the constant for a type or function name, without hashing.
func known(b []byte) (string, bool) {
	switch string(b) {
	case "invoke":
		return string(history.Invoke), true
	case "ok":
		return string(history.OK), true
	case "fail":
		return string(history.Fail), true
	case "info":
		return string(history.Info), true
	case "enqueue":
		return string(history.Enqueue), true
	case "lease":
		return string(history.Lease), true
	case "fence":
		return string(history.Fence), true
	case "extend":
		return string(history.Extend), true
	case "extract":
		return string(history.Extract), true
	case "commit":
		return string(history.Commit), true
	case "ack":
		return string(history.Ack), true
	case "nack":
		return string(history.Nack), true
	case "dead_letter":
		return string(history.DeadLetter), true
	case "apply":
		return string(history.Apply), true
	case "publish":
		return string(history.Publish), true
	case "mark":
		return string(history.Mark), true
	}
	return "", false
}
