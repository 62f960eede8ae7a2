package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/durachk/durachk/checker"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/explore"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/internal/lazyfs"
	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/internal/targets"
	"github.com/durachk/durachk/plans"
	"github.com/durachk/durachk/reports"
)

// ExploreOptions are the flags of `durachk explore`.
type ExploreOptions struct {
	Target    string
	Seed      uint64
	Duration  time.Duration
	Rounds    int
	Jobs      int
	MaxFaults int
	Pace      int
	Faults    []string // fault kinds to draw (default: every kind the target supports)
	Parallel  int
	// Shard is "i/N": the exploration takes rounds i-1, i-1+N, ... of the
	// seed space (durachk merge adds the shards up); "" takes every round.
	Shard      string
	Properties []string
	Sabotage   string
	KeepGoing  bool
	NoShrink   bool
	Shrink     explore.ShrinkOptions
	Every      time.Duration
	Out        string
	Command    string
}

// lookupSabotage finds a sabotage of the catalogue or the seed scenarios by
// name.
func lookupSabotage(name string) (*contracts.Sabotage, error) {
	s, err := plans.LookupSabotage(name)
	if err != nil {
		return nil, fmt.Errorf("--%w", err)
	}
	return s, nil
}

// Explore carries out `durachk explore`: rounds of seeded random workloads
// and faults on one target until the duration (or --rounds) is spent or a
// round raises a violation, which it shrinks; then result.json, the reports,
// original.yaml (the plan of the round that failed) and shrunk.yaml in --out.
func Explore(ctx context.Context, o ExploreOptions, stdout, stderr io.Writer) error {
	if err := checkExploreFlags(o); err != nil {
		return err
	}
	shard, err := ParseShard(o.Shard)
	if err != nil {
		return err
	}
	sh := o.Shrink
	eo := explore.Options{Seed: o.Seed, Duration: o.Duration, Rounds: o.Rounds, Jobs: o.Jobs, MaxFaults: o.MaxFaults, Pace: o.Pace, Parallel: o.Parallel,
		Shard: shard, KeepGoing: o.KeepGoing, Progress: stderr, Every: o.Every, Shrink: sh}
	eo.Shrink.Off = o.NoShrink
	for _, k := range o.Faults {
		for _, x := range strings.Split(k, ",") {
			kind := faults.Kind(strings.TrimSpace(x))
			if !slices.Contains(contracts.FaultKinds, kind) {
				return ConfigError(fmt.Errorf("--faults %q: not a fault kind (docs/plans.md lists them)", reports.Clip(x)))
			}
			eo.Kinds = append(eo.Kinds, kind)
		}
	}
	for _, p := range o.Properties {
		if !knownProperty(p) {
			return ConfigError(fmt.Errorf("--property %q: not a property of the checker (docs/checker.md)", reports.Clip(p)))
		}
		eo.Want = append(eo.Want, contracts.Property(p))
	}
	if o.Sabotage != "" {
		s, err := lookupSabotage(o.Sabotage)
		if err != nil {
			return ConfigError(err)
		}
		eo.Sabotage = s
	}
	t, err := resolve(ctx, o.Target, "", stderr)
	if err != nil {
		return err
	}
	if rt, ok := t.Target.(*runner.Target); ok && o.Parallel > 1 {
		// Rounds at once make load the load average does not show yet:
		// their clock stretches for it from the first round.
		if k := runner.StretchFor(o.Parallel); k*runner.DefaultScale > rt.Scale {
			rt.Scale, t.scale = k*runner.DefaultScale, k*runner.DefaultScale
			fmt.Fprintf(stderr, "durachk: %d rounds at once on %d CPUs: scenario times stretched ×%.1f (DURACHK_LOAD_FACTOR fixes it)\n", o.Parallel, runtime.NumCPU(), k)
		}
	}
	kinds, why := explore.Supported(t.Capabilities())
	lack := lacking(t, why)
	var not []string
	for _, k := range contracts.FaultKinds {
		if w, ok := why[k]; ok && lack[k] == "" {
			not = append(not, fmt.Sprintf("%s (%s)", k, w))
		}
	}
	runID := newRunID()
	adopt([]*target{t}, runID)
	budget := o.Duration.String()
	if o.Rounds > 0 {
		budget = fmt.Sprintf("%d rounds", o.Rounds)
		if o.Duration > 0 {
			budget += " or " + o.Duration.String()
		}
	}
	if shard.Of > 1 {
		budget += fmt.Sprintf(", shard %s (rounds %d, %d, %d, …)", shard, shard.Index-1, shard.Index-1+shard.Of, shard.Index-1+2*shard.Of)
	}
	fmt.Fprintf(stderr, "durachk: explore %s on %s for %s, seed %d; fault kinds: %s\n", runID, t.Name(), budget, o.Seed, kindList(kinds, eo.Kinds))
	if len(eo.Kinds) == 0 {
		if len(lack) > 0 {
			// Not the target's: this machine's. Said loudly, and kept in the
			// result (and its shards' merge refuses shards that drew more).
			fmt.Fprintf(stderr, "durachk: WARNING: this machine cannot apply %s to %s, which supports them: %s. This exploration never draws them: its verdict says nothing of them.\n",
				lackList(lack), t.Name(), lackWhy(lack))
		}
		if len(not) > 0 {
			fmt.Fprintf(stderr, "durachk: never drawn on %s: %s\n", t.Name(), strings.Join(not, "; "))
		}
	} else {
		for _, k := range eo.Kinds {
			if lack[k] != "" {
				return ConfigError(fmt.Errorf("--faults %s: this machine cannot apply it to %s: %s", k, t.Name(), lack[k]))
			}
		}
		lack = nil // what --faults left out is the user's choice, whatever the machine
	}
	keepLogs([]*target{t}, o.Out)
	if err := prepareOut(o.Out, stderr); err != nil {
		return ConfigError(err)
	}
	started := time.Now()
	// write writes the document of s: partial (stopped says why) while the
	// finding is being shrunk, then whole.
	write := func(s *explore.Summary, err error, stopped string) error {
		doc := reports.NewDocument(o.Seed, o.Command, started)
		doc.Wall.RunID = runID
		doc.AddTargetInfo(t.info)
		if serr := doc.Scrub(t.secrets...); serr != nil {
			return serr
		}
		rec := exploration(o, shard, s, lack)
		entries, werr := exploreEntries(t, o, s, rec)
		if werr != nil {
			return werr
		}
		for i, e := range entries {
			if serr := e.Scrub(t.secrets...); serr != nil {
				return serr
			}
			doc.Place(i, e)
		}
		doc.Planned = len(entries)
		doc.Exploration = rec
		doc.Complete = err == nil && ctx.Err() == nil && stopped == ""
		switch {
		case ctx.Err() != nil:
			doc.Interrupted, doc.Stopped = true, "interrupted: "+interruption(ctx)
		case err != nil:
			doc.Stopped = reports.ScrubString(err.Error(), t.secrets...)
		case stopped != "":
			doc.Stopped = stopped
		}
		doc.Finish(time.Now())
		return WriteOutputs(doc, o.Out, reports.Formats)
	}
	eo.Found = func(s *explore.Summary) {
		if werr := write(s, nil, "shrinking the finding"); werr != nil {
			fmt.Fprintf(stderr, "durachk: explore: writing the finding: %v\n", werr)
			return
		}
		fmt.Fprintf(stderr, "durachk: the finding is in %s and %s; shrinking it\n",
			filepath.Join(o.Out, "result.json"), filepath.Join(o.Out, "original.yaml"))
	}
	s, err := explore.Run(ctx, t.Target, eo)
	if err != nil && s == nil {
		return ConfigError(err)
	}
	if werr := write(s, err, ""); werr != nil {
		return ConfigError(werr)
	}
	printExplore(stdout, o, s, lack)
	fmt.Fprintf(stdout, "result: %s\n", filepath.Join(o.Out, "result.json"))
	if err != nil {
		return ConfigError(err)
	}
	switch s.Verdict() {
	case contracts.Violated:
		return &ExitError{Code: ExitViolation, Err: fmt.Errorf("explore: violation")}
	case contracts.Unknown:
		if s.Verdicts[contracts.Unknown] == 0 {
			return &ExitError{Code: ExitUnknown, Err: fmt.Errorf("explore: no round ended within --duration %s (%d cut at its end)", o.Duration, s.Cut)}
		}
		return &ExitError{Code: ExitUnknown, Err: fmt.Errorf("explore: %d unknown rounds", s.Verdicts[contracts.Unknown])}
	}
	if ctx.Err() != nil {
		return &ExitError{Code: ExitUnknown, Err: fmt.Errorf("explore: interrupted")}
	}
	return nil
}

