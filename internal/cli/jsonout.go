package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/redact"
	"github.com/durachk/durachk/internal/targets"
	"github.com/durachk/durachk/reports"
)

// The JSON outputs of list, doctor and compare (--format json): one indented
// document each, its shape in reports/SCHEMA.md ("Command outputs").

// checkFormat refuses an output format cmd does not write.
func checkFormat(cmd, format string, known ...string) error {
	for _, k := range known {
		if strings.EqualFold(format, k) {
			return nil
		}
	}
	return ConfigError(fmt.Errorf("%s --format %q: want %s", cmd, reports.Clip(format), strings.Join(known, " or ")))
}

// listEntry is one contract or seed scenario of `durachk list --format json`.
type listEntry struct {
	ID     string       `json:"id"`
	Kind   string       `json:"kind"` // contract or scenario
	Claim  string       `json:"claim"`
	Labels []string     `json:"labels,omitempty"`
	On     []listTarget `json:"targets"`
}

// listTarget says whether a target supports a contract, and why not.
type listTarget struct {
	Target    string `json:"target"`
	Supported bool   `json:"supported"`
	Why       string `json:"why,omitempty"`
}

func listJSON(w io.Writer, ts []contracts.Target) error {
	var out []listEntry
	for _, c := range append(append([]*contracts.Contract{}, contracts.Catalogue...), contracts.SeedScenarios...) {
		e := listEntry{ID: c.ID, Kind: "contract", Claim: c.Claim, Labels: c.Labels, On: []listTarget{}}
		if strings.HasPrefix(c.ID, "scenario/") {
			e.Kind = "scenario"
		}
		for _, t := range ts {
			lt := listTarget{Target: t.Name(), Supported: true}
			if c.Needs != nil {
				if why := c.Needs(t.Capabilities()); why != "" {
					lt.Supported, lt.Why = false, why
				}
			}
			e.On = append(e.On, lt)
		}
		out = append(out, e)
	}
	return writeJSON(w, out)
}

// doctorEntry is one target of `durachk doctor --format json`.
type doctorEntry struct {
	Target    string              `json:"target"`
	Reachable bool                `json:"reachable"`
	Error     string              `json:"error,omitempty"`
	Info      *reports.TargetInfo `json:"info,omitempty"`
	// BrokerKill and NodeFaults say whether durachk can kill the broker and
	// fault a cluster's nodes, and how (or why not).
	BrokerKill string          `json:"broker_kill,omitempty"`
	NodeFaults string          `json:"node_faults,omitempty"`
	PowerLoss  bool            `json:"power_loss"`
	WillSkip   []doctorSkipped `json:"will_skip"`
}

type doctorSkipped struct {
	Contract string `json:"contract"`
	Why      string `json:"why"`
}

// doctorJSON is Doctor as one JSON document: every target, reachable or
// not; an unreachable one fails the command (exit 3) after the document.
func doctorJSON(ctx context.Context, ss []string, store string, w io.Writer) error {
	out := []doctorEntry{}
	var failed []string
	for _, spec := range ss {
		t, err := resolve(ctx, spec, store, nil)
		if err != nil {
			secrets := append(reports.Secrets(spec), reports.Secrets(store)...)
			name := reports.Clip(reports.RedactURL(spec))
			out = append(out, doctorEntry{Target: name, Error: redact.Line(scrub(err.Error(), secrets)), WillSkip: []doctorSkipped{}})
			var se *targets.StoreError
			if errors.As(err, &se) {
				name = "effect store " + reports.Clip(reports.RedactURL(se.URL))
			}
			failed = append(failed, name)
			continue
		}
		ti := t.info
		e := doctorEntry{Target: ti.Name, Reachable: true, Info: &ti, PowerLoss: ti.Capabilities.PowerLoss, WillSkip: []doctorSkipped{}}
		e.BrokerKill, e.NodeFaults = brokerKill(t), nodeFaults(t)
		for _, ct := range contracts.Catalogue {
			if ct.Needs != nil {
				if why := ct.Needs(ti.Capabilities); why != "" {
					e.WillSkip = append(e.WillSkip, doctorSkipped{Contract: ct.ID, Why: why})
				}
			}
		}
		out = append(out, e)
	}
	if err := writeJSON(w, out); err != nil {
		return err
	}
	if len(failed) > 0 {
		return ConfigError(fmt.Errorf("unreachable: %s", strings.Join(failed, ", ")))
	}
	return nil
}

// brokerKill says whether durachk can kill and restart t's broker, and how.
func brokerKill(t *target) string {
	if t.parsed.Kind == "" {
		return fmt.Sprintf("%v (simulated)", t.info.Capabilities.BrokerKill)
	}
	switch err := targets.CanKillBroker(t.parsed); {
	case err != nil:
		return fmt.Sprintf("no: %v", err)
	case t.parsed.ControlKills():
		return "yes (control commands)"
	}
	return "yes (private instance)"
}

// nodeFaults says whether durachk can fault the nodes of t's cluster ("" for
// the embedded target).
func nodeFaults(t *target) string {
	if t.parsed.Kind == "" {
		return ""
	}
	if err := targets.CanFaultNodes(t.parsed); err != nil {
		return fmt.Sprintf("no: %v", err)
	}
	return "yes: " + targets.DescribeCluster(t.parsed)
}
