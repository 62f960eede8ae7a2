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
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ErrConfig marks every error of a configuration file.
var ErrConfig = errors.New("configuration")

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
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%w: want a mapping with seed, targets and store", ErrConfig)
	}
	m := root.Content[0]
	c := &Config{}
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if seen[k.Value] {
			return nil, fmt.Errorf("%w: line %d: key %q given twice", ErrConfig, k.Line, k.Value)
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
				return nil, fmt.Errorf("%w: line %d: seed %q: want a non-negative integer", ErrConfig, v.Line, s)
			}
			c.Seed, c.HasSeed = n, true
		case "store":
			s, err := scalar(v, "store")
			if err != nil {
				return nil, err
			}
			c.Store = s
		case "targets":
			if v.Kind != yaml.SequenceNode {
				return nil, fmt.Errorf("%w: line %d: targets: want a list", ErrConfig, v.Line)
			}
			for j, tn := range v.Content {
				t, err := target(tn, j)
				if err != nil {
					return nil, err
				}
				c.Targets = append(c.Targets, t)
			}
		default:
			return nil, fmt.Errorf("%w: line %d: unknown key %q (known: seed, targets, store)", ErrConfig, k.Line, k.Value)
		}
	}
	names := map[string]bool{}
	for _, t := range c.Targets {
		if names[t.Name] {
			return nil, fmt.Errorf("%w: target name %q used twice", ErrConfig, t.Name)
		}
		names[t.Name] = true
	}
	return c, nil
}

func scalar(n *yaml.Node, what string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", fmt.Errorf("%w: line %d: %s: want a single value", ErrConfig, n.Line, what)
	}
	return Expand(n.Value, what)
}

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
				return "", fmt.Errorf("%w: %s: environment variable %s is not set", ErrConfig, what, name)
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
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
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
			t.Name = s
		default:
			if err := flatten(k.Value, v, where, t.Knobs); err != nil {
				return Target{}, err
			}
		}
	}
	if raw == "" {
		return Target{}, fmt.Errorf("%w: line %d: %s: url is missing", ErrConfig, n.Line, where)
	}
	if raw != "mem" {
		if u, err := url.Parse(raw); err != nil || u.Scheme == "" {
			return Target{}, fmt.Errorf("%w: %s.url: want mem or a broker URL", ErrConfig, where)
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

// flatten writes v under key into out: nested maps become dotted names.
func flatten(key string, v *yaml.Node, where string, out map[string]string) error {
	switch v.Kind {
	case yaml.ScalarNode:
		s, err := Expand(v.Value, where+"."+key)
		if err != nil {
			return err
		}
		out[key] = s
	case yaml.MappingNode:
		for i := 0; i+1 < len(v.Content); i += 2 {
			if err := flatten(key+"."+v.Content[i].Value, v.Content[i+1], where, out); err != nil {
				return err
			}
		}
	case yaml.AliasNode:
		return flatten(key, v.Alias, where, out)
	default:
		return fmt.Errorf("%w: line %d: %s.%s: a list is not a knob; write the value as the broker takes it, as one string", ErrConfig, v.Line, where, key)
	}
	return nil
}
