package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/durachk/durachk/checker"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/reports"
)

// oneLine fails t unless err is a configuration error (exit 3) of one line.
func oneLine(t *testing.T, what string, err error) {
	t.Helper()
	if Code(err) != ExitConfig {
		t.Fatalf("%s: exit %d (%v), want 3", what, Code(err), err)
	}
	if msg := err.Error(); strings.ContainsAny(msg, "\n\r") || len(msg) > 4000 {
		t.Fatalf("%s: the error is not one bounded line: %q", what, msg)
	}
}

// FuzzCheck: durachk check on any history (and final-state file) never
// panics; it judges (exit 0, 1 or 2) only a history whose every line is a
// record (history.Read, the reader of result.json's histories, agrees with
// the checker's own streaming reader: the same records) and that holds one
// at least; anything else is exit 3 with one line.
func FuzzCheck(f *testing.F) {
	for _, name := range []string{"lease-redelivery-clean", "lease-redelivery-broker-delivery-limit"} {
		h, fin := fixture(name)
		hb, err1 := os.ReadFile(h)
		fb, err2 := os.ReadFile(fin)
		if err1 != nil || err2 != nil {
			f.Fatal(err1, err2)
		}
		lines := strings.SplitAfter(string(hb), "\n")
		f.Add([]byte(strings.Join(lines[:min(40, len(lines))], "")), fb)
		f.Add([]byte(strings.Join(lines[:min(40, len(lines))], "")), []byte(nil))
	}
	for _, h := range []string{"", "\n", "garbage\n", "garbage", "{}\n", `{"t":1,"process":"w1","type":"ok","f":"lease"}` + "\n" + `{"t":`,
		`{"t":1,"process":"w1","type":"maybe","f":"lease"}` + "\n", `{"t":1e3,"type":"ok","f":"x","t":2}` + "\n", "[1,2]\n"} {
		f.Add([]byte(h), []byte(nil))
	}
	// Found by this fuzzer: the checker's fast reader took a leading zero
	// (not JSON) that encoding/json refuses; a final-state result without a
	// key made the checker panic; numbers past int64, invalid UTF-8.
	for _, h := range []string{`{"t":00,"process":"p","seq":1,"type":"invoke","f":"enqueue","job":"a"}`, `{"t":1,"seq":-01,"type":"ok","f":"x"}`,
		`{"t":9223372036854775808,"type":"ok","f":"x"}`, `{"t":-9223372036854775808,"type":"ok","f":"x"}`, `{"attempt":18446744073709551615,"type":"ok","f":"x"}`,
		"{\"t\":1,\"type\":\"ok\",\"f\":\"x\",\"job\":\"\xff\"}", "{\"t\":1,\"type\":\"ok\",\"f\":\"x\",\"job\":\"a\u00e9\xc3\"}"} {
		f.Add([]byte(h+"\n"), []byte(nil))
	}
	f.Add([]byte(`{"t":1,"process":"p","type":"invoke","f":"enqueue","job":"a"}`+"\n"), []byte(`{"store": {"results": [{"job_id": "a"}], "events": [{"id": "e"}]}}`))
	f.Add([]byte(`{"t":1,"process":"p","type":"invoke","f":"enqueue","job":"a"}`+"\n"), []byte(`{"store": 1}`))
	f.Add([]byte(`{"t":1,"process":"p","type":"invoke","f":"enqueue","job":"a"}`+"\n"), []byte(`{"final": {}, "check": {"fifo": true}}`))
	// A run's final-state files (durachk.final/v1): the engine's verdict.
	rec := filepath.Join("testdata", "rejudge-mem", "histories", "001-mem_plan_power-loss-volatile")
	if hb, err := os.ReadFile(rec + ".jsonl"); err == nil {
		fb, _ := os.ReadFile(rec + ".final.json")
		lines := strings.SplitAfter(string(hb), "\n")
		f.Add([]byte(strings.Join(lines[:min(40, len(lines))], "")), fb)
	}
	f.Add([]byte(`{"t":1,"process":"p","type":"invoke","f":"enqueue","job":"a"}`+"\n"), []byte(`{"format": "durachk.final/v1", "contract": "no.such", "final": {}}`))
	f.Fuzz(func(t *testing.T, hist, final []byte) {
		dir := t.TempDir()
		o := CheckOptions{History: filepath.Join(dir, "h.jsonl")}
		if err := os.WriteFile(o.History, hist, 0o644); err != nil {
			t.Fatal(err)
		}
		if len(final) > 0 {
			o.Final = filepath.Join(dir, "final.json")
			if err := os.WriteFile(o.Final, final, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, rerr := history.Read(bytes.NewReader(hist))
		var got []history.Op
		_, serr := checker.ReadOps(bytes.NewReader(hist), func(op *history.Op) { got = append(got, *op) })
		if (rerr == nil) != (serr == nil) || rerr == nil && !reflect.DeepEqual(want, got) {
			t.Fatalf("the readers disagree on %q: history.Read %d records, %v; checker.ReadOps %d records, %v", hist, len(want), rerr, len(got), serr)
		}
		for _, format := range []string{"text", "json"} {
			o.Format = format
			var out bytes.Buffer
			err := Check(o, &out)
			_, ferr := checker.ReadFinal(o.Final)
			switch {
			case rerr != nil || len(want) == 0 || o.Final != "" && ferr != nil:
				oneLine(t, "check of "+string(hist), err)
			case o.Final != "" && reports.IsJudged(o.Final) && Code(err) == ExitConfig:
				// A run's final-state file naming no contract this durachk knows, or a plan it cannot read.
				oneLine(t, "check of "+string(hist), err)
			case Code(err) == ExitConfig:
				t.Fatalf("check of %d records (%q): exit 3: %v", len(want), hist, err)
			}
		}
	})
}

// FuzzResultFile: what report, compare and replay read from a result.json
// never panics: they render it in every format, or refuse it (exit 3, one
// line). Replay runs on a context already ended, so that a result it accepts
// costs a scenario built, not a run.
func FuzzResultFile(f *testing.F) {
	for _, p := range []string{"../../reports/testdata/golden.json"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{
		`{"schema": "durachk.result/v1", "targets": [{"name": "mem", "kind": "mem", "endpoint": "embedded"}], "results": [{"contract": "lease.redelivery", "target": "mem", "verdict": "pass", "seed": 1}], "summary": {"pass": 1}}`,
		`{"schema": "durachk.result/v1", "jobs": 1000000000, "targets": [{"name": "mem", "kind": "mem"}], "results": [{"contract": "lease.redelivery", "target": "mem", "verdict": "pass"}], "summary": {"pass": 1}}`,
		`{"schema": "durachk.result/v1", "targets": [{"name": "r", "kind": "redis", "endpoint": "local"}], "results": [{"contract": "lease.redelivery", "target": "r", "verdict": "pass"}], "summary": {"pass": 1}}`,
		`{"schema": "durachk.result/v1", "evidence": {"mem/x": {"history": "../../etc/passwd"}}}`,
		`{"schema": "durachk.result/v1", "targets": [{"name": "mem"}], "evidence": {"mem/x": {"final": "histories/../../x", "trial_finals": {"1": "/etc/passwd"}}}}`,
		`{"schema": "durachk.result/v1"}`, `{}`, `null`, `[]`, "",
	} {
		f.Add([]byte(s))
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "result.json")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		for _, format := range []string{"md", "html", "junit", "json", "text"} {
			if err := Report(path, format, "", &out); err != nil {
				oneLine(t, "report --format "+format, err)
				break
			}
		}
		for _, format := range []string{"text", "md", "html"} {
			if err := Compare([]string{path, path}, format, "", &out); err != nil {
				oneLine(t, "compare --format "+format, err)
				break
			}
		}
		if err := Replay(done, ReplayOptions{Result: path}, &out, &out); err != nil && Code(err) != ExitViolation {
			oneLine(t, "replay", err)
		}
	})
}

// FuzzTargetSpec: a --target (or a durachk.yaml url:) is named from its spec
// alone, mem's knobs included, or refused with one line; no broker is reached.
func FuzzTargetSpec(f *testing.F) {
	for _, s := range []string{"mem", "mem?name=a&delivery_limit=3", "mem?delivery_limit=-1", "mem?delivery_limit=99999999999999999999",
		"mem?name=", "mem?x=1", "mem?%zz", "redis://127.0.0.1:6379/0?stream.maxlen=50", "postgres://u:p@127.0.0.1/db?fifo=true",
		"amqp://guest:guest@127.0.0.1:5672/?queue-arguments.x-queue-type=quorum&private-cluster.nodes=3", "nonsense", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		o := &RunOptions{Targets: []string{spec}}
		names, err := targetNames(o)
		if err != nil {
			oneLine(t, "target "+spec, err)
			return
		}
		if len(names) != 1 || names[0] == "" {
			t.Fatalf("target %q: names %q", spec, names)
		}
		if isMem(spec) {
			mt, err := resolveMem(spec)
			if err != nil || mt.Name() != names[0] {
				t.Fatalf("target %q: named %q, resolved %v, %v", spec, names[0], mt, err)
			}
		}
	})
}
