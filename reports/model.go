// Package reports holds the versioned result model that every run writes as
// result.json, and its renderers: JSON, JUnit XML, Markdown (a CI job summary),
// a self-contained HTML evidence page, the compare matrix and the baseline diff.
//
// A Document is built by one goroutine (the run) and is not safe for concurrent
// mutation; once finished, rendering it from several goroutines is safe.
package reports

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/history"
)

// Schema names the version of the result model. A change that removes or renames
// a field bumps it; adding a field does not.
const Schema = "durachk.result/v1"

// Version is durachk's own version, stamped into every document: the module
// version from the build information (see ReadBuild).
var Version = ReadBuild().Version

// MaxHistoryOps bounds the history sample kept per result (see SampleHistory).
const MaxHistoryOps = 4000

// Document is one run: every result of every target, plus how to reproduce it.
// All fields but Wall are a function of the command line and the targets; Wall
// holds every wall-clock measurement, kept apart so that two runs with one seed
// compare equal without it.
type Document struct {
	Schema  string `json:"schema"`
	Version string `json:"durachk_version"`
	Seed    uint64 `json:"seed"`
	// Jobs is the --jobs of the run (0: each contract's default).
	Jobs    int                `json:"jobs,omitempty"`
	Command string             `json:"command"`
	Targets []TargetInfo       `json:"targets"`
	Results []contracts.Result `json:"results"`
	Summary map[string]int     `json:"summary"`
	// Evidence per result, keyed by Key(target, contract): the history sample's
	// file, the fault windows and the command that reproduces the result.
	Evidence map[string]*Evidence `json:"evidence,omitempty"`
	Wall     Wall                 `json:"wall"`

	// Histories holds the (sampled) history of each result, keyed like Evidence.
	// It is written to histories/*.jsonl beside result.json, not into it.
	Histories map[string][]history.Op `json:"-"`
}

// TargetInfo describes one target as it was measured. It never holds a
// credential: URL is redacted and Settings leaves secret-looking knobs out.
type TargetInfo struct {
	Name         string                `json:"name"`
	Broker       string                `json:"broker"`
	MeasuredOn   string                `json:"measured_on"`
	Capabilities adapters.Capabilities `json:"capabilities"`
	// Kind is the target kind (mem, postgres, redis, ...).
	Kind string `json:"kind,omitempty"`
	// URL is the target URL with every credential replaced by xxxxx.
	URL string `json:"url,omitempty"`
	// Endpoint is embedded, local (loopback) or remote.
	Endpoint string `json:"endpoint,omitempty"`
	// Settings are the effective knobs (credentials and the name left out).
	Settings map[string]string `json:"settings,omitempty"`
	// Fingerprint hashes kind, settings, broker version and endpoint kind: two
	// columns of a matrix with one fingerprint measured the same configuration.
	Fingerprint string `json:"fingerprint,omitempty"`
}

// Evidence is what a report shows beside a verdict.
type Evidence struct {
	// History is the history sample's file, relative to result.json.
	History string `json:"history,omitempty"`
	// HistoryOps is the number of operations in the sample; HistoryTotal the
	// number the run recorded (they differ when the sample was bounded).
	HistoryOps   int `json:"history_ops"`
	HistoryTotal int `json:"history_total"`
	// Windows are the fault windows (link down, reply loss, broker down, pause).
	Windows []FaultWindow `json:"fault_windows,omitempty"`
	// Reproduce is the command that reruns this result alone.
	Reproduce string `json:"reproduce,omitempty"`
}

// FaultWindow is a period during which a fault was in force, in the history's
// clock (nanoseconds since the Unix epoch, virtual on the embedded target).
type FaultWindow struct {
	Kind   string `json:"kind"`
	Target string `json:"target,omitempty"` // a link, a process or the broker
	From   int64  `json:"from"`
	To     int64  `json:"to"`
	// Planned: taken from the fault plan (anchored on the producer's first
	// send) rather than observed in the history.
	Planned bool `json:"planned,omitempty"`
}

// Wall is the wall-clock part of a run.
type Wall struct {
	StartedAt  time.Time   `json:"started_at"`
	DurationMS float64     `json:"duration_ms"`
	Results    []WallEntry `json:"results"`
}

// WallEntry is the wall time of one result.
type WallEntry struct {
	Target   string  `json:"target"`
	Contract string  `json:"contract"`
	MS       float64 `json:"ms"`
}

// Key names a result among a document's evidence and histories.
func Key(target, contract string) string { return target + "/" + contract }

