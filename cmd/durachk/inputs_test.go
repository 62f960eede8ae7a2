package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/durachk/durachk/internal/cli"
	"github.com/durachk/durachk/internal/natsserver"
	"github.com/durachk/durachk/internal/runner"
)

// TestMain lets the test binary be durachk itself: with DURACHK_MAIN_TEST=1 it
// runs main() with its arguments, so that a test sees exactly what a user
// sees on stderr (library log lines included) and the process's exit code.
func TestMain(m *testing.M) {
	// First: the children of a real run it starts as durachk are this binary
	// too, its private NATS server included.
	runner.ServeChildIfAsked()
	natsserver.ServeIfAsked()
	if os.Getenv("DURACHK_MAIN_TEST") == "1" {
		main()
		return
	}
	// The tests themselves end on SIGINT as go test's do (the interrupt
	// package listens from its init, for main).
	signal.Reset(os.Interrupt, syscall.SIGTERM)
	os.Exit(m.Run())
}

// durachk runs the binary in dir with args and extra environment.
func durachk(t *testing.T, dir string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "DURACHK_MAIN_TEST=1"), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("durachk %q: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// fixtures writes the files the table below reads: configurations,
// baselines and result documents (one honest, the others doctored).
func fixtures(t *testing.T, dir string) {
	t.Helper()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("empty-targets.yaml", "targets: []\n")
	write("two-urls.yaml", "targets:\n  - url: redis://127.0.0.1:6379/0\n    url: postgres://127.0.0.1:5432/test\n")
	write("unknown-key.yaml", "seed: 1\ntarget:\n  - url: mem\n")
	write("unknown-knob.yaml", "targets:\n  - url: mem\n    deliverylimit: 3\n")
	write("dup-names.yaml", "targets:\n  - {name: a, url: mem}\n  - {name: a, url: 'mem?delivery_limit=2'}\n")
	write("two-docs.yaml", "targets:\n  - url: mem\n---\ntargets:\n  - url: mem\n")
	write("null-knob.yaml", "targets:\n  - url: mem\n    delivery_limit:\n")
	write("bad-store.yaml", "targets:\n  - url: mem\nstore: redis://127.0.0.1:6379\n")
	write("garbage.yaml", "\x00\x01\x02 ::: [\n")
	write("plan-unknown-field.yaml", "format: durachk.plan/v1\nseed: 1\njobs:\n  - id: a\n    colour: red\n")
	write("plan-bad-fault.yaml", "format: durachk.plan/v1\nseed: 1\njobs:\n  - id: a\nfaults:\n  - kind: reply_loss\n    link: store\n    for: 1s\n    rate: 7\n")
	write("plan-long-gap.yaml", "format: durachk.plan/v1\nseed: 1\nlimit: 1000000h\njobs:\n  - id: a\n    at: 999999h\n")
	write("plan-late-job.yaml", "format: durachk.plan/v1\nseed: 1\nlimit: 1h\njobs:\n  - id: a\n    at: 2h\n")
	write("plan-idle.yaml", "format: durachk.plan/v1\nseed: 1\nworkers: 64\nlimit: 24h\njobs:\n  - id: a\n")
	write("plan-many-jobs.yaml", "format: durachk.plan/v1\nseed: 1\njobs:\n  - id: a\n    count: 20000\n  - id: b\n")
	write("plan-20000.yaml", "format: durachk.plan/v1\nseed: 1\njobs:\n  - id: a\n    count: 20000\n")
	write("empty.jsonl", "")
	write("garbage.jsonl", "garbage\n")
	write("a-file", "not a directory\n")
	write("baseline-empty.json", "{}\n")
	write("baseline-unknown-contract.json", `{"mem": {"no.such": "pass"}}`)
	write("baseline-unmeasured-target.json", `{"mem": {"lease.redelivery": "pass"}, "redis-aof": {"lease.redelivery": "pass"}}`)
	write("baseline-unselected-contract.json", `{"mem": {"lease.redelivery": "pass", "order.fifo": "pass"}}`)
	write("baseline-bad-verdict.json", `{"mem": {"lease.redelivery": "passed"}}`)
	write("baseline-dup-target.json", `{"mem": {"lease.redelivery": "pass"}, "mem": {"lease.redelivery": "violation"}}`)
	write("baseline-list.json", `[1, 2]`)
	if err := os.Mkdir(filepath.Join(dir, "a-directory"), 0o755); err != nil {
		t.Fatal(err)
	}

	// An honest run to doctor.
	if _, stderr, code := durachk(t, dir, nil, "run", "--contract", "lease.redelivery", "--out", "honest", "--format", "json"); code != 0 {
		t.Fatalf("honest run: exit %d\n%s", code, stderr)
	}
	b, err := os.ReadFile(filepath.Join(dir, "honest", "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	doctor := func(name string, edit func(doc map[string]any)) {
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		edit(doc)
		out, _ := json.MarshalIndent(doc, "", "  ")
		write(name, string(out))
	}
	doctor("maybe.json", func(doc map[string]any) {
		doc["results"].([]any)[0].(map[string]any)["verdict"] = "maybe"
	})
	doctor("real-target.json", func(doc map[string]any) {
		ti := doc["targets"].([]any)[0].(map[string]any)
		ti["name"], ti["kind"], ti["endpoint"], ti["url"] = "redis", "redis", "local", "redis://127.0.0.1:6379/0"
		doc["results"].([]any)[0].(map[string]any)["target"] = "redis"
	})
	doctor("escape.json", func(doc map[string]any) {
		for _, ev := range doc["evidence"].(map[string]any) {
			ev.(map[string]any)["history"] = "../../../../etc/passwd"
		}
	})
	doctor("wrong-schema.json", func(doc map[string]any) { doc["schema"] = "durachk.result/v0" })
	doctor("huge-jobs.json", func(doc map[string]any) { doc["jobs"] = 1_000_000_000 })
	write("truncated.json", string(b[:len(b)/2]))
}

// TestGarbageIsRefused: every malformed input exits 3 with one line on
// stderr naming the cause, and no output, through the real binary.
func TestGarbageIsRefused(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the real-process paths are Linux only")
	}
	dir := t.TempDir()
	fixtures(t, dir)
	huge := "redis://" + strings.Repeat("a", 100_000) + ":6379/0"
	tests := []struct {
		name string
		args []string
		env  []string // extra environment
		want string   // the one line must contain it
		need string   // environment variable the case needs (a real broker)
	}{
		// Each input of issue 12, in its order.
		{name: "empty --target", args: []string{"run", "--target", ""}, want: "--target: empty value"},
		{name: "config with targets: []", args: []string{"run", "-c", "empty-targets.yaml"}, want: "targets: empty list"},
		{name: "empty --out", args: []string{"run", "--out", ""}, want: "--out: empty value"},
		{name: "x-delivery-limit=abc", args: []string{"run", "--target", "amqp://guest:guest@127.0.0.1:5672/?queue-arguments.x-delivery-limit=abc"},
			want: `queue-arguments.x-delivery-limit="abc": want a whole number`},
		{name: "baseline {}", args: []string{"run", "--baseline", "baseline-empty.json"}, want: "names no target"},
		{name: "baseline with an unknown contract", args: []string{"run", "--baseline", "baseline-unknown-contract.json"}, want: `unknown contract "no.such"`},
		{name: "baseline with an unmeasured target", args: []string{"run", "--contract", "lease.redelivery", "--baseline", "baseline-unmeasured-target.json"},
			want: `names target "redis-aof", which this run does not measure`},
		{name: "report of verdict maybe", args: []string{"report", "maybe.json"}, want: `verdict "maybe": want pass, violation, unknown or skipped`},
		{name: "replay of an unknown contract", args: []string{"replay", "--contract", "no.such", "honest/result.json"}, want: `unknown contract "no.such"`},
		{name: "replay of a real target without --target", args: []string{"replay", "real-target.json"}, want: "give --target with the URL"},
		{name: "two url keys in a yaml target", args: []string{"run", "-c", "two-urls.yaml"}, want: `key "url" given twice`},
		{name: "unreachable redis, no library log line", args: []string{"doctor", "--target", "redis://127.0.0.1:1/0"}, want: "unreachable: redis://127.0.0.1:1/0"},
		{name: "100 KB host", args: []string{"run", "--target", huge}, want: "(100015 bytes): the URL is 100015 bytes long"},
		{name: "unreachable store", args: []string{"run", "--contract", "lease.redelivery", "--target", "${DURACHK_REDIS_URL}"},
			env: []string{"DURACHK_STORE_URL=postgres://postgres@127.0.0.1:1/test?sslmode=disable"}, need: "DURACHK_REDIS_URL",
			want: "effect store postgres://postgres@127.0.0.1:1/test?sslmode=disable (of target redis)"},

		// The same families.
		{name: "baseline expects an unselected contract", args: []string{"run", "--contract", "lease.redelivery", "--baseline", "baseline-unselected-contract.json"},
			want: "expects mem/order.fifo, which this run does not select"},
		{name: "baseline with a bad verdict", args: []string{"run", "--contract", "lease.redelivery", "--baseline", "baseline-bad-verdict.json"}, want: `verdict "passed"`},
		{name: "baseline naming a target twice", args: []string{"run", "--baseline", "baseline-dup-target.json"}, want: `target "mem" given twice`},
		{name: "baseline not an object", args: []string{"run", "--baseline", "baseline-list.json"}, want: "baseline"},
		{name: "empty --baseline", args: []string{"run", "--baseline", ""}, want: "--baseline: empty value"},
		{name: "empty --config", args: []string{"run", "-c", ""}, want: "--config: empty value"},
		{name: "empty --contract", args: []string{"run", "--contract", ""}, want: "--contract: empty value"},
		{name: "empty --format", args: []string{"run", "--format", ""}, want: "--format: empty value"},
		{name: "bad --format", args: []string{"run", "--format", "pdf"}, want: `--format "pdf"`},
		{name: "bad report --format", args: []string{"report", "--format", "pdf", "honest/result.json"}, want: `format "pdf"`},
		{name: "bad compare --format", args: []string{"compare", "--format", "pdf", "honest/result.json"}, want: `--format "pdf"`},
		{name: "negative --jobs", args: []string{"run", "--jobs", "-1"}, want: "--jobs -1"},
		{name: "absurd --jobs", args: []string{"run", "--jobs", "99999999"}, want: "--jobs 99999999"},
		{name: "negative selftest --jobs", args: []string{"selftest", "--jobs", "-1"}, want: "--jobs -1"},
		{name: "empty selftest --contract", args: []string{"selftest", "--contract", ""}, want: "--contract: empty value"},
		{name: "negative selftest --seeds", args: []string{"selftest", "--seeds", "-1"}, want: "--seeds -1: want 1 to 1000"},
		{name: "absurd selftest --seeds", args: []string{"selftest", "--seeds", "1001"}, want: "--seeds 1001: want 1 to 1000"},
		{name: "empty cleanup --target", args: []string{"cleanup", "--target", ""}, want: "--target: empty value"},
		{name: "empty report --output", args: []string{"report", "-o", "", "honest/result.json"}, want: "--output: empty value"},
		{name: "garbage --seed", args: []string{"run", "--seed", "-1"}, want: `invalid argument "-1" for "--seed"`},
		{name: "unknown scenario", args: []string{"run", "--scenario", "nope"}, want: `unknown scenario "nope"`},
		{name: "plan with an unknown field", args: []string{"run", "--plan", "plan-unknown-field.yaml"}, want: "field colour not found"},
		{name: "plan with a bad rate", args: []string{"run", "--plan", "plan-bad-fault.yaml"}, want: "rate 7: want a probability"},
		{name: "missing plan", args: []string{"run", "--plan", "no-such.yaml"}, want: "no such file"},
		{name: "plan of no contract", args: []string{"plan"}, want: "name one --contract or one --scenario"},
		{name: "plan of an unknown contract", args: []string{"plan", "--contract", "no.such"}, want: `unknown contract "no.such"`},
		{name: "empty --plan", args: []string{"run", "--plan", ""}, want: "--plan: empty value"},
		{name: "knob given twice", args: []string{"run", "--target", "postgres://127.0.0.1:5432/test?fifo=true&fifo=false"}, want: `setting "fifo" given 2 times`},
		{name: "mem knob given twice", args: []string{"run", "--target", "mem?delivery_limit=1&delivery_limit=2"}, want: `setting "delivery_limit" given 2 times`},
		{name: "negative mem knob", args: []string{"run", "--target", "mem?delivery_limit=-1"}, want: `delivery_limit="-1"`},
		{name: "negative postgres knob", args: []string{"run", "--target", "postgres://127.0.0.1:5432/test?delivery_limit=-3"}, want: `delivery_limit="-3"`},
		{name: "garbage redis knob", args: []string{"run", "--target", "redis://127.0.0.1:6379/0?stream.maxlen=many"}, want: `stream.maxlen="many"`},
		{name: "negative rabbit knob", args: []string{"run", "--target", "amqp://127.0.0.1:5672/?prefetch=-1"}, want: `prefetch="-1"`},
		{name: "16-bit rabbit knob", args: []string{"run", "--target", "amqp://127.0.0.1:5672/?heartbeat=100000"}, want: `heartbeat="100000": at most 65535`},
		{name: "garbage rabbit enum", args: []string{"run", "--target", "amqp://127.0.0.1:5672/?queue-arguments.x-overflow=drop"}, want: `x-overflow="drop"`},
		{name: "garbage sqs knob", args: []string{"run", "--target", "sqs://127.0.0.1:4566?redrive.maxReceiveCount=0"}, want: `redrive.maxReceiveCount="0"`},
		{name: "unknown knob", args: []string{"run", "--target", "redis://127.0.0.1:6379/0?no_such=1"}, want: `unknown setting "no_such"`},
		{name: "bad query escape", args: []string{"run", "--target", "redis://127.0.0.1:6379/0?a=%zz"}, want: `invalid URL escape "%zz"`},
		{name: "long host name", args: []string{"run", "--target", "redis://" + strings.Repeat("h", 300) + ":6379/0"}, want: "a host name has at most 253"},
		{name: "space in the host", args: []string{"run", "--target", "redis://127.0.0.1 x:6379/0"}, want: "a space before the query"},
		{name: "control character in a URL", args: []string{"run", "--target", "redis://127.0.0.1:6379/0\nx"}, want: "control character"},
		{name: "unknown broker kind", args: []string{"run", "--target", "pulsar://127.0.0.1:6650"}, want: `unknown broker kind "pulsar"`},
		{name: "not a URL", args: []string{"run", "--target", "nonsense"}, want: `target "nonsense": want mem or a broker URL`},
		{name: "duplicate --target names", args: []string{"run", "--target", "mem", "--target", "mem"}, want: `target name "mem" used twice`},
		{name: "duplicate yaml names", args: []string{"run", "-c", "dup-names.yaml"}, want: `target name "a" used twice`},
		{name: "unknown yaml key", args: []string{"run", "-c", "unknown-key.yaml"}, want: `unknown key "target"`},
		{name: "unknown yaml knob", args: []string{"run", "-c", "unknown-knob.yaml"}, want: `unknown setting "deliverylimit"`},
		{name: "yaml knob without a value", args: []string{"run", "-c", "null-knob.yaml"}, want: "delivery_limit: no value"},
		{name: "two yaml documents", args: []string{"run", "-c", "two-docs.yaml"}, want: "more than one YAML document"},
		{name: "store that is not postgres", args: []string{"run", "-c", "bad-store.yaml"}, want: "store: want a postgres:// URL"},
		{name: "garbage yaml", args: []string{"run", "-c", "garbage.yaml"}, want: "configuration"},
		{name: "missing config", args: []string{"run", "-c", "no-such.yaml"}, want: "no such file"},
		{name: "config is a directory", args: []string{"run", "-c", "a-directory"}, want: "is a directory"},
		{name: "missing baseline", args: []string{"run", "--baseline", "no-such.json"}, want: "no such file"},
		{name: "missing result", args: []string{"report", "no-such.json"}, want: "no such file"},
		{name: "result is a directory", args: []string{"replay", "a-directory"}, want: "is a directory"},
		{name: "truncated result", args: []string{"report", "truncated.json"}, want: "not a durachk result"},
		{name: "result of another schema", args: []string{"compare", "wrong-schema.json"}, want: `schema "durachk.result/v0"`},
		{name: "result with a history outside histories/", args: []string{"report", "escape.json"}, want: "is not a file in histories/"},
		{name: "replay --target not in the result", args: []string{"replay", "--target", "mem?name=other", "honest/result.json"}, want: `named "other", which`},
		{name: "replay of a contract the result lacks", args: []string{"replay", "--contract", "order.fifo", "honest/result.json"}, want: "has no result of order.fifo"},

		// Issue 20: bounds, checked before anything runs.
		{name: "--trials 0", args: []string{"run", "--trials", "0"}, want: "--trials 0: want 1 to 1000"},
		{name: "--trials 1000000000", args: []string{"run", "--trials", "1000000000"}, want: "--trials 1000000000: want 1 to 1000"},
		{name: "--jobs × --trials", args: []string{"run", "--jobs", "10000", "--trials", "11"}, want: "--jobs 10000 × --trials 11"},
		{name: "--parallel 1000", args: []string{"run", "--parallel", "1000"}, want: "--parallel 1000: want 1 to 64"},
		{name: "explore --rounds 10000000", args: []string{"explore", "--rounds", "10000000"}, want: "--rounds 10000000: want 1 to 1000000"},
		{name: "explore --duration 1000h", args: []string{"explore", "--duration", "1000h"}, want: "--duration 1000h: want 1s to 168h"},
		{name: "explore --shrink-k over --shrink-n", args: []string{"explore", "--rounds", "1", "--shrink-k", "3", "--shrink-n", "2"}, want: "--shrink-k 3: want at most --shrink-n 2"},
		{name: "plan --jobs 10001", args: []string{"plan", "--contract", "lease.redelivery", "--jobs", "10001"}, want: "--jobs 10001: want 1 to 10000"},
		{name: "mem delivery_limit 5000", args: []string{"run", "--target", "mem?delivery_limit=5000"}, want: `delivery_limit="5000": want 0 (none) to 1000`},
		{name: "plan with a limit of 1000000h", args: []string{"run", "--plan", "plan-long-gap.yaml"}, want: "limit 1000000h0m0s: want 1s to 24h0m0s"},
		{name: "plan with a job after its limit", args: []string{"run", "--plan", "plan-late-job.yaml"}, want: "at 2h0m0s: want at most the plan's limit (1h0m0s)"},
		{name: "plan that idles 64 workers a day", args: []string{"run", "--plan", "plan-idle.yaml"}, want: "workers 64 × limit 24h0m0s ÷ poll 200ms"},
		{name: "plan of 20001 jobs", args: []string{"run", "--plan", "plan-many-jobs.yaml"}, want: "jobs: 20001 with their counts: want at most 20000"},
		{name: "plan of 20000 jobs × --trials 6", args: []string{"run", "--plan", "plan-20000.yaml", "--trials", "6"}, want: "--plan plan-20000.yaml: 20000 jobs × --trials 6"},
		{name: "replay of a result with 10^9 jobs", args: []string{"replay", "huge-jobs.json"}, want: "jobs 1000000000: want 1 to 10000"},
		// The smaller items of issue 20.
		{name: "--contract given twice", args: []string{"run", "--contract", "lease.redelivery", "--contract", "lease.redelivery"}, want: "--contract lease.redelivery: given twice"},
		{name: "a scenario in all and by name", args: []string{"run", "--scenario", "all", "--scenario", "poison-job"}, want: "scenario/poison-job: selected twice"},
		{name: "selftest --contract given twice", args: []string{"selftest", "--contract", "order.fifo", "--contract", "order.fifo"}, want: "--contract order.fifo: given twice"},
		{name: "--out names a file", args: []string{"run", "--out", "a-file"}, want: "--out a-file: is a file, not a directory"},
		{name: "--out below a file", args: []string{"run", "--out", "a-file/x"}, want: "--out a-file/x: a-file is a file"},
		{name: "check of an empty history", args: []string{"check", "empty.jsonl"}, want: "history empty.jsonl: no operation"},
		{name: "check of a garbage line", args: []string{"check", "garbage.jsonl"}, want: "garbage.jsonl: history line 1: invalid character"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.need != "" && os.Getenv(tc.need) == "" {
				t.Skipf("needs $%s (a real broker)", tc.need)
			}
			args := make([]string, len(tc.args))
			for i, a := range tc.args {
				args[i] = os.ExpandEnv(a)
			}
			args = append(args, outFlag(tc.args)...)
			stdout, stderr, code := durachk(t, dir, tc.env, args...)
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			if code != cli.ExitConfig || len(lines) != 1 || !strings.HasPrefix(lines[0], "durachk: ") || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("exit %d, stderr (%d lines):\n%.2000s\nwant exit 3 and one line containing %q", code, len(lines), stderr, tc.want)
			}
			if len(lines[0]) > 1000 {
				t.Errorf("the line is %d bytes long: %.200s…", len(lines[0]), lines[0])
			}
			if tc.args[0] != "doctor" && stdout != "" {
				t.Errorf("stdout is not empty:\n%.500s", stdout)
			}
		})
	}
}

