// Package compose holds the docker-compose setup for users (no Go code); its test
// checks, without a Docker engine, what README.md promises about it.
package compose

import (
	"fmt"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/durachk/durachk/internal/targets"
)

type composeFile struct {
	Services map[string]service `yaml:"services"`
}

type service struct {
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

func load(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile("docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return c
}

// published returns the host ports of s, checking that each is bound to 127.0.0.1.
func published(t *testing.T, name string, s service) []string {
	t.Helper()
	var out []string
	for _, p := range s.Ports {
		parts := strings.Split(p, ":")
		if len(parts) != 3 || parts[0] != "127.0.0.1" {
			t.Errorf("%s: port %q is not published on 127.0.0.1 only", name, p)
			continue
		}
		out = append(out, parts[1])
	}
	return out
}

func TestServices(t *testing.T) {
	c := load(t)
	tests := []struct {
		service string
		image   string // exact image, or a prefix ending in ":" plus a tag check
		port    string
		health  string   // a word the health check must contain
		command []string // arguments the command must contain
		env     map[string]string
	}{
		{service: "localstack", image: "localstack/localstack:4.14.0", port: "4566", health: "/_localstack/health", env: map[string]string{"SERVICES": "sqs"}},
		{service: "elasticmq", image: "softwaremill/elasticmq-native:", port: "9324", health: "9324"},
		{service: "rabbitmq", image: "rabbitmq:4.", port: "5672", health: "ping"},
		{service: "redis", image: "redis:", port: "6379", health: "ping", command: []string{"--appendonly", "yes"}},
		{service: "postgres", image: "postgres:", port: "5432", health: "pg_isready", command: []string{"fsync=on"}},
		{service: "nats", image: "nats:", port: "4222", health: "js-enabled-only", command: []string{"-js"}},
	}
	for _, tc := range tests {
		t.Run(tc.service, func(t *testing.T) {
			s, ok := c.Services[tc.service]
			if !ok {
				t.Fatalf("no service %s", tc.service)
			}
			repo, tag, hasTag := strings.Cut(s.Image, ":")
			switch {
			case !strings.HasPrefix(s.Image, tc.image):
				t.Errorf("image %q, want %q", s.Image, tc.image)
			case !hasTag || tag == "" || tag == "latest" || repo == "":
				t.Errorf("image %q is not pinned to a tag", s.Image)
			}
			if !slices.Contains(published(t, tc.service, s), tc.port) {
				t.Errorf("port %s is not published: %v", tc.port, s.Ports)
			}
			if s.Healthcheck == nil || len(s.Healthcheck.Test) == 0 {
				t.Fatalf("no health check")
			}
			if h := strings.Join(s.Healthcheck.Test, " "); !strings.Contains(h, tc.health) {
				t.Errorf("health check %q does not mention %q", h, tc.health)
			}
			cmd := strings.Join(s.Command, " ")
			for _, want := range tc.command {
				if !strings.Contains(cmd, want) {
					t.Errorf("command %q lacks %q", cmd, want)
				}
			}
			for k, v := range tc.env {
				if s.Environment[k] != v {
					t.Errorf("environment %s=%q, want %q", k, s.Environment[k], v)
				}
			}
		})
	}
	for name, s := range c.Services {
		if s.Healthcheck == nil {
			t.Errorf("service %s has no health check", name)
		}
	}
}

// flatten turns nested knob maps into dotted query parameters, as durachk.yaml's
// loader does.
func flatten(prefix string, v any, q url.Values) error {
	switch x := v.(type) {
	case map[string]any:
		for k, vv := range x {
			if err := flatten(prefix+k+".", vv, q); err != nil {
				return err
			}
		}
	case []any:
		return fmt.Errorf("%s: a list is not a knob", strings.TrimSuffix(prefix, "."))
	default:
		q.Set(strings.TrimSuffix(prefix, "."), fmt.Sprint(x))
	}
	return nil
}

func TestDurachkYAML(t *testing.T) {
	b, err := os.ReadFile("durachk.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Seed    uint64           `yaml:"seed"`
		Targets []map[string]any `yaml:"targets"`
		Store   string           `yaml:"store"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("durachk.yaml: %v", err)
	}
	c := load(t)
	ports := map[string]bool{}
	for name, s := range c.Services {
		for _, p := range published(t, name, s) {
			ports[p] = true
		}
	}
	if len(f.Targets) != 5 {
		t.Errorf("%d targets, want 5 (one per broker kind)", len(f.Targets))
	}
	kinds := map[string]bool{}
	for i, tg := range f.Targets {
		raw, _ := tg["url"].(string)
		u, err := url.Parse(raw)
		if err != nil || raw == "" {
			t.Errorf("target %d: url %q", i, raw)
			continue
		}
		if !ports[u.Port()] {
			t.Errorf("target %d (%s) points at port %q, which docker-compose.yml does not publish", i, u.Scheme, u.Port())
		}
		q := u.Query()
		var keys []string
		for k := range tg {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if k == "url" {
				continue
			}
			if err := flatten(k+".", tg[k], q); err != nil {
				t.Errorf("target %d: %v", i, err)
			}
		}
		u.RawQuery = q.Encode()
		if _, ok := targets.Lookup(u.Scheme); !ok {
			t.Logf("target %d: no %s kind is registered in this build; its knobs are not checked", i, u.Scheme)
			kinds[u.Scheme] = true
			continue
		}
		spec, err := targets.Parse(u.String())
		if err != nil {
			t.Errorf("target %d: %v", i, err)
			continue
		}
		kinds[spec.Kind] = true
	}
	if len(kinds) != 5 {
		t.Errorf("broker kinds %v, want five different ones", kinds)
	}
	if su, err := url.Parse(f.Store); err != nil || su.Scheme != "postgres" || !ports[su.Port()] {
		t.Errorf("store %q is not the compose Postgres", f.Store)
	}
}