// lacking are the fault kinds target t's broker kind can apply and this
// machine cannot, with why: the private instance its broker faults run on
// needs a binary this machine lacks, or its power loss a FUSE mount it
// refuses. why are the kinds not drawn (explore.Supported).
func lacking(t *target, why map[faults.Kind]string) map[faults.Kind]string {
	out := map[faults.Kind]string{}
	if t.parsed.Kind == "" {
		return out // the embedded target: every kind, always
	}
	if err := targets.PrivateMissing(t.parsed); err != nil {
		for _, k := range []faults.Kind{faults.BrokerCrash, faults.PowerLoss} {
			if why[k] != "" {
				out[k] = err.Error()
			}
		}
		return out
	}
	if why[faults.PowerLoss] != "" && why[faults.BrokerCrash] == "" && !t.parsed.ControlKills() {
		if err := lazyfs.Available(); err != nil {
			out[faults.PowerLoss] = err.Error()
		}
	}
	return out
}

// lackList names the kinds of lack in contracts.FaultKinds order.
func lackList(lack map[faults.Kind]string) string {
	var ks []string
	for _, k := range contracts.FaultKinds {
		if lack[k] != "" {
			ks = append(ks, string(k))
		}
	}
	return strings.Join(ks, ", ")
}

// lackWhy is why the kinds of lack cannot be applied, each reason once.
func lackWhy(lack map[faults.Kind]string) string {
	var ws []string
	for _, k := range contracts.FaultKinds {
		if w := lack[k]; w != "" && !slices.Contains(ws, w) {
			ws = append(ws, w)
		}
	}
	return strings.Join(ws, "; ")
}

