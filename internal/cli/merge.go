package cli

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/explore"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/plans"
	"github.com/durachk/durachk/reports"
)

// MergeOptions are the arguments of `durachk merge`.
type MergeOptions struct {
	Inputs  []string // result.json files (or the directories holding them)
	Out     string
	Command string
}

// mergeInput is one document to merge and the directory it was read from.
type mergeInput struct {
	name string // as given
	dir  string
	doc  *reports.Document
}

// Merge carries out `durachk merge`: the shards of one exploration, the
// --trials runs of one run, or the runs of one gate on several runners,
// merged into one result.json with its histories and every report in
// --out. An exploration's counts are added up and its finding is the first
// round (by number) of any shard, one shrunk plan kept per property (the
// earliest round's); a contract in several runs has their trials as its
// trials. Inputs that do not belong together (another durachk version,
// another configuration of a target, an exploration with other options or
// fault kinds, the same shard or trial twice) are a configuration error,
// before anything is written.
func Merge(o MergeOptions, stdout, stderr io.Writer) error {
	if len(o.Inputs) == 0 {
		return ConfigError(fmt.Errorf("merge: name the result.json files to merge"))
	}
	if err := checkOut(o.Out); err != nil {
		return err
	}
	out, _ := filepath.Abs(o.Out)
	var ins []mergeInput
	for _, p := range o.Inputs {
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			p = filepath.Join(p, "result.json")
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return ConfigError(fmt.Errorf("merge: %w", err))
		}
		d, err := reports.DecodeJSON(b)
		if err != nil {
			return ConfigError(fmt.Errorf("merge: %s: %w", p, err))
		}
		dir := filepath.Dir(p)
		if abs, _ := filepath.Abs(dir); abs == out {
			return ConfigError(fmt.Errorf("merge: --out %s holds %s, an input: write the merge elsewhere", o.Out, p))
		}
		ins = append(ins, mergeInput{name: p, dir: dir, doc: d})
	}
	first := ins[0]
	explores := 0
	for _, in := range ins {
		if in.doc.Version != first.doc.Version {
			return ConfigError(fmt.Errorf("merge: %s is durachk %s, %s durachk %s: merge runs of one version", first.name, reports.Clip(first.doc.Version), in.name, reports.Clip(in.doc.Version)))
		}
		if in.doc.Exploration != nil {
			explores++
		}
	}
	if explores > 0 && explores < len(ins) {
		return ConfigError(fmt.Errorf("merge: some inputs are explorations and some are not: merge the shards of one exploration, or runs"))
	}
	// Shards whose machines could draw different faults differ in their
	// targets' fingerprints too (a machine without the broker's binary has no
	// private instance to describe): the exploration's options say why, so
	// they are compared first.
	for _, in := range ins {
		if explores > 0 && in.doc.Exploration.Config != first.doc.Exploration.Config {
			return ConfigError(configDiffers(first, in))
		}
	}
	if err := sameTargets(ins); err != nil {
		return err
	}
	var doc *reports.Document
	var plansOut map[string]*plans.Plan
	var err error
	if explores > 0 {
		doc, plansOut, err = mergeExplore(ins, o)
	} else {
		doc, err = mergeRuns(ins, o)
	}
	if err != nil {
		return err
	}
	if err := prepareOut(o.Out, stderr); err != nil {
		return ConfigError(err)
	}
	for _, name := range slices.Sorted(mapKeys(plansOut)) {
		if err := plansOut[name].Write(filepath.Join(o.Out, name)); err != nil {
			return ConfigError(err)
		}
	}
	if err := WriteOutputs(doc, o.Out, reports.Formats); err != nil {
		return ConfigError(err)
	}
	fmt.Fprintf(stdout, "merged %d results of %d runs\n", len(doc.Results), len(ins))
	PrintTable(stdout, doc)
	fmt.Fprintf(stdout, "result: %s\n", filepath.Join(o.Out, "result.json"))
	switch {
	case doc.Summary[string(contracts.Violated)] > 0:
		return &ExitError{Code: ExitViolation, Err: fmt.Errorf("merge: violation")}
	case doc.Summary[string(contracts.Unknown)] > 0:
		return &ExitError{Code: ExitUnknown, Err: fmt.Errorf("merge: unknown")}
	case !doc.Complete:
		return &ExitError{Code: ExitUnknown, Err: fmt.Errorf("merge: incomplete: %s", doc.Stopped)}
	}
	return nil
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// sameTargets refuses inputs that measured one target name in two
// configurations (their fingerprints differ).
func sameTargets(ins []mergeInput) error {
	seen := map[string]mergeInput{}
	fp := map[string]string{}
	for _, in := range ins {
		for _, t := range in.doc.Targets {
			if f, ok := fp[t.Name]; ok && f != t.Fingerprint {
				return ConfigError(fmt.Errorf("merge: target %s is configured otherwise in %s (fingerprint %s) than in %s (%s)", reports.Clip(t.Name), in.name, reports.Clip(t.Fingerprint), seen[t.Name].name, reports.Clip(f)))
			}
			fp[t.Name], seen[t.Name] = t.Fingerprint, in
		}
	}
	return nil
}

