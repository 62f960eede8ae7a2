// Package reports holds the versioned result model that every run writes as
// result.json, and its renderers: JSON, JUnit XML, Markdown (a CI job summary),
// a self-contained HTML evidence page, the compare matrix and the baseline diff.
//
// A Document is built by one goroutine (the run) and is not safe for concurrent
// mutation; a run that evaluates concurrently hands its results to that one
// goroutine (see Place). Rendering a document nobody mutates is safe from
// several goroutines.
package reports

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
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
// holds every wall-clock measurement and run id, kept apart so that two runs
// with one seed compare equal without it.
type Document struct {
	Schema  string `json:"schema"`
	Version string `json:"durachk_version"`
	Seed    uint64 `json:"seed"`
	// Jobs is the --jobs of the run (0: each contract's default).
	Jobs int `json:"jobs,omitempty"`
	// Trials is the --trials of the run (0: one run per contract).
	Trials int `json:"trials,omitempty"`
	// Complete is false until the run has carried out every result it set
	// out to (Planned): result.json is rewritten after each result, so a run
	// that was killed, interrupted or stopped by an error leaves a partial
	// document with complete false. A document without the field (written
	// before it existed) is read as complete.
	Complete bool `json:"complete"`
	// Interrupted: SIGINT or SIGTERM stopped the run; Stopped says why an
	// incomplete run ended early (the signal, or the error).
	Interrupted bool   `json:"interrupted,omitempty"`
	Stopped     string `json:"stopped,omitempty"`
	// Planned is the number of results the run set out to produce.
	Planned int                `json:"planned_results,omitempty"`
	Command string             `json:"command"`
	Targets []TargetInfo       `json:"targets"`
	Results []contracts.Result `json:"results"`
	Summary map[string]int     `json:"summary"`
	// Evidence per result, keyed by Key(target, contract): the history sample's
	// file, the fault windows and the command that reproduces the result.
	Evidence map[string]*Evidence `json:"evidence,omitempty"`
	// Exploration is what `durachk explore` counted beyond its results, for
	// `durachk merge`; nil in the document of any other command.
	Exploration *Exploration `json:"exploration,omitempty"`
	// Gate is the baseline the run was gated with (--baseline); nil
	// without one.
	Gate *Gate `json:"gate,omitempty"`
	Wall Wall  `json:"wall"`

	// Histories holds a sample of the history of each result (at most
	// MaxHistoryOps operations: what the pictures are drawn from), keyed like
	// Evidence. The whole history is written to histories/*.jsonl beside
	// result.json, not into it.
	Histories map[string][]history.Op `json:"-"`

	slots   []int             // the slot of each result placed with Place, in order
	pending []pendingFile     // whole histories and final states not yet written
	files   map[string]string // each file written: its path relative to result.json → where it was written
}

// Exploration is an exploration's counts, as `durachk merge` adds up the
// shards of one: which part of the seed space it took (Shard, "i/N"; the
// shards a merge holds, "1,2/3", when it holds some of them; "" for the
// whole), the options that decide which rounds run and what each draws
// (Config: shards of one exploration have the same), and per round counted:
// verdicts, violations by property, faults drawn by kind, operations. Finding
// and Unknown are the first round (by number) to raise a wanted property
// and to be unknown.
type Exploration struct {
	Shard      string         `json:"shard,omitempty"`
	Config     string         `json:"config"`
	Rounds     int            `json:"rounds"`
	Verdicts   map[string]int `json:"verdicts,omitempty"`
	Violations map[string]int `json:"violations,omitempty"`
	Drawn      map[string]int `json:"drawn,omitempty"`
	Ops        int            `json:"ops"`
	Finding    *RoundNote     `json:"finding,omitempty"`
	Unknown    *RoundNote     `json:"unknown,omitempty"`
	// Cut counts the rounds in flight at the end of --duration, ended
	// before their verdict (not in Rounds).
	Cut int `json:"cut,omitempty"`
	// Lacking are the fault kinds the target supports and the machine the
	// exploration ran on could not apply (a broker binary, FUSE), with why:
	// never drawn.
	Lacking map[string]string `json:"lacking,omitempty"`
}

// RoundNote is one round of an exploration: its number and seed, and what
// the explore result's reason says of it (Text: what it raised, or why it
// was unknown; Shrunk: its shrunk plan's size and reproduction rate).
type RoundNote struct {
	Round  int    `json:"round"`
	Seed   uint64 `json:"seed"`
	Text   string `json:"text"`
	Shrunk string `json:"shrunk,omitempty"`
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
	// Durability is the private instance the durability contracts ran on (a
	// broker durachk started, killed and cut the power of): nil when the
	// target has none (its own broker under control commands, a private
	// cluster, a kind without private instances).
	Durability *Durability `json:"durability,omitempty"`
	// Fingerprint hashes kind, settings, broker version and endpoint kind,
	// and the private instance's version and durability settings: two
	// columns of a matrix with one fingerprint measured the same configuration.
	Fingerprint string `json:"fingerprint,omitempty"`
}

