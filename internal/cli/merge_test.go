package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/explore"
	"github.com/durachk/durachk/reports"
)

func TestParseShard(t *testing.T) {
	for _, c := range []struct {
		in   string
		want explore.Shard
		ok   bool
	}{
		{"", explore.Shard{}, true},
		{"1/1", explore.Shard{Index: 1, Of: 1}, true},
		{"1/2", explore.Shard{Index: 1, Of: 2}, true},
		{"2/2", explore.Shard{Index: 2, Of: 2}, true},
		{"1000/1000", explore.Shard{Index: 1000, Of: 1000}, true},
		{"0/2", explore.Shard{}, false},
		{"3/2", explore.Shard{}, false},
		{"1/0", explore.Shard{}, false},
		{"1/1001", explore.Shard{}, false},
		{"-1/2", explore.Shard{}, false},
		{"+1/2", explore.Shard{}, false},
		{"1/+2", explore.Shard{}, false},
		{"1", explore.Shard{}, false},
		{"1/2/3", explore.Shard{}, false},
		{"a/b", explore.Shard{}, false},
		{" 1/2", explore.Shard{}, false},
		{"1/", explore.Shard{}, false},
		{"/2", explore.Shard{}, false},
	} {
		got, err := ParseShard(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseShard(%q) = %+v, %v; want %+v, ok %t", c.in, got, err, c.want, c.ok)
		}
		if err != nil && (Code(err) != ExitConfig || !strings.Contains(err.Error(), "--shard ") || strings.Contains(err.Error(), "\n")) {
			t.Errorf("ParseShard(%q): %v (exit %d), want one line naming --shard, exit 3", c.in, err, Code(err))
		}
	}
}

// comparable is a result.json without what differs between two runs of one
// seed (wall, command) and with dir, where its plans are, written DIR.
func comparable(t *testing.T, dir string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.ReplaceAll(b, []byte(dir+"/"), []byte("DIR/"))
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "wall")
	delete(m, "command")
	return m
}

// sameFiles fails unless the plans and histories beside two result.json
// files are the same.
func sameFiles(t *testing.T, a, b string) {
	t.Helper()
	for _, pat := range []string{"*.yaml", "histories/*"} {
		fa, _ := filepath.Glob(filepath.Join(a, pat))
		fb, _ := filepath.Glob(filepath.Join(b, pat))
		if len(fa) != len(fb) {
			t.Errorf("%s: %d files in %s, %d in %s", pat, len(fa), a, len(fb), b)
			continue
		}
		for i := range fa {
			x, _ := os.ReadFile(fa[i])
			y, _ := os.ReadFile(fb[i])
			if filepath.Base(fa[i]) != filepath.Base(fb[i]) || !bytes.Equal(x, y) {
				t.Errorf("%s and %s differ", fa[i], fb[i])
			}
		}
	}
}

// explored runs durachk explore with o into dir and returns its exit code.
func explored(t *testing.T, o ExploreOptions, dir string) int {
	t.Helper()
	o.Target, o.Seed, o.Out = "mem", 1, dir
	var stdout, stderr bytes.Buffer
	err := Explore(context.Background(), o, &stdout, &stderr)
	if c := Code(err); c == ExitConfig {
		t.Fatalf("explore: %v\n%s", err, stderr.String())
	}
	return Code(err)
}