func kindList(all, chosen []faults.Kind) string {
	if len(chosen) > 0 {
		all = chosen
	}
	parts := make([]string, len(all))
	for i, k := range all {
		parts[i] = string(k)
	}
	return strings.Join(parts, ", ")
}

func knownProperty(p string) bool {
	_, ok := checker.Lookup(checker.Property(p))
	return ok || p == string(contracts.PropTokenReissued)
}

// exploreEntries are the document's results: the exploration (with the
// history of the round that failed), and the shrunk plan's run; the plans
// are written beside result.json. rec is what the exploration counted.
func exploreEntries(t *target, o ExploreOptions, s *explore.Summary, rec *reports.Exploration) ([]reports.Entry, error) {
	target := ""
	if t.spec != "mem" && t.spec != "" {
		target = " --target " + shellQuote(reports.RedactURL(t.spec))
	}
	r := contracts.Result{Contract: "explore", Claim: exploreClaim,
		Target: t.Name(), Broker: t.Capabilities().Broker, MeasuredOn: t.MeasuredOn(), Verdict: s.Verdict(), Seed: o.Seed,
		Scenario: fmt.Sprintf("explore: %d rounds", s.Rounds), Stats: s.Stats, HistoryLen: s.Ops, Wall: s.Wall}
	r.Reason = exploreReason(rec, s.Stats.Accepted)
	ev := reports.Evidence{}
	var ops []history.Op
	if f := s.Finding; f != nil {
		path := filepath.Join(o.Out, "original.yaml")
		f.Plan.Sabotage = o.Sabotage
		if err := f.Plan.Write(path); err != nil {
			return nil, err
		}
		r.Violations, r.Planned = f.Result.Violations, f.Result.Planned
		ops = f.Ops
		ev.Reproduce = "durachk run --plan " + shellQuote(path) + target
		ev.Windows = planWindows(t, f.Plan, f.Ops)
	}
	out := []reports.Entry{reports.NewEntry(r, ops, ev)}
	if sh := s.Shrunk; sh != nil {
		path := filepath.Join(o.Out, "shrunk.yaml")
		sh.Plan.Sabotage = o.Sabotage
		if err := sh.Plan.Write(path); err != nil {
			return nil, err
		}
		sr := sh.Result
		sr.Contract, sr.Claim = "explore/shrunk", fmt.Sprintf("the shrunk plan still raises %s", sh.Property)
		sr.Reason = fmt.Sprintf("%s; shrunk from %d jobs, %d faults to %d jobs, %d faults in %d candidates (%d runs, %s; %s)",
			sh.Replay, sh.FromJobs, sh.FromFaults, sh.ToJobs, sh.ToFaults, sh.Candidates, sh.Runs, sh.Wall.Round(time.Millisecond), shrinkRule(sh))
		if sh.Stopped != "" {
			sr.Reason += "; stopped: " + sh.Stopped
		}
		sr.Reason += "; " + sh.Result.Reason
		rp := sh.Replay
		sev := reports.Evidence{Reproduce: "durachk run --plan " + shellQuote(path) + target, Windows: planWindows(t, sh.Plan, sh.Ops),
			Replay: &reports.Replay{Property: string(rp.Property), Runs: rp.Runs, Reproduced: rp.Reproduced, NotAtRisk: rp.NotAtRisk, Other: rp.Other,
				MeasuredOn: rp.MeasuredOn, Deterministic: rp.Deterministic, AtRisk: rp.AtRisk, Text: rp.String()}}
		out = append(out, reports.NewEntry(sr, sh.Ops, sev))
	}
	return out, nil
}

