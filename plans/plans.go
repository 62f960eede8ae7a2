// Package plans reads and writes plans: a workload and a fault schedule as a
// file (YAML or JSON), so that a scenario can be written out, edited, kept,
// shrunk and run again without Go. The schema is docs/plans.md; decoding is
// strict (an unknown field or a bad value is an error naming it).
package plans

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/pipeline"
)

// Format names the version of the file format; a plan names it first.
const Format = "durachk.plan/v1"

// Generic is the contract of a plan that names none: every property of the
// checker, no claim-specific exercise check.
const Generic = "plan"

// Defaults of a plan's fields left out, the catalogue's own.
const (
	DefaultWorkers     = 4
	DefaultLease       = 10 * time.Second
	DefaultPoll        = 200 * time.Millisecond
	DefaultLimit       = 5 * time.Minute
	DefaultMaxAttempts = 3
)

// Bounds of a plan's numeric fields (docs/plans.md), checked before anything
// runs: every plan durachk writes (durachk plan with --jobs up to 10000,
// explore's rounds and shrunk plans) is within them.
const (
	MaxWorkers = 64
	MinLease   = 100 * time.Millisecond
	MaxLease   = time.Hour
	MinPoll    = 10 * time.Millisecond
	MaxPoll    = time.Minute
	// kill_after_lease and kill_after_ack: the controller reads the
	// histories every 20 ms, so a delivery or an acknowledgement fresher than
	// 10 ms is not seen in time; 10 s bounds the wait.
	MinKillAfter = 10 * time.Millisecond
	MaxKillAfter = 10 * time.Second
	MinLimit     = time.Second
	MaxLimit     = contracts.MaxLimit
	MaxJobs      = 20_000 // jobs, count expanded: the CLI's 10,000 and what a contract adds to them
	MaxFaults    = 1000
	MaxVersion   = 1_000_000
	MaxAttempts  = 1000
	MaxNth       = 1_000_000
	MaxDeadline  = 24 * time.Hour // also age_budget
	MaxLatency   = time.Minute    // delay and jitter
	// MaxIdlePolls bounds workers × limit ÷ poll: the embedded target records
	// every empty lease of every worker (an idle worker polls every 8 × poll
	// at most), so 64 workers idle for a day would record millions of
	// operations. 2,000,000 is 4 workers idle for 24 h at the default poll,
	// or 64 workers for 1.7 h: at most about 500,000 operations, under 200 MB
	// and a few seconds (tools/bench-jobs.sh measures the worst cases).
	MaxIdlePolls = 2_000_000
)

// Plan is one plan file. Times are scenario times: virtual on the embedded
// target, scaled (×0.1 by default) on real ones, as for every contract.
type Plan struct {
	Format string `yaml:"format" json:"format"`
	Name   string `yaml:"name,omitempty" json:"name,omitempty"`
	// Contract whose claim the plan exercises: its capability needs, its
	// exercise check and its own properties are used; the checker judges
	// every property in any case. "" or "plan": generic.
	Contract    string   `yaml:"contract,omitempty" json:"contract,omitempty"`
	Seed        uint64   `yaml:"seed" json:"seed"`
	Workers     int      `yaml:"workers,omitempty" json:"workers,omitempty"`
	Lease       Duration `yaml:"lease,omitempty" json:"lease,omitempty"`
	Poll        Duration `yaml:"poll,omitempty" json:"poll,omitempty"`
	Limit       Duration `yaml:"limit,omitempty" json:"limit,omitempty"`
	Operator    bool     `yaml:"operator,omitempty" json:"operator,omitempty"`
	Canaries    []string `yaml:"canaries,omitempty" json:"canaries,omitempty"`
	PinProducer string   `yaml:"pin_producer,omitempty" json:"pin_producer,omitempty"`
	// KillAfterLease holds the primary's kill until a job was handed out no
	// longer than this before it (faults.Plan.KillAfterLease).
	KillAfterLease Duration `yaml:"kill_after_lease,omitempty" json:"kill_after_lease,omitempty"`
	// KillAfterAck anchors the primary's kill, a broker kill and a power cut
	// to an acknowledgement: each fires a seeded few milliseconds after an
	// enqueue the broker acknowledged, while the newest is younger than this
	// (faults.Plan.KillAfterAck).
	KillAfterAck Duration `yaml:"kill_after_ack,omitempty" json:"kill_after_ack,omitempty"`
	// AtRisk is what the plan's claim needs at risk in a run (measures of
	// the registry, atrisk.go): a run that put less at risk is unknown.
	AtRisk []Risk `yaml:"at_risk,omitempty" json:"at_risk,omitempty"`
	// Sabotage names a sabotage of the catalogue (durachk selftest) that
	// breaks the run's pipeline or broker: a negative control, so that a plan
	// explore shrank under --sabotage replays as it failed.
	Sabotage string  `yaml:"sabotage,omitempty" json:"sabotage,omitempty"`
	Jobs     []Job   `yaml:"jobs" json:"jobs"`
	Faults   []Fault `yaml:"faults,omitempty" json:"faults,omitempty"`
}