// TestMergeShards: the shards 1/N..N/N of an exploration on the embedded
// target explore disjoint rounds, and durachk merge of them (in any order) is
// the one exploration over all of them, apart from wall times: the same
// result.json, histories and plans, a finding (the first round of any
// shard, with its history and witness) included.
func TestMergeShards(t *testing.T) {
	for _, c := range []struct {
		name   string
		shards int
		o      ExploreOptions
		code   int
	}{
		{"no violation", 2, ExploreOptions{Rounds: 6, Jobs: 100}, 0},
		{"a finding", 3, ExploreOptions{Rounds: 12, Sabotage: "dual-write", KeepGoing: true, NoShrink: true}, ExitViolation},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			whole := filepath.Join(dir, "whole")
			if got := explored(t, c.o, whole); got != c.code {
				t.Fatalf("explore: exit %d, want %d", got, c.code)
			}
			var ins []string
			rounds := 0
			for i := c.shards; i >= 1; i-- {
				o := c.o
				o.Shard = fmt.Sprintf("%d/%d", i, c.shards)
				sd := filepath.Join(dir, fmt.Sprintf("shard-%d", i))
				explored(t, o, sd)
				ins = append(ins, filepath.Join(sd, "result.json"))
				x := comparable(t, sd)["exploration"].(map[string]any)
				n := int(x["rounds"].(float64))
				if want := (c.o.Rounds - i + c.shards) / c.shards; n != want || x["shard"] != o.Shard {
					t.Errorf("shard %s: %d rounds (exploration %v), want %d", o.Shard, n, x, want)
				}
				if f, ok := x["finding"].(map[string]any); ok && int(f["round"].(float64))%c.shards != i-1 {
					t.Errorf("shard %s found round %v, not one of its own", o.Shard, f["round"])
				}
				rounds += n
			}
			if rounds != c.o.Rounds {
				t.Errorf("the shards ran %d rounds, want %d", rounds, c.o.Rounds)
			}
			merged := filepath.Join(dir, "merged")
			var stdout, stderr bytes.Buffer
			if err := Merge(MergeOptions{Inputs: ins, Out: merged}, &stdout, &stderr); Code(err) != c.code {
				t.Fatalf("merge: exit %d (%v), want %d\n%s", Code(err), err, c.code, stderr.String())
			}
			if a, b := comparable(t, whole), comparable(t, merged); !reflect.DeepEqual(a, b) {
				ja, _ := json.MarshalIndent(a, "", " ")
				jb, _ := json.MarshalIndent(b, "", " ")
				t.Errorf("the merge differs from the whole exploration:\nwhole:\n%s\nmerged:\n%s", ja, jb)
			}
			sameFiles(t, whole, merged)
			for _, f := range []string{"junit.xml", "summary.md", "report.html"} {
				if _, err := os.Stat(filepath.Join(merged, f)); err != nil {
					t.Errorf("the merge wrote no %s: %v", f, err)
				}
			}
		})
	}
}

// Inputs that do not belong together are one line and exit 3 before anything
// is written; a merge of some shards is incomplete, saying so.
func TestMergeRefuses(t *testing.T) {
	dir := t.TempDir()
	o := ExploreOptions{Rounds: 4, Jobs: 50}
	in := func(name, shard string, o ExploreOptions) string {
		o.Shard = shard
		explored(t, o, filepath.Join(dir, name))
		return filepath.Join(dir, name, "result.json")
	}
	s1, s2, s3of3 := in("s1", "1/2", o), in("s2", "2/2", o), in("s3", "3/3", o)
	other := o
	other.Jobs = 60
	s2jobs := in("s2jobs", "2/2", other)
	fast := o
	fast.Pace = 3
	s2pace := in("s2pace", "2/2", fast)
	// Another version: the same shard, written by another durachk.
	b, _ := os.ReadFile(s2)
	var m map[string]any
	json.Unmarshal(b, &m)
	m["durachk_version"] = "v0.0.1"
	b, _ = json.Marshal(m)
	os.MkdirAll(filepath.Join(dir, "old"), 0o755)
	old := filepath.Join(dir, "old", "result.json")
	os.WriteFile(old, b, 0o644)
	for _, c := range []struct {
		ins  []string
		out  string
		want string
	}{
		{[]string{s1, s1}, "m1", "the same shard twice"},
		{[]string{s1, s2jobs}, "m2", "merge the shards of one exploration"},
		{[]string{s1, s2pace}, "m2p", "pace=3"},
		{[]string{s1, s3of3}, "m3", "is a shard of 2"},
		{[]string{s1, old}, "m4", "merge runs of one version"},
		{[]string{s1, s2}, "s1", "holds " + s1},
		{[]string{s1, filepath.Join(dir, "nothing.json")}, "m5", "no such file"},
	} {
		var stdout, stderr bytes.Buffer
		out := filepath.Join(dir, c.out)
		before, _ := os.ReadFile(filepath.Join(out, "result.json"))
		err := Merge(MergeOptions{Inputs: c.ins, Out: out}, &stdout, &stderr)
		if Code(err) != ExitConfig || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("merge %v: %v (exit %d), want one line with %q, exit 3", c.ins, err, Code(err), c.want)
		}
		if after, _ := os.ReadFile(filepath.Join(out, "result.json")); !bytes.Equal(before, after) {
			t.Errorf("merge %v wrote %s", c.ins, out)
		}
	}
	var stdout, stderr bytes.Buffer
	part := filepath.Join(dir, "part")
	if err := Merge(MergeOptions{Inputs: []string{s1}, Out: part}, &stdout, &stderr); Code(err) != ExitUnknown {
		t.Errorf("a merge of 1 of 2 shards: %v (exit %d), want exit 2", err, Code(err))
	}
	if m := comparable(t, part); m["complete"] != false || !strings.Contains(fmt.Sprint(m["stopped"]), "merged 1 of 2 shards") ||
		m["exploration"].(map[string]any)["shard"] != "1/2" {
		t.Errorf("a merge of 1 of 2 shards: complete %v, stopped %v, exploration %v", m["complete"], m["stopped"], m["exploration"])
	}
}

