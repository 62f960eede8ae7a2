package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/durachk/durachk/internal/config"
	"github.com/durachk/durachk/internal/targets"
	"github.com/durachk/durachk/reports"
)

// TestAtlasProfilesParse: every profile of atlas/profiles.yaml is a target
// durachk takes (its URL parses with its knobs, given the loopback URLs
// .ci/services.sh exports), says what a team would choose it for, and every
// broker kind of the docs has profiles; SQS is marked as the emulator.
func TestAtlasProfilesParse(t *testing.T) {
	env := map[string]string{
		"DURACHK_PG_URL":    "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
		"DURACHK_REDIS_URL": "redis://127.0.0.1:6379/0",
		"DURACHK_AMQP_URL":  "amqp://guest:guest@127.0.0.1:5672/",
		"DURACHK_NATS_URL":  "nats://127.0.0.1:4222",
		"DURACHK_MYSQL_URL": "mysql://root@127.0.0.1:3306/test",
		"DURACHK_SQS_URL":   "sqs://127.0.0.1:9324?region=us-east-1&endpoint-kind=fauxqs",
	}
	old := config.Getenv
	config.Getenv = func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	defer func() { config.Getenv = old }()
	idx, ps, err := loadAtlas("../../atlas/profiles.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, p := range ps {
		if p.NotRun != "" {
			t.Errorf("%s: not run: %s", p.Name, p.NotRun)
			continue
		}
		s, err := targets.Parse(p.url)
		if err != nil {
			t.Errorf("%s: %v", p.Name, err)
			continue
		}
		kinds[s.Kind]++
		if len(p.Choose) < 20 {
			t.Errorf("%s: choose %q: say what a team would choose it for", p.Name, p.Choose)
		}
		if (s.Kind == "sqs") != p.Emulator {
			t.Errorf("%s: emulator %v on kind %s: the SQS profiles run on the emulator and say so", p.Name, p.Emulator, s.Kind)
		}
	}
	for _, k := range []string{"redis", "postgres", "amqp", "nats", "sqs", "mysql"} {
		if kinds[k] < 2 {
			t.Errorf("kind %s: %d profiles, want the configurations its docs discuss (at least 2)", k, kinds[k])
		}
	}
	if len(idx.Brokers) == 0 {
		t.Errorf("no brokers")
	}
}

