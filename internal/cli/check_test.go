package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/durachk/durachk/checker"
	"github.com/durachk/durachk/contracts"
)

func fixture(name string) (string, string) {
	dir := filepath.Join("..", "..", "checker", "testdata")
	return filepath.Join(dir, name+".jsonl"), filepath.Join(dir, name+".final.json")
}

// durachk check judges recorded histories with run's exit codes.
func TestCheckCommand(t *testing.T) {
	moved, movedFinal := fixture("lease-redelivery-broker-delivery-limit")
	clean, cleanFinal := fixture("lease-redelivery-clean")
	yes := true
	tests := []struct {
		name string
		o    CheckOptions
		code int
		want []string
	}{
		{"violation with its witness", CheckOptions{History: moved, Final: movedFinal}, ExitViolation,
			[]string{"violation", "moved_by_broker", "false", "TIME", "fact: broker:", "delivery_limit", "because nothing the broker moves"}},
		{"clean", CheckOptions{History: clean, Final: cleanFinal}, ExitPass, []string{": pass (", "accepted 24, lost 0"}},
		{"no final state is unknown", CheckOptions{History: clean}, ExitUnknown, []string{"no final state", "unknown"}},
		{"a flag overrides the file", CheckOptions{History: clean, Final: cleanFinal, FIFO: &yes}, ExitPass, []string{"order_inversion                    true"}},
		{"missing history", CheckOptions{History: "nope.jsonl"}, ExitConfig, nil},
		{"unreadable final state", CheckOptions{History: clean, Final: clean}, ExitConfig, nil},
		{"bad format", CheckOptions{History: clean, Final: cleanFinal, Format: "xml"}, ExitConfig, nil},
		// Nothing to judge, or garbage, is an error, never a verdict.
		{"empty file", CheckOptions{History: historyFile(t, "")}, ExitConfig, nil},
		{"only blank lines", CheckOptions{History: historyFile(t, "\n\n")}, ExitConfig, nil},
		{"only a garbage line", CheckOptions{History: historyFile(t, "garbage\n")}, ExitConfig, nil},
		{"only a torn line", CheckOptions{History: historyFile(t, `{"t":1,"process":"w1","se`)}, ExitConfig, nil},
		{"a line that is no record", CheckOptions{History: historyFile(t, "{}\n")}, ExitConfig, nil},
		{"an unknown type", CheckOptions{History: historyFile(t, `{"t":1,"process":"w1","type":"maybe","f":"lease"}`+"\n")}, ExitConfig, nil},
		{"a garbage last line", CheckOptions{History: historyFile(t, firstLines(t, clean, 5)+"garbage\n")}, ExitConfig, nil},
		{"a torn last line is dropped", CheckOptions{History: historyFile(t, firstLines(t, clean, 5)+`{"t":1,"pro`)}, ExitUnknown, []string{"(5 operations, no final state)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Check(tt.o, &out)
			if Code(err) != tt.code {
				t.Fatalf("exit %d (%v), want %d\n%s", Code(err), err, tt.code, out.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
	var out bytes.Buffer
	if err := Check(CheckOptions{History: moved, Final: movedFinal, Format: "json"}, &out); Code(err) != ExitViolation {
		t.Fatalf("json: exit %d", Code(err))
	}
	var r checker.Result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.Properties[checker.MovedByBroker].Valid != checker.Invalid || len(r.Violations) == 0 || len(r.Violations[0].Facts) == 0 {
		t.Fatalf("json result: %v, %+v", err, r.Properties[checker.MovedByBroker])
	}
}

// historyFile writes a history file with content.
func historyFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "h.jsonl")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// firstLines is the first n lines of a file, each with its newline.
func firstLines(t *testing.T, path string, n int) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	return strings.Join(lines[:n], "")
}

// selftest names the property that let a sabotage through.
func TestSelftestNamesTheProperty(t *testing.T) {
	restore := checker.DisableForTest(contracts.PropLost)
	defer restore()
	var out bytes.Buffer
	err := Selftest(t.Context(), RunOptions{Contracts: []string{"lease.redelivery"}, Seed: 1}, &out)
	if Code(err) != ExitViolation || !strings.Contains(err.Error(), "ack-before-commit") || !strings.Contains(err.Error(), "must raise lost") {
		t.Fatalf("selftest with lost disabled: exit %d, %v\n%s", Code(err), err, out.String())
	}
	if !strings.Contains(out.String(), "NO") {
		t.Errorf("the table does not mark the sabotage not caught:\n%s", out.String())
	}
}