// Durability is the private instance a target's durability contracts
// (durability.ack, durability.power-loss, a plan's broker_crash or
// power_loss) ran on: the broker and version it runs, the target server's,
// and every setting that decides what survives a kill or a power loss, each
// with where its value came from.
type Durability struct {
	// Private names the broker of the private instance with its version
	// ("redis 7.0.15"); Server the target's server as it answered ("redis
	// 7.2.4"), "" when unknown.
	Private  string    `json:"private"`
	Server   string    `json:"server,omitempty"`
	Settings []Setting `json:"settings,omitempty"`
}

// Where a durability setting's value came from.
const (
	SourceKnob    = "knob"    // the target's private-instance.* knob
	SourceServer  = "server"  // the target's server, read when the run probed it
	SourceDefault = "default" // durachk's: neither said (Note says why, where the server could not)
)

// Setting is one durability setting of a private instance.
type Setting struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Source string `json:"source"`
	// ServerValue is the server's own value where a knob overrode another.
	ServerValue string `json:"server_value,omitempty"`
	// Note says why a default was used (the server's value could not be read,
	// or the private instance cannot take it), or where a server's value
	// comes from (fixed by its version).
	Note string `json:"note,omitempty"`
}

// Evidence is what a report shows beside a verdict.
type Evidence struct {
	// History is the history's file, relative to result.json: the whole
	// history the verdict was judged on.
	History string `json:"history,omitempty"`
	// HistoryOps is the number of operations in the file; HistoryTotal the
	// number the run recorded (a document written before histories were kept
	// whole holds a sample: fewer).
	HistoryOps   int `json:"history_ops"`
	HistoryTotal int `json:"history_total"`
	// Final is the final-state file the verdict was judged on (Judged),
	// relative to result.json; TrialFinals the one of each trial, by seed,
	// when the result ran trials. `durachk check --result` re-judges from
	// them.
	Final       string            `json:"final,omitempty"`
	TrialFinals map[uint64]string `json:"trial_finals,omitempty"`
	// Windows are the fault windows (link down, reply loss, broker down, pause).
	Windows []FaultWindow `json:"fault_windows,omitempty"`
	// Reproduce is the command that reruns this result alone.
	Reproduce string `json:"reproduce,omitempty"`
	// ReproduceTrials reruns each trial that did not pass, by seed.
	ReproduceTrials map[uint64]string `json:"reproduce_trials,omitempty"`
	// Replay is how often a finding's plan reproduced (durachk explore's
	// shrunk plan); nil for any other result.
	Replay *Replay `json:"replay,omitempty"`
	// Scale is how many times slower than planned the scenario ran in wall
	// time (a real target on a busy machine stretches every scenario time);
	// absent: as planned, or not known.
	Scale float64 `json:"scenario_scale,omitempty"`
}