// TestAtlasMemResumes runs an atlas of the embedded target twice with 2
// trials: the cells carry the verdict with its rate, the profile whose
// variable is unset is shown as not run, and the second run keeps every
// complete profile and reruns only the one whose result is missing or
// incomplete.
func TestAtlasMemResumes(t *testing.T) {
	out := t.TempDir()
	o := AtlasOptions{Profiles: "testdata/atlas-mem.yaml", Trials: 2, Out: out, Command: "durachk atlas -c testdata/atlas-mem.yaml --trials 2"}
	var stdout, stderr bytes.Buffer
	if err := Atlas(context.Background(), o, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	md, err := os.ReadFile(filepath.Join(out, "atlas.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"[✅ pass in 2 of 2](#c-mem-plain--retry.bounded)",
		"[❌ moved_by_broker in 2 of 2](#c-mem-dl1--retry.bounded)",
		"**Choose** `mem-plain` (the reference broker)",
		"`mem-dl1` violates `lease.redelivery` (moved_by_broker in 2 of 2)",
		"environment variable DURACHK_ATLAS_TEST_UNSET_URL is not set",
		"Reproduce: `durachk run --seed 1 --target 'mem?name=mem-dl1&delivery_limit=1' --contract retry.bounded --trials 2`",
		"The witness's trial alone: `durachk run --seed 1 --target 'mem?name=mem-dl1&delivery_limit=1' --contract retry.bounded`",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("atlas.md lacks %q:\n%s", want, md)
		}
	}
	// Violations first: the rows of the table start with the violated ones.
	if i, j := strings.Index(string(md), "| `retry.bounded` |"), strings.Index(string(md), "| `durability.ack` |"); i < 0 || j < 0 || i > j {
		t.Errorf("rows: retry.bounded (violated) at %d, durability.ack (passes) at %d: want violations first", i, j)
	}

	// Resume: mem-plain's result kept; mem-dl1's made incomplete is rerun.
	plain := filepath.Join(out, "mem-plain", "result.json")
	before, _ := os.Stat(plain)
	dl1 := filepath.Join(out, "mem-dl1", "result.json")
	d, err := reports.ReadJSON(dl1)
	if err != nil {
		t.Fatal(err)
	}
	d.Complete = false
	if err := d.WriteJSON(dl1); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	if err := Atlas(context.Background(), o, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "mem-plain: kept") || strings.Contains(stderr.String(), "mem-dl1: kept") ||
		!strings.Contains(stdout.String(), "1 profiles run, 1 kept") {
		t.Errorf("second run: want mem-plain kept and mem-dl1 run again:\n%s%s", stdout.String(), stderr.String())
	}
	if after, _ := os.Stat(plain); !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("mem-plain's result.json was rewritten")
	}
	d, err = reports.ReadJSON(dl1)
	if err != nil || !d.Complete {
		t.Errorf("mem-dl1 after the second run: complete %v, %v", d != nil && d.Complete, err)
	}
	// A different number of trials measures again.
	o.Trials = 1
	stdout.Reset()
	stderr.Reset()
	if err := Atlas(context.Background(), o, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "2 profiles run, 0 kept") {
		t.Errorf("--trials 1 after 2: want both run again:\n%s", stdout.String())
	}

	// --render re-renders the same atlas from the files.
	md1, _ := os.ReadFile(filepath.Join(out, "atlas.md"))
	os.Remove(filepath.Join(out, "atlas.md"))
	if err := Atlas(context.Background(), AtlasOptions{Render: out}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if md2, _ := os.ReadFile(filepath.Join(out, "atlas.md")); !bytes.Equal(md1, md2) {
		t.Errorf("--render gave another atlas.md")
	}
}

// TestAtlasRefusesBadProfiles: a profile file that cannot be run is a
// configuration error naming what is wrong.
func TestAtlasRefusesBadProfiles(t *testing.T) {
	for name, body := range map[string]string{
		"no format":      "profiles: [{name: a, broker: mem, choose: x, target: {url: mem}}]",
		"no choose":      "format: durachk.atlas/v1\nprofiles: [{name: a, broker: mem, target: {url: mem}}]",
		"unknown key":    "format: durachk.atlas/v1\nprofiles: [{name: a, broker: mem, choose: x, colour: red, target: {url: mem}}]",
		"name in target": "format: durachk.atlas/v1\nprofiles: [{name: a, broker: mem, choose: x, target: {url: mem, name: b}}]",
		"bad contract":   "format: durachk.atlas/v1\nprofiles: [{name: a, broker: mem, choose: x, contracts: [nope], target: {url: mem}}]",
		"twice":          "format: durachk.atlas/v1\nprofiles: [{name: a, broker: mem, choose: x, target: {url: mem}}, {name: a, broker: mem, choose: y, target: {url: mem}}]",
		"slash":          "format: durachk.atlas/v1\nprofiles: [{name: a/b, broker: mem, choose: x, target: {url: mem}}]",
	} {
		p := filepath.Join(t.TempDir(), "p.yaml")
		os.WriteFile(p, []byte(body), 0o644)
		err := Atlas(context.Background(), AtlasOptions{Profiles: p, Out: t.TempDir()}, &bytes.Buffer{}, &bytes.Buffer{})
		if Code(err) != ExitConfig {
			t.Errorf("%s: %v (exit %d), want a configuration error", name, err, Code(err))
		}
	}
}

// TestAtlasChecksEveryProfileFirst: a profile whose target cannot be
// parsed (a knob its broker does not have, a mem setting that does not
// exist) is exit 3 before any profile runs: the fifth's bad knob was
// reported once the four before it had run.
func TestAtlasChecksEveryProfileFirst(t *testing.T) {
	for name, bad := range map[string]string{
		"unknown redis knob": `{url: "redis://127.0.0.1:6379/0", no_such_knob: 1}`,
		"unknown mem knob":   `{url: mem, fifo: "yes"}`,
	} {
		t.Run(name, func(t *testing.T) {
			var b strings.Builder
			b.WriteString("format: durachk.atlas/v1\ncontracts: [retry.bounded]\nprofiles:\n")
			for i := 1; i <= 4; i++ {
				fmt.Fprintf(&b, "  - {name: m%d, broker: mem, choose: x, target: {url: mem}}\n", i)
			}
			fmt.Fprintf(&b, "  - {name: fifth, broker: x, choose: x, target: %s}\n", bad)
			p := filepath.Join(t.TempDir(), "p.yaml")
			os.WriteFile(p, []byte(b.String()), 0o644)
			out := t.TempDir()
			var stderr bytes.Buffer
			err := Atlas(context.Background(), AtlasOptions{Profiles: p, Out: out}, &bytes.Buffer{}, &stderr)
			if Code(err) != ExitConfig || !strings.Contains(err.Error(), "profiles[4] (fifth)") {
				t.Fatalf("exit %d (%v), want 3 naming the fifth profile", Code(err), err)
			}
			if ran, _ := filepath.Glob(filepath.Join(out, "m*")); len(ran) > 0 || strings.Contains(stderr.String(), "profile 1 of 5") {
				t.Errorf("profiles ran before the bad one was refused: %v\n%s", ran, stderr.String())
			}
		})
	}
}

// TestAtlasSeedExact: the profiles file's seed is the one written, up to
// 2^64-1, or exit 3: YAML read 1.5 as 1 and 2^64 as 2^63.
func TestAtlasSeedExact(t *testing.T) {
	file := func(seed string) string {
		p := filepath.Join(t.TempDir(), "p.yaml")
		os.WriteFile(p, []byte("format: durachk.atlas/v1\nseed: "+seed+"\ncontracts: [retry.bounded]\nprofiles:\n  - {name: m, broker: mem, choose: x, target: {url: mem}}\n"), 0o644)
		return p
	}
	idx, _, err := loadAtlas(file("18446744073709551615"), nil)
	if err != nil || idx.Seed != 18446744073709551615 {
		t.Errorf("seed 2^64-1: %d (%v)", idx.Seed, err)
	}
	for _, seed := range []string{"1.5", "18446744073709551616", "1e3", "-1", "[1]"} {
		if _, _, err := loadAtlas(file(seed), nil); Code(err) != ExitConfig || !strings.Contains(err.Error(), "want a decimal integer") {
			t.Errorf("seed %s: %v (exit %d), want 3", seed, err, Code(err))
		}
	}
}
