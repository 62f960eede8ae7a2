package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/durachk/durachk/internal/config"
	"github.com/durachk/durachk/internal/targets"
	"github.com/durachk/durachk/reports"
)

// loopbackEnv sets the brokers' URLs as .ci/services.sh exports them, for
// the test only (config's ${VAR}).
func loopbackEnv(t *testing.T) {
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
	t.Cleanup(func() { config.Getenv = old })
}

// TestAtlasProfilesParse: every profile of atlas/profiles.yaml is a target
// durachk takes (its URL parses with its knobs, given the loopback URLs
// .ci/services.sh exports), says what a team would choose it for, and every
// broker kind of the docs has profiles; SQS is marked as the emulator.
func TestAtlasProfilesParse(t *testing.T) {
	loopbackEnv(t)
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
	prose := strings.Join(strings.Fields(string(md)), " ") // wrapped lines joined
	for _, want := range []string{
		"### `retry.bounded` on `mem-plain`: ✅ pass in 2 of 2",
		"### `retry.bounded` on `mem-dl1`: ❌ moved_by_broker in 2 of 2",
		"| `mem-dl1` | [❌ moved_by_broker 2/2][",
		"**Choose** `mem-plain` (the reference broker)",
		"`mem-dl1` violates `lease.redelivery` (moved_by_broker in 2 of 2)",
		"They all skipped `durability.failover`",
		"environment variable DURACHK_ATLAS_TEST_UNSET_URL is not set",
		"Reproduce it: ```sh durachk run --seed 1 --target 'mem?name=mem-dl1&delivery_limit=1' --contract retry.bounded --trials 2 ```",
		"The witness's trial alone: ```sh durachk run --seed 1 --target 'mem?name=mem-dl1&delivery_limit=1' --contract retry.bounded ```",
	} {
		if !strings.Contains(prose, want) {
			t.Errorf("atlas.md lacks %q:\n%s", want, md)
		}
	}
	// Violations first: the table's columns start with the violated contracts.
	if !strings.Contains(string(md), "| configuration | `lease.redelivery` | `retry.bounded` | `durability.ack` | `durability.failover` |") {
		t.Errorf("the table's columns: want the violated contracts first:\n%s", md)
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

// An atlas with nothing to run — an empty profiles file, a --contract or
// --profile that selects nothing, every profile's variables unset — is a
// configuration error (exit 3, one line) and writes nothing.
func TestAtlasNothingToRun(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.yaml")
	os.WriteFile(empty, nil, 0o644)
	unset := filepath.Join(t.TempDir(), "unset.yaml")
	os.WriteFile(unset, []byte("format: durachk.atlas/v1\nprofiles: [{name: a, broker: mem, choose: x, target: {url: \"${DURACHK_ATLAS_TEST_UNSET_URL}\"}}]\n"), 0o644)
	for name, o := range map[string]AtlasOptions{
		"empty file":           {Profiles: empty},
		"no profile runs it":   {Profiles: "testdata/atlas-mem.yaml", Contracts: []string{"order.fifo"}},
		"profile and contract": {Profiles: "testdata/atlas-mem.yaml", Only: []string{"mem-unset"}},
		"variables unset":      {Profiles: unset},
	} {
		t.Run(name, func(t *testing.T) {
			o.Out = filepath.Join(t.TempDir(), "out")
			var stdout, stderr bytes.Buffer
			err := Atlas(context.Background(), o, &stdout, &stderr)
			if Code(err) != ExitConfig || strings.Contains(err.Error(), "\n") {
				t.Fatalf("%v (exit %d): want one line, exit 3", err, Code(err))
			}
			if _, serr := os.Stat(o.Out); !os.IsNotExist(serr) {
				t.Errorf("%s written (%v): want nothing", o.Out, serr)
			}
		})
	}
}

// The atlas records what each profile was measured with (stamp.json: its
// definition, the checker's properties, seed, trials, durachk, machine) and
// the check that the committed atlas is current (reports.Atlas.Stale, run on
// docs/atlas by the atlas package's test) fails when a profile is added, a
// profile's target changes, the checker's properties change, or a cell has
// fewer trials than asked; running the changed profile again makes it pass.
func TestAtlasStaleWhenProfilesChange(t *testing.T) {
	dir := t.TempDir()
	profiles := filepath.Join(dir, "profiles.yaml")
	orig, _ := os.ReadFile("testdata/atlas-mem.yaml")
	// Without the unset profile: a committed atlas measures every profile.
	body := string(orig[:bytes.Index(orig, []byte("  - name: mem-unset"))])
	os.WriteFile(profiles, []byte(body), 0o644)
	out := filepath.Join(dir, "out")
	atlas := func() {
		t.Helper()
		o := AtlasOptions{Profiles: profiles, Trials: 2, Out: out, Command: "durachk atlas"}
		if err := Atlas(context.Background(), o, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
	}
	stale := func(minTrials int) []string {
		t.Helper()
		want, err := AtlasWanted(profiles, minTrials)
		if err != nil {
			t.Fatal(err)
		}
		a, err := reports.LoadAtlas(out)
		if err != nil {
			t.Fatal(err)
		}
		return a.Stale(want)
	}
	atlas()
	st, err := reports.ReadStamp(filepath.Join(out, "mem-plain"))
	if err != nil || st == nil || st.Definition == "" || st.Properties != reports.PropertiesHash() || st.Trials != 2 || st.Seed != 1 ||
		st.Machine.CPUs == 0 || st.Started.IsZero() || st.Finished.Before(st.Started) {
		t.Fatalf("stamp %+v, %v: want the definition, properties, seed, trials, machine and times", st, err)
	}
	md, _ := os.ReadFile(filepath.Join(out, "atlas.md"))
	for _, w := range []string{"## How it was measured", "2 trials a cell for 2 configurations", " CPU", "UTC by durachk"} {
		if !strings.Contains(strings.Join(strings.Fields(string(md)), " "), w) {
			t.Errorf("atlas.md lacks its stamp %q", w)
		}
	}
	if idx, err := reports.ReadAtlasIndex(filepath.Join(out, "atlas.json")); err != nil || idx.Run == nil || idx.Run.Machine.CPUs == 0 ||
		idx.Run.Finished.Before(idx.Run.Started) || idx.Run.Version == "" {
		t.Errorf("atlas.json's run %+v, %v: want the invocation's stamp", idx.Run, err)
	}
	if s := stale(2); len(s) != 0 {
		t.Fatalf("a fresh atlas is stale: %v", s)
	}
	if s := stale(5); len(s) != 2 || !strings.Contains(s[0], "2 trial(s) a cell, want at least 5") {
		t.Errorf("2 trials where 5 are asked: %v", s)
	}
	// A profile added without regenerating.
	os.WriteFile(profiles, []byte(body+"  - name: mem-dl2\n    broker: mem\n    choose: a broker that dead-letters after two deliveries\n    target: {url: mem, delivery_limit: 2}\n"), 0o644)
	if s := stale(2); len(s) != 1 || !strings.Contains(s[0], "profile mem-dl2 is in the profiles file, not in the atlas") {
		t.Errorf("a profile added: %v", s)
	}
	atlas() // runs mem-dl2 only: the others are kept
	if s := stale(2); len(s) != 0 {
		t.Errorf("after the atlas ran again: %v", s)
	}
	// A profile's target changed (a comment alone does not change it).
	changed := strings.Replace(body, "delivery_limit: 1}", "delivery_limit: 3}", 1) + "# a comment\n"
	os.WriteFile(profiles, []byte(changed+"  - name: mem-dl2 # two\n    broker: mem\n    choose: a broker that dead-letters after two deliveries\n    target: {url: mem, delivery_limit: 2}\n"), 0o644)
	if s := stale(2); len(s) != 1 || !strings.Contains(s[0], "profile mem-dl1 changed in the profiles file") {
		t.Errorf("a profile's target changed: %v", s)
	}
	atlas()
	if s := stale(2); len(s) != 0 {
		t.Errorf("after the atlas ran again: %v", s)
	}
	// The checker's properties changed since.
	for _, p := range []string{"mem-plain", "mem-dl1", "mem-dl2"} {
		st, _ := reports.ReadStamp(filepath.Join(out, p))
		st.Properties = "0123456789abcdef"
		reports.WriteStamp(filepath.Join(out, p), *st)
	}
	if s := stale(2); len(s) != 3 || !strings.Contains(s[0], "another list of the checker's properties") {
		t.Errorf("the properties changed: %v", s)
	}
}

// targetURL finds the broker URLs of a page.
var targetURL = regexp.MustCompile("(redis|rediss|postgres|postgresql|amqp|amqps|nats|mysql|sqs)://[^'`\"\\s)]*\\?[^'`\"\\s)]*")

// Every configuration a doc runs on a broker durachk starts (a URL with
// private-instance.* or private-cluster.* knobs: a configuration the doc
// measured) has a profile in the atlas that sets each of those knobs to the
// same value, so that the atlas measures it again at every regeneration.
func TestEveryDocumentedConfigurationHasAProfile(t *testing.T) {
	loopbackEnv(t)
	_, loaded, err := loadAtlas("../../atlas/profiles.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	type profile struct {
		name, scheme string
		knobs        url.Values
	}
	var ps []profile
	for _, p := range loaded {
		pu, err := url.Parse(p.url)
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		ps = append(ps, profile{p.Name, pu.Scheme, pu.Query()})
	}
	docs, _ := filepath.Glob("../../docs/*.md")
	checked := 0
	for _, doc := range docs {
		if strings.HasSuffix(doc, "atlas.md") {
			continue
		}
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range targetURL.FindAllString(string(b), -1) {
			du, err := url.Parse(strings.ReplaceAll(m, "…", ""))
			if err != nil {
				continue
			}
			knobs := map[string]string{}
			for k, vs := range du.Query() {
				if strings.HasPrefix(k, "private-instance.") || strings.HasPrefix(k, "private-cluster.") {
					knobs[k] = vs[len(vs)-1]
				}
			}
			if len(knobs) == 0 {
				continue
			}
			checked++
			found := false
			for _, p := range ps {
				if p.scheme != du.Scheme {
					continue
				}
				all := true
				for k, v := range knobs {
					all = all && p.knobs.Get(k) == v
				}
				if all {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s runs %s: no profile of atlas/profiles.yaml sets %v: add one (and regenerate the atlas)", filepath.Base(doc), m, knobs)
			}
		}
	}
	if checked == 0 {
		t.Errorf("no doc names a configuration on a private broker: the check checked nothing")
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
