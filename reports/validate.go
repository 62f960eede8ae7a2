package reports

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/redact"
)

// ErrBadResult marks a result document that is not one durachk wrote: a
// report of it would show verdicts no run produced.
var ErrBadResult = errors.New("not a durachk result")

// DecodeJSON reads a result document from its JSON, checks its schema and
// validates it (see Validate). It never reads the history files.
func DecodeJSON(b []byte) (*Document, error) {
	var d Document
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadResult, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: more than one JSON value", ErrBadResult)
	}
	if d.Schema != Schema {
		return nil, fmt.Errorf("%w: schema %q, this durachk reads %q", ErrBadResult, Clip(d.Schema), Schema)
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	if d.Summary == nil {
		d.Summary = map[string]int{}
	}
	var has struct {
		Complete *bool `json:"complete"`
	}
	if json.Unmarshal(b, &has) == nil && has.Complete == nil {
		d.Complete = true // written before runs were written as they went
	}
	return &d, nil
}

// contractIDRE is the form of every contract id (lease.redelivery), seed
// scenario (scenario/poison-job), plan file (plan/shrunk) and explore result
// (explore, explore/shrunk); known ids are not required, so that a
// result of an older catalogue still renders.
var contractIDRE = regexp.MustCompile(`^([a-z][a-z0-9-]*(\.[a-z0-9-]+)+|scenario/[a-z0-9-]+|plan/[A-Za-z0-9][A-Za-z0-9._-]*|explore(/[a-z0-9-]+)?)$`)

// validVerdict reports whether v is one of the four verdicts.
func validVerdict(v contracts.Verdict) bool {
	switch v {
	case contracts.Pass, contracts.Violated, contracts.Unknown, contracts.Skipped:
		return true
	}
	return false
}

// Validate checks what every renderer relies on: each result names a target
// of the document and a contract, with one of the four verdicts; target names
// are unique; the summary counts verdicts; history files stay in histories/
// beside result.json.
func (d *Document) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadResult, fmt.Sprintf(format, a...))
	}
	if len(d.Targets) == 0 {
		return bad("names no target (every run measures at least one)")
	}
	targets := map[string]bool{}
	for i, t := range d.Targets {
		if t.Name == "" {
			return bad("targets[%d]: no name", i)
		}
		if strings.IndexFunc(t.Name, func(r rune) bool { return r < 0x20 || r == 0x7f || r == utf8.RuneError }) >= 0 {
			return bad("targets[%d]: name %q holds a control character or invalid UTF-8", i, Clip(t.Name))
		}
		if targets[t.Name] {
			return bad("targets[%d]: name %q used twice", i, Clip(t.Name))
		}
		targets[t.Name] = true
		if t.Durability != nil {
			for j, st := range t.Durability.Settings {
				if st.Name == "" || (st.Source != SourceKnob && st.Source != SourceServer && st.Source != SourceDefault) {
					return bad("targets[%d].durability.settings[%d]: name %q, source %q: want a name and knob, server or default", i, j, Clip(st.Name), Clip(st.Source))
				}
			}
		}
	}
	for i, r := range d.Results {
		where := fmt.Sprintf("results[%d] (%s/%s)", i, Clip(r.Target), Clip(r.Contract))
		switch {
		case r.Contract == "":
			return bad("results[%d]: no contract", i)
		case r.Target == "":
			return bad("results[%d]: no target", i)
		case !targets[r.Target]:
			return bad("%s: target %q is not among the document's targets", where, Clip(r.Target))
		case !contractIDRE.MatchString(r.Contract):
			return bad("%s: %q is not a contract id", where, Clip(r.Contract))
		case !validVerdict(r.Verdict):
			return bad("%s: verdict %q: want pass, violation, unknown or skipped", where, Clip(string(r.Verdict)))
		}
	}
	for v, n := range d.Summary {
		if !validVerdict(contracts.Verdict(v)) {
			return bad("summary: verdict %q: want pass, violation, unknown or skipped", Clip(v))
		}
		if n < 0 {
			return bad("summary: %s = %d", v, n)
		}
	}
	if g := d.Gate; g != nil {
		for _, t := range g.Expected.targets() {
			for _, c := range slices.Sorted(maps.Keys(g.Expected[t])) {
				if v := g.Expected[t][c]; !contractIDRE.MatchString(c) || !validVerdict(v) {
					return bad("gate: expected %s/%s %q: want a contract id and pass, violation, unknown or skipped", Clip(t), Clip(c), Clip(string(v)))
				}
			}
		}
	}
	for k, ev := range d.Evidence {
		if ev != nil && ev.Replay != nil {
			if rp := ev.Replay; rp.Runs < 1 || rp.Reproduced < 0 || rp.NotAtRisk < 0 || rp.Other < 0 || rp.Reproduced+rp.NotAtRisk+rp.Other != rp.Runs {
				return bad("evidence %q: replay of %d runs counts %d reproduced, %d not at risk, %d other", Clip(k), rp.Runs, rp.Reproduced, rp.NotAtRisk, rp.Other)
			}
		}
		if ev == nil {
			continue
		}
		// Every path is joined to result.json's directory: it must stay in
		// histories/ beside it.
		files := map[string]string{"history": ev.History, "final": ev.Final}
		for seed, f := range ev.TrialFinals {
			files[fmt.Sprintf("trial_finals[%d]", seed)] = f
		}
		for _, what := range slices.Sorted(maps.Keys(files)) {
			if h := files[what]; h != "" && !inHistories(h) {
				return bad("evidence %q: %s %q is not a file in histories/", Clip(k), what, Clip(h))
			}
		}
	}
	return nil
}

// inHistories reports whether p names a file in histories/ (relative, no
// way out of it).
func inHistories(p string) bool {
	return strings.HasPrefix(p, "histories/") && !strings.Contains(p, "..") && !strings.ContainsAny(p, "\\\x00")
}

// Clip shortens an echoed input for an error message (see redact.Clip).
func Clip(s string) string { return redact.Clip(s) }
