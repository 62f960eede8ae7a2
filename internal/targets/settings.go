package targets

// Durability settings of a private instance.
//
// durability.ack and durability.power-loss kill, or cut the power of, a broker
// durachk starts itself (StartPrivate). What survives depends on that
// broker's settings, and the verdict must be about the settings the user's
// server runs with, not about durachk's. So every setting of the private
// instance that decides what survives a kill or a power loss (a kind's
// Durability) takes its value from, in this order:
//
//   - knob: the target's own knob (private-instance.<name>; Postgres's
//     synchronous_commit), written to say what to measure;
//   - server: the target's server, read over the target's own connection
//     when the run probes the target (ReadDurability, from runner.New);
//   - default: durachk's value, when neither gives one. A setting the server
//     did not let durachk read, or whose value the private instance cannot
//     take, is named with why (Setting.Note): never silently defaulted.
//
// The effective value of each goes into the spec the private instance starts
// from, as Options[PrivateKnob(name)]: the private instance reads it there,
// and so does whatever else must know the configuration (how often it
// flushes).

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/durachk/durachk/internal/redact"
)

// Where a setting's value came from.
const (
	SourceKnob    = "knob"
	SourceServer  = "server"
	SourceDefault = "default"
)

// DurabilitySetting declares one setting of a kind's private instance that
// decides what survives a kill or a power loss.
type DurabilitySetting struct {
	// Name is the broker's own name for it (appendfsync).
	Name string
	// Knob is the target knob that sets it; "": PrivateKnob(Name).
	Knob string
	// Default is durachk's value when neither the knob nor the server gives one.
	Default string
	// Check says why a value cannot be given to the private instance ("" when
	// it can); the knob's parser and the server's value go through it. Nil:
	// any value.
	Check func(v string) string
}

func (d DurabilitySetting) knob() string {
	if d.Knob != "" {
		return d.Knob
	}
	return PrivateKnob(d.Name)
}

// PrivateKnob is the key of a private instance's setting in Spec.Options:
// the knob, and after ReadDurability the effective value.
func PrivateKnob(name string) string { return "private-instance." + name }

// ServerSettings is what a kind's ServerSettings read from a target's server,
// by setting name.
type ServerSettings struct {
	// Values are the server's values.
	Values map[string]string
	// Unread says why a setting could not be read ("CONFIG disabled or
	// renamed").
	Unread map[string]string
	// Notes say where a value comes from when it is not the server's
	// configuration itself (a value its version fixes).
	Notes map[string]string
}

// Setting is one durability setting a private instance runs with.
type Setting struct {
	Name   string
	Value  string
	Source string // SourceKnob, SourceServer or SourceDefault
	// ServerValue is the server's own value where a knob overrode another.
	ServerValue string
	// Note says why a default was used (the server's value could not be read,
	// or the private instance cannot take it), or where a server's value
	// comes from.
	Note string
}

// Durability is the configuration of the private instance a target's
// durability contracts run on.
type Durability struct {
	// Private names the broker the private instance runs, with its version
	// ("redis 7.0.15").
	Private string
	// Server names the target's server as the probe found it ("redis 7.2.4");
	// "" if unknown.
	Server   string
	Settings []Setting
}

// ReadDurability reads the durability settings of s's server for the private
// instance its durability contracts start, and returns s with the effective
// value of each in (a copy of) its Options, and the private instance's
// configuration. A target whose durability contracts do not run on a private
// instance of its own comes back as it is, with nil: control commands kill
// its own server, a private cluster's nodes take the cluster's settings, its
// kind has no private instance or cannot start one here.
func ReadDurability(ctx context.Context, s Spec) (Spec, *Durability) {
	k, err := kindOf(s)
	if err != nil || k.StartPrivate == nil || s.ControlKills() || HasPrivateCluster(s) || CanKillBroker(s) != nil {
		return s, nil
	}
	d := &Durability{Private: k.Name}
	if k.PrivateVersion != nil {
		if v, err := k.PrivateVersion(); err == nil && v != "" {
			d.Private = v
		}
	}
	srv := ServerSettings{}
	if len(k.Durability) > 0 {
		switch {
		case k.ServerSettings == nil:
			srv.Unread = unreadAll(k.Durability, "durachk does not read it from a "+k.Name+" server")
		default:
			if srv, err = k.ServerSettings(ctx, s); err != nil {
				srv = ServerSettings{Unread: unreadAll(k.Durability, redact.Line(redact.Clip(err.Error())))}
			}
		}
	}
	s.Options, d.Settings = Effective(k.Durability, s.Options, srv)
	return s, d
}

