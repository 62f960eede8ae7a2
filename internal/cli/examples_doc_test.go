package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The worked examples of the docs are what the code prints today: each is
// run again here on the embedded target (deterministic per seed) and
// compared with the page, wall-clock figures and run ids masked. A change
// that alters an example fails here until the page says what the code does
// (`go test ./internal/cli -run TestWorkedExamples -update` rewrites them).
func TestWorkedExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("short: runs durachk explore and run on the embedded target")
	}
	bin := durachkBinary(t)
	page := filepath.Join("..", "..", "docs", "explore.md")
	doc, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	durachk := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		_ = cmd.Run() // a violation is what the example shows: exit 1
		return out.String()
	}
	text := string(doc)

	// The exploration and its output, as the page's first block after the
	// command it quotes.
	const command = "durachk explore --duration 1m --parallel 1 --sabotage dual-write --property outbox_orphan --out ex"
	if !strings.Contains(text, "`"+command+"`") {
		t.Fatalf("docs/explore.md no longer quotes %q: keep this test and the page together", command)
	}
	out := durachk(strings.Fields(command)[1:]...)
	text = compareBlock(t, page, text, "\n```\ndurachk: explore ", out)

	// The shrunk plan it wrote.
	plan, err := os.ReadFile(filepath.Join(dir, "ex", "shrunk.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text = compareBlock(t, page, text, "\n```yaml\nformat: durachk.plan/v1\nname: explore round", string(plan))

	// Its replay on ten seeds: the sentence the page quotes.
	replay := durachk("run", "--plan", "ex/shrunk.yaml", "--trials", "10", "--out", "replay")
	quoted := regexp.MustCompile("prints `(violation in \\d+ of 10 trials \\(seed [0-9, ]+\\))`").FindStringSubmatch(text)
	if quoted == nil {
		t.Fatal("docs/explore.md no longer quotes what `--trials 10` prints")
	}
	got := regexp.MustCompile(`violation in \d+ of 10 trials \(seed [0-9, ]+\)`).FindString(replay)
	if got != quoted[1] {
		if *update {
			text = strings.Replace(text, quoted[1], got, 1)
		} else {
			t.Errorf("docs/explore.md says `--trials 10` prints %q; it prints %q:\n%s", quoted[1], got, replay)
		}
	}
	if *update && text != string(doc) {
		if err := os.WriteFile(page, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// docs/plans.md's example plan is what `durachk plan` writes.
	page = filepath.Join("..", "..", "docs", "plans.md")
	if doc, err = os.ReadFile(page); err != nil {
		t.Fatal(err)
	}
	const planCmd = "durachk plan --contract lease.redelivery --seed 1 --jobs 2"
	if !strings.Contains(string(doc), "`"+planCmd+"`") {
		t.Fatalf("docs/plans.md no longer quotes %q: keep this test and the page together", planCmd)
	}
	text = compareBlock(t, page, string(doc), "\n```yaml\nformat: durachk.plan/v1\nname: workers killed after lease", durachk(strings.Fields(planCmd)[1:]...))
	if *update && text != string(doc) {
		if err := os.WriteFile(page, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// wallClock masks what differs between two runs of one seed: run ids,
// durations, rates.
var wallClock = regexp.MustCompile(`\b[0-9a-f]{10}\b|\b\d+(\.\d+)?(ns|µs|ms|s|m)\b|\b\d+(\.\d+)?m\d+(\.\d+)?s\b|\(\d+ jobs/(s|min)\)|\d+ jobs/(s|min)`)

func masked(s string) string { return wallClock.ReplaceAllString(s, "…") }

// compareBlock compares the fenced block of text that starts at the first
// occurrence of start (its opening fence included) with got, wall-clock
// figures masked; with -update it puts got there instead. It returns text,
// updated or not.
func compareBlock(t *testing.T, page, text, start, got string) string {
	t.Helper()
	i := strings.Index(text, start)
	if i < 0 {
		t.Fatalf("%s: no block starting %q", page, strings.TrimSpace(start))
	}
	open := i + 1 + strings.Index(text[i+1:], "\n") + 1 // after the opening fence's line
	end := strings.Index(text[open:], "```\n")
	if end < 0 {
		t.Fatalf("%s: the block starting %q does not end", page, strings.TrimSpace(start))
	}
	want := text[open : open+end]
	got = strings.TrimRight(got, "\n") + "\n"
	if masked(want) == masked(got) {
		return text
	}
	if *update {
		return text[:open] + got + text[open+end:]
	}
	t.Errorf("%s: the example block starting %q is not what the code prints today (run go test ./internal/cli -run TestWorkedExamples -update)\npage:\n%s\ncode:\n%s",
		page, strings.TrimSpace(start), want, got)
	return text
}
