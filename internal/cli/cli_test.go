package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/reports"
)

var update = flag.Bool("update", false, "rewrite docs/results.md's generated table")

func runCLI(t *testing.T, o RunOptions) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	if o.Out == "" {
		o.Out = t.TempDir()
	}
	err := Run(context.Background(), o, &out, &errb)
	return out.String(), errb.String(), err
}

func TestRunWritesEveryFormat(t *testing.T) {
	dir := t.TempDir()
	summary := filepath.Join(t.TempDir(), "step-summary.md")
	t.Setenv("GITHUB_STEP_SUMMARY", summary)
	_, stderr, err := runCLI(t, RunOptions{Seed: 1, Out: dir, Command: "durachk run"})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	for _, f := range []string{"result.json", "junit.xml", "summary.md", "report.html", "histories/000-mem_lease.redelivery.jsonl"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v (want a non-empty file)", f, err)
		}
	}
	n := len(contracts.Catalogue)
	pass := 0 // the replicated topologies' contracts are skipped on mem
	for _, c := range contracts.Catalogue {
		if c.Needs == nil || c.Needs(contracts.MemTarget{}.Capabilities()) == "" {
			pass++
		}
	}
	if b, err := os.ReadFile(summary); err != nil || !bytes.HasPrefix(b, fmt.Appendf(nil, "## durachk: %d pass", pass)) {
		t.Errorf("$GITHUB_STEP_SUMMARY = %.80q, %v; want the summary appended", b, err)
	}
	// One line per result, in the order they finish (concurrently).
	if !strings.Contains(stderr, fmt.Sprintf("durachk: [%d/%d] mem ", n, n)) || !strings.Contains(stderr, "] mem partition.ambiguous: pass (") {
		t.Errorf("stderr (not a terminal) has no plain progress lines: %q", stderr)
	}
	// report re-renders the run identically.
	for _, f := range []string{"html", "junit", "md"} {
		var b bytes.Buffer
		if err := Report(filepath.Join(dir, "result.json"), f, "", &b); err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(filepath.Join(dir, reports.FileName(f)))
		if !bytes.Equal(b.Bytes(), want) {
			t.Errorf("durachk report --format %s differs from the run's %s", f, reports.FileName(f))
		}
	}
}

// TestRunDeterministic: two runs with one seed write identical result.json
// apart from the wall section.
func TestRunDeterministic(t *testing.T) {
	read := func() map[string]any {
		dir := t.TempDir()
		if _, _, err := runCLI(t, RunOptions{Seed: 7, Out: dir, Command: "durachk run --seed 7"}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "result.json"))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		delete(m, "wall")
		return m
	}
	a, b := read(), read()
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		t.Errorf("two runs with seed 7 differ outside the wall section")
	}
}

func writeTestFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBaselineGate: a run flips to exit 1 with a one-line diff when the
// configuration changes to one the baseline does not expect, and back to 0
// when the baseline accepts it.
func TestBaselineGate(t *testing.T) {
	dir := t.TempDir()
	cfg := writeTestFile(t, dir, "durachk.yaml", "seed: 1\ntargets:\n  - name: jobs\n    url: mem\n")
	cfgDL := writeTestFile(t, dir, "durachk-dl.yaml", "seed: 1\ntargets:\n  - name: jobs\n    url: mem\n    delivery_limit: 1\n")
	expected := writeTestFile(t, dir, "expected.json", `{"jobs": {"retry.bounded": "pass", "dlq.reprocess": "pass"}}`)
	o := RunOptions{Config: cfg, Contracts: []string{"retry.bounded", "dlq.reprocess"}, Baseline: expected}
	if out, _, err := runCLI(t, o); err != nil {
		t.Fatalf("baseline run: %v\n%s", err, out)
	}
	o.Config = cfgDL
	out, _, err := runCLI(t, o)
	// delivery_limit 1 makes the broker dead-letter jobs on its own, which the
	// checker flags under every contract (moved_by_broker).
	if Code(err) != ExitViolation || !strings.Contains(out, "jobs: ") || !strings.Contains(out, " pass → ") {
		t.Fatalf("changed configuration: exit %d, output\n%s\nwant exit 1 and a line like `jobs: retry.bounded pass → violation`", Code(err), out)
	}
	// A baseline that accepts every changed verdict passes the gate.
	verdicts := map[string]string{"retry.bounded": "pass", "dlq.reprocess": "pass"}
	for _, l := range strings.Split(out, "\n") {
		if parts := strings.Fields(l); len(parts) == 5 && parts[0] == "jobs:" && parts[3] == "→" { // jobs: <contract> pass → <verdict>
			verdicts[parts[1]] = parts[4]
		}
	}
	b, err := json.Marshal(map[string]map[string]string{"jobs": verdicts})
	if err != nil {
		t.Fatal(err)
	}
	o.Baseline = writeTestFile(t, dir, "accept.json", string(b))
	if out, _, err := runCLI(t, o); err != nil {
		t.Fatalf("baseline that accepts %v: exit %d\n%s", verdicts, Code(err), out)
	}
	// Back on the first configuration, the accepted violations now pass: an
	// improvement, named so, which fails the gate until the baseline says so.
	o.Config = cfg
	out, _, err = runCLI(t, o)
	if Code(err) != ExitViolation || !strings.Contains(out, "improvement") || strings.Contains(out, "regression") || !strings.Contains(out, "violation → pass (improvement") {
		t.Fatalf("improved configuration: exit %d, output\n%s\nwant exit 1 and improvements, no regression", Code(err), out)
	}
}

func TestSeveralTargetsAndCompare(t *testing.T) {
	dir := t.TempDir()
	cfg := writeTestFile(t, dir, "durachk.yaml", "seed: 3\ntargets:\n  - {name: plain, url: mem}\n  - {name: dlq5, url: mem, delivery_limit: 5}\n")
	outA := filepath.Join(dir, "a")
	out, _, err := runCLI(t, RunOptions{Config: cfg, Contracts: []string{"retry.bounded"}, Out: outA})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	doc, err := reports.ReadJSON(filepath.Join(outA, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if doc.Seed != 3 || len(doc.Targets) != 2 || doc.Targets[0].Fingerprint == doc.Targets[1].Fingerprint {
		t.Fatalf("seed %d, targets %+v: want the file's seed and two targets with different fingerprints", doc.Seed, doc.Targets)
	}
	outB := filepath.Join(dir, "b")
	if _, _, err := runCLI(t, RunOptions{Targets: []string{"mem"}, Contracts: []string{"retry.bounded", "lease.redelivery"}, Out: outB, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Compare([]string{filepath.Join(outA, "result.json"), filepath.Join(outB, "result.json")}, "text", "", &b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	// plain and dlq5 are both mem: each column names the setting that tells
	// it from the others of its kind.
	for _, want := range []string{"plain [delivery_limit unset] (", "dlq5 [delivery_limit=5] (", "mem [delivery_limit unset] (", "differ between columns: delivery_limit", "retry.bounded", "lease.redelivery"} {
		if !strings.Contains(text, want) {
			t.Errorf("compare output lacks %q:\n%s", want, text)
		}
	}
	b.Reset()
	if err := Compare([]string{filepath.Join(outA, "result.json")}, "md", "", &b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "a/report.html#r-dlq5--retry.bounded") {
		t.Errorf("compare md cells do not link to the evidence:\n%s", b.String())
	}
}

func TestConfigErrorsExit3(t *testing.T) {
	dir := t.TempDir()
	tests := []struct{ name, yaml, want string }{
		{"unknown top-level key", "seed: 1\ntargetz: []\n", `unknown key "targetz"`},
		{"unset variable", "targets:\n  - url: postgres://u:${DURACHK_TEST_UNSET_PW}@127.0.0.1/test\n", "DURACHK_TEST_UNSET_PW is not set"},
		{"unknown mem knob", "targets:\n  - url: mem\n    fifo: false\n", `unknown setting "fifo"`},
		{"duplicate names", "targets:\n  - {name: a, url: mem}\n  - {name: a, url: mem}\n", `"a" used twice`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeTestFile(t, dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml", tc.yaml)
			_, _, err := runCLI(t, RunOptions{Config: p})
			if Code(err) != ExitConfig || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("err = %v (exit %d), want exit 3 and one line naming %s", err, Code(err), tc.want)
			}
		})
	}
}

// TestNoCredentialsInRealRun plants a password in a real target's URL (the
// local Postgres trusts every password) and searches every file of the run.
func TestNoCredentialsInRealRun(t *testing.T) {
	pg := os.Getenv("DURACHK_PG_URL")
	if pg == "" {
		t.Skip("DURACHK_PG_URL is not set (the local Postgres); .ci/run sets it")
	}
	const pw = "Pl4ntedPassw0rd"
	spec := strings.Replace(pg, "postgres://postgres@", "postgres://postgres:"+pw+"@", 1)
	if spec == pg {
		t.Skipf("cannot plant a password in %s", reports.RedactURL(pg))
	}
	// A real run starts `durachk worker` children through os.Executable: it
	// needs the real binary, not this test binary.
	bin := filepath.Join(t.TempDir(), "durachk")
	if b, err := exec.Command("go", "build", "-o", bin, "../../cmd/durachk").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	dir := t.TempDir()
	cmd := exec.Command(bin, "run", "--target", spec, "--contract", "tenant.isolation", "--seed", "1", "--out", dir)
	var outb, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outb, &errb
	err := cmd.Run()
	out, stderr := outb.String(), errb.String()
	// The verdict is not this test's subject: an unknown one (exit 2, e.g. a
	// busy machine) still wrote every file there is to search.
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 2) {
		t.Fatalf("run: %v\n%s%s", err, out, stderr)
	}
	if strings.Contains(out, pw) || strings.Contains(stderr, pw) {
		t.Errorf("the password reached the terminal output")
	}
	n := 0
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			n++
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(pw)) {
				t.Errorf("%s contains the planted password", p)
			}
		}
		return nil
	})
	if n < 5 {
		t.Errorf("only %d files written, want result.json, histories, junit.xml, summary.md, report.html", n)
	}
}

