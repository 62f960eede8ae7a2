package history

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// FuzzRead: the history reader never panics; what it accepts is records
// (Op.Check) that written again read back the same; its error is one line
// naming a line.
func FuzzRead(f *testing.F) {
	var good bytes.Buffer
	w := NewWriter(&good)
	for _, op := range sample() {
		w.Record(op)
	}
	f.Add(good.Bytes())
	for _, s := range []string{"", "\n", "garbage\n", "garbage", "{}\n", "{}", `{"t":1,"pro`, "[1]\n", `{"t":"x"}` + "\n",
		`{"type":"ok","f":"lease","type":"fail"}` + "\n", "\xff\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ops, err := Read(bytes.NewReader(b))
		if err != nil {
			if msg := err.Error(); !strings.HasPrefix(msg, "history line ") || strings.ContainsAny(msg, "\n\r") {
				t.Fatalf("Read(%q): error %q is not one line naming its line", b, msg)
			}
			return
		}
		var again bytes.Buffer
		w := NewWriter(&again)
		for _, op := range ops {
			if err := op.Check(); err != nil {
				t.Fatalf("Read(%q) accepted %v: %v", b, op, err)
			}
			w.Record(op)
		}
		back, err := Read(&again)
		if err != nil || !reflect.DeepEqual(back, ops) {
			t.Fatalf("Read(%q) = %v; written again it reads back as %v, %v", b, ops, back, err)
		}
	})
}
