// Package reports holds the versioned result model that every run writes as
// result.json, and its renderers.
package reports

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/contracts"
)

// Schema names the version of the result model. A change that removes or renames
// a field bumps it; adding a field does not.
const Schema = "durachk.result/v1"

// Version is durachk's own version, stamped into every document.
var Version = "0.1.0-dev"

// Document is one run: every result of every target, plus how to reproduce it.
// All fields but Wall are a function of the command line and the targets; Wall
// holds every wall-clock measurement, kept apart so that two runs with one seed
// compare equal without it.
type Document struct {
	Schema  string             `json:"schema"`
	Version string             `json:"durachk_version"`
	Seed    uint64             `json:"seed"`
	Command string             `json:"command"`
	Targets []TargetInfo       `json:"targets"`
	Results []contracts.Result `json:"results"`
	Summary map[string]int     `json:"summary"`
	Wall    Wall               `json:"wall"`
}

// TargetInfo describes one target as it was measured.
type TargetInfo struct {
	Name         string                `json:"name"`
	Broker       string                `json:"broker"`
	MeasuredOn   string                `json:"measured_on"`
	Capabilities adapters.Capabilities `json:"capabilities"`
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

// NewDocument starts a document for a run.
func NewDocument(seed uint64, command string, started time.Time) *Document {
	return &Document{Schema: Schema, Version: Version, Seed: seed, Command: command, Summary: map[string]int{},
		Wall: Wall{StartedAt: started.UTC()}}
}

// AddTarget records a target once.
func (d *Document) AddTarget(t contracts.Target) {
	for _, ti := range d.Targets {
		if ti.Name == t.Name() {
			return
		}
	}
	d.Targets = append(d.Targets, TargetInfo{Name: t.Name(), Broker: t.Capabilities().Broker, MeasuredOn: t.MeasuredOn(), Capabilities: t.Capabilities()})
}

// Add appends a result and its wall time.
func (d *Document) Add(r contracts.Result) {
	d.Results = append(d.Results, r)
	d.Summary[string(r.Verdict)]++
	d.Wall.Results = append(d.Wall.Results, WallEntry{Target: r.Target, Contract: r.Contract, MS: ms(r.Wall)})
}

// Finish stamps the total wall time.
func (d *Document) Finish(end time.Time) { d.Wall.DurationMS = ms(end.Sub(d.Wall.StartedAt)) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// WriteJSON writes the document, indented, to path (creating its directory).
func (d *Document) WriteJSON(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadJSON reads a result document and checks its schema.
func ReadJSON(path string) (*Document, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read result: %w", err)
	}
	var d Document
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("read result %s: %w", path, err)
	}
	if d.Schema != Schema {
		return nil, fmt.Errorf("read result %s: schema %q, this durachk reads %q", path, d.Schema, Schema)
	}
	return &d, nil
}
