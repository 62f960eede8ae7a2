// Package examples holds files for users to copy (no Go code); its test runs
// the example gate workflow's steps as they are written.
package examples

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/lazyfs"
	"github.com/durachk/durachk/reports"
)

// step is a step of a workflow job or of a composite action.
type step struct {
	Name  string            `yaml:"name"`
	If    string            `yaml:"if"`
	Uses  string            `yaml:"uses"`
	Run   string            `yaml:"run"`
	Shell string            `yaml:"shell"`
	With  map[string]string `yaml:"with"`
	Env   map[string]string `yaml:"env"`
}

type workflow struct {
	Env  map[string]string `yaml:"env"`
	Jobs map[string]struct {
		Env   map[string]string `yaml:"env"`
		Steps []step            `yaml:"steps"`
	} `yaml:"jobs"`
}

type action struct {
	Inputs map[string]struct {
		Default string `yaml:"default"`
	} `yaml:"inputs"`
	Runs struct {
		Using string `yaml:"using"`
		Steps []step `yaml:"steps"`
	} `yaml:"runs"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// The durachk action as a workflow names it (owner/name@ref), and the
// Redis configuration the Docker step mounts.
var (
	durachkAction = regexp.MustCompile(`^durachk/durachk@[A-Za-z0-9._/-]+$`)
	mountedConf   = regexp.MustCompile(`-v "\$PWD/([^":]+):`)
	expr          = regexp.MustCompile(`\$\{\{\s*([^}]*?)\s*\}\}`)
)

// job runs a workflow job's steps on this machine the way a runner would,
// in workspace, with the environment a runner gives (RUNNER_TEMP,
// GITHUB_PATH, GITHUB_STEP_SUMMARY, ...). Docker aside: a step that runs
// docker is not run (the test started its stand-in), nor are the reporting
// steps (an if: condition) and third-party actions (checkout, upload,
// JUnit publishing); the durachk action's own steps run as action.yml gives
// them, with the inputs the job's with: gives, Go's setup aside.
type job struct {
	t         *testing.T
	repo      string // this repository: the action's files
	workspace string
	env       map[string]string
	act       action
	stdout    bytes.Buffer
	// failed names the step that failed, and its exit code.
	failed string
	code   int
}

func (j *job) run(steps []step) {
	for _, s := range steps {
		if j.failed != "" {
			return
		}
		switch {
		case s.If != "":
			continue // reports after the fact: failure(), always()
		case strings.HasPrefix(s.Uses, "actions/checkout@"):
			continue // the workspace is laid out
		case durachkAction.MatchString(s.Uses):
			j.action(s)
		case s.Uses != "":
			continue
		case strings.Contains(s.Run, "docker "):
			continue // the test runs the Redis under test itself
		default:
			j.script(s.Name, s.Run, s.Shell, s.Env, nil)
		}
	}
}

func (j *job) action(call step) {
	inputs := map[string]string{}
	for k, in := range j.act.Inputs {
		inputs[k] = in.Default
	}
	for k, v := range call.With {
		if _, ok := j.act.Inputs[k]; !ok {
			j.t.Fatalf("step %q gives the action an input it does not have: %s", call.Name, k)
		}
		inputs[k] = v
	}
	for _, s := range j.act.Runs.Steps {
		if j.failed != "" {
			return
		}
		if s.Uses != "" {
			continue // actions/setup-go: Go is here
		}
		if s.If != "" {
			m := regexp.MustCompile(`^inputs\.([a-z-]+) == '([^']*)'$`).FindStringSubmatch(s.If)
			if m == nil {
				j.t.Fatalf("action step %q: if %q: the test reads only inputs.NAME == 'value'", s.Name, s.If)
			}
			if inputs[m[1]] != m[2] {
				continue
			}
		}
		j.script(s.Name, s.Run, s.Shell, s.Env, inputs)
	}
}

