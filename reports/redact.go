package reports

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"sort"
	"strings"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/internal/redact"
)

// Redacted replaces every credential in a report.
const Redacted = redact.Mask

// sensitive reports whether a knob or query parameter name looks like it holds
// a credential.
func sensitive(name string) bool { return redact.Sensitive(name) }

// RedactURL replaces the password of a URL's user info and the value of every
// secret-looking query parameter with xxxxx. A string that is not a URL comes
// back unchanged.
func RedactURL(s string) string { return redact.URL(s) }

// RedactCommand redacts every URL-looking word of a command line (also
// --flag=URL forms).
func RedactCommand(cmd string) string { return redact.Command(cmd) }

// Secrets returns the credentials a URL carries, for Scrub.
func Secrets(raw string) []string { return redact.Secrets(raw) }

// DescribeTarget describes t for a report. rawURL (may be empty, e.g. for mem)
// is the target's URL with its knobs; it is redacted here, and its query
// parameters other than name and credentials become the settings, together
// with options (the kind's parsed knobs).
func DescribeTarget(t contracts.Target, kind, rawURL string, options ...map[string]string) TargetInfo {
	caps := t.Capabilities()
	ti := TargetInfo{Name: t.Name(), Broker: caps.Broker, MeasuredOn: t.MeasuredOn(), Capabilities: caps, Kind: kind}
	settings := map[string]string{}
	if rawURL == "" || rawURL == "mem" {
		ti.Endpoint = "embedded"
		if ti.Kind == "" {
			ti.Kind = caps.Broker
		}
	} else {
		ti.URL = RedactURL(rawURL)
		ti.Endpoint = "remote"
		if u, err := url.Parse(rawURL); err == nil {
			if ti.Kind == "" {
				ti.Kind = u.Scheme
			}
			switch u.Hostname() {
			case "127.0.0.1", "localhost", "::1", "":
				ti.Endpoint = "local"
			}
			for k, vs := range u.Query() {
				if k != "name" && !sensitive(k) && len(vs) > 0 {
					settings[k] = vs[len(vs)-1]
				}
			}
		}
	}
	for _, o := range options {
		for k, v := range o {
			if k != "name" && !sensitive(k) {
				settings[k] = v
			}
		}
	}
	if len(settings) > 0 {
		ti.Settings = settings
	}
	ti.Fingerprint = Fingerprint(ti)
	return ti
}

// Fingerprint hashes what makes a configuration: kind, effective settings,
// broker version and endpoint kind, and the effective durability settings of
// the private instance (and its version) where there is one. Names, hosts,
// ports, credentials and where a setting's value came from do not enter it.
func Fingerprint(ti TargetInfo) string {
	h := sha256.New()
	kind := ti.Kind
	if kind == "" {
		kind = ti.Broker
	}
	for _, kv := range [][2]string{{"kind", kind}, {"version", ti.MeasuredOn}, {"endpoint", ti.Endpoint}} {
		h.Write([]byte(kv[0] + "=" + kv[1] + "\n"))
	}
	keys := make([]string, 0, len(ti.Settings))
	for k := range ti.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		h.Write([]byte("setting." + k + "=" + ti.Settings[k] + "\n"))
	}
	// The configuration the durability verdicts were measured on: two servers
	// configured otherwise are two configurations, knobs or not. (Absent, as
	// in documents written before it was kept, the hash is what it was.)
	if d := ti.Durability; d != nil {
		h.Write([]byte("durability.private=" + d.Private + "\n"))
		for _, st := range d.Settings {
			h.Write([]byte("durability." + st.Name + "=" + st.Value + "\n"))
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// ScrubString replaces every occurrence of each secret in s (see Scrub).
func ScrubString(s string, secrets ...string) string {
	if repl := scrubber(secrets); repl != nil {
		return repl(s)
	}
	return s
}

// scrubber replaces the secrets (as they are, and query- and path-escaped) in
// a string; nil when there is none to replace.
func scrubber(secrets []string) func(string) string {
	var ss []string
	for _, s := range secrets {
		if len(s) >= 3 {
			ss = append(ss, s, url.QueryEscape(s), url.PathEscape(s))
		}
	}
	if len(ss) == 0 {
		return nil
	}
	return func(s string) string {
		for _, x := range ss {
			s = strings.ReplaceAll(s, x, Redacted)
		}
		return s
	}
}

// Scrub replaces every occurrence of each secret in every string of the
// document, its evidence and its history samples. Secrets shorter than 3
// characters are ignored (they would shred ordinary text).
func (d *Document) Scrub(secrets ...string) error {
	repl := scrubber(secrets)
	if repl == nil {
		return nil
	}
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	v = walk(v, repl)
	if b, err = json.Marshal(v); err != nil {
		return err
	}
	hs := d.Histories
	var nd Document
	if err := json.Unmarshal(b, &nd); err != nil {
		return err
	}
	// Wall durations are not in the JSON; keep them.
	nd.Histories = map[string][]history.Op{}
	for k, ops := range hs {
		nd.Histories[repl(k)] = scrubOps(ops, repl)
	}
	// Files not yet written: whole histories and final states.
	for _, p := range d.pending {
		p.ops = scrubOps(p.ops, repl)
		if p.rec != nil {
			j, err := scrubJSON(*p.rec, repl)
			if err != nil {
				return err
			}
			p.rec = &j
		}
		nd.pending = append(nd.pending, p)
	}
	nd.slots, nd.files = d.slots, d.files
	for i := range nd.Results {
		if i < len(d.Results) {
			nd.Results[i].Wall = d.Results[i].Wall
		}
	}
	*d = nd
	return nil
}

// scrubOps is ops with every string field scrubbed (a copy; nil for none).
func scrubOps(ops []history.Op, repl func(string) string) []history.Op {
	if ops == nil {
		return nil
	}
	out := make([]history.Op, len(ops))
	for i, op := range ops {
		op.Process, op.Job, op.Key, op.Value, op.Err, op.Target = repl(op.Process), repl(op.Job), repl(op.Key), repl(op.Value), repl(op.Err), repl(op.Target)
		out[i] = op
	}
	return out
}

// scrubJSON is v with every string of its JSON scrubbed.
func scrubJSON[T any](v T, repl func(string) string) (T, error) {
	var out T
	b, err := json.Marshal(v)
	if err != nil {
		return out, err
	}
	var x any
	if err := json.Unmarshal(b, &x); err != nil {
		return out, err
	}
	if b, err = json.Marshal(walk(x, repl)); err != nil {
		return out, err
	}
	err = json.Unmarshal(b, &out)
	return out, err
}

func walk(v any, repl func(string) string) any {
	switch x := v.(type) {
	case string:
		return repl(x)
	case []any:
		for i := range x {
			x[i] = walk(x[i], repl)
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[repl(k)] = walk(e, repl)
		}
		return out
	}
	return v
}
