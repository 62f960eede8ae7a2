package reports

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
)

// FuzzParseBaseline: the baseline reader never panics; what it refuses is a
// one-line ErrBadBaseline; what it accepts names at least one target, each
// with known contracts and valid verdicts, and survives a round trip.
func FuzzParseBaseline(f *testing.F) {
	for _, s := range []string{
		`{"mem": {"lease.redelivery": "pass", "durability.ack": "violation"}, "redis/aof": {"order.fifo": "skipped", "scenario/poison-job": "unknown"}}`,
		`{}`, `[]`, `{"mem": {}}`, `{"mem": {"no.such": "pass"}}`, `{"mem": {"lease.redelivery": "maybe"}}`,
		`{"mem": {"lease.redelivery": "pass"}, "mem": {"lease.redelivery": "violation"}}`,
		`{"mem": {"lease.redelivery": "pass", "lease.redelivery": "violation"}}`,
		`{"mem": {"lease.redelivery": 1}}`, `{"mem": {"lease.redelivery": "pass"}} {}`,
		`{"schema": "durachk.result/v1", "targets": [{"name": "mem"}], "results": [{"contract": "lease.redelivery", "target": "mem", "verdict": "pass"}]}`,
		`{"schema": "durachk.result/v1"}`,
	} {
		f.Add([]byte(s))
	}
	if b, err := os.ReadFile("testdata/golden.json"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		bl, err := ParseBaseline(b)
		if err != nil {
			if !errors.Is(err, ErrBadBaseline) || strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("ParseBaseline(%q): error %q is not one line of ErrBadBaseline", b, err)
			}
			return
		}
		if len(bl) == 0 {
			t.Fatalf("ParseBaseline(%q) accepted a baseline naming no target", b)
		}
		for tg, cs := range bl {
			if tg == "" || len(cs) == 0 {
				t.Fatalf("ParseBaseline(%q): target %q with %d contracts", b, tg, len(cs))
			}
			for c, v := range cs {
				if knownContract(c) != nil || !validVerdict(v) {
					t.Fatalf("ParseBaseline(%q): %s: %s = %q", b, tg, c, v)
				}
			}
		}
		again, err := json.Marshal(bl)
		if err != nil {
			t.Fatal(err)
		}
		bl2, err := ParseBaseline(again)
		if err != nil || !reflect.DeepEqual(bl, bl2) {
			t.Fatalf("ParseBaseline(%q) = %v; its JSON %s reads back as %v, %v", b, bl, again, bl2, err)
		}
	})
}

// FuzzDecodeJSON: the result reader never panics; what it refuses is a
// one-line ErrBadResult; what it accepts is valid, renders in every format
// without panicking, gates itself without a difference and survives a round
// trip.
func FuzzDecodeJSON(f *testing.F) {
	if b, err := os.ReadFile("testdata/golden.json"); err == nil {
		f.Add(b)
	}
	d := synthDoc()
	if b, err := d.MarshalIndent(); err == nil {
		f.Add(b)
	}
	for _, s := range []string{
		`{"schema": "durachk.result/v1", "targets": [{"name": "mem"}], "results": [{"contract": "lease.redelivery", "target": "mem", "verdict": "pass"}], "summary": {"pass": 1}}`,
		`{"schema": "durachk.result/v1", "targets": [{"name": "mem"}], "results": [{"contract": "lease.redelivery", "target": "mem", "verdict": "maybe"}]}`,
		`{"schema": "durachk.result/v1", "results": [{"contract": "x", "target": "ghost", "verdict": "pass"}]}`,
		`{"schema": "durachk.result/v1", "evidence": {"mem/x": {"history": "../../etc/passwd"}}}`,
		`{"schema": "durachk.result/v1", "summary": {"pass": -1}}`,
		`{"schema": "durachk.result/v0"}`, `{}`, `null`, `[]`, `{"schema": "durachk.result/v1"} x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeJSON(b)
		if err != nil {
			if !errors.Is(err, ErrBadResult) || strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("DecodeJSON(%q): error %q is not one line of ErrBadResult", b, err)
			}
			return
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("DecodeJSON(%q) accepted an invalid document: %v", b, err)
		}
		for _, format := range Formats {
			_ = Render(io.Discard, d, format) // must not panic
		}
		// (Trials may repeat a target × contract; the self-check needs one each.)
		if bl := BaselineOf(d); len(bl) > 0 && !repeats(d) {
			if diffs := bl.Compare(d); len(diffs) > 0 {
				t.Fatalf("DecodeJSON(%q): the document differs from its own baseline: %v", b, diffs)
			}
		}
		again, err := d.MarshalIndent()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeJSON(again); err != nil {
			t.Fatalf("DecodeJSON(%q) accepted; its JSON does not read back: %v", b, err)
		}
	})
}

func repeats(d *Document) bool {
	seen := map[string]bool{}
	for _, r := range d.Results {
		k := Key(r.Target, r.Contract)
		if seen[k] {
			return true
		}
		seen[k] = true
	}
	return false
}