// newMerged starts the merged document: the inputs' targets, the earliest
// start, the lowest seed.
func newMerged(ins []mergeInput, o MergeOptions) *reports.Document {
	started := ins[0].doc.Wall.StartedAt
	seed := ins[0].doc.Seed
	for _, in := range ins {
		if in.doc.Wall.StartedAt.Before(started) {
			started = in.doc.Wall.StartedAt
		}
		seed = min(seed, in.doc.Seed)
	}
	doc := reports.NewDocument(seed, o.Command, started)
	doc.Version = ins[0].doc.Version
	doc.Complete = true
	var stopped []string
	end := started
	for _, in := range ins {
		for _, t := range in.doc.Targets {
			doc.AddTargetInfo(t)
		}
		doc.Complete = doc.Complete && in.doc.Complete
		doc.Interrupted = doc.Interrupted || in.doc.Interrupted
		if in.doc.Stopped != "" {
			stopped = append(stopped, in.name+": "+in.doc.Stopped)
		}
		if e := in.doc.Wall.StartedAt.Add(time.Duration(in.doc.Wall.DurationMS * float64(time.Millisecond))); e.After(end) {
			end = e
		}
	}
	doc.Stopped = strings.Join(stopped, "; ")
	doc.Finish(end)
	return doc
}

// withWall is result i of d with its wall time and run ids (kept apart in
// the document) put back.
func withWall(d *reports.Document, i int) contracts.Result {
	r := d.Results[i]
	if i < len(d.Wall.Results) {
		w := d.Wall.Results[i]
		r.Wall, r.RunIDs = time.Duration(w.MS*float64(time.Millisecond)), w.RunIDs
	}
	return r
}

type mergeSource struct {
	in *mergeInput
	i  int // the result's index in in.doc
}

// mergeRuns merges runs: each target × contract once, or, run in several,
// with their trials as its trials.
func mergeRuns(ins []mergeInput, o MergeOptions) (*reports.Document, error) {
	for _, in := range ins {
		if in.doc.Jobs != ins[0].doc.Jobs {
			return nil, ConfigError(fmt.Errorf("merge: %s ran --jobs %d, %s --jobs %d: merge runs of one workload", ins[0].name, ins[0].doc.Jobs, in.name, in.doc.Jobs))
		}
	}
	doc := newMerged(ins, o)
	var keys []string
	groups := map[string][]mergeSource{}
	for n := range ins {
		in := &ins[n]
		for i, r := range in.doc.Results {
			k := reports.Key(r.Target, r.Contract)
			if _, ok := groups[k]; !ok {
				keys = append(keys, k)
			}
			groups[k] = append(groups[k], mergeSource{in: in, i: i})
		}
	}
	for slot, k := range keys {
		e, err := mergeResult(groups[k])
		if err != nil {
			return nil, err
		}
		doc.Place(slot, e)
		doc.Trials = max(doc.Trials, len(e.Result.Trials))
	}
	doc.Planned = len(keys)
	return doc, nil
}

