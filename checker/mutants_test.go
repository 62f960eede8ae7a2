package checker

import (
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var runMutants = flag.Bool("mutants", false, "build each mutant of the table in mutants_test.go and require the test it names to fail (minutes; go test ./checker -run TestMutants -mutants -v)")

// mutant is one hand-made bug: old replaced by new in file (from the module
// root) removes or alters one branch a property's detection, the verdict
// merge, the engine's judge or selftest rests on. The tests run names must
// go red with it.
type mutant struct {
	name     string
	file     string
	old, new string
	pkg      string // the package whose tests catch it
	run      string // go test -run pattern of those tests
}

// TestMutants keeps the table honest: every mutant's text is in its file
// exactly once, so the table cannot rot into mutants that mutate nothing.
// With -mutants it builds each one (go build -overlay: the tree is never
// written) and requires the tests it names to pass without it and fail with
// it.
func TestMutants(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range mutants {
		if seen[m.name] {
			t.Errorf("two mutants named %q", m.name)
		}
		seen[m.name] = true
		b, err := os.ReadFile(filepath.Join(root, m.file))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), m.old); n != 1 {
			t.Errorf("mutant %q: %s holds its text %d times, want once: %q", m.name, m.file, n, m.old)
		}
		if m.old == m.new || m.run == "" || m.pkg == "" {
			t.Errorf("mutant %q changes nothing or names no test", m.name)
		}
	}
	if !*runMutants {
		return
	}
	goTest := func(t *testing.T, pkg, run, overlay string) (string, bool) {
		args := []string{"test", "-count=1", "-run", run}
		if overlay != "" {
			args = append(args, "-overlay", overlay)
		}
		cmd := exec.Command("go", append(args, pkg)...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if strings.Contains(string(out), "build failed") || strings.Contains(string(out), "setup failed") {
			t.Fatalf("go test %s -run %s does not build:\n%s", pkg, run, out)
		}
		return string(out), err == nil
	}
	green := map[string]bool{}
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			if _, err := regexp.Compile(m.run); err != nil {
				t.Fatal(err)
			}
			if k := m.pkg + " " + m.run; !green[k] {
				if out, ok := goTest(t, m.pkg, m.run, ""); !ok {
					t.Fatalf("without the mutant, go test %s -run '%s' fails already:\n%s", m.pkg, m.run, out)
				}
				green[k] = true
			}
			path := filepath.Join(root, m.file)
			b, _ := os.ReadFile(path)
			dir := t.TempDir()
			mutated := filepath.Join(dir, filepath.Base(path))
			if err := os.WriteFile(mutated, []byte(strings.Replace(string(b), m.old, m.new, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			ov, _ := json.Marshal(map[string]map[string]string{"Replace": {path: mutated}})
			overlay := filepath.Join(dir, "overlay.json")
			if err := os.WriteFile(overlay, ov, 0o644); err != nil {
				t.Fatal(err)
			}
			out, ok := goTest(t, m.pkg, m.run, overlay)
			if ok || !strings.Contains(out, "--- FAIL") {
				t.Errorf("mutant survived: %s -run '%s' stays green with %s: %q → %q", m.pkg, m.run, m.file, m.old, m.new)
				return
			}
			var failed []string
			for _, l := range strings.Split(out, "\n") {
				if l = strings.TrimSpace(l); strings.HasPrefix(l, "--- FAIL") {
					failed = append(failed, strings.Fields(l)[2])
				}
			}
			t.Logf("killed by %s", strings.Join(failed, ", "))
		})
	}
}

// mutants: every branch a property's Detection text names, the merge of
// answers, the engine's judge and selftest's Caught, each removed or altered
// once, with the test that catches it.
var mutants = []mutant{}