// outFlag keeps runs that would pass from writing into the package's
// directory: a case without --out gets one in its temporary directory.
func outFlag(args []string) []string {
	if args[0] != "run" {
		return nil
	}
	for _, a := range args {
		if a == "--out" {
			return nil
		}
	}
	return []string{"--out", "out"}
}

// TestVersion: --version and `version` print the build and exit 0.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		stdout, stderr, code := durachk(t, t.TempDir(), nil, args...)
		if code != 0 || !strings.HasPrefix(stdout, "durachk ") || !strings.Contains(stdout, runtime.Version()) || stderr != "" {
			t.Errorf("durachk %s: exit %d, stdout %q, stderr %q; want exit 0 and the version with %s", args[0], code, stdout, stderr, runtime.Version())
		}
	}
}

// TestReplayKeepsTheEmbeddedKnobs: a run on mem?delivery_limit=1 replays on
// the same configuration and reproduces (it used to replay plain mem).
func TestReplayKeepsTheEmbeddedKnobs(t *testing.T) {
	dir := t.TempDir()
	if _, stderr, code := durachk(t, dir, nil, "run", "--target", "mem?delivery_limit=1", "--contract", "retry.bounded", "--contract", "lease.redelivery", "--out", "o", "--format", "json"); code != cli.ExitPass && code != cli.ExitViolation && code != cli.ExitUnknown {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	stdout, stderr, code := durachk(t, dir, nil, "replay", "o/result.json")
	if code != 0 || !strings.Contains(stdout, "2 replayed, 2 reproduced") {
		t.Fatalf("replay: exit %d\n%s%s", code, stdout, stderr)
	}
}