// Job is one job of the workload, or Count jobs alike.
type Job struct {
	ID string `yaml:"id" json:"id"`
	// Count > 1 makes this entry Count jobs: ids and documents get -000,
	// -001, ... appended, the producer sends them Every apart from At.
	Count       int      `yaml:"count,omitempty" json:"count,omitempty"`
	Every       Duration `yaml:"every,omitempty" json:"every,omitempty"`
	Kind        string   `yaml:"kind,omitempty" json:"kind,omitempty"`
	Tenant      string   `yaml:"tenant,omitempty" json:"tenant,omitempty"`
	Doc         string   `yaml:"doc,omitempty" json:"doc,omitempty"`
	PayloadDoc  string   `yaml:"payload_doc,omitempty" json:"payload_doc,omitempty"`
	Version     int      `yaml:"version,omitempty" json:"version,omitempty"`
	MaxAttempts int      `yaml:"max_attempts,omitempty" json:"max_attempts,omitempty"`
	Group       string   `yaml:"group,omitempty" json:"group,omitempty"`
	At          Duration `yaml:"at,omitempty" json:"at,omitempty"`
	Deadline    Duration `yaml:"deadline,omitempty" json:"deadline,omitempty"`
	Twice       bool     `yaml:"twice,omitempty" json:"twice,omitempty"`
	Text        string   `yaml:"text,omitempty" json:"text,omitempty"`
	// What the job does when executed (pipeline.Payload).
	Crash            bool     `yaml:"crash,omitempty" json:"crash,omitempty"`
	FailTransient    int      `yaml:"fail_transient,omitempty" json:"fail_transient,omitempty"`
	FailPermanent    bool     `yaml:"fail_permanent,omitempty" json:"fail_permanent,omitempty"`
	FailBelowVersion int      `yaml:"fail_below_version,omitempty" json:"fail_below_version,omitempty"`
	PoisonEvent      bool     `yaml:"poison_event,omitempty" json:"poison_event,omitempty"`
	Slow             Duration `yaml:"slow,omitempty" json:"slow,omitempty"`
	AgeBudget        Duration `yaml:"age_budget,omitempty" json:"age_budget,omitempty"`
}

// Fault is one fault of the schedule (faults.Fault).
type Fault struct {
	Kind    string   `yaml:"kind" json:"kind"`
	Point   string   `yaml:"point,omitempty" json:"point,omitempty"`
	Nth     int      `yaml:"nth,omitempty" json:"nth,omitempty"`
	Process string   `yaml:"process,omitempty" json:"process,omitempty"`
	Link    string   `yaml:"link,omitempty" json:"link,omitempty"`
	Node    string   `yaml:"node,omitempty" json:"node,omitempty"`
	At      Duration `yaml:"at,omitempty" json:"at,omitempty"`
	For     Duration `yaml:"for,omitempty" json:"for,omitempty"`
	Rate    float64  `yaml:"rate,omitempty" json:"rate,omitempty"`
	Delay   Duration `yaml:"delay,omitempty" json:"delay,omitempty"`
	Jitter  Duration `yaml:"jitter,omitempty" json:"jitter,omitempty"`
	Match   string   `yaml:"match,omitempty" json:"match,omitempty"`
}

// Kinds of jobs: shorthands for what a job does.
var kinds = map[string]pipeline.Payload{
	"normal":       {},
	"poison":       {Crash: true},                           // kills its worker on every delivery
	"stubborn":     {FailTransient: -1},                     // fails transiently forever
	"flaky":        {FailTransient: 1},                      // fails its first attempt
	"permanent":    {FailPermanent: true},                   // fails permanently
	"poison-event": {PoisonEvent: true},                     // its event is rejected by the consumer
	"fixed-later":  {FailBelowVersion: 2},                   // fails until reprocessed at version 2
	"slow":         {Slow: 25 * time.Second},                // longer than the default lease
	"near-budget":  {FailTransient: DefaultMaxAttempts - 1}, // succeeds on its last attempt
}

