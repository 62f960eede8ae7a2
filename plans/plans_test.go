package plans_test

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/plans"
)

func properties(r contracts.Result) []string {
	var out []string
	for _, v := range r.Violations {
		if !slices.Contains(out, string(v.Property)) {
			out = append(out, string(v.Property))
		}
	}
	slices.Sort(out)
	return out
}

// Every catalogue contract and seed scenario, written out as a plan file
// and run from it on the embedded target, gives the result the built-in
// contract gives: verdict, reason, properties raised and every count.
func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	all := append(slices.Clone(contracts.Catalogue), contracts.SeedScenarios...)
	for i, c := range all {
		t.Run(c.ID, func(t *testing.T) {
			t.Parallel()
			const seed = 1
			ctx := context.Background()
			want, err := contracts.Evaluate(ctx, contracts.MemTarget{}, c, contracts.Options{Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			p, err := plans.FromContract(c, seed, 0)
			if err != nil {
				t.Fatal(err)
			}
			ext := ".yaml"
			if i%2 == 1 {
				ext = ".json" // both formats, alternately
			}
			path := filepath.Join(dir, strings.ReplaceAll(c.ID, "/", "_")+ext)
			if err := p.Write(path); err != nil {
				t.Fatal(err)
			}
			back, err := plans.Read(path)
			if err != nil {
				t.Fatal(err)
			}
			if back.Seed != seed || back.Contract != c.ID {
				t.Fatalf("read back seed %d contract %q", back.Seed, back.Contract)
			}
			pc, err := back.AsContract("plan/" + c.ID)
			if err != nil {
				t.Fatal(err)
			}
			got, err := contracts.Evaluate(ctx, contracts.MemTarget{}, pc, contracts.Options{Seed: back.Seed})
			if err != nil {
				t.Fatal(err)
			}
			if got.Verdict != want.Verdict || got.Reason != want.Reason {
				t.Errorf("from the file: %s (%s); built in: %s (%s)", got.Verdict, got.Reason, want.Verdict, want.Reason)
			}
			if g, w := properties(got), properties(want); !slices.Equal(g, w) {
				t.Errorf("properties from the file %v, built in %v", g, w)
			}
			if !reflect.DeepEqual(got.Stats, want.Stats) || got.HistoryLen != want.HistoryLen {
				t.Errorf("stats from the file %+v (%d ops), built in %+v (%d ops)", got.Stats, got.HistoryLen, want.Stats, want.HistoryLen)
			}
			if want.Verdict == contracts.Skipped && got.Reason == "" {
				t.Errorf("skipped without a reason")
			}
		})
	}
}

// A sabotaged run from a plan file is caught like the built-in contract's:
// the round trip holds for violations too, not only for passes.
func TestRoundTripSabotaged(t *testing.T) {
	c, _ := contracts.Lookup("outbox.atomic")
	ctx := context.Background()
	s := c.Sabotages[0]
	want, err := contracts.EvaluateSabotage(ctx, contracts.MemTarget{}, c, s, contracts.Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	p, err := plans.FromContract(c, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Marshal(false)
	if err != nil {
		t.Fatal(err)
	}
	back, err := plans.Parse(b, "")
	if err != nil {
		t.Fatal(err)
	}
	pc, _ := back.AsContract("plan/x")
	got, err := contracts.EvaluateSabotage(ctx, contracts.MemTarget{}, pc, s, contracts.Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if want.Verdict != contracts.Violated || got.Verdict != want.Verdict || !slices.Equal(properties(got), properties(want)) {
		t.Fatalf("from the file %s %v; built in %s %v", got.Verdict, properties(got), want.Verdict, properties(want))
	}
}

const minimal = `format: durachk.plan/v1
seed: 7
jobs:
  - id: a
`

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, text, want string
	}{
		{"unknown field", minimal + "colour: red\n", "field colour not found"},
		{"unknown job field", strings.Replace(minimal, "- id: a", "- id: a\n    colour: red", 1), "field colour not found"},
		{"wrong format", strings.Replace(minimal, "v1", "v9", 1), `format "durachk.plan/v9"`},
		{"no format", strings.Replace(minimal, "format: durachk.plan/v1\n", "", 1), "format"},
		{"no jobs", "format: durachk.plan/v1\nseed: 1\n", "at least one job"},
		{"duplicate id", minimal + "  - id: a\n", `"a" given twice`},
		{"bad duration", minimal + "lease: soon\n", `duration "soon"`},
		{"number for a duration", minimal + "lease: 10\n", `duration "10"`},
		{"negative seed", strings.Replace(minimal, "seed: 7", "seed: -1", 1), "cannot unmarshal"},
		{"bad kind", strings.Replace(minimal, "- id: a", "- id: a\n    kind: angry", 1), `kind "angry"`},
		{"kind and behaviour", strings.Replace(minimal, "- id: a", "- id: a\n    kind: poison\n    fail_permanent: true", 1), "give one or the other"},
		{"unknown contract", minimal + "contract: nope\n", `contract "nope"`},
		{"bad fault kind", minimal + "faults:\n  - kind: meteor\n", `kind "meteor"`},
		{"crash without point", minimal + "faults:\n  - kind: crash_at\n    nth: 1\n", `point ""`},
		{"crash nth 0", minimal + "faults:\n  - kind: crash_at\n    point: mid_commit\n", "nth 0"},
		{"kill unknown worker", minimal + "faults:\n  - kind: kill\n    process: w9\n", `process "w9"`},
		{"field the kind does not take", minimal + "faults:\n  - kind: kill\n    process: w1\n    rate: 0.5\n", "kill does not take rate"},
		{"rate above 1", minimal + "faults:\n  - kind: reply_loss\n    link: store\n    for: 1s\n    rate: 2\n", "rate 2"},
		{"link fault without for", minimal + "faults:\n  - kind: link_down\n    link: broker\n", "for: want"},
		{"unknown link", minimal + "faults:\n  - kind: link_down\n    link: moon\n    for: 1s\n", `link "moon"`},
		{"two documents", minimal + "---\n" + minimal, "more than one document"},
		{"empty", "", "empty file"},
		{"not a mapping", "- 1\n- 2\n", "cannot unmarshal"},
		{"fail_transient -2", strings.Replace(minimal, "- id: a", "- id: a\n    fail_transient: -2", 1), "fail_transient -2"},
		{"every without count", strings.Replace(minimal, "- id: a", "- id: a\n    every: 1s", 1), "every: only with count"},
		{"json unknown field", `{"format": "durachk.plan/v1", "seed": 1, "jobs": [{"id": "a"}], "extra": 1}`, "field extra not found"},
		{"unknown sabotage", minimal + "sabotage: nope\n", `sabotage "nope": want one of`},
	}
	job := func(fields string) string { return strings.Replace(minimal, "- id: a", "- id: a\n    "+fields, 1) }
	fault := func(fields string) string { return minimal + "faults:\n  - " + fields + "\n" }
	// The bounds of every numeric field, just past each end.
	cases = append(cases, []struct{ name, text, want string }{
		{"workers 65", minimal + "workers: 65\n", "workers 65: want 1 to 64"},
		{"workers -1", minimal + "workers: -1\n", "workers -1: want 1 to 64"},
		{"lease 99ms", minimal + "lease: 99ms\n", "lease 99ms: want 100ms to 1h0m0s"},
		{"lease 61m", minimal + "lease: 61m\n", "lease 1h1m0s: want 100ms to 1h0m0s"},
		{"poll 9ms", minimal + "poll: 9ms\n", "poll 9ms: want 10ms to 1m0s"},
		{"poll 61s", minimal + "poll: 61s\n", "poll 1m1s: want 10ms to 1m0s"},
		{"kill_after_lease 9ms", minimal + "kill_after_lease: 9ms\n", "kill_after_lease 9ms: want 10ms to 10s"},
		{"kill_after_ack 9ms", minimal + "kill_after_ack: 9ms\n", "kill_after_ack 9ms: want 10ms to 10s"},
		{"kill_after_ack 11s", minimal + "kill_after_ack: 11s\n", "kill_after_ack 11s: want 10ms to 10s"},
		{"limit 999ms", minimal + "limit: 999ms\n", "limit 999ms: want 1s to 24h0m0s"},
		{"limit 1000000h", minimal + "limit: 1000000h\n", "limit 1000000h0m0s: want 1s to 24h0m0s"},
		{"idle polls", minimal + "workers: 64\nlimit: 24h\n", "workers 64 × limit 24h0m0s ÷ poll 200ms = 27648000: want at most 2000000"},
		{"idle polls at a fast poll", minimal + "workers: 1\npoll: 10ms\nlimit: 6h\n", "want at most 2000000"},
		{"20001 jobs", job("count: 20000") + "  - id: b\n", "jobs: 20001 with their counts: want at most 20000"},
		{"count 20001", job("count: 20001"), "jobs: 20001 with their counts: want at most 20000"},
		{"count -1", job("count: -1"), "count -1: want 1 to 20000"},
		{"1001 faults", minimal + "faults:\n" + strings.Repeat("  - kind: crash_at\n    point: mid_commit\n    nth: 1\n", 1001), "faults: 1001: want at most 1000"},
		{"at past the limit", job("at: 5m1s"), "at 5m1s: want at most the plan's limit (5m0s)"},
		{"at 999999h", minimal + "limit: 24h\n" + job("at: 999999h")[len(minimal):], ""},
		{"last of a count past the limit", job("count: 3\n    at: 4m\n    every: 31s"), "the last is sent after the plan's limit 5m0s"},
		{"every past the limit", job("count: 20000\n    every: 2562047h"), "the last is sent after the plan's limit"},
		{"version 0 is the default, 1000001 is not", job("version: 1000001"), "version 1000001: want 1 to 1000000"},
		{"version -1", job("version: -1"), "version -1: want 1 to 1000000"},
		{"max_attempts 1001", job("max_attempts: 1001"), "max_attempts 1001: want 1 to 1000"},
		{"max_attempts -1", job("max_attempts: -1"), "max_attempts -1: want 1 to 1000"},
		{"fail_transient 1001", job("fail_transient: 1001"), "fail_transient 1001: want -1 (forever) or a number of attempts from 0 to 1000"},
		{"fail_below_version 1000001", job("fail_below_version: 1000001"), "fail_below_version 1000001: want 0 to 1000000"},
		{"fail_below_version -1", job("fail_below_version: -1"), "fail_below_version -1: want 0 to 1000000"},
		{"deadline 25h", job("deadline: 25h"), "deadline 25h0m0s: want at most a day"},
		{"slow past the limit", job("slow: 6m"), "slow 6m0s: want at most the plan's limit"},
		{"age_budget 25h", job("age_budget: 25h"), "age_budget 25h0m0s: want at most a day"},
		{"nth 1000001", fault("kind: crash_at\n    point: mid_commit\n    nth: 1000001"), "nth 1000001: want at most 1000000"},
		{"fault at past the limit", fault("kind: kill\n    process: w1\n    at: 6m"), "at 6m0s: want at most the plan's limit"},
		{"fault for past the limit", fault("kind: link_down\n    link: broker\n    for: 6m"), "for 6m0s: want at most the plan's limit"},
		{"delay 61s", fault("kind: latency\n    link: broker\n    for: 1s\n    delay: 61s"), "delay 1m1s: want at most a minute"},
		{"jitter 61s", fault("kind: latency\n    link: broker\n    for: 1s\n    delay: 1s\n    jitter: 61s"), "jitter 1m1s: want at most a minute"},
		{"rate 0 where needed", fault("kind: reset\n    link: broker\n    for: 1s"), "rate 0: want a probability"},
		// 0 where 0 stands for the default: refused with the bounds (they
		// ran the default: workers: 0 ran 4 workers).
		{"workers 0", minimal + "workers: 0\n", "line 5: workers 0: want 1 to 64 (leave it out for its default)"},
		{"max_attempts 0", job("max_attempts: 0"), "jobs[0].max_attempts 0: want 1 to 1000"},
		{"count 0", job("count: 0"), "jobs[0].count 0: want 1 to 20000"},
		{"version 0", job("version: 0"), "jobs[0].version 0: want 1 to 1000000"},
		{"lease 0s", minimal + "lease: 0s\n", "lease 0s: want 100ms to 1h0m0s"},
		{"poll 0", minimal + "poll: 0\n", "poll 0: want 10ms to 1m0s"},
		{"limit 0s", minimal + "limit: 0s\n", "limit 0s: want 1s to 24h0m0s"},
		{"kill_after_ack 0s", minimal + "kill_after_ack: 0s\n", "kill_after_ack 0s: want 10ms to 10s"},
		{"age_budget 0s", job("age_budget: 0s"), "age_budget 0s: want more than 0, at most 24h0m0s"},
		// Integers are integers: YAML read these into an int or uint64
		// silently changed (1.5 as 1, 1e3 as 1000, 2^64 as 2^63).
		{"seed 1.5", strings.Replace(minimal, "seed: 7", "seed: 1.5", 1), "seed 1.5: want a decimal integer from 0 to 18446744073709551615"},
		{"seed 2^64", strings.Replace(minimal, "seed: 7", "seed: 18446744073709551616", 1), "seed 18446744073709551616: want a decimal integer from 0 to 18446744073709551615"},
		{"seed 1e3", strings.Replace(minimal, "seed: 7", "seed: 1e3", 1), "seed 1e3: want a decimal integer"},
		{"seed 0x10", strings.Replace(minimal, "seed: 7", "seed: 0x10", 1), "seed 0x10: want a decimal integer"},
		{"workers 2.5", minimal + "workers: 2.5\n", "workers 2.5: want a decimal integer"},
		{"nth 1.5", fault("kind: crash_at\n    point: mid_commit\n    nth: 1.5"), "faults[0].nth 1.5: want a decimal integer"},
		{"json seed 1.5", `{"format": "durachk.plan/v1", "seed": 1.5, "jobs": [{"id": "a"}]}`, "seed 1.5: want a decimal integer"},
		{"json max_attempts 2.0", `{"format": "durachk.plan/v1", "seed": 1, "jobs": [{"id": "a", "max_attempts": 2.0}]}`, "jobs[0].max_attempts 2.0: want a decimal integer"},
	}...)
	// "at 999999h" above: the limit is checked first, then the job.
	cases = slices.DeleteFunc(cases, func(c struct{ name, text, want string }) bool { return c.want == "" })
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := plans.Parse([]byte(tc.text), "x.yaml")
			if err == nil {
				t.Fatalf("no error for\n%s", tc.text)
			}
			var pe *plans.Error
			if !errors.As(err, &pe) {
				t.Errorf("error %T, want *plans.Error", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to name %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
}

// TestSeedExact: a plan's seed is the one written, up to 2^64-1 (it became
// 2^63 where YAML went through a float), in YAML and JSON.
func TestSeedExact(t *testing.T) {
	for _, text := range []string{strings.Replace(minimal, "seed: 7", "seed: 18446744073709551615", 1),
		`{"format": "durachk.plan/v1", "seed": 18446744073709551615, "jobs": [{"id": "a"}]}`} {
		p, err := plans.Parse([]byte(text), "x")
		if err != nil || p.Seed != 18446744073709551615 {
			t.Errorf("seed 2^64-1: %v (%v)\n%s", p, err, text)
		}
	}
}

// TestBoundsTakeWhatDurachkWrites: the plans durachk writes are within the
// bounds: every catalogue contract and seed scenario at the default and the
// largest --jobs, and the field values at each end of their bounds.
func TestBoundsTakeWhatDurachkWrites(t *testing.T) {
	// FromContract validates the plan it writes (TestRoundTrip reads the
	// default ones back from their files).
	for _, c := range append(append([]*contracts.Contract{}, contracts.Catalogue...), contracts.SeedScenarios...) {
		if _, err := plans.FromContract(c, 1, 10000); err != nil {
			t.Errorf("%s with --jobs 10000: %v", c.ID, err)
		}
	}
	edges := minimal + "workers: 64\nlease: 1h\npoll: 1m\nlimit: 24h\nfaults:\n" +
		"  - kind: crash_at\n    point: mid_commit\n    nth: 1000000\n" +
		"  - kind: latency\n    link: broker\n    at: 24h\n    for: 24h\n    delay: 1m\n    jitter: 1m\n"
	edges = strings.Replace(edges, "- id: a", "- id: a\n    count: 20000\n    every: 4s\n    version: 1000000\n    max_attempts: 1000\n"+
		"    fail_transient: 1000\n    fail_below_version: 1000000\n    deadline: 24h\n    slow: 24h\n    age_budget: 24h", 1)
	if _, err := plans.Parse([]byte(edges), "edges"); err != nil {
		t.Fatalf("a plan at the edges of every bound: %v", err)
	}
}

func TestCountExpands(t *testing.T) {
	p, err := plans.Parse([]byte(`format: durachk.plan/v1
seed: 1
jobs:
  - id: bulk
    count: 3
    every: 100ms
    at: 1s
    kind: stubborn
    tenant: globex
`), "")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := p.Scenario()
	if err != nil {
		t.Fatal(err)
	}
	if n, f := p.Size(); n != 3 || f != 0 {
		t.Fatalf("size %d jobs %d faults", n, f)
	}
	var ids []string
	for _, j := range sc.Jobs {
		ids = append(ids, j.Job.ID+"@"+j.At.String()+"/"+j.Job.Tenant)
	}
	if want := []string{"bulk-000@1s/globex", "bulk-001@1.1s/globex", "bulk-002@1.2s/globex"}; !slices.Equal(ids, want) {
		t.Fatalf("jobs %v, want %v", ids, want)
	}
}

// FuzzParse: no input panics, an error is one line, and a plan that parses
// writes out and reads back to the same scenario.
func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	for _, c := range contracts.Catalogue[:4] {
		p, err := plans.FromContract(c, 1, 3)
		if err != nil {
			f.Fatal(err)
		}
		b, _ := p.Marshal(false)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := plans.Parse(b, "fuzz")
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
			return
		}
		sc, err := p.Scenario()
		if err != nil {
			t.Fatal(err)
		}
		// What it accepts is within the bounds: no plan runs unbounded.
		if n, nf := p.Size(); n > plans.MaxJobs || nf > plans.MaxFaults || len(sc.Jobs) != n || sc.Limit > plans.MaxLimit ||
			sc.Workers > plans.MaxWorkers || float64(sc.Workers)*float64(sc.Limit)/float64(sc.Poll) > plans.MaxIdlePolls {
			t.Fatalf("accepted a plan out of bounds: %d jobs, %d faults, limit %v, %d workers, poll %v", n, nf, sc.Limit, sc.Workers, sc.Poll)
		}
		for _, j := range sc.Jobs {
			if j.At > sc.Limit || j.Job.Version < 1 || j.Job.MaxAttempts < 1 {
				t.Fatalf("accepted job %s at %v (limit %v), version %d, %d attempts", j.Job.ID, j.At, sc.Limit, j.Job.Version, j.Job.MaxAttempts)
			}
		}
		for _, f := range sc.Plan.Faults {
			if f.At > sc.Limit || f.For > sc.Limit {
				t.Fatalf("accepted fault %v past the limit %v", f, sc.Limit)
			}
		}
		out, err := p.Marshal(true)
		if err != nil {
			t.Fatal(err)
		}
		back, err := plans.Parse(out, "again")
		if err != nil {
			t.Fatalf("written plan does not read back: %v\n%s", err, out)
		}
		sc2, _ := back.Scenario()
		if len(sc.Jobs) != len(sc2.Jobs) || len(sc.Plan.Faults) != len(sc2.Plan.Faults) {
			t.Fatalf("read back %d jobs %d faults, wrote %d, %d", len(sc2.Jobs), len(sc2.Plan.Faults), len(sc.Jobs), len(sc.Plan.Faults))
		}
	})
}
