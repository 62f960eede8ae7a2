// Package config loads durachk.yaml: a seed, the targets (a URL plus the
// broker's own knobs as nested maps) and the effect store.
//
//	seed: 42
//	targets:
//	  - name: orders-rabbit
//	    url: amqp://guest:${RABBIT_PASSWORD}@127.0.0.1:5672/
//	    queue-arguments: {x-queue-type: quorum, x-delivery-limit: 5}
//	store: postgres://127.0.0.1:5432/test
//
// Nested knob maps flatten into dotted query parameters appended to the URL
// (queue-arguments.x-queue-type=quorum), which is how every target kind reads
// its knobs; name becomes name=. ${VAR} is replaced by the environment
// variable VAR in every value (an unset variable is an error). Unknown
// top-level keys are errors naming the key. A loaded Config holds secrets:
// never log or report its URLs without redacting them.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/durachk/durachk/internal/redact"
)

// ErrConfig marks every error of a configuration file.
var ErrConfig = errors.New("configuration")

// ErrUnset marks an error naming an environment variable that is not set
// (errors.Is it ErrConfig too): `durachk atlas` skips a profile for it.
var ErrUnset = fmt.Errorf("%w", ErrConfig)

// Config is a loaded durachk.yaml. Values are plain data, safe to share once
// loaded.
type Config struct {
	Path string
	// Seed is the file's seed; HasSeed says whether it set one.
	Seed    uint64
	HasSeed bool
	Targets []Target
	// Store is the effect store URL for real targets ("" : the default).
	Store string
	// Vars are the environment variables the file refers to (${VAR}), with
	// their values: a report writes a credential as the reference the file
	// took it from, never as itself.
	Vars map[string]string
}

// Target is one target of the file.
type Target struct {
	Name string
	// URL is the target's URL with its knobs (and name=) as query parameters;
	// it may carry credentials.
	URL string
	// Knobs are the flattened knobs, without name.
	Knobs map[string]string
}

// Getenv reads environment variables for ${VAR}; a variable for tests.
var Getenv = os.LookupEnv

// Load reads and checks a configuration file.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c.Path = path
	return c, nil
}

// Parse reads a configuration from YAML.
func Parse(b []byte) (*Config, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&root); err != nil {
		if err.Error() == "EOF" {
			return nil, fmt.Errorf("%w: empty file", ErrConfig)
		}
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); err != io.EOF {
		return nil, fmt.Errorf("%w: more than one YAML document (one file, one mapping)", ErrConfig)
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%w: want a mapping with seed, targets and store", ErrConfig)
	}
	m := root.Content[0]
	c := &Config{}
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("%w: line %d: a key must be a name", ErrConfig, k.Line)
		}
		if seen[k.Value] {
			return nil, fmt.Errorf("%w: line %d: key %q given twice", ErrConfig, k.Line, clip(k.Value))
		}
		seen[k.Value] = true
		switch k.Value {
		case "seed":
			s, err := scalar(v, "seed")
			if err != nil {
				return nil, err
			}
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: line %d: seed %q: want a non-negative integer", ErrConfig, v.Line, clip(s))
			}
			c.Seed, c.HasSeed = n, true
		case "store":
			s, err := scalar(v, "store")
			if err != nil {
				return nil, err
			}
			if u, err := url.Parse(s); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
				return nil, fmt.Errorf("%w: line %d: store: want a postgres:// URL (the effect store is Postgres)", ErrConfig, v.Line)
			}
			c.Store = s
		case "targets":
			if v.Kind != yaml.SequenceNode {
				return nil, fmt.Errorf("%w: line %d: targets: want a list", ErrConfig, v.Line)
			}
			if len(v.Content) == 0 {
				return nil, fmt.Errorf("%w: line %d: targets: empty list: name at least one target, or leave targets out", ErrConfig, v.Line)
			}
			for j, tn := range v.Content {
				t, err := target(tn, j)
				if err != nil {
					return nil, err
				}
				c.Targets = append(c.Targets, t)
			}
		default:
			return nil, fmt.Errorf("%w: line %d: unknown key %q (known: seed, targets, store)", ErrConfig, k.Line, clip(k.Value))
		}
	}
	for _, m := range varRE.FindAllSubmatch(b, -1) {
		if v, ok := Getenv(string(m[1])); ok {
			if c.Vars == nil {
				c.Vars = map[string]string{}
			}
			c.Vars[string(m[1])] = v
		}
	}
	names := map[string]bool{}
	for _, t := range c.Targets {
		if t.Name == "" {
			continue // named after its kind later; the run refuses two alike
		}
		if names[t.Name] {
			return nil, fmt.Errorf("%w: target name %q used twice", ErrConfig, t.Name)
		}
		names[t.Name] = true
	}
	return c, nil
}

func scalar(n *yaml.Node, what string) (string, error) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.ScalarNode {
		return "", fmt.Errorf("%w: line %d: %s: want a single value", ErrConfig, n.Line, what)
	}
	if n.Tag == "!!null" {
		return "", fmt.Errorf("%w: line %d: %s: no value", ErrConfig, n.Line, what)
	}
	return Expand(n.Value, what)
}

// varRE finds the ${VAR} references of a file.
var varRE = regexp.MustCompile(`\$\{([^}]+)\}`)

// maxKnobNodes bounds the nodes one target's knobs may visit, so that nested
// aliases cannot expand a small file into millions of knobs.
const maxKnobNodes = 1000