// KindNames lists the job kinds, sorted.
func KindNames() []string {
	var out []string
	for k := range kinds {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Duration is a time.Duration written as Go writes it ("1.5s", "200ms").
type Duration time.Duration

// D is d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalYAML reads "1.5s", "200ms", "0".
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a duration such as 200ms", n.Line)
	}
	v, err := parseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

func parseDuration(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("duration %q: want a duration ≥ 0 such as 200ms or 1.5s", clip(s))
	}
	return v, nil
}

// Error is a plan that cannot be read or is not valid.
type Error struct {
	Source string // the file, or "plan"
	Err    error
}

func (e *Error) Error() string { return fmt.Sprintf("plan %s: %v", e.Source, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// ErrInvalid marks a plan that decodes but does not hold together.
var ErrInvalid = errors.New("invalid plan")

// Read reads and validates the plan file at path (YAML or JSON).
func Read(path string) (*Plan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{Source: path, Err: err}
	}
	return Parse(b, path)
}

// Parse decodes and validates a plan (YAML, of which JSON is a part).
// Decoding is strict: an unknown field, a second document, or a value of the
// wrong type is an error. source names the plan in errors.
func Parse(b []byte, source string) (*Plan, error) {
	if source == "" {
		source = "plan"
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var p Plan
	if err := dec.Decode(&p); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{Source: source, Err: errors.New("empty file")}
		}
		return nil, &Error{Source: source, Err: oneLine(err)}
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, &Error{Source: source, Err: errors.New("more than one document")}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, &Error{Source: source, Err: oneLine(err)}
	}
	if err := strictNumbers(&doc, reflect.TypeFor[Plan](), ""); err != nil {
		return nil, &Error{Source: source, Err: fmt.Errorf("%w: %w", ErrInvalid, err)}
	}
	if _, err := p.Scenario(); err != nil {
		return nil, &Error{Source: source, Err: err}
	}
	if p.Sabotage != "" {
		if _, err := LookupSabotage(p.Sabotage); err != nil {
			return nil, &Error{Source: source, Err: fmt.Errorf("%w: %w", ErrInvalid, err)}
		}
	}
	return &p, nil
}

// zeroRefused are the fields for which 0 stands for the default, and whose
// bounds exclude 0, by the struct they are in: given as 0 in a file, they are
// refused (they were read as the default: workers: 0 ran 4 workers), with
// their bounds.
var zeroRefused = map[reflect.Type]map[string]string{
	reflect.TypeFor[Plan](): {
		"workers": fmt.Sprintf("1 to %d", MaxWorkers), "lease": fmt.Sprintf("%v to %v", MinLease, MaxLease),
		"poll": fmt.Sprintf("%v to %v", MinPoll, MaxPoll), "limit": fmt.Sprintf("%v to %v", MinLimit, MaxLimit),
		"kill_after_lease": fmt.Sprintf("%v to %v", MinKillAfter, MaxKillAfter), "kill_after_ack": fmt.Sprintf("%v to %v", MinKillAfter, MaxKillAfter),
	},
	reflect.TypeFor[Job](): {
		"count": fmt.Sprintf("1 to %d", MaxJobs), "version": fmt.Sprintf("1 to %d", MaxVersion),
		"max_attempts": fmt.Sprintf("1 to %d", MaxAttempts), "age_budget": fmt.Sprintf("more than 0, at most %v", MaxDeadline),
	},
}