// Replay is a finding's reproduction rate: its plan run Runs times with the
// plan's seed, of which Reproduced raised Property again, NotAtRisk were
// unknown because they put less at risk than the plan needs (at_risk), and
// Other did neither. Text says it in words ("reproduces 9 of 10 on redis
// 7.0.15 (real processes)").
type Replay struct {
	Property   string `json:"property"`
	Runs       int    `json:"runs"`
	Reproduced int    `json:"reproduced"`
	NotAtRisk  int    `json:"not_at_risk,omitempty"`
	Other      int    `json:"other,omitempty"`
	MeasuredOn string `json:"measured_on"`
	// Deterministic: the target gives the same run for a seed every time
	// (the embedded one), so the rate is all or nothing.
	Deterministic bool `json:"deterministic,omitempty"`
	// AtRisk: the plan carries at_risk; the rate is over the runs that put
	// at risk what it needs (runs less not_at_risk), else over every run.
	AtRisk bool   `json:"at_risk,omitempty"`
	Text   string `json:"text"`
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

// Wall is the part of a run that differs between two runs with one seed: its
// times and run ids.
type Wall struct {
	// RunID names this run of durachk (printed when it starts).
	RunID      string      `json:"run_id,omitempty"`
	StartedAt  time.Time   `json:"started_at"`
	DurationMS float64     `json:"duration_ms"`
	Results    []WallEntry `json:"results"`
	// CutShort are the run ids of the executions an interrupted or failed
	// run cut short: torn down like every other, named in case their
	// teardown could not finish (durachk cleanup).
	CutShort []string `json:"cut_short_run_ids,omitempty"`
}

// WallEntry is the wall time of one result and the run ids of the namespaces
// its target made (one per execution: `durachk cleanup` finds what a killed
// run left by them).
type WallEntry struct {
	Target   string   `json:"target"`
	Contract string   `json:"contract"`
	MS       float64  `json:"ms"`
	RunIDs   []string `json:"run_ids,omitempty"`
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
	d.Wall.Results = append(d.Wall.Results, wallEntry(r))
}

func wallEntry(r contracts.Result) WallEntry {
	return WallEntry{Target: r.Target, Contract: r.Contract, MS: ms(r.Wall), RunIDs: r.RunIDs}
}

// Entry is one result with its evidence and its history, as a run hands it
// to its document.
type Entry struct {
	Result   contracts.Result
	Evidence Evidence
	History  []history.Op // a sample (SampleHistory); nil without one
	// Judged are the executions the result's verdicts were judged on: the
	// one the result shows first, then each other trial's. The document
	// writes each as its history and final state (Judged) beside result.json.
	Judged []Recorded

	full []history.Op // the whole history History samples
	kept []KeptTrial  // trials written already
}

// NewEntry keeps ops whole (written to the history file) and a sample of it
// (the pictures), and completes ev's counts and, when it has none, its fault
// windows from the history.
func NewEntry(r contracts.Result, ops []history.Op, ev Evidence) Entry {
	ev.HistoryTotal = len(ops)
	if len(ev.Windows) == 0 && len(ops) > 0 {
		ev.Windows = ObservedWindows(ops)
	}
	e := Entry{Result: r, Evidence: ev}
	if len(ops) > 0 {
		e.History = SampleHistory(ops, MaxHistoryOps)
		e.full = ops
		e.Evidence.HistoryOps = len(ops)
	}
	return e
}

// Scrub replaces every secret in the entry with Redacted (see Document.Scrub),
// its whole histories and final states included.
func (e *Entry) Scrub(secrets ...string) error {
	const k = "entry"
	ev := e.Evidence
	d := &Document{Results: []contracts.Result{e.Result}, Evidence: map[string]*Evidence{k: &ev}, Histories: map[string][]history.Op{k: e.History}}
	if err := d.Scrub(secrets...); err != nil {
		return err
	}
	ids := e.Result.RunIDs
	e.Result, e.Evidence, e.History = d.Results[0], *d.Evidence[k], d.Histories[k]
	e.Result.RunIDs = ids
	repl := scrubber(secrets)
	if repl == nil {
		return nil
	}
	e.full = scrubOps(e.full, repl)
	judged := make([]Recorded, len(e.Judged))
	for i, rc := range e.Judged {
		j, err := scrubJSON(rc.Judged, repl)
		if err != nil {
			return err
		}
		judged[i] = Recorded{Judged: j, Ops: scrubOps(rc.Ops, repl)}
	}
	e.Judged = judged
	return nil
}

// Place puts e among the results in the order of slot, whatever order the
// entries come in (a run numbers its results target × contract and evaluates
// them concurrently), and names its history file by slot. Every result of a
// document is placed, or every one added: the two do not mix.
func (d *Document) Place(slot int, e Entry) {
	if d.Summary == nil {
		d.Summary = map[string]int{}
	}
	if d.Evidence == nil {
		d.Evidence = map[string]*Evidence{}
	}
	if d.Histories == nil {
		d.Histories = map[string][]history.Op{}
	}
	i := sort.SearchInts(d.slots, slot)
	d.slots = slices.Insert(d.slots, i, slot)
	d.Results = slices.Insert(d.Results, i, e.Result)
	d.Wall.Results = slices.Insert(d.Wall.Results, i, wallEntry(e.Result))
	d.Summary[string(e.Result.Verdict)]++
	k := Key(e.Result.Target, e.Result.Contract)
	ev := e.Evidence
	if len(e.History) > 0 {
		d.Histories[k] = e.History
	}
	base := "histories/" + strings.TrimSuffix(historyFile(slot, k), ".jsonl")
	full := e.full
	if len(full) == 0 && len(e.Judged) > 0 {
		full = e.Judged[0].Ops
	}
	if len(full) > 0 {
		ev.History, ev.HistoryOps = base+".jsonl", len(full)
		d.pending = append(d.pending, pendingFile{path: ev.History, ops: full})
	}
	for i, rc := range e.Judged {
		name := base
		if i > 0 {
			// Another trial: its own history beside the result's.
			name = fmt.Sprintf("%s.seed-%d", base, rc.Judged.Seed)
			d.pending = append(d.pending, pendingFile{path: name + ".jsonl", ops: rc.Ops})
		}
		j := rc.Judged
		j.Format, j.History, j.HistoryOps = FinalFormat, path.Base(name+".jsonl"), len(rc.Ops)
		if i == 0 {
			j.HistoryOps = len(full)
			ev.Final = name + ".final.json"
		}
		d.pending = append(d.pending, pendingFile{path: name + ".final.json", rec: &j})
		if len(e.Result.Trials) > 0 {
			if ev.TrialFinals == nil {
				ev.TrialFinals = map[uint64]string{}
			}
			ev.TrialFinals[j.Seed] = name + ".final.json"
		}
	}
	for _, kt := range e.kept {
		if ev.TrialFinals == nil {
			ev.TrialFinals = map[uint64]string{}
		}
		ev.TrialFinals[kt.Seed] = kt.Final
		if d.files == nil {
			d.files = map[string]string{}
		}
		for _, rel := range []string{kt.History, kt.Final} {
			d.files[rel] = filepath.Join(kt.dir, filepath.FromSlash(rel))
		}
	}
	d.Evidence[k] = &ev
}

// AddEvidence keeps a result's history (whole, written beside result.json;
// a bounded sample for the pictures) and its evidence.
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
		d.Histories[k] = SampleHistory(ops, MaxHistoryOps)
		ev.HistoryOps = len(ops)
		ev.History = "histories/" + historyFile(len(d.Evidence), k)
		d.pending = append(d.pending, pendingFile{path: ev.History, ops: ops})
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
// and every history sample to the files its evidence names, beside it. Each
// file is replaced atomically (written beside, then renamed): a reader, or a
// run killed while writing, sees the old file or the new one, never a part.
// A document written again to the same path writes only the histories it did
// not write before: a run rewrites its result.json after every result.
func (d *Document) WriteJSON(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	// Histories first: the document never names a file not yet there.
	if err := d.writeHistories(dir); err != nil {
		return err
	}
	b, err := d.MarshalIndent()
	if err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	if err := WriteFileAtomic(path, b); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return nil
}

// WriteFileAtomic replaces path with b through a temporary file in the same
// directory and a rename.
func WriteFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
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
	// The files written to another directory before: copied here.
	for _, rel := range slices.Sorted(maps.Keys(d.files)) {
		from, to := d.files[rel], filepath.Join(dir, filepath.FromSlash(rel))
		if from == to {
			continue
		}
		if _, err := os.Stat(to); err == nil {
			continue
		}
		if err := copyFile(from, to); err != nil {
			return fmt.Errorf("write history: %w", err)
		}
	}
	for len(d.pending) > 0 {
		p := d.pending[0]
		if err := p.write(dir); err != nil {
			return fmt.Errorf("write history: %w", err)
		}
		if d.files == nil {
			d.files = map[string]string{}
		}
		d.files[p.path] = filepath.Join(dir, filepath.FromSlash(p.path))
		d.pending = d.pending[1:] // whole histories leave memory once written
	}
	d.pending = nil
	return nil
}