// trialsOf are the trials of a result: its Trials, or the one run it was.
func trialsOf(r contracts.Result) []contracts.Trial {
	if len(r.Trials) > 0 {
		return r.Trials
	}
	return []contracts.Trial{{Seed: r.Seed, Verdict: r.Verdict, Reason: r.Reason, Violations: r.Violations}}
}

var trialsPrefix = regexp.MustCompile(`^[a-z]+ in [0-9]+ of [0-9]+ trials \(seed [0-9, ]+\): `)

// mergeResult is one target × contract from one or more runs: from several,
// their trials (each seed once) make its trials, and the result shows the
// first violating one, else the first unknown, else the last, as the engine
// aggregates trials.
func mergeResult(srcs []mergeSource) (reports.Entry, error) {
	load := func(s mergeSource) (contracts.Result, reports.Loaded, error) {
		l, err := s.in.doc.Load(s.in.dir, s.i)
		return withWall(s.in.doc, s.i), l, err
	}
	if len(srcs) == 1 {
		r, l, err := load(srcs[0])
		return l.Entry(r), err
	}
	sort.SliceStable(srcs, func(a, b int) bool {
		return trialsOf(srcs[a].in.doc.Results[srcs[a].i])[0].Seed < trialsOf(srcs[b].in.doc.Results[srcs[b].i])[0].Seed
	})
	first := srcs[0].in.doc.Results[srcs[0].i]
	seen := map[uint64]string{}
	var ts []contracts.Trial
	for _, s := range srcs {
		r := s.in.doc.Results[s.i]
		where := reports.Key(r.Target, r.Contract)
		if r.Sabotage != first.Sabotage || r.Scenario != first.Scenario {
			return reports.Entry{}, ConfigError(fmt.Errorf("merge: %s differs between %s and %s (scenario or sabotage): merge runs of one configuration", where, srcs[0].in.name, s.in.name))
		}
		if r.Verdict == contracts.Skipped || first.Verdict == contracts.Skipped {
			if r.Verdict != first.Verdict {
				return reports.Entry{}, ConfigError(fmt.Errorf("merge: %s is skipped in one of %s and %s and not in the other", where, srcs[0].in.name, s.in.name))
			}
			continue
		}
		for _, t := range trialsOf(r) {
			if other, dup := seen[t.Seed]; dup {
				return reports.Entry{}, ConfigError(fmt.Errorf("merge: %s seed %d is in %s and %s: the same run twice", where, t.Seed, other, s.in.name))
			}
			seen[t.Seed] = s.in.name
			ts = append(ts, t)
		}
	}
	if first.Verdict == contracts.Skipped {
		r, l, err := load(srcs[0])
		return l.Entry(r), err
	}
	rep := len(srcs) - 1
	for _, v := range []contracts.Verdict{contracts.Violated, contracts.Unknown} {
		if i := slices.IndexFunc(srcs, func(s mergeSource) bool { return s.in.doc.Results[s.i].Verdict == v }); i >= 0 {
			rep = i
			break
		}
	}
	res, l, err := load(srcs[rep])
	if err != nil {
		return reports.Entry{}, err
	}
	sort.SliceStable(ts, func(a, b int) bool { return ts[a].Seed < ts[b].Seed })
	res.Trials = ts
	res.Wall, res.RunIDs = 0, nil
	for i, s := range srcs {
		w := withWall(s.in.doc, s.i)
		res.Wall += w.Wall
		res.RunIDs = append(res.RunIDs, w.RunIDs...)
		if i == rep {
			continue
		}
		other, err := s.in.doc.Load(s.in.dir, s.i)
		if err != nil {
			return reports.Entry{}, err
		}
		if len(other.Judged) == 0 && len(other.Ops) > 0 {
			return reports.Entry{}, ConfigError(fmt.Errorf("merge: %s in %s has no final-state file: written by a durachk too old to merge", reports.Key(res.Target, res.Contract), s.in.name))
		}
		l.Judged = append(l.Judged, other.Judged...)
		for seed, cmd := range other.Evidence.ReproduceTrials {
			if l.Evidence.ReproduceTrials == nil {
				l.Evidence.ReproduceTrials = map[uint64]string{}
			}
			l.Evidence.ReproduceTrials[seed] = cmd
		}
	}
	if res.Verdict == contracts.Violated || res.Verdict == contracts.Unknown {
		var seeds []string
		for _, t := range ts {
			if t.Verdict == res.Verdict {
				seeds = append(seeds, strconv.FormatUint(t.Seed, 10))
			}
		}
		res.Reason = fmt.Sprintf("%s in %d of %d trials (seed %s): %s", res.Verdict, len(seeds), len(ts), strings.Join(seeds, ", "),
			trialsPrefix.ReplaceAllString(res.Reason, ""))
	}
	return l.Entry(res), nil
}