const exploreClaim = "every property of the checker holds over seeded random workloads and fault schedules"

// exploration is what an exploration counted, as result.json keeps it for
// durachk merge (reports.Exploration); lack are the kinds this machine could
// not apply (lacking).
func exploration(o ExploreOptions, shard explore.Shard, s *explore.Summary, lack map[faults.Kind]string) *reports.Exploration {
	rec := &reports.Exploration{Shard: shard.String(), Config: exploreConfig(o, s.Kinds), Rounds: s.Rounds, Cut: s.Cut, Violations: maps.Clone(s.Violations),
		Drawn: maps.Clone(s.Drawn), Ops: s.Ops, Verdicts: map[string]int{}}
	for v, n := range s.Verdicts {
		rec.Verdicts[string(v)] = n
	}
	for k, w := range lack {
		if rec.Lacking == nil {
			rec.Lacking = map[string]string{}
		}
		rec.Lacking[string(k)] = w
	}
	if f := s.Finding; f != nil {
		rec.Finding = &reports.RoundNote{Round: f.Round, Seed: f.Plan.Seed, Text: "raised " + raisedText(f.Property, f.Result)}
		switch sh := s.Shrunk; {
		case sh != nil:
			rec.Finding.Shrunk = fmt.Sprintf("its shrunk plan (%d jobs, %d faults) %s", sh.ToJobs, sh.ToFaults, sh.Replay)
		case s.ShrinkInterrupted:
			rec.Finding.Shrunk = "its shrink was interrupted: the round's plan is original.yaml"
		}
	}
	if u := s.Unknown; u != nil {
		rec.Unknown = &reports.RoundNote{Round: u.Round, Seed: u.Plan.Seed, Text: "unknown: " + u.Result.Reason}
	}
	return rec
}

