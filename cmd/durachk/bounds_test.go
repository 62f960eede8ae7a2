package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/internal/cli"
)

// commands are durachk's commands, as its help lists them.
func commands(t *testing.T, dir string) []string {
	t.Helper()
	stdout, _, code := durachk(t, dir, nil, "--help")
	if code != 0 {
		t.Fatalf("durachk --help: exit %d", code)
	}
	var out []string
	in := false
	for _, l := range strings.Split(stdout, "\n") {
		switch {
		case strings.HasPrefix(l, "Available Commands:"):
			in = true
		case in && strings.TrimSpace(l) == "":
			in = false
		case in:
			if name := strings.Fields(l)[0]; name != "help" && name != "completion" {
				out = append(out, name)
			}
		}
	}
	if len(out) < 10 {
		t.Fatalf("durachk --help lists %d commands: %q", len(out), out)
	}
	return out
}

var numericFlag = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z-]+) (int|uint|duration|string)\s`)

// TestNumericFlagsBounded: every numeric flag of every command has a bound
// in cli.Bounds (seeds: their parser's), written in docs/commands.md's bounds table;
// a value just outside it, either side, is exit 3 with one line naming the
// flag, before anything runs (no output, no --out directory).
func TestNumericFlagsBounded(t *testing.T) {
	dir := t.TempDir()
	readme, err := os.ReadFile(filepath.Join("..", "..", "docs", "commands.md"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, cmd := range commands(t, dir) {
		help, _, _ := durachk(t, dir, nil, cmd, "--help")
		for _, l := range strings.Split(help, "\n") {
			if strings.Count(l, "(default") > 1 {
				t.Errorf("%s --help shows a default twice: %q", cmd, l)
			}
			m := numericFlag.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			name, typ := m[1], m[2]
			if typ == "string" && !cli.Bounds[cmd][name].Shard {
				continue // a string flag with no bound: not a number
			}
			if typ == "uint" {
				if name != "seed" {
					t.Errorf("%s --%s: an unsigned flag other than --seed: give it a bound", cmd, name)
				}
				continue
			}
			b, ok := cli.Bounds[cmd][name]
			if !ok {
				t.Errorf("%s --%s (%s) has no bound in cli.Bounds", cmd, name, typ)
				continue
			}
			seen[cmd+" --"+name] = true
			if !documented(string(readme), cmd, name, b.String()) {
				t.Errorf("docs/commands.md's bounds table has no row for %s `--%s` with %q", cmd, name, b.String())
			}
			lo := b.Min - 1
			if lo == 0 && b.Zero != "" {
				lo = -1
			}
			for _, v := range []int64{lo, b.Max + 1} {
				val := strconv.FormatInt(v, 10)
				switch {
				case typ == "duration":
					val = time.Duration(v).String()
				case b.Shard: // i/N: N outside its bounds
					val = "1/" + val
				}
				out := filepath.Join(dir, "out-"+cmd+"-"+name)
				args := []string{cmd, "--" + name, val}
				if cmd == "run" || cmd == "explore" {
					args = append(args, "--out", out)
				}
				stdout, stderr, code := durachk(t, dir, nil, args...)
				lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
				if code != cli.ExitConfig || len(lines) != 1 || !strings.Contains(lines[0], "--"+name+" ") || stdout != "" {
					t.Errorf("durachk %s: exit %d, stdout %q, stderr %q; want exit 3 and one line naming --%s", strings.Join(args, " "), code, stdout, stderr, name)
				}
				if _, err := os.Stat(out); err == nil {
					t.Errorf("durachk %s made its --out directory", strings.Join(args, " "))
				}
			}
		}
	}
	for cmd, fs := range cli.Bounds {
		for name := range fs {
			if !seen[cmd+" --"+name] {
				t.Errorf("cli.Bounds has %s --%s, which its help does not show", cmd, name)
			}
		}
	}
}

// documented reports whether a line of the README names command, the flag
// and its bound.
func documented(readme, command, flag, bound string) bool {
	for _, l := range strings.Split(readme, "\n") {
		if strings.HasPrefix(l, "|") && strings.Contains(l, "`--"+flag+"`") && strings.Contains(l, bound) && strings.Contains(l, command) {
			return true
		}
	}
	return false
}