// ReadJSON reads a result document and checks its schema. The histories the
// evidence names are read from beside it (Histories keeps a sample of each);
// a missing file leaves that history empty (the verdicts and witnesses are in
// the document itself).
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
		d.Histories[k] = SampleHistory(ops, MaxHistoryOps)
	}
	return d, nil
}

// KeptTrial is a trial's execution written before its result was placed (a
// trial that cannot become the execution its result shows): the run need
// not keep its history in memory until the contract's last trial ends.
type KeptTrial struct {
	Seed           uint64
	History, Final string // relative to result.json's directory
	dir            string // the directory they were written to
}

// Keep names the trials of e written already (WriteTrial).
func (e *Entry) Keep(kept []KeptTrial) { e.kept = append(e.kept, kept...) }

// WriteTrial writes one trial of the result to be placed in slot — its whole
// history and its final state, every secret replaced — into dir (result.json's
// directory) under the names Place gives another trial, and returns them.
func WriteTrial(dir string, slot int, rc Recorded, secrets ...string) (KeptTrial, error) {
	j := rc.Judged
	if repl := scrubber(secrets); repl != nil {
		sj, err := scrubJSON(j, repl)
		if err != nil {
			return KeptTrial{}, err
		}
		j, rc.Ops = sj, scrubOps(rc.Ops, repl)
	}
	base := "histories/" + strings.TrimSuffix(historyFile(slot, Key(j.Target, j.Contract)), ".jsonl")
	name := fmt.Sprintf("%s.seed-%d", base, j.Seed)
	j.Format, j.History, j.HistoryOps = FinalFormat, path.Base(name+".jsonl"), len(rc.Ops)
	if err := (pendingFile{path: name + ".jsonl", ops: rc.Ops}).write(dir); err != nil {
		return KeptTrial{}, fmt.Errorf("write history: %w", err)
	}
	final := name + ".final.json"
	if err := (pendingFile{path: final, rec: &j}).write(dir); err != nil {
		return KeptTrial{}, fmt.Errorf("write history: %w", err)
	}
	return KeptTrial{Seed: j.Seed, History: name + ".jsonl", Final: final, dir: dir}, nil
}
