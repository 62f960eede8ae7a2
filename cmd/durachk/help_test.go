package main

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Every visible command's --help has examples and its exit codes, and every
// example is a durachk command line whose command and flags exist (each is
// parsed by the command it names, nothing run).
func TestHelpHasExamplesAndExitCodes(t *testing.T) {
	seen := map[string]bool{}
	var root *cobra.Command
	// run builds the command tree; an unknown command's help returns it
	// without running anything.
	captureRoot = func(r *cobra.Command) { root = r; r.SetOut(io.Discard) }
	defer func() { captureRoot = nil }()
	if err := run([]string{"--help"}); err != nil {
		t.Fatal(err)
	}
	if root == nil {
		t.Fatal("no command tree")
	}
	for _, c := range root.Commands() {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		seen[c.Name()] = true
		var out bytes.Buffer
		c.SetOut(&out)
		if err := c.Help(); err != nil {
			t.Fatal(err)
		}
		help := out.String()
		if !strings.Contains(help, "Examples:") || !strings.Contains(help, "Exit codes:") || !strings.Contains(help, "  0  ") {
			t.Errorf("durachk %s --help lacks examples or exit codes:\n%s", c.Name(), help)
		}
		for _, line := range strings.Split(c.Example, "\n") {
			line, _, _ = strings.Cut(line, "  #")
			for _, cmdline := range strings.Split(line, "&&") {
				args := words(strings.TrimSpace(cmdline))
				if len(args) < 2 || args[0] != "durachk" {
					t.Errorf("durachk %s: example %q is not a durachk command line", c.Name(), cmdline)
					continue
				}
				sub, rest, err := root.Find(args[1:])
				if err != nil || sub == root {
					t.Errorf("durachk %s: example %q: no such command (%v)", c.Name(), cmdline, err)
					continue
				}
				if err := sub.ParseFlags(rest); err != nil {
					t.Errorf("durachk %s: example %q: %v", c.Name(), cmdline, err)
				}
				sub.Flags().VisitAll(func(f *pflag.Flag) { f.Changed = false })
			}
		}
	}
	for name := range helps {
		if !seen[name] {
			t.Errorf("help for %s, which is no visible command", name)
		}
	}
}

// words splits an example line at blanks, single and double quotes kept
// together (the examples hold no escapes).
func words(s string) []string {
	var out []string
	var b strings.Builder
	quote := byte(0)
	in := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			b.WriteByte(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				out = append(out, b.String())
				b.Reset()
				in = false
			}
		default:
			b.WriteByte(c)
			in = true
		}
	}
	if in {
		out = append(out, b.String())
	}
	return out
}