// NewDocument starts a document for a run.
func NewDocument(seed uint64, command string, started time.Time) *Document {
	return &Document{Schema: Schema, Version: Version, Seed: seed, Command: RedactCommand(command), Summary: map[string]int{},
		Evidence: map[string]*Evidence{}, Histories: map[string][]history.Op{}, Wall: Wall{StartedAt: started.UTC()}}
}

// AddTarget records a target once, described by what it says of itself.
func (d *Document) AddTarget(t contracts.Target) {
	d.AddTargetInfo(DescribeTarget(t, "", ""))
}

// AddTargetInfo records a target once (by name); a later call with the same
// name is ignored.
func (d *Document) AddTargetInfo(ti TargetInfo) {
	for _, x := range d.Targets {
		if x.Name == ti.Name {
			return
		}
	}
	if ti.Fingerprint == "" {
		ti.Fingerprint = Fingerprint(ti)
	}
	d.Targets = append(d.Targets, ti)
}

// Target returns the description of the target called name.
func (d *Document) Target(name string) (TargetInfo, bool) {
	for _, ti := range d.Targets {
		if ti.Name == name {
			return ti, true
		}
	}
	return TargetInfo{}, false
}

// Add appends a result and its wall time.
func (d *Document) Add(r contracts.Result) {
	if d.Summary == nil {
		d.Summary = map[string]int{}
	}
	d.Results = append(d.Results, r)
	d.Summary[string(r.Verdict)]++
	d.Wall.Results = append(d.Wall.Results, WallEntry{Target: r.Target, Contract: r.Contract, MS: ms(r.Wall)})
}

// AddEvidence keeps a bounded sample of a result's history and its evidence.
// ops may be nil (a skipped result has no history).
func (d *Document) AddEvidence(r contracts.Result, ops []history.Op, ev Evidence) {
	if d.Evidence == nil {
		d.Evidence = map[string]*Evidence{}
	}
	if d.Histories == nil {
		d.Histories = map[string][]history.Op{}
	}
	k := Key(r.Target, r.Contract)
	ev.HistoryTotal = len(ops)
	if len(ops) > 0 {
		sample := SampleHistory(ops, MaxHistoryOps)
		d.Histories[k] = sample
		ev.HistoryOps = len(sample)
		ev.History = "histories/" + historyFile(len(d.Evidence), k)
	}
	if len(ev.Windows) == 0 && len(ops) > 0 {
		ev.Windows = ObservedWindows(ops)
	}
	d.Evidence[k] = &ev
}

// EvidenceFor returns the evidence of a result, or an empty one.
func (d *Document) EvidenceFor(target, contract string) Evidence {
	if e := d.Evidence[Key(target, contract)]; e != nil {
		return *e
	}
	return Evidence{}
}

// Finish stamps the total wall time.
func (d *Document) Finish(end time.Time) { d.Wall.DurationMS = ms(end.Sub(d.Wall.StartedAt)) }

// WallMS returns the wall time of result i, or 0.
func (d *Document) WallMS(i int) float64 {
	if i < len(d.Wall.Results) {
		return d.Wall.Results[i].MS
	}
	return 0
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func historyFile(i int, key string) string {
	b := []byte(key)
	for j, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			b[j] = '_'
		}
	}
	return fmt.Sprintf("%03d-%s.jsonl", i, b)
}

// WriteJSON writes the document, indented, to path (creating its directory),
// and every history sample to the files its evidence names, beside it.
func (d *Document) WriteJSON(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	b, err := d.MarshalIndent()
	if err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return d.writeHistories(dir)
}

// MarshalIndent is the document as result.json holds it.
func (d *Document) MarshalIndent() ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func (d *Document) writeHistories(dir string) error {
	keys := make([]string, 0, len(d.Histories))
	for k := range d.Histories {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ev := d.Evidence[k]
		if ev == nil || ev.History == "" {
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(ev.History))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("write history: %w", err)
		}
		if err := history.WriteFile(p, d.Histories[k]); err != nil {
			return fmt.Errorf("write history: %w", err)
		}
	}
	return nil
}

// ReadJSON reads a result document and checks its schema. History samples the
// evidence names are read from beside it; a missing file leaves that history
// empty (the verdicts and witnesses are in the document itself).
func ReadJSON(path string) (*Document, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read result: %w", err)
	}
	d, err := DecodeJSON(b)
	if err != nil {
		return nil, fmt.Errorf("read result %s: %w", path, err)
	}
	d.Histories = map[string][]history.Op{}
	dir := filepath.Dir(path)
	for k, ev := range d.Evidence {
		if ev == nil || ev.History == "" {
			continue
		}
		ops, err := history.ReadFile(filepath.Join(dir, filepath.FromSlash(ev.History)))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read result %s: %w", path, err)
		}
		d.Histories[k] = ops
	}
	return d, nil
}
