package reports

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/durachk/durachk/contracts"
)

// Baseline is the verdict expected per target and contract. A user may expect
// a known violation or skip: the gate is about change, not about perfection.
// A baseline is strict: every target and contract it names must be measured by
// the run it gates.
type Baseline map[string]map[string]contracts.Verdict

// ErrBadBaseline marks a baseline file that cannot gate a run (exit 3).
var ErrBadBaseline = errors.New("baseline")

// ReadBaseline reads a baseline: either a JSON object mapping target →
// contract → verdict, or a previous result.json (its verdicts become the
// expected ones).
func ReadBaseline(path string) (Baseline, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadBaseline, err)
	}
	bl, err := ParseBaseline(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return bl, nil
}

// ParseBaseline reads a baseline from its JSON (see ReadBaseline). It refuses a
// baseline that names no target, a target without contracts, an unknown
// contract or scenario, a verdict other than the four, and a key given twice.
func ParseBaseline(b []byte) (Baseline, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadBaseline, fmt.Sprintf(format, a...))
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, bad(`want {"target": {"contract": "verdict"}} or a result.json: %v`, err)
	}
	var bl Baseline
	if _, ok := probe["schema"]; ok {
		d, err := DecodeJSON(b)
		if err != nil {
			return nil, bad("%v", err)
		}
		bl = BaselineOf(d)
	} else {
		var err error
		if bl, err = decodeBaseline(b); err != nil {
			return nil, bad("%v", err)
		}
	}
	if len(bl) == 0 {
		return nil, bad(`names no target: want {"target": {"contract": "verdict"}}`)
	}
	for _, t := range bl.targets() {
		cs := bl[t]
		if t == "" {
			return nil, bad("a target with an empty name")
		}
		if len(cs) == 0 {
			return nil, bad("%s: names no contract", Clip(t))
		}
		for _, c := range slices.Sorted(maps.Keys(cs)) {
			if err := knownContract(c); err != nil {
				return nil, bad("%s: %v", Clip(t), err)
			}
			if v := cs[c]; !validVerdict(v) {
				return nil, bad("%s: %s: verdict %q: want pass, violation, unknown or skipped", Clip(t), c, Clip(string(v)))
			}
		}
	}
	return bl, nil
}

// planIDRE is the id of a --plan contract: plan/<file name> (cli's planName).
var planIDRE = regexp.MustCompile(`^plan/[A-Za-z0-9][A-Za-z0-9._-]*$`)

// knownContract accepts a catalogue id, scenario/<name> or plan/<name> (a
// --plan file's results are gated like any other).
func knownContract(id string) error {
	if strings.HasPrefix(id, "plan/") {
		if !planIDRE.MatchString(id) {
			return fmt.Errorf("%q is not a plan's contract id (plan/<file name>)", Clip(id))
		}
		return nil
	}
	if strings.HasPrefix(id, "scenario/") {
		if _, err := contracts.LookupScenario(id); err != nil {
			return fmt.Errorf("unknown scenario %q", Clip(id))
		}
		return nil
	}
	if _, err := contracts.Lookup(id); err != nil {
		return fmt.Errorf("unknown contract %q", Clip(id))
	}
	return nil
}

// decodeBaseline walks the JSON object of objects of strings, refusing a key
// given twice (encoding/json would keep the last silently).
func decodeBaseline(b []byte) (Baseline, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	want := func(d json.Delim, what string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if tok != d {
			return fmt.Errorf(`%s: want {"target": {"contract": "verdict"}}`, what)
		}
		return nil
	}
	if err := want('{', "top level"); err != nil {
		return nil, err
	}
	bl := Baseline{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		target := tok.(string) // object keys are strings
		if _, dup := bl[target]; dup {
			return nil, fmt.Errorf("target %q given twice", Clip(target))
		}
		if err := want('{', Clip(target)); err != nil {
			return nil, err
		}
		cs := map[string]contracts.Verdict{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil, err
			}
			c := tok.(string)
			if _, dup := cs[c]; dup {
				return nil, fmt.Errorf("%s: contract %q given twice", Clip(target), Clip(c))
			}
			tok, err = dec.Token()
			if err != nil {
				return nil, err
			}
			v, ok := tok.(string)
			if !ok {
				return nil, fmt.Errorf("%s: %s: want a verdict string", Clip(target), Clip(c))
			}
			cs[c] = contracts.Verdict(v)
		}
		if err := want('}', Clip(target)); err != nil {
			return nil, err
		}
		bl[target] = cs
	}
	if err := want('}', "top level"); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("more than one JSON value")
	}
	return bl, nil
}

// IsResultBaseline reports whether the baseline file at path is a
// result.json (a previous run's verdicts) rather than a baseline object.
func IsResultBaseline(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal(b, &probe) != nil {
		return false
	}
	_, ok := probe["schema"]
	return ok
}

// Updated is bl expecting the verdicts of diffs instead: each difference's
// new verdict replaces (or adds) the expected one. A difference the run did
// not measure (Got empty: it stopped before that result) changes nothing.
func (bl Baseline) Updated(diffs []Difference) Baseline {
	out := Baseline{}
	for t, cs := range bl {
		out[t] = maps.Clone(cs)
	}
	for _, d := range diffs {
		if d.Got == "" {
			continue
		}
		if out[d.Target] == nil {
			out[d.Target] = map[string]contracts.Verdict{}
		}
		out[d.Target][d.Contract] = d.Got
	}
	return out
}