// exploreConfig names the options that decide which rounds an exploration
// runs and what each of them draws and counts as a finding: the shards of
// one exploration have the same (the seed and the target are the
// document's). kinds are the fault kinds its rounds drew from: --faults, or
// what the target supports on the machine it ran on (a shard on a machine
// without the broker's binary draws fewer).
func exploreConfig(o ExploreOptions, kinds []faults.Kind) string {
	props := slices.Sorted(slices.Values(o.Properties))
	return fmt.Sprintf("rounds=%d jobs=%d pace=%d max-faults=%d faults=%s property=%s sabotage=%s keep-going=%t no-shrink=%t kinds=%s",
		o.Rounds, cmp.Or(o.Jobs, explore.DefaultJobs), cmp.Or(o.Pace, 1), cmp.Or(o.MaxFaults, explore.DefaultMaxFaults),
		strings.Join(o.Faults, ","), strings.Join(props, ","), o.Sabotage, o.KeepGoing, o.NoShrink, strings.ReplaceAll(kindList(kinds, nil), ", ", ","))
}

// exploreVerdict is an exploration's verdict from its counts (as
// explore.Summary.Verdict).
func exploreVerdict(rec *reports.Exploration) contracts.Verdict {
	switch {
	case rec.Finding != nil || rec.Verdicts[string(contracts.Violated)] > 0:
		return contracts.Violated
	case rec.Verdicts[string(contracts.Unknown)] > 0, rec.Rounds == 0 && rec.Cut > 0:
		return contracts.Unknown
	}
	return contracts.Pass
}

// exploreReason is the explore result's reason: the finding (or the first
// unknown round), the rounds, jobs, faults drawn and violations.
func exploreReason(rec *reports.Exploration, jobs int) string {
	s := fmt.Sprintf("%d rounds, %d jobs, faults drawn: %s", rec.Rounds, jobs, counts(rec.Drawn))
	if rec.Cut > 0 {
		s += fmt.Sprintf(" (%d more cut in flight at the end of the duration, not judged)", rec.Cut)
	}
	if len(rec.Lacking) > 0 {
		lack := map[faults.Kind]string{}
		for k, w := range rec.Lacking {
			lack[faults.Kind(k)] = w
		}
		s += fmt.Sprintf("; never drawn, this machine cannot apply them: %s (%s)", lackList(lack), lackWhy(lack))
	}
	if len(rec.Violations) > 0 {
		s += "; violations: " + counts(rec.Violations)
	}
	switch {
	case rec.Finding != nil:
		s = fmt.Sprintf("round %d (seed %d) %s; %s", rec.Finding.Round, rec.Finding.Seed, rec.Finding.Text, s)
		if rec.Finding.Shrunk != "" {
			s += "; " + rec.Finding.Shrunk
		}
	case rec.Unknown != nil:
		s = fmt.Sprintf("round %d (seed %d) %s; %s", rec.Unknown.Round, rec.Unknown.Seed, rec.Unknown.Text, s)
	}
	return s
}

// raisedText says what a round raised, property p first: its count and the
// message of its first violation, then the other properties with their
// counts ("preempted ×86: … ; also healthy_dead_lettered ×9"). The result's
// own reason leads with whichever property the checker reported first, and
// its message is that property's, not necessarily p's.
func raisedText(p contracts.Property, r contracts.Result) string {
	s := fmt.Sprintf("%s ×%d", p, max(r.Stats.Violations[string(p)], 1))
	for _, v := range r.Violations {
		if v.Property == p {
			s += ": " + v.Message
			break
		}
	}
	var also []string
	for _, name := range slices.Sorted(maps.Keys(r.Stats.Violations)) {
		if n := r.Stats.Violations[name]; name != string(p) && n > 0 {
			also = append(also, fmt.Sprintf("%s ×%d", name, n))
		}
	}
	if len(also) > 0 {
		s += "; also " + strings.Join(also, ", ")
	}
	return s
}

