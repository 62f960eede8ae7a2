package reports

import (
	"fmt"
	"strings"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/faults"
)

// Describe says the setting and where its value came from, in one phrase:
// "appendonly=no (server)", "appendfsync=always (knob; the server has
// everysec)", "appendfsync: not readable from the server (CONFIG disabled or
// renamed): default everysec used".
func (s Setting) Describe() string {
	switch {
	case s.Source == SourceDefault && s.Note != "":
		return fmt.Sprintf("%s: %s: default %s used", s.Name, s.Note, showValue(s.Value))
	case s.Source == SourceKnob && s.ServerValue != "":
		return fmt.Sprintf("%s=%s (knob; the server has %s)", s.Name, showValue(s.Value), showValue(s.ServerValue))
	case s.Note != "":
		return fmt.Sprintf("%s=%s (%s: %s)", s.Name, showValue(s.Value), s.Source, s.Note)
	}
	return fmt.Sprintf("%s=%s (%s)", s.Name, showValue(s.Value), s.Source)
}

// showValue writes a value as a config file would: quoted when empty or
// holding a space.
func showValue(v string) string {
	if v == "" || strings.ContainsAny(v, " \t\"") {
		return fmt.Sprintf("%q", v)
	}
	return v
}

// Line says what the durability verdicts rest on: "on a private redis
// 7.0.15 with appendonly=no (server), appendfsync=everysec (server), …", and
// "; the target runs redis 7.2.4" where the target's server is another
// version. Empty for nil.
func (d *Durability) Line() string {
	if d == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("on a private " + d.Private)
	if len(d.Settings) == 0 {
		b.WriteString(" (no setting of it is read from the target's server)")
	} else {
		parts := make([]string, len(d.Settings))
		for i, s := range d.Settings {
			parts[i] = s.Describe()
		}
		b.WriteString(" with " + strings.Join(parts, ", "))
	}
	if d.Server != "" && d.Server != d.Private {
		b.WriteString("; the target runs " + d.Server)
	}
	return b.String()
}

// RestsOnDurability reports whether r ran on its target's private instance:
// its plan kills the broker or cuts its power.
func RestsOnDurability(r contracts.Result) bool {
	for _, f := range r.Planned {
		kind, _, _ := strings.Cut(f, " ")
		if kind == string(faults.BrokerCrash) || kind == string(faults.PowerLoss) {
			return true
		}
	}
	return false
}

// DurabilityLine is the line a report shows beside r's verdict: what the
// private instance it ran on ran with (Durability.Line), or "" when r did
// not run on one.
func (d *Document) DurabilityLine(r contracts.Result) string {
	if !RestsOnDurability(r) {
		return ""
	}
	ti, ok := d.Target(r.Target)
	if !ok {
		return ""
	}
	return ti.Durability.Line()
}

// DurabilityLines says, per target of d whose results ran on its private
// instance, which contracts did and what the instance ran with:
// "redis: durability.ack, durability.power-loss ran on a private redis 7.0.15
// with appendonly=no (server), …".
func (d *Document) DurabilityLines() []string {
	var out []string
	for _, ti := range d.Targets {
		if ti.Durability == nil {
			continue
		}
		var cs []string
		for _, r := range d.Results {
			if r.Target == ti.Name && RestsOnDurability(r) && r.Verdict != contracts.Skipped {
				cs = append(cs, r.Contract)
			}
		}
		if len(cs) > 0 {
			out = append(out, fmt.Sprintf("%s: %s ran %s", ti.Name, strings.Join(cs, ", "), ti.Durability.Line()))
		}
	}
	return out
}