// shardSet reads an exploration's shard ("", "i/N" or "i,j/N") as the
// indices it holds of N.
func shardSet(s string) ([]int, int, error) {
	if s == "" {
		return []int{1}, 1, nil
	}
	is, ns, ok := strings.Cut(s, "/")
	n, err := strconv.Atoi(ns)
	if !ok || err != nil || n < 1 {
		return nil, 0, fmt.Errorf("shard %q", reports.Clip(s))
	}
	var out []int
	for _, x := range strings.Split(is, ",") {
		i, err := strconv.Atoi(x)
		if err != nil || i < 1 || i > n {
			return nil, 0, fmt.Errorf("shard %q", reports.Clip(s))
		}
		out = append(out, i)
	}
	return out, n, nil
}

// mergeExplore adds up the shards of one exploration: the same seed, target
// and options (Exploration.Config), each shard once.
func mergeExplore(ins []mergeInput, o MergeOptions) (*reports.Document, map[string]*plans.Plan, error) {
	first := ins[0]
	of := 0
	held := map[int]string{}
	for _, in := range ins {
		x := in.doc.Exploration
		switch {
		case in.doc.Seed != first.doc.Seed:
			return nil, nil, ConfigError(fmt.Errorf("merge: %s explored seed %d, %s seed %d: merge the shards of one exploration", first.name, first.doc.Seed, in.name, in.doc.Seed))
		case x.Config != first.doc.Exploration.Config:
			return nil, nil, ConfigError(configDiffers(first, in))
		case len(in.doc.Targets) != 1 || in.doc.Targets[0].Name != first.doc.Targets[0].Name:
			return nil, nil, ConfigError(fmt.Errorf("merge: %s and %s explored other targets", first.name, in.name))
		}
		idx, n, err := shardSet(x.Shard)
		if err != nil {
			return nil, nil, ConfigError(fmt.Errorf("merge: %s: %w", in.name, err))
		}
		if of != 0 && n != of {
			return nil, nil, ConfigError(fmt.Errorf("merge: %s is a shard of %d, %s of %d: merge the shards of one exploration", first.name, of, in.name, n))
		}
		of = n
		for _, i := range idx {
			if other, dup := held[i]; dup {
				return nil, nil, ConfigError(fmt.Errorf("merge: shard %d/%d is in %s and %s: the same shard twice", i, n, other, in.name))
			}
			held[i] = in.name
		}
	}
	// In shard order, so that the merge is the same whatever the order of
	// its arguments.
	sort.SliceStable(ins, func(a, b int) bool {
		ia, _, _ := shardSet(ins[a].doc.Exploration.Shard)
		ib, _, _ := shardSet(ins[b].doc.Exploration.Shard)
		return ia[0] < ib[0]
	})
	doc := newMerged(ins, o)
	rec := &reports.Exploration{Config: first.doc.Exploration.Config, Verdicts: map[string]int{}, Violations: map[string]int{}, Drawn: map[string]int{}}
	var stats contracts.Stats
	var finder *mergeInput
	var wall time.Duration
	var runIDs []string
	for n := range ins {
		in := &ins[n]
		x := in.doc.Exploration
		rec.Rounds += x.Rounds
		rec.Cut += x.Cut
		rec.Ops += x.Ops
		for k, w := range x.Lacking {
			if rec.Lacking == nil {
				rec.Lacking = map[string]string{}
			}
			rec.Lacking[k] = w
		}
		for k, v := range x.Verdicts {
			rec.Verdicts[k] += v
		}
		for k, v := range x.Violations {
			rec.Violations[k] += v
		}
		for k, v := range x.Drawn {
			rec.Drawn[k] += v
		}
		if x.Finding != nil && (rec.Finding == nil || x.Finding.Round < rec.Finding.Round) {
			rec.Finding, finder = x.Finding, in
		}
		if x.Unknown != nil && (rec.Unknown == nil || x.Unknown.Round < rec.Unknown.Round) {
			rec.Unknown = x.Unknown
		}
		i := slices.IndexFunc(in.doc.Results, func(r contracts.Result) bool { return r.Contract == "explore" })
		if i < 0 {
			return nil, nil, ConfigError(fmt.Errorf("merge: %s holds no explore result", in.name))
		}
		explore.AddStats(&stats, in.doc.Results[i].Stats)
		w := withWall(in.doc, i)
		wall = max(wall, w.Wall)
		runIDs = append(runIDs, w.RunIDs...)
	}
	for _, m := range []map[string]int{rec.Verdicts, rec.Violations, rec.Drawn} {
		for k, v := range m {
			if v == 0 {
				delete(m, k)
			}
		}
	}
	if len(held) < of {
		var idx []string
		for _, i := range slices.Sorted(mapKeysInt(held)) {
			idx = append(idx, strconv.Itoa(i))
		}
		rec.Shard = strings.Join(idx, ",") + "/" + strconv.Itoa(of)
		doc.Complete = false
		doc.Stopped = strings.TrimPrefix(doc.Stopped+fmt.Sprintf("; merged %d of %d shards", len(held), of), "; ")
	}
	doc.Exploration = rec
	// The explore result: the counts of every shard, and the history and
	// witness of the shard that found the first round.
	base := &ins[0]
	if finder != nil {
		base = finder
	}
	bi := slices.IndexFunc(base.doc.Results, func(r contracts.Result) bool { return r.Contract == "explore" })
	r := base.doc.Results[bi]
	l, err := base.doc.Load(base.dir, bi)
	if err != nil {
		return nil, nil, ConfigError(err)
	}
	if finder == nil {
		r.Violations, r.Planned, l.Ops, l.Evidence = nil, nil, nil, reports.Evidence{}
	}
	r.Stats, r.HistoryLen, r.Verdict = stats, rec.Ops, exploreVerdict(rec)
	r.Scenario = fmt.Sprintf("explore: %d rounds", rec.Rounds)
	r.Reason = exploreReason(rec, stats.Accepted)
	r.Wall, r.RunIDs = wall, runIDs
	out := map[string]*plans.Plan{}
	if finder != nil {
		p, err := plans.Read(filepath.Join(finder.dir, "original.yaml"))
		if err != nil {
			return nil, nil, ConfigError(fmt.Errorf("merge: %s: %w", finder.name, err))
		}
		out["original.yaml"] = p
		l.Evidence.Reproduce = replacePlanPath(l.Evidence.Reproduce, filepath.Join(o.Out, "original.yaml"))
	}
	doc.Place(0, l.Entry(r))
	// The shrunk plans, once per property: a property two shards found and
	// shrank is one finding, kept from the earlier round (by number, over
	// every shard), as one exploration over all would have shrunk it.
	type shrunk struct {
		in    *mergeInput
		i     int
		round int
	}
	var all []shrunk
	for n := range ins {
		in := &ins[n]
		round := math.MaxInt
		if f := in.doc.Exploration.Finding; f != nil {
			round = f.Round
		}
		for i, r := range in.doc.Results {
			if r.Contract == "explore/shrunk" || strings.HasPrefix(r.Contract, "explore/shrunk-") {
				all = append(all, shrunk{in: in, i: i, round: round})
			}
		}
	}
	slices.SortStableFunc(all, func(a, b shrunk) int { return cmp.Compare(a.round, b.round) })
	type entry struct {
		r     contracts.Result
		l     reports.Loaded
		again []string // the rounds that shrank its property again
	}
	var keep []*entry
	byProp := map[string]*entry{}
	for _, x := range all {
		in, i := x.in, x.i
		file := strings.TrimPrefix(in.doc.Results[i].Contract, "explore/") + ".yaml"
		p, err := plans.Read(filepath.Join(in.dir, file))
		if err != nil {
			return nil, nil, ConfigError(fmt.Errorf("merge: %s: %w", in.name, err))
		}
		sr := withWall(in.doc, i)
		l, err := in.doc.Load(in.dir, i)
		if err != nil {
			return nil, nil, ConfigError(err)
		}
		prop := ""
		if l.Evidence.Replay != nil {
			prop = l.Evidence.Replay.Property
		}
		if e, ok := byProp[prop]; ok {
			e.again = append(e.again, fmt.Sprintf("round %d of %s", x.round, in.name))
			continue
		}
		slot := len(keep) + 1
		name, file := "explore/shrunk", "shrunk.yaml"
		if slot > 1 {
			name, file = fmt.Sprintf("explore/shrunk-%d", slot), fmt.Sprintf("shrunk-%d.yaml", slot)
		}
		sr.Contract = name
		out[file] = p
		l.Evidence.Reproduce = replacePlanPath(l.Evidence.Reproduce, filepath.Join(o.Out, file))
		e := &entry{r: sr, l: l}
		keep = append(keep, e)
		byProp[prop] = e
	}
	for k, e := range keep {
		if len(e.again) > 0 {
			e.r.Reason += fmt.Sprintf("; shrunk again from %s: left out (one finding)", strings.Join(e.again, ", "))
		}
		doc.Place(k+1, e.l.Entry(e.r))
	}
	doc.Planned = len(keep) + 1
	return doc, out, nil
}