// script runs one run: step with bash, as a runner does for its shell
// (bash with -e, and pipefail where the step names bash), its ${{ }}
// expressions substituted: the action's path and inputs only.
func (j *job) script(name, run, shell string, stepEnv map[string]string, inputs map[string]string) {
	t := j.t
	sub := func(s string) string {
		return expr.ReplaceAllStringFunc(s, func(m string) string {
			e := expr.FindStringSubmatch(m)[1]
			if e == "github.action_path" && inputs != nil {
				return j.repo
			}
			if k, ok := strings.CutPrefix(e, "inputs."); ok && inputs != nil {
				if v, ok := inputs[k]; ok {
					return v
				}
			}
			t.Fatalf("step %q: the test cannot evaluate ${{ %s }}", name, e)
			return ""
		})
	}
	env := os.Environ()
	for k, v := range j.env {
		env = append(env, k+"="+v)
	}
	for k, v := range stepEnv {
		env = append(env, k+"="+sub(v))
	}
	if inputs != nil {
		env = append(env, "GITHUB_ACTION_PATH="+j.repo)
	}
	var paths []string
	if b, err := os.ReadFile(j.env["GITHUB_PATH"]); err == nil {
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if l != "" {
				paths = append([]string{l}, paths...)
			}
		}
	}
	env = append(env, "PATH="+strings.Join(append(paths, os.Getenv("PATH")), string(os.PathListSeparator)))
	args := []string{"-e", "-c", sub(run)}
	if shell == "bash" {
		args = []string{"--noprofile", "--norc", "-eo", "pipefail", "-c", sub(run)}
	} else if shell != "" {
		t.Fatalf("step %q: shell %q", name, shell)
	}
	cmd := exec.Command("bash", args...)
	cmd.Dir, cmd.Env = j.workspace, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	j.stdout.Write(out.Bytes())
	t.Logf("step %q: %v\n%s", name, err, tail(out.String(), 40))
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		j.failed, j.code = name, ee.ExitCode()
	case err != nil:
		t.Fatalf("step %q: %v", name, err)
	}
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = append([]string{fmt.Sprintf("… %d lines", len(l)-n)}, l[len(l)-n:]...)
	}
	return strings.Join(l, "\n")
}