// strictNumbers checks what decoding into Go's types would lose, over the
// YAML document n decoded into t: every integer field is written as a
// decimal integer that fits its type (YAML decodes 1.5 into an int as 1, 1e3
// as 1000 and 2^64 into a uint64 as 2^63), and no field of zeroRefused is
// given as 0. where is the path of n in the plan ("jobs[2]").
func strictNumbers(n *yaml.Node, t reflect.Type, where string) error {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n.Kind != yaml.MappingNode || t.Kind() != reflect.Struct {
		return nil // the decoder refuses what is not a mapping
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, v := n.Content[i].Value, n.Content[i+1]
		f, ok := fieldOf(t, key)
		if !ok {
			continue
		}
		name := key
		if where != "" {
			name = where + "." + key
		}
		ft := f.Type
		switch {
		case ft == reflect.TypeFor[Duration]():
			if bound, ok := zeroRefused[t][key]; ok && v.Kind == yaml.ScalarNode {
				if d, err := parseDuration(v.Value); err == nil && d == 0 {
					return fmt.Errorf("line %d: %s %s: want %s (leave it out for its default)", v.Line, name, clip(v.Value), bound)
				}
			}
		case ft.Kind() >= reflect.Int && ft.Kind() <= reflect.Uint64:
			if v.Kind != yaml.ScalarNode {
				continue // the decoder says what it is
			}
			val, err := exactInt(v.Value, ft)
			if err != nil {
				return fmt.Errorf("line %d: %s %s: want a decimal integer %s", v.Line, name, clip(v.Value), err)
			}
			if bound, ok := zeroRefused[t][key]; ok && val == 0 {
				return fmt.Errorf("line %d: %s 0: want %s (leave it out for its default)", v.Line, name, bound)
			}
		case ft.Kind() == reflect.Struct:
			if err := strictNumbers(v, ft, name); err != nil {
				return err
			}
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct && v.Kind == yaml.SequenceNode:
			for j, item := range v.Content {
				if err := strictNumbers(item, ft.Elem(), fmt.Sprintf("%s[%d]", name, j)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// fieldOf finds the field of struct t that YAML key names.
func fieldOf(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// exactInt reads s as a decimal integer that a field of type t holds
// exactly; the error says which integers it holds where that is all there
// is to say (the field's own bounds are checked after).
func exactInt(s string, t reflect.Type) (int64, error) {
	if t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64 {
		u, err := strconv.ParseUint(s, 10, t.Bits())
		if err != nil {
			return 0, fmt.Errorf("from 0 to %d", uint64(math.MaxUint64)>>(64-t.Bits()))
		}
		return int64(min(u, 1)), nil // 0 or not is what the caller asks
	}
	v, err := strconv.ParseInt(s, 10, t.Bits())
	if err != nil {
		return 0, errors.New("within the field's bounds")
	}
	return v, nil
}

// LookupSabotage finds a sabotage of the catalogue or the seed scenarios by
// name.
func LookupSabotage(name string) (*contracts.Sabotage, error) {
	var names []string
	for _, c := range append(slices.Clone(contracts.Catalogue), contracts.SeedScenarios...) {
		for _, s := range c.Sabotages {
			if s.Name == name {
				return &s, nil
			}
			if !slices.Contains(names, s.Name) {
				names = append(names, s.Name)
			}
		}
	}
	return nil, fmt.Errorf("sabotage %q: want one of %s", clip(name), strings.Join(names, ", "))
}

func oneLine(err error) error {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	s = strings.ReplaceAll(s, "unmarshal errors:\n", "")
	s = strings.Join(strings.Fields(s), " ")
	s = strings.ReplaceAll(s, "in type plans.", "in ")
	return errors.New(s)
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// Marshal writes the plan as YAML, or as JSON when json is set.
func (p *Plan) Marshal(asJSON bool) ([]byte, error) {
	if asJSON {
		b, err := json.MarshalIndent(p, "", "  ")
		if err != nil {
			return nil, err
		}
		return append(b, '\n'), nil
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(p); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Write writes the plan to path: JSON for a .json path, YAML otherwise.
func (p *Plan) Write(path string) error {
	b, err := p.Marshal(strings.EqualFold(filepath.Ext(path), ".json"))
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// Size is the number of jobs (Count expanded) and of faults.
func (p *Plan) Size() (jobs, faults int) {
	for _, j := range p.Jobs {
		jobs += max(j.Count, 1)
	}
	return jobs, len(p.Faults)
}

// Clone returns a deep copy.
func (p *Plan) Clone() *Plan {
	q := *p
	q.Jobs = slices.Clone(p.Jobs)
	q.Faults = slices.Clone(p.Faults)
	q.Canaries = slices.Clone(p.Canaries)
	q.AtRisk = slices.Clone(p.AtRisk)
	return &q
}

var processRE = regexp.MustCompile(`^w([1-9][0-9]*)$`)

var crashPoints = []string{string(pipeline.AfterLease), string(pipeline.AfterExtract), string(pipeline.MidCommit),
	string(pipeline.AfterCommitBeforeAck), string(pipeline.AfterPublishBeforeMark)}

var links = []string{faults.LinkBroker, faults.LinkStore, faults.LinkChannel, faults.LinkReplication}

// fields says which of a fault's fields each kind takes (besides kind).
var fields = map[faults.Kind][]string{
	faults.CrashAt:       {"point", "nth"},
	faults.PauseAt:       {"point", "nth", "for"},
	faults.Kill:          {"process", "at"},
	faults.BrokerCrash:   {"at", "for"},
	faults.PowerLoss:     {"at", "for"},
	faults.LinkDown:      {"link", "at", "for"},
	faults.Blackhole:     {"link", "at", "for"},
	faults.Flap:          {"link", "at", "for"},
	faults.ReplyLoss:     {"link", "at", "for", "rate", "match"},
	faults.Reset:         {"link", "at", "for", "rate"},
	faults.Latency:       {"link", "at", "for", "delay", "jitter"},
	faults.NodeKill:      {"node", "at", "for"},
	faults.NodePartition: {"node", "at", "for"},
	faults.Failover:      {"at"},
}

func (f Fault) set() []string {
	var out []string
	add := func(name string, on bool) {
		if on {
			out = append(out, name)
		}
	}
	add("point", f.Point != "")
	add("nth", f.Nth != 0)
	add("process", f.Process != "")
	add("link", f.Link != "")
	add("node", f.Node != "")
	add("at", f.At != 0)
	add("for", f.For != 0)
	add("rate", f.Rate != 0)
	add("delay", f.Delay != 0)
	add("jitter", f.Jitter != 0)
	add("match", f.Match != "")
	return out
}

// Scenario validates the plan and returns the scenario it describes.
func (p *Plan) Scenario() (contracts.Scenario, error) {
	bad := func(format string, args ...any) (contracts.Scenario, error) {
		return contracts.Scenario{}, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
	}
	if p.Format != Format {
		return bad("format %q: want %q", clip(p.Format), Format)
	}
	if p.Contract != "" && p.Contract != Generic {
		if _, err := lookup(p.Contract); err != nil {
			return bad("contract %q: not in the catalogue (durachk list), nor %q", clip(p.Contract), Generic)
		}
	}
	if p.Workers < 0 || p.Workers > MaxWorkers {
		return bad("workers %d: want 1 to %d", p.Workers, MaxWorkers)
	}
	if err := errors.Join(inRange("lease", p.Lease, MinLease, MaxLease), inRange("poll", p.Poll, MinPoll, MaxPoll),
		inRange("limit", p.Limit, MinLimit, MaxLimit), inRange("kill_after_lease", p.KillAfterLease, MinKillAfter, MaxKillAfter),
		inRange("kill_after_ack", p.KillAfterAck, MinKillAfter, MaxKillAfter)); err != nil {
		return bad("%v", oneLineErr(err))
	}
	if err := validRisks(p.AtRisk); err != nil {
		return bad("%v", err)
	}
	sc := contracts.Scenario{Name: p.Name, Workers: or(p.Workers, DefaultWorkers), Lease: orD(p.Lease, DefaultLease),
		Poll: orD(p.Poll, DefaultPoll), Limit: orD(p.Limit, DefaultLimit), Operator: p.Operator, Canaries: slices.Clone(p.Canaries)}
	if sc.Name == "" {
		sc.Name = "plan"
	}
	if polls := float64(sc.Workers) * float64(sc.Limit) / float64(sc.Poll); polls > MaxIdlePolls {
		return bad("workers %d × limit %v ÷ poll %v = %.0f: want at most %d (the embedded target records every empty poll; shorten the limit, or poll less often)",
			sc.Workers, sc.Limit, sc.Poll, polls, MaxIdlePolls)
	}
	if len(p.Jobs) == 0 {
		return bad("jobs: want at least one job")
	}
	if n, _ := p.Size(); n > MaxJobs {
		return bad("jobs: %d with their counts: want at most %d", n, MaxJobs)
	}
	if len(p.Faults) > MaxFaults {
		return bad("faults: %d: want at most %d", len(p.Faults), MaxFaults)
	}
	ids := map[string]bool{}
	for i, j := range p.Jobs {
		js, err := j.specs(sc.Limit)
		if err != nil {
			return bad("jobs[%d] (%s): %v", i, clip(j.ID), err)
		}
		for _, s := range js {
			if ids[s.Job.ID] {
				return bad("jobs[%d]: job id %q given twice", i, clip(s.Job.ID))
			}
			ids[s.Job.ID] = true
		}
		sc.Jobs = append(sc.Jobs, js...)
	}
	sc.Plan = faults.Plan{Name: sc.Name, PinProducer: p.PinProducer, KillAfterLease: p.KillAfterLease.D(), KillAfterAck: p.KillAfterAck.D()}
	for i, f := range p.Faults {
		ff, err := f.fault(sc.Workers, sc.Limit)
		if err != nil {
			return bad("faults[%d] (%s): %v", i, clip(f.Kind), err)
		}
		sc.Plan.Faults = append(sc.Plan.Faults, ff)
	}
	return sc, nil
}

func or(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

func orD(v Duration, d time.Duration) time.Duration {
	if v == 0 {
		return d
	}
	return v.D()
}

// inRange checks a duration field: 0 (its default) or lo to hi.
func inRange(name string, d Duration, lo, hi time.Duration) error {
	if d != 0 && (d.D() < lo || d.D() > hi) {
		return fmt.Errorf("%s %v: want %v to %v", name, d, lo, hi)
	}
	return nil
}

// atMost checks a duration field against its upper bound (what names it).
func atMost(name string, d Duration, hi time.Duration, what string) error {
	if d.D() > hi {
		return fmt.Errorf("%s %v: want at most %s (%v)", name, d, what, hi)
	}
	return nil
}

// intIn checks an integer field: lo to hi.
func intIn(name string, v, lo, hi int) error {
	if v < lo || v > hi {
		return fmt.Errorf("%s %d: want %d to %d", name, v, lo, hi)
	}
	return nil
}

func oneLineErr(err error) error { return errors.New(strings.ReplaceAll(err.Error(), "\n", "; ")) }

func (j Job) specs(limit time.Duration) ([]contracts.JobSpec, error) {
	if j.ID == "" {
		return nil, errors.New("id: want a job id")
	}
	if j.Count < 0 || j.Count > MaxJobs {
		return nil, fmt.Errorf("count %d: want 1 to %d", j.Count, MaxJobs)
	}
	if j.Every != 0 && j.Count <= 1 {
		return nil, errors.New("every: only with count > 1")
	}
	err := errors.Join(intIn("version", or(j.Version, 1), 1, MaxVersion), intIn("max_attempts", or(j.MaxAttempts, 1), 1, MaxAttempts),
		intIn("fail_below_version", j.FailBelowVersion, 0, MaxVersion),
		atMost("at", j.At, limit, "the plan's limit"), atMost("deadline", j.Deadline, MaxDeadline, "a day"),
		atMost("slow", j.Slow, limit, "the plan's limit"), atMost("age_budget", j.AgeBudget, MaxDeadline, "a day"))
	if j.FailTransient < -1 || j.FailTransient > MaxAttempts {
		err = errors.Join(err, fmt.Errorf("fail_transient %d: want -1 (forever) or a number of attempts from 0 to %d", j.FailTransient, MaxAttempts))
	}
	if j.Count > 1 && err == nil {
		// The last copy is sent (Count-1)×Every after At: within the limit too.
		if j.Every.D() > limit || j.At.D()+time.Duration(j.Count-1)*j.Every.D() > limit {
			err = fmt.Errorf("at %v + %d × every %v: the last is sent after the plan's limit %v", j.At, j.Count-1, j.Every, limit)
		}
	}
	if err != nil {
		return nil, oneLineErr(err)
	}
	p := pipeline.Payload{Text: j.Text, Crash: j.Crash, FailTransient: j.FailTransient, FailPermanent: j.FailPermanent,
		FailBelowVersion: j.FailBelowVersion, PoisonEvent: j.PoisonEvent, Slow: j.Slow.D(), AgeBudget: j.AgeBudget.D()}
	if j.Kind != "" {
		k, ok := kinds[j.Kind]
		if !ok {
			return nil, fmt.Errorf("kind %q: want one of %s", clip(j.Kind), strings.Join(KindNames(), ", "))
		}
		own := p
		own.Text = ""
		if own != (pipeline.Payload{}) {
			return nil, fmt.Errorf("kind %s and the behaviour fields (crash, fail_*, poison_event, slow, age_budget): give one or the other", j.Kind)
		}
		k.Text = j.Text
		p = k
	}
	n := max(j.Count, 1)
	out := make([]contracts.JobSpec, n)
	for i := range n {
		id, doc := j.ID, j.Doc
		if doc == "" {
			doc = "doc-" + j.ID
		}
		if j.Count > 1 {
			suffix := fmt.Sprintf("-%03d", i)
			id, doc = id+suffix, doc+suffix
		}
		pp := p
		pp.Doc = doc
		if j.PayloadDoc != "" {
			pp.Doc = j.PayloadDoc
		}
		out[i] = contracts.JobSpec{
			Job: adapters.Job{ID: id, Tenant: cmpOr(j.Tenant, "acme"), DocumentID: doc, Version: or(j.Version, 1),
				Payload: pp.Encode(), MaxAttempts: or(j.MaxAttempts, DefaultMaxAttempts), Group: j.Group},
			At: j.At.D() + time.Duration(i)*j.Every.D(), Twice: j.Twice, Deadline: j.Deadline.D(),
		}
	}
	return out, nil
}

func cmpOr(a, b string) string {
	if a == "" {
		return b
	}
	return a
}

func (f Fault) fault(workers int, limit time.Duration) (faults.Fault, error) {
	k := faults.Kind(f.Kind)
	allowed, ok := fields[k]
	if !ok {
		var names []string
		for _, k := range contracts.FaultKinds {
			names = append(names, string(k))
		}
		return faults.Fault{}, fmt.Errorf("kind %q: want one of %s", clip(f.Kind), strings.Join(names, ", "))
	}
	for _, name := range f.set() {
		if !slices.Contains(allowed, name) {
			return faults.Fault{}, fmt.Errorf("%s does not take %s (it takes %s)", k, name, strings.Join(allowed, ", "))
		}
	}
	need := func(cond bool, format string, args ...any) error {
		if cond {
			return nil
		}
		return fmt.Errorf(format, args...)
	}
	err := errors.Join(atMost("at", f.At, limit, "the plan's limit"), atMost("for", f.For, limit, "the plan's limit"),
		atMost("delay", f.Delay, MaxLatency, "a minute"), atMost("jitter", f.Jitter, MaxLatency, "a minute"))
	if f.Nth > MaxNth {
		err = errors.Join(err, fmt.Errorf("nth %d: want at most %d", f.Nth, MaxNth))
	}
	switch k {
	case faults.CrashAt, faults.PauseAt:
		err = errors.Join(err, need(slices.Contains(crashPoints, f.Point), "point %q: want one of %s", clip(f.Point), strings.Join(crashPoints, ", ")),
			need(f.Nth >= 1, "nth %d: want the arrival (≥ 1) at the point that fires it", f.Nth))
		if k == faults.PauseAt {
			err = errors.Join(err, need(f.For > 0, "for: want how long the process stays paused"))
		}
	case faults.Kill:
		m := processRE.FindStringSubmatch(f.Process)
		n := 0
		if m != nil {
			n, _ = strconv.Atoi(m[1])
		}
		err = errors.Join(err, need(m != nil && n <= workers, "process %q: want a worker w1 to w%d", clip(f.Process), workers))
	case faults.LinkDown, faults.Blackhole, faults.Flap, faults.ReplyLoss, faults.Reset, faults.Latency:
		err = errors.Join(err, need(slices.Contains(links, f.Link), "link %q: want one of %s", clip(f.Link), strings.Join(links, ", ")),
			need(f.For > 0, "for: want how long the fault lasts"))
		switch k {
		case faults.ReplyLoss, faults.Reset:
			err = errors.Join(err, need(f.Rate > 0 && f.Rate <= 1, "rate %v: want a probability in (0, 1]", f.Rate))
		case faults.Latency:
			err = errors.Join(err, need(f.Delay > 0, "delay: want the latency to add"))
		}
	case faults.NodeKill, faults.NodePartition:
		err = errors.Join(err, need(f.Node != "", "node: want a selector (primary, replica, one, minority, majority, all, pinned) or a node's name"))
	}
	if err != nil {
		return faults.Fault{}, errors.New(strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return faults.Fault{Kind: k, Point: f.Point, Nth: f.Nth, Process: f.Process, Link: f.Link, Node: f.Node,
		At: f.At.D(), For: f.For.D(), Rate: f.Rate, Delay: f.Delay.D(), Jitter: f.Jitter.D(), Match: f.Match}, nil
}

func lookup(id string) (*contracts.Contract, error) {
	if strings.HasPrefix(id, "scenario/") {
		return contracts.LookupScenario(id)
	}
	return contracts.Lookup(id)
}

// FromContract writes out the scenario contract c builds from seed with jobs
// jobs (0: the default), as a plan naming c.
func FromContract(c *contracts.Contract, seed uint64, jobs int) (*Plan, error) {
	if jobs <= 0 {
		jobs = contracts.DefaultJobs
	}
	return FromScenario(c.Scenario(seed, jobs), c.ID, seed)
}

// FromScenario writes out sc as a plan naming contract (or Generic) and the
// seed it runs with. It fails when the plan would not give back sc exactly.
func FromScenario(sc contracts.Scenario, contract string, seed uint64) (*Plan, error) {
	p := &Plan{Format: Format, Name: sc.Name, Contract: contract, Seed: seed, Workers: sc.Workers, Lease: Duration(sc.Lease),
		Poll: Duration(sc.Poll), Limit: Duration(sc.Limit), Operator: sc.Operator, Canaries: slices.Clone(sc.Canaries), PinProducer: sc.Plan.PinProducer,
		KillAfterLease: Duration(sc.Plan.KillAfterLease), KillAfterAck: Duration(sc.Plan.KillAfterAck)}
	for _, js := range sc.Jobs {
		pl, err := pipeline.DecodePayload(js.Job.Payload)
		if err != nil {
			return nil, fmt.Errorf("job %s: payload: %w", js.Job.ID, err)
		}
		j := Job{ID: js.Job.ID, Tenant: js.Job.Tenant, Doc: js.Job.DocumentID, Version: js.Job.Version, MaxAttempts: js.Job.MaxAttempts,
			Group: js.Job.Group, At: Duration(js.At), Deadline: Duration(js.Deadline), Twice: js.Twice, Text: pl.Text}
		if j.Version == 1 {
			j.Version = 0
		}
		if j.MaxAttempts == DefaultMaxAttempts {
			j.MaxAttempts = 0
		}
		if pl.Doc != js.Job.DocumentID {
			j.PayloadDoc = pl.Doc
		}
		behaviour := pl
		behaviour.Doc, behaviour.Text = "", ""
		j.Kind = kindOf(behaviour)
		if j.Kind == "" {
			j.Crash, j.FailTransient, j.FailPermanent, j.FailBelowVersion = pl.Crash, pl.FailTransient, pl.FailPermanent, pl.FailBelowVersion
			j.PoisonEvent, j.Slow, j.AgeBudget = pl.PoisonEvent, Duration(pl.Slow), Duration(pl.AgeBudget)
		}
		p.Jobs = append(p.Jobs, j)
	}
	for _, f := range sc.Plan.Faults {
		p.Faults = append(p.Faults, Fault{Kind: string(f.Kind), Point: f.Point, Nth: f.Nth, Process: f.Process, Link: f.Link, Node: f.Node,
			At: Duration(f.At), For: Duration(f.For), Rate: f.Rate, Delay: Duration(f.Delay), Jitter: Duration(f.Jitter), Match: f.Match})
	}
	back, err := p.Scenario()
	if err != nil {
		return nil, err
	}
	if !sameScenario(back, sc) {
		return nil, fmt.Errorf("%w: scenario %q cannot be written out exactly", ErrInvalid, sc.Name)
	}
	return p, nil
}

// kindOf names the job kind whose behaviour is b, "" for none ("normal" is
// left out: a job without a kind is normal).
func kindOf(b pipeline.Payload) string {
	if b == (pipeline.Payload{}) {
		return ""
	}
	for _, name := range KindNames() {
		if kinds[name] == b {
			return name
		}
	}
	return ""
}

func sameScenario(a, b contracts.Scenario) bool {
	if len(a.Jobs) != len(b.Jobs) {
		return false
	}
	for i := range a.Jobs {
		x, y := a.Jobs[i], b.Jobs[i]
		if !bytes.Equal(x.Job.Payload, y.Job.Payload) {
			return false
		}
		x.Job.Payload, y.Job.Payload = nil, nil
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	a.Jobs, b.Jobs = nil, nil
	if len(a.Canaries) == 0 && len(b.Canaries) == 0 {
		a.Canaries, b.Canaries = nil, nil
	}
	if len(a.Plan.Faults) == 0 && len(b.Plan.Faults) == 0 {
		a.Plan.Faults, b.Plan.Faults = nil, nil
	}
	return reflect.DeepEqual(a, b)
}

// AsContract is the plan as a contract with id: the named contract's claim,
// needs, exercise check and own properties (or, for a generic plan, every
// property of the checker and no exercise check), then the plan's at_risk;
// its scenario the plan's whatever the seed. A target that cannot apply one
// of the plan's faults skips it with the reason.
func (p *Plan) AsContract(id string) (*contracts.Contract, error) {
	sc, err := p.Scenario()
	if err != nil {
		return nil, err
	}
	c := &contracts.Contract{ID: id, Claim: "the plan's workload and faults: no property of the checker violated",
		Motivation: "a plan file", Labels: []string{"plan"}}
	var base *contracts.Contract
	if p.Contract != "" && p.Contract != Generic {
		if base, err = lookup(p.Contract); err != nil {
			return nil, err
		}
		c.Claim, c.Motivation, c.Labels = base.Claim, base.Motivation, base.Labels
		c.Exercised, c.Properties, c.Sabotages = base.Exercised, base.Properties, base.Sabotages
	}
	if risks := slices.Clone(p.AtRisk); len(risks) > 0 {
		// What the plan needs at risk, after what its contract needs exercised.
		exercised := c.Exercised
		c.Exercised = func(s contracts.Stats) string {
			if exercised != nil {
				if why := exercised(s); why != "" {
					return why
				}
			}
			return Unmet(risks, s)
		}
	}
	plan := sc.Plan
	c.Needs = func(caps adapters.Capabilities) string {
		if base != nil && base.Needs != nil {
			if why := base.Needs(caps); why != "" {
				return why
			}
		}
		return contracts.PlanNeeds(plan, caps)
	}
	c.Scenario = func(uint64, int) contracts.Scenario {
		out := sc
		out.Jobs = slices.Clone(sc.Jobs)
		out.Plan.Faults = slices.Clone(sc.Plan.Faults)
		out.Canaries = slices.Clone(sc.Canaries)
		return out
	}
	return c, nil
}
