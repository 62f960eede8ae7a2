package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReplayReproducesAndCatchesATamperedResult(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	var out bytes.Buffer
	err := Run(ctx, RunOptions{Seed: 5, Out: dir, Contracts: []string{"fencing.zombie", "outbox.atomic"}, Formats: []string{"json"}}, &out, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	path := filepath.Join(dir, "result.json")
	out.Reset()
	if err := Replay(ctx, ReplayOptions{Result: path}, &out, &out); err != nil {
		t.Fatalf("replay of an untouched result: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "2 replayed, 2 reproduced") {
		t.Fatalf("replay output:\n%s", out.String())
	}

	b, _ := os.ReadFile(path)
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	doc["results"].([]any)[0].(map[string]any)["verdict"] = "violation"
	b, _ = json.Marshal(doc)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	err = Replay(ctx, ReplayOptions{Result: path}, &out, &out)
	if Code(err) != ExitViolation {
		t.Fatalf("replay of a tampered result: exit %d (%v), want %d\n%s", Code(err), err, ExitViolation, out.String())
	}
	if !strings.Contains(out.String(), "recorded violation, replayed pass") {
		t.Fatalf("replay output does not name the difference:\n%s", out.String())
	}
}