// startRedis starts redis-server from conf on a free loopback port, as the
// workflow's Docker step does from the same file; it is stopped at the
// test's end.
func startRedis(t *testing.T, conf string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	cmd := exec.Command("redis-server", conf, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir, "--daemonize", "no")
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_, _ = c.Write([]byte("PING\r\n"))
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") {
				return "redis://" + addr + "/0"
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server %s did not answer PING on %s", conf, addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type junit struct {
	Failures int `xml:"failures,attr"`
	Errors   int `xml:"errors,attr"`
	Suites   []struct {
		Name  string `xml:"name,attr"`
		Cases []struct {
			Name    string    `xml:"name,attr"`
			Failure *struct{} `xml:"failure"`
			Error   *struct{} `xml:"error"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGateWorkflow runs the steps of github-actions.yml's gate job — the
// durachk action's install, brokers and gate scripts with the job's inputs —
// against a Redis started from the redis.conf the job mounts, as committed
// (`appendfsync always`) and with `appendfsync everysec`. The gate passes on
// always and fails on everysec, on a violation of durability.power-loss
// (jobs lost: the private instance copied everysec from the server); the
// JUnit report fails exactly when the gate does. Without a committed
// baseline, the first run writes one and passes.
func TestGateWorkflow(t *testing.T) {
	if err := lazyfs.Available(); err != nil {
		t.Skipf("durability.power-loss cannot cut a private broker's power here: %v", err)
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("no redis-server: the durachk action installs it on a runner, not here")
	}
	store := os.Getenv("DURACHK_PG_URL")
	if store == "" {
		t.Skip("DURACHK_PG_URL is not set: no effect store")
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var wf workflow
	readYAML(t, "github-actions.yml", &wf)
	var act action
	readYAML(t, "../action.yml", &act)
	if act.Runs.Using != "composite" {
		t.Fatalf("action.yml runs using %q, want composite", act.Runs.Using)
	}
	gate, ok := wf.Jobs["gate"]
	if !ok {
		t.Fatal("github-actions.yml has no job gate")
	}
	var call step
	var conf, junitPath string
	for _, s := range gate.Steps {
		if durachkAction.MatchString(s.Uses) {
			call = s
		}
		if m := mountedConf.FindStringSubmatch(s.Run); m != nil && strings.Contains(s.Run, "docker run") {
			conf = m[1]
		}
		if strings.HasPrefix(s.Uses, "mikepenz/action-junit-report@") {
			junitPath = s.With["report_paths"]
		}
	}
	if call.Uses == "" || conf == "" || junitPath == "" {
		t.Fatalf("the gate job: durachk action %q, Redis configuration mounted %q, JUnit published %q: want all", call.Uses, conf, junitPath)
	}
	for _, k := range []string{"REDIS_URL", "DURACHK_STORE_URL"} {
		if wf.Env[k] == "" {
			t.Fatalf("the workflow's env has no %s, which the test points at its own Redis and store", k)
		}
	}
	baseline, out := call.With["baseline"], call.With["out"]
	if baseline == "" || out == "" || !strings.HasPrefix(junitPath, out+"/") {
		t.Fatalf("the action's baseline %q, out %q, JUnit %q: want a baseline and the JUnit report in out", baseline, out, junitPath)
	}
	committed, err := reports.ReadBaseline(filepath.Join(repo, baseline))
	if err != nil {
		t.Fatal(err)
	}
	always, err := os.ReadFile(filepath.Join(repo, conf))
	if err != nil {
		t.Fatal(err)
	}
	fsyncLine := regexp.MustCompile(`(?m)^appendfsync always$`)
	if n := len(fsyncLine.FindAll(always, -1)); n != 1 {
		t.Fatalf("%s has %d lines 'appendfsync always', want 1", conf, n)
	}
	everysec := fsyncLine.ReplaceAll(always, []byte("appendfsync everysec"))

	// run lays out a repository as a user would hold it (the files of the
	// workflow's paths), starts its Redis and runs the job.
	run := func(t *testing.T, redisConf []byte, withBaseline bool) (*job, string) {
		ws := t.TempDir()
		copyTree(t, filepath.Join(repo, filepath.Dir(baseline)), filepath.Join(ws, filepath.Dir(baseline)))
		copyTree(t, filepath.Join(repo, filepath.Dir(conf)), filepath.Join(ws, filepath.Dir(conf)))
		if err := os.WriteFile(filepath.Join(ws, conf), redisConf, 0o644); err != nil {
			t.Fatal(err)
		}
		if !withBaseline {
			if err := os.Remove(filepath.Join(ws, baseline)); err != nil {
				t.Fatal(err)
			}
		}
		runner := t.TempDir()
		j := &job{t: t, repo: repo, workspace: ws, act: act, env: map[string]string{}}
		for k, v := range wf.Env {
			j.env[k] = v
		}
		for k, v := range gate.Env {
			j.env[k] = v
		}
		j.env["REDIS_URL"] = startRedis(t, filepath.Join(ws, conf))
		j.env["DURACHK_STORE_URL"] = store
		for k, f := range map[string]string{"GITHUB_PATH": "path", "GITHUB_ENV": "env", "GITHUB_OUTPUT": "output", "GITHUB_STEP_SUMMARY": "summary.md"} {
			j.env[k] = filepath.Join(runner, f)
		}
		j.env["RUNNER_TEMP"], j.env["GITHUB_WORKSPACE"] = runner, ws
		j.run(gate.Steps)
		return j, ws
	}
	read := func(t *testing.T, ws string) (*reports.Document, junit) {
		var doc reports.Document
		b, err := os.ReadFile(filepath.Join(ws, out, "result.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		var ju junit
		b, err = os.ReadFile(filepath.Join(ws, junitPath))
		if err != nil {
			t.Fatal(err)
		}
		if err := xml.Unmarshal(b, &ju); err != nil {
			t.Fatalf("%s: %v", junitPath, err)
		}
		return &doc, ju
	}
	// agree: the JUnit report fails exactly when the gate does.
	agree := func(t *testing.T, j *job, ju junit) {
		if red := ju.Failures+ju.Errors > 0; red != (j.code != 0) {
			t.Errorf("JUnit: %d failures, %d errors; the gate exited %d", ju.Failures, ju.Errors, j.code)
		}
	}
	powerLoss := func(t *testing.T, doc *reports.Document) contracts.Result {
		for _, r := range doc.Results {
			if r.Contract == "durability.power-loss" {
				return r
			}
		}
		t.Fatalf("result.json has no durability.power-loss")
		return contracts.Result{}
	}
	// summary: the job summary (durachk appends its own) says want.
	summary := func(t *testing.T, j *job, want string) {
		b, _ := os.ReadFile(j.env["GITHUB_STEP_SUMMARY"])
		if !strings.Contains(string(b), want) {
			t.Errorf("the job summary does not say %q:\n%s", want, tail(string(b), 20))
		}
	}
	settingFrom := func(t *testing.T, j *job, want string) {
		if !strings.Contains(j.stdout.String(), want) {
			t.Errorf("the run does not name the private instance's setting %q:\n%s", want, tail(j.stdout.String(), 30))
		}
	}

	t.Run("first run writes the baseline", func(t *testing.T) {
		j, ws := run(t, always, false)
		if j.failed != "" {
			t.Fatalf("step %q exited %d, want the first run to pass", j.failed, j.code)
		}
		written, err := reports.ReadBaseline(filepath.Join(ws, baseline))
		if err != nil {
			t.Fatalf("no baseline written: %v", err)
		}
		if v := written["redis"]["durability.power-loss"]; v != contracts.Pass {
			t.Errorf("the written baseline expects durability.power-loss %q, want pass", v)
		}
		_, ju := read(t, ws)
		agree(t, j, ju)
		summary(t, j, "commit it")
	})
	t.Run("appendfsync always passes", func(t *testing.T) {
		j, ws := run(t, always, true)
		if j.failed != "" {
			t.Errorf("step %q exited %d, want the gate to pass", j.failed, j.code)
		}
		doc, ju := read(t, ws)
		agree(t, j, ju)
		if r := powerLoss(t, doc); r.Verdict != committed[r.Target][r.Contract] || r.Verdict != contracts.Pass {
			t.Errorf("durability.power-loss %s (%s), the baseline expects %s", r.Verdict, r.Reason, committed[r.Target][r.Contract])
		}
		settingFrom(t, j, "appendfsync=always (server)")
	})
	t.Run("appendfsync everysec fails", func(t *testing.T) {
		j, ws := run(t, everysec, true)
		if j.failed != "Run the contracts and gate on the baseline" && !strings.Contains(j.failed, "gate") {
			t.Errorf("step %q failed, want the gate's", j.failed)
		}
		if j.code != 1 {
			t.Errorf("the gate exited %d, want 1 (a verdict differs from the baseline)", j.code)
		}
		doc, ju := read(t, ws)
		agree(t, j, ju)
		r := powerLoss(t, doc)
		var props []string
		for _, v := range r.Violations {
			props = append(props, string(v.Property))
		}
		if r.Verdict != contracts.Violated || !slices.Contains(props, "lost") {
			t.Errorf("durability.power-loss %s (%s), properties %v: want a violation, jobs lost", r.Verdict, r.Reason, props)
		}
		if !strings.Contains(j.stdout.String(), "durability.power-loss pass → violation") {
			t.Errorf("the gate does not print the difference:\n%s", tail(j.stdout.String(), 30))
		}
		failed := false
		for _, s := range ju.Suites {
			for _, c := range s.Cases {
				failed = failed || c.Name == "durability.power-loss" && (c.Failure != nil || c.Error != nil)
			}
		}
		if !failed {
			t.Errorf("JUnit does not fail durability.power-loss")
		}
		settingFrom(t, j, "appendfsync=everysec (server)")
		summary(t, j, "durability.power-loss")
	})
}