// shrinkRule says how the shrink decided: K of N per candidate, and on a
// real target the confirmations.
func shrinkRule(sh *explore.Shrunk) string {
	s := fmt.Sprintf("a candidate fails when it raises %s in %d of %d runs", sh.Property, sh.K, sh.N)
	if !sh.Replay.Deterministic {
		s += fmt.Sprintf("; %d smaller plans confirmed, %d did not reproduce", sh.Confirmed, sh.Unconfirmed)
	}
	return s
}

// planWindows are a plan's fault windows against a run's history, with the
// windows the history shows.
func planWindows(t *target, p *plans.Plan, ops []history.Op) []reports.FaultWindow {
	sc, err := p.Scenario()
	if err != nil || len(ops) == 0 {
		return nil
	}
	return reports.MergeWindows(reports.PlanWindows(sc.Plan, anchor(ops, sc, t.scale), t.scale), reports.ObservedWindows(ops))
}

func counts(m map[string]int) string { return explore.Counts(m, "none") }

// printExplore writes what the exploration found and where the plans are;
// lack are the kinds this machine could not apply (lacking).
func printExplore(w io.Writer, o ExploreOptions, s *explore.Summary, lack map[faults.Kind]string) {
	fmt.Fprintf(w, "explored %d rounds, %d jobs in %s (%.0f jobs/min); faults drawn: %s\n", s.Rounds, s.Stats.Accepted,
		s.Wall.Round(time.Millisecond), float64(s.Stats.Accepted)/max(s.Wall.Minutes(), 1e-9), counts(s.Drawn))
	if s.Cut > 0 {
		fmt.Fprintf(w, "  %d rounds in flight cut at the end of --duration %s (not judged)\n", s.Cut, o.Duration)
	}
	if len(lack) > 0 {
		fmt.Fprintf(w, "  never drawn, this machine cannot apply them: %s (%s)\n", lackList(lack), lackWhy(lack))
	}
	switch {
	case s.Finding != nil:
		f := s.Finding
		fmt.Fprintf(w, "violation: round %d (seed %d) raised %s\n", f.Round, f.Plan.Seed, raisedText(f.Property, f.Result))
		fmt.Fprintf(w, "  its plan: %s\n", filepath.Join(o.Out, "original.yaml"))
		if sh := s.Shrunk; sh != nil {
			fmt.Fprintf(w, "shrunk: %d jobs, %d faults → %d jobs, %d faults (%d candidates, %d runs, %s)\n",
				sh.FromJobs, sh.FromFaults, sh.ToJobs, sh.ToFaults, sh.Candidates, sh.Runs, sh.Wall.Round(time.Millisecond))
			if sh.Stopped != "" {
				fmt.Fprintf(w, "  stopped: %s\n", sh.Stopped)
			}
			fmt.Fprintf(w, "  shrunk plan: %s (durachk run --plan %s)\n", filepath.Join(o.Out, "shrunk.yaml"), filepath.Join(o.Out, "shrunk.yaml"))
			fmt.Fprintf(w, "  %s\n", sh.Replay)
		} else if s.ShrinkInterrupted {
			fmt.Fprintf(w, "  its shrink was interrupted: the round's plan is the finding\n")
		}
	case s.Verdicts[contracts.Violated] > 0:
		fmt.Fprintf(w, "violations outside --property: %s\n", counts(s.Violations))
	case s.Unknown != nil:
		fmt.Fprintf(w, "unknown: round %d (seed %d): %s\n", s.Unknown.Round, s.Unknown.Plan.Seed, s.Unknown.Result.Reason)
	case s.Verdict() == contracts.Unknown:
		fmt.Fprintf(w, "unknown: no round ended within --duration %s\n", o.Duration)
	default:
		fmt.Fprintf(w, "no violation\n")
	}
}