// Expand replaces ${VAR} with the environment variable VAR; an unset variable
// is an error naming it. $$ is a literal $; any other $ stays as it is.
func Expand(s, what string) (string, error) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", fmt.Errorf("%w: %s: unclosed ${", ErrConfig, what)
			}
			name := s[i+2 : i+2+end]
			v, ok := Getenv(name)
			if !ok {
				return "", fmt.Errorf("%w: %s: environment variable %s is not set", ErrUnset, what, name)
			}
			b.WriteString(v)
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String(), nil
}

func target(n *yaml.Node, idx int) (Target, error) {
	where := fmt.Sprintf("targets[%d]", idx)
	if n.Kind != yaml.MappingNode {
		return Target{}, fmt.Errorf("%w: line %d: %s: want a mapping with name, url and knobs", ErrConfig, n.Line, where)
	}
	t := Target{Knobs: map[string]string{}}
	raw := ""
	seen := map[string]bool{}
	budget := maxKnobNodes
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return Target{}, fmt.Errorf("%w: line %d: %s: a key must be a name", ErrConfig, k.Line, where)
		}
		if seen[k.Value] {
			return Target{}, fmt.Errorf("%w: line %d: %s: key %q given twice", ErrConfig, k.Line, where, clip(k.Value))
		}
		seen[k.Value] = true
		switch k.Value {
		case "url":
			s, err := scalar(v, where+".url")
			if err != nil {
				return Target{}, err
			}
			raw = s
		case "name":
			s, err := scalar(v, where+".name")
			if err != nil {
				return Target{}, err
			}
			if s == "" {
				return Target{}, fmt.Errorf("%w: line %d: %s.name: empty", ErrConfig, v.Line, where)
			}
			t.Name = s
		default:
			if err := flatten(k.Value, v, where, t.Knobs, &budget); err != nil {
				return Target{}, err
			}
		}
	}
	if raw == "" {
		return Target{}, fmt.Errorf("%w: line %d: %s: url is missing", ErrConfig, n.Line, where)
	}
	if raw != "mem" && !strings.HasPrefix(raw, "mem?") {
		if u, err := url.Parse(raw); err != nil || u.Scheme == "" {
			return Target{}, fmt.Errorf("%w: %s.url: want mem or a broker URL", ErrConfig, where)
		}
		if strings.Contains(raw, "#") {
			return Target{}, fmt.Errorf("%w: %s.url: a fragment (#...) is not part of a broker URL", ErrConfig, where)
		}
	}
	// Append knobs in a stable order, keeping any the URL already has.
	keys := make([]string, 0, len(t.Knobs))
	for k := range t.Knobs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var extra []string
	if t.Name != "" {
		extra = append(extra, "name="+url.QueryEscape(t.Name))
	}
	for _, k := range keys {
		extra = append(extra, url.QueryEscape(k)+"="+url.QueryEscape(t.Knobs[k]))
	}
	t.URL = raw
	if len(extra) > 0 {
		sep := "?"
		if strings.Contains(raw, "?") {
			sep = "&"
		}
		t.URL = raw + sep + strings.Join(extra, "&")
	}
	if t.Name == "" {
		if u, err := url.Parse(raw); err == nil {
			t.Name = u.Query().Get("name")
		}
	}
	return t, nil
}

// flatten writes v under key into out: nested maps become dotted names. A
// knob reached twice (`stream: {maxlen: 1}` and `stream.maxlen: 2`) is an
// error; budget counts the nodes visited.
func flatten(key string, v *yaml.Node, where string, out map[string]string, budget *int) error {
	if *budget--; *budget < 0 {
		return fmt.Errorf("%w: line %d: %s: more than %d knob nodes", ErrConfig, v.Line, where, maxKnobNodes)
	}
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return fmt.Errorf("%w: line %d: %s.%s: no value (write \"\" for an empty one)", ErrConfig, v.Line, where, clip(key))
		}
		s, err := Expand(v.Value, where+"."+key)
		if err != nil {
			return err
		}
		if _, dup := out[key]; dup {
			return fmt.Errorf("%w: line %d: %s: knob %q given twice", ErrConfig, v.Line, where, clip(key))
		}
		out[key] = s
	case yaml.MappingNode:
		seen := map[string]bool{}
		for i := 0; i+1 < len(v.Content); i += 2 {
			k := v.Content[i]
			if k.Kind != yaml.ScalarNode {
				return fmt.Errorf("%w: line %d: %s.%s: a key must be a name", ErrConfig, k.Line, where, clip(key))
			}
			if seen[k.Value] {
				return fmt.Errorf("%w: line %d: %s.%s: key %q given twice", ErrConfig, k.Line, where, clip(key), clip(k.Value))
			}
			seen[k.Value] = true
			if err := flatten(key+"."+k.Value, v.Content[i+1], where, out, budget); err != nil {
				return err
			}
		}
	case yaml.AliasNode:
		if v.Alias == nil {
			return fmt.Errorf("%w: line %d: %s.%s: unknown alias", ErrConfig, v.Line, where, clip(key))
		}
		return flatten(key, v.Alias, where, out, budget)
	default:
		return fmt.Errorf("%w: line %d: %s.%s: a list is not a knob; write the value as the broker takes it, as one string", ErrConfig, v.Line, where, key)
	}
	return nil
}

func clip(s string) string { return redact.Clip(s) }