func unreadAll(defs []DurabilitySetting, why string) map[string]string {
	m := map[string]string{}
	for _, d := range defs {
		m[d.Name] = why
	}
	return m
}

// Effective applies the precedence knob > server > default to each setting
// of defs and returns a copy of opts with every effective value under
// PrivateKnob(name), and the settings with their sources.
func Effective(defs []DurabilitySetting, opts map[string]string, srv ServerSettings) (map[string]string, []Setting) {
	out := maps.Clone(opts)
	if out == nil {
		out = map[string]string{}
	}
	var settings []Setting
	for _, d := range defs {
		st := Setting{Name: d.Name}
		server, read := srv.Values[d.Name]
		why := ""
		switch {
		case !read:
			why = "not readable from the server"
			if u := srv.Unread[d.Name]; u != "" {
				why += " (" + u + ")"
			}
		case d.Check != nil && d.Check(server) != "":
			why = fmt.Sprintf("the server's value %s cannot be given to the private instance (%s)", ShowValue(server), d.Check(server))
			read = false
		}
		if v, ok := opts[d.knob()]; ok {
			st.Value, st.Source = v, SourceKnob
			if read && server != v {
				st.ServerValue = server
			}
		} else if read {
			st.Value, st.Source, st.Note = server, SourceServer, srv.Notes[d.Name]
		} else {
			st.Value, st.Source, st.Note = d.Default, SourceDefault, why
		}
		out[PrivateKnob(d.Name)] = st.Value
		settings = append(settings, st)
	}
	return out, settings
}

// ShowValue writes a setting's value as a config file would: quoted when
// empty or holding a space.
func ShowValue(v string) string {
	if v == "" || strings.ContainsAny(v, " \t\"") {
		return fmt.Sprintf("%q", v)
	}
	return v
}

// privateValue is the value of the setting name of defs that a private
// instance of s runs with: the effective value ReadDurability put in s, else
// the knob, else the default.
func privateValue(defs []DurabilitySetting, s Spec, name string) string {
	for _, d := range defs {
		if d.Name != name {
			continue
		}
		if v, ok := s.Options[PrivateKnob(name)]; ok {
			return v
		}
		if v, ok := s.Options[d.knob()]; ok {
			return v
		}
		return d.Default
	}
	panic("targets: no durability setting " + name)
}

// binaryVersion runs `bin --version` and names the broker from its output
// with name ("" : the output says no version).
func binaryVersion(bin string, name func(out string) string) (string, error) {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", filepath.Base(bin), err)
	}
	if v := name(string(out)); v != "" {
		return v, nil
	}
	return "", fmt.Errorf("%s --version: no version in %q", filepath.Base(bin), redact.Clip(strings.TrimSpace(string(out))))
}

// oneOfCheck is a Check that wants one of vs.
func oneOfCheck(vs ...string) func(string) string {
	return func(v string) string {
		if oneOf(v, vs...) {
			return ""
		}
		return "want " + orList(vs)
	}
}

// orList is "a, b or c".
func orList(vs []string) string {
	if len(vs) < 2 {
		return strings.Join(vs, "")
	}
	return strings.Join(vs[:len(vs)-1], ", ") + " or " + vs[len(vs)-1]
}

// checkDurabilityKnobs checks the knob of each of defs that opts sets, as its
// Check wants it (a configuration error naming the knob).
func checkDurabilityKnobs(defs []DurabilitySetting, opts map[string]string) error {
	for _, d := range defs {
		if v, ok := opts[d.knob()]; ok && d.Check != nil {
			if why := d.Check(v); why != "" {
				return fmt.Errorf("%w: %s=%q: %s", ErrBadTarget, d.knob(), v, why)
			}
		}
	}
	return nil
}