// Write writes bl as a baseline object ({"target": {"contract": "verdict"}},
// keys sorted, indented) to path, atomically.
func (bl Baseline) Write(path string) error {
	b, err := json.MarshalIndent(bl, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(path, append(b, '\n'))
}

// BaselineOf turns a document's verdicts into a baseline: every result, a
// plan's with a sabotage included (a negative control a gate expects to
// fail).
func BaselineOf(d *Document) Baseline {
	bl := Baseline{}
	for _, r := range d.Results {
		if bl[r.Target] == nil {
			bl[r.Target] = map[string]contracts.Verdict{}
		}
		bl[r.Target][r.Contract] = r.Verdict
	}
	return bl
}

func (bl Baseline) targets() []string { return slices.Sorted(maps.Keys(bl)) }

// Check is the strict part of the gate, done before a run starts: every
// target the baseline names must be among the run's targets, and every
// contract it names must be among the run's selection. A baseline that expects
// what the run cannot measure is a configuration error, not a regression.
func (bl Baseline) Check(targets, selected []string) error {
	inRun := map[string]bool{}
	for _, t := range targets {
		inRun[t] = true
	}
	sel := map[string]bool{}
	for _, c := range selected {
		sel[c] = true
	}
	for _, t := range bl.targets() {
		if !inRun[t] {
			return fmt.Errorf("%w names target %q, which this run does not measure (its targets: %s)", ErrBadBaseline, Clip(t), Clip(strings.Join(targets, ", ")))
		}
		for _, c := range slices.Sorted(maps.Keys(bl[t])) {
			if !sel[c] {
				return fmt.Errorf("%w expects %s/%s, which this run does not select (select it with --contract/--scenario, or remove it from the baseline)", ErrBadBaseline, Clip(t), c)
			}
		}
	}
	return nil
}

// Difference is one verdict that is not the expected one. Expected is empty
// for a result the baseline does not list; Got is empty for an expected
// result the run did not produce.
type Difference struct {
	Target, Contract string
	Expected, Got    contracts.Verdict
}

// Improvement reports whether d is good news: a violation, unknown or skip
// the baseline expects that now passes. The gate fails on it all the same,
// until the baseline is updated: a gate that let it by would let the contract
// slip back unnoticed. Every other difference is a regression.
func (d Difference) Improvement() bool {
	return d.Got == contracts.Pass && d.Expected != "" && d.Expected != contracts.Pass
}

func (d Difference) String() string {
	exp, got := string(d.Expected), string(d.Got)
	if exp == "" {
		exp = "(not in baseline)"
	}
	if got == "" {
		got = "(not measured)"
	}
	line := fmt.Sprintf("%s: %s %s → %s", d.Target, d.Contract, exp, got)
	if d.Improvement() {
		line += " (improvement: update the baseline to expect it)"
	}
	return line
}

// GateSummary is the gate's first line over its differences: how many are
// regressions and how many improvements (which fail the gate too, until the
// baseline expects them).
func GateSummary(diffs []Difference) string {
	if len(diffs) == 0 {
		return "baseline: every verdict as expected"
	}
	better := 0
	for _, d := range diffs {
		if d.Improvement() {
			better++
		}
	}
	var parts []string
	if worse := len(diffs) - better; worse > 0 {
		parts = append(parts, plural(worse, "regression", "regressions"))
	}
	if better > 0 {
		parts = append(parts, plural(better, "improvement", "improvements")+
			" (the gate fails until the baseline expects the new verdict)")
	}
	return "baseline: " + strings.Join(parts, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Compare checks a document against a baseline. It returns the differences,
// over every result of the run (a --plan's with a sabotage too): a listed
// result whose verdict differs (a skip where a pass was expected included),
// an unlisted result that is a violation or unknown, and a listed result the
// run did not produce (a run that stopped early; Check refuses the other ways
// to miss one before the run).
func (bl Baseline) Compare(d *Document) []Difference {
	var diffs []Difference
	got := map[string]bool{}
	for _, r := range d.Results {
		got[Key(r.Target, r.Contract)] = true
		exp, listed := bl[r.Target][r.Contract]
		switch {
		case listed && exp != r.Verdict:
			diffs = append(diffs, Difference{Target: r.Target, Contract: r.Contract, Expected: exp, Got: r.Verdict})
		case !listed && (r.Verdict == contracts.Violated || r.Verdict == contracts.Unknown):
			diffs = append(diffs, Difference{Target: r.Target, Contract: r.Contract, Got: r.Verdict})
		}
	}
	for _, t := range bl.targets() {
		for _, c := range slices.Sorted(maps.Keys(bl[t])) {
			if !got[Key(t, c)] {
				diffs = append(diffs, Difference{Target: t, Contract: c, Expected: bl[t][c]})
			}
		}
	}
	return diffs
}

// Gate is the baseline a run was gated with (durachk run --baseline): the
// file and the verdicts it expected — as the run found them, or as
// --update-baseline wrote them (Updated: "updated" or "created"). The exit
// code, the JUnit file and the summary judge the results against it alike.
type Gate struct {
	Baseline string   `json:"baseline"`
	Expected Baseline `json:"expected"`
	Updated  string   `json:"updated,omitempty"`
}

// GateDifferences are the document's differences from the baseline it was
// gated with; nil for a run without one.
func (d *Document) GateDifferences() []Difference {
	if d.Gate == nil {
		return nil
	}
	return d.Gate.Expected.Compare(d)
}

// Measured reports whether some of diffs are results the run produced
// (a gate failure: exit 1), rather than only expected results a partial run
// did not reach.
func Measured(diffs []Difference) bool {
	return slices.ContainsFunc(diffs, func(d Difference) bool { return d.Got != "" })
}

// Expects returns the verdict the gate expects of target × contract, and
// whether it names it.
func (g *Gate) Expects(target, contract string) (contracts.Verdict, bool) {
	if g == nil {
		return "", false
	}
	v, ok := g.Expected[target][contract]
	return v, ok
}