// The --trials runs of one run, merged, are the run with all their trials;
// the same seed twice is refused.
func TestMergeTrials(t *testing.T) {
	dir := t.TempDir()
	run := func(name string, seed uint64, trials int) string {
		var stdout, stderr bytes.Buffer
		err := Run(context.Background(), RunOptions{Targets: []string{"mem"}, Contracts: []string{"lease.redelivery", "retry.bounded"},
			Seed: seed, Trials: trials, Out: filepath.Join(dir, name)}, &stdout, &stderr)
		if err != nil {
			t.Fatalf("run: %v\n%s", err, stderr.String())
		}
		return filepath.Join(dir, name, "result.json")
	}
	a, b, whole := run("a", 1, 2), run("b", 3, 3), run("whole", 1, 5)
	var stdout, stderr bytes.Buffer
	merged := filepath.Join(dir, "merged")
	if err := Merge(MergeOptions{Inputs: []string{b, a}, Out: merged}, &stdout, &stderr); err != nil {
		t.Fatalf("merge: %v", err)
	}
	x, y := comparable(t, filepath.Join(dir, "whole")), comparable(t, merged)
	if !reflect.DeepEqual(x, y) {
		jx, _ := json.MarshalIndent(x, "", " ")
		jy, _ := json.MarshalIndent(y, "", " ")
		t.Errorf("the merge of trials differs from one run of them all:\nwhole:\n%s\nmerged:\n%s", jx, jy)
	}
	if err := Merge(MergeOptions{Inputs: []string{a, whole}, Out: filepath.Join(dir, "m2")}, &stdout, &stderr); Code(err) != ExitConfig || !strings.Contains(err.Error(), "the same run twice") {
		t.Errorf("merge of overlapping trials: %v (exit %d), want exit 3, the same run twice", err, Code(err))
	}
	var check bytes.Buffer
	if err := Check(CheckOptions{Result: filepath.Join(merged, "result.json")}, &check); err != nil {
		t.Errorf("check --result of the merge: %v\n%s", err, check.String())
	}
}

// Two shards that found and shrank the same property are one finding: the
// merge keeps one shrunk plan, the earliest round's over every shard (here
// the second shard's, given first), with the other named in its reason.
// Before, it kept both (their plans differ) and ordered them by shard.
func TestMergeShrunkOncePerProperty(t *testing.T) {
	dir := t.TempDir()
	o := ExploreOptions{Rounds: 10, Jobs: 60, Sabotage: "no-heartbeat", Shrink: explore.ShrinkOptions{Replay: 2}}
	var ins []string
	found := map[int]int{}
	for i := 2; i >= 1; i-- {
		so := o
		so.Shard = fmt.Sprintf("%d/2", i)
		sd := filepath.Join(dir, fmt.Sprint("shard-", i))
		if code := explored(t, so, sd); code != ExitViolation {
			t.Fatalf("shard %d: exit %d, want a finding", i, code)
		}
		f := comparable(t, sd)["exploration"].(map[string]any)["finding"].(map[string]any)
		found[i] = int(f["round"].(float64))
		ins = append(ins, sd)
	}
	if found[2] >= found[1] {
		t.Fatalf("shard 2 found round %d, shard 1 round %d: the test needs the later shard to find the earlier round", found[2], found[1])
	}
	merged := filepath.Join(dir, "merged")
	var stdout, stderr bytes.Buffer
	if err := Merge(MergeOptions{Inputs: ins, Out: merged}, &stdout, &stderr); Code(err) != ExitViolation {
		t.Fatalf("merge: exit %d (%v)\n%s", Code(err), err, stderr.String())
	}
	m := comparable(t, merged)
	if r := int(m["exploration"].(map[string]any)["finding"].(map[string]any)["round"].(float64)); r != found[2] {
		t.Errorf("merged finding: round %d, want %d (the earliest)", r, found[2])
	}
	var shrunk []map[string]any
	for _, r := range m["results"].([]any) {
		if r := r.(map[string]any); strings.HasPrefix(r["contract"].(string), "explore/shrunk") {
			shrunk = append(shrunk, r)
		}
	}
	if len(shrunk) != 1 {
		t.Fatalf("%d shrunk results, want 1 (one property, found twice)", len(shrunk))
	}
	if !strings.Contains(shrunk[0]["reason"].(string), fmt.Sprintf("shrunk again from round %d of %s", found[1], filepath.Join(dir, "shard-1", "result.json"))) {
		t.Errorf("the kept shrunk result does not name the other: %s", shrunk[0]["reason"])
	}
	want, _ := os.ReadFile(filepath.Join(dir, "shard-2", "shrunk.yaml"))
	got, _ := os.ReadFile(filepath.Join(merged, "shrunk.yaml"))
	if len(want) == 0 || !bytes.Equal(want, got) {
		t.Errorf("the merge's shrunk.yaml is not the earliest round's:\n%s\nwant\n%s", got, want)
	}
	if _, err := os.Stat(filepath.Join(merged, "shrunk-2.yaml")); err == nil {
		t.Error("the merge wrote shrunk-2.yaml")
	}
}