// configDiffers says how two shards' options differ (Exploration.Config:
// "name=value ..."), naming the first option that does; the fault kinds a
// shard drew from differ when one ran where the broker's binary was missing.
func configDiffers(a, b mergeInput) error {
	opts := func(c string) ([]string, map[string]string) {
		m := map[string]string{}
		var names []string
		for _, f := range strings.Fields(c) {
			k, v, _ := strings.Cut(f, "=")
			names = append(names, k)
			m[k] = v
		}
		return names, m
	}
	na, ma := opts(a.doc.Exploration.Config)
	nb, mb := opts(b.doc.Exploration.Config)
	for _, k := range append(na, nb...) {
		va, oka := ma[k]
		vb, okb := mb[k]
		if oka && okb && va == vb {
			continue
		}
		if k == "kinds" && oka && okb {
			why := ""
			for _, in := range []mergeInput{a, b} {
				if l := in.doc.Exploration.Lacking; len(l) > 0 {
					lack := map[faults.Kind]string{}
					for k, w := range l {
						lack[faults.Kind(k)] = w
					}
					why += fmt.Sprintf(" (%s could not apply %s: %s)", in.name, lackList(lack), lackWhy(lack))
				}
			}
			return fmt.Errorf("merge: %s drew faults of %s, %s of %s%s: shards of one exploration draw from the same kinds",
				a.name, reports.Clip(va), b.name, reports.Clip(vb), reports.Clip(why))
		}
		return fmt.Errorf("merge: %s explored with %s=%s, %s with %s=%s: merge the shards of one exploration",
			a.name, reports.Clip(k), reports.Clip(va), b.name, reports.Clip(k), reports.Clip(vb))
	}
	return fmt.Errorf("merge: %s explored with %s, %s with %s: merge the shards of one exploration", a.name, reports.Clip(a.doc.Exploration.Config), b.name, reports.Clip(b.doc.Exploration.Config))
}

func mapKeysInt(m map[int]string) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// replacePlanPath points a reproduce command (durachk run --plan FILE
// [--target URL]) at the plan's merged copy.
func replacePlanPath(cmd, to string) string {
	if cmd == "" {
		return ""
	}
	target := ""
	if i := strings.Index(cmd, " --target "); i >= 0 {
		target = cmd[i:]
	}
	return "durachk run --plan " + shellQuote(to) + target
}