func TestReadmeResults(t *testing.T) {
	section, err := ReadmeResults(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "docs", "results.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(path, []byte(ReplaceReadmeResults(string(b), section)), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got := ReadmeSection(string(b)); got != section {
		t.Errorf("docs/results.md's table differs from what the code produces today; run\n  go test ./internal/cli -run TestReadmeResults -update\nwant:\n%s\ngot:\n%s", section, got)
	}
}

// TestHTMLInChromium renders the evidence page of a run in headless Chromium:
// no console error, and a screenshot that is not blank.
func TestHTMLInChromium(t *testing.T) {
	bin := "/usr/bin/chromium"
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("Chromium is absent (%s); .ci/run installs Debian's chromium", bin)
	}
	dir := t.TempDir()
	if _, _, err := runCLI(t, RunOptions{Seed: 1, Out: dir, Command: "durachk run"}); err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(dir, "report.html")
	html, _ := os.ReadFile(page)
	for _, bad := range []string{"<script", "http://", "https://", "<link", "@import"} {
		if bytes.Contains(bytes.ReplaceAll(html, []byte(`xmlns="http://www.w3.org/2000/svg"`), nil), []byte(bad)) {
			t.Errorf("report.html contains %q: not self-contained", bad)
		}
	}
	profile := t.TempDir()
	shot := filepath.Join(dir, "shot.png")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--user-data-dir="+profile, "--window-size=1280,2000", "--screenshot="+shot, "--enable-logging=stderr", "--v=0", "file://"+page)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, "CONSOLE") || strings.Contains(l, "Uncaught") {
			t.Errorf("console message: %s", l)
		}
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v\n%s", err, stderr.String())
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if n := colours(img, 16); n < 8 {
		t.Errorf("screenshot has %d colours, want a rendered page (≥ 8)", n)
	}
}

// colours counts distinct colours, stopping at limit.
func colours(img image.Image, limit int) int {
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 3 {
		for x := b.Min.X; x < b.Max.X; x += 3 {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[[4]uint32{r, g, bl, a}] = true
			if len(seen) >= limit {
				return len(seen)
			}
		}
	}
	return len(seen)
}