// Merged trials count each trial by its verdict: a violation is a trial that
// violated, an unknown one is not (the note says how many), a pass neither.
// The inputs' trial verdicts are rewritten (their histories are a run's
// that passed: merge reads them back, it does not judge them again).
func TestMergeTrialsCountVerdicts(t *testing.T) {
	dir := t.TempDir()
	run := func(name string, seed uint64, verdicts ...contracts.Verdict) string {
		var stdout, stderr bytes.Buffer
		out := filepath.Join(dir, name)
		if err := Run(context.Background(), RunOptions{Targets: []string{"mem"}, Contracts: []string{"lease.redelivery"},
			Seed: seed, Trials: len(verdicts), Out: out}, &stdout, &stderr); err != nil {
			t.Fatalf("run: %v\n%s", err, stderr.String())
		}
		path := filepath.Join(out, "result.json")
		b, _ := os.ReadFile(path)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		r := m["results"].([]any)[0].(map[string]any)
		worst := contracts.Pass
		for i, tr := range r["trials"].([]any) {
			tr := tr.(map[string]any)
			tr["verdict"] = string(verdicts[i])
			if verdicts[i] != contracts.Pass {
				tr["reason"] = fmt.Sprintf("%s (rewritten)", verdicts[i])
			}
			if verdicts[i] == contracts.Violated || verdicts[i] == contracts.Unknown && worst == contracts.Pass {
				worst = verdicts[i]
			}
		}
		r["verdict"] = string(worst)
		m["summary"] = map[string]any{string(worst): 1}
		b, _ = json.Marshal(m)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	v, u, p := contracts.Violated, contracts.Unknown, contracts.Pass
	a, b := run("a", 1, u, p), run("b", 3, p, v)
	var stdout, stderr bytes.Buffer
	err := Merge(MergeOptions{Inputs: []string{a, b}, Out: filepath.Join(dir, "m")}, &stdout, &stderr)
	if Code(err) != ExitViolation {
		t.Fatalf("merge: %v (exit %d), want 1", err, Code(err))
	}
	doc, rerr := reports.ReadJSON(filepath.Join(dir, "m", "result.json"))
	if rerr != nil {
		t.Fatal(rerr)
	}
	r := doc.Results[0]
	if r.Verdict != v || !strings.HasPrefix(r.Reason, "violation in 1 of 4 trials (seed 4): ") || reports.TrialsNote(r) != "violation in 1 of 4 trials, unknown in 1" {
		t.Errorf("merged %s: %q, note %q; want a violation in 1 of 4 trials (seed 4), unknown in 1", r.Verdict, r.Reason, reports.TrialsNote(r))
	}
	c, d := run("c", 5, u, p), run("d", 7, p, p)
	err = Merge(MergeOptions{Inputs: []string{c, d}, Out: filepath.Join(dir, "m2")}, &stdout, &stderr)
	if Code(err) != ExitUnknown {
		t.Errorf("merge of an unknown trial and passes: %v (exit %d), want 2", err, Code(err))
	}
}
