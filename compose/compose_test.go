// Package compose holds the docker-compose setup for users (no Go code); its test
// checks, without a Docker engine, what README.md promises about it, and that
// docker-compose.yml, durachk.yaml and ../examples/baseline.json stay
// consistent with each other (and
// clusters.yml, clusters.yaml and ../examples/clusters-baseline.json:
// clusters_test.go).
package compose

import (
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/config"
	"github.com/durachk/durachk/internal/targets"
	"github.com/durachk/durachk/reports"
)

type composeFile struct {
	Services map[string]service `yaml:"services"`
}

type service struct {
	Image         string            `yaml:"image"`
	ContainerName string            `yaml:"container_name"`
	Hostname      string            `yaml:"hostname"`
	Restart       string            `yaml:"restart"`
	Command       []string          `yaml:"command"`
	Entrypoint    []string          `yaml:"entrypoint"`
	NetworkMode   string            `yaml:"network_mode"`
	Volumes       []string          `yaml:"volumes"`
	Environment   map[string]string `yaml:"environment"`
	Ports         []string          `yaml:"ports"`
	Healthcheck   *struct {
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

// byPort maps each published host port to its service.
func byPort(t *testing.T, c composeFile) map[string]string {
	t.Helper()
	m := map[string]string{}
	for name, s := range c.Services {
		for _, p := range published(t, name, s) {
			if other, dup := m[p]; dup {
				t.Errorf("port %s is published by %s and %s", p, other, name)
			}
			m[p] = name
		}
	}
	return m
}

// Patch-level tags: x.y.z (optionally -variant); Postgres numbers its patch
// releases x.y since version 10.
var (
	patchTag         = regexp.MustCompile(`^v?[0-9]+\.[0-9]+\.[0-9]+(-[a-z0-9.-]+)?$`)
	postgresPatchTag = regexp.MustCompile(`^[0-9]{2,}\.[0-9]+(-[a-z0-9.-]+)?$`)
)

func pinned(image string) bool {
	repo, tag, ok := strings.Cut(image, ":")
	if !ok || repo == "" || strings.Contains(tag, "latest") {
		return false
	}
	if repo == "postgres" {
		return postgresPatchTag.MatchString(tag)
	}
	return patchTag.MatchString(tag)
}

func TestPinnedTags(t *testing.T) {
	for image, want := range map[string]bool{
		"redis:7.4.3": true, "rabbitmq:4.1.8-management": true, "postgres:17.6": true, "localstack/localstack:4.14.0": true,
		"redis:7.4": false, "rabbitmq:4.1-management": false, "postgres:17": false, "redis": false, "redis:latest": false, "postgres:latest": false,
	} {
		if pinned(image) != want {
			t.Errorf("pinned(%q) = %v, want %v", image, !want, want)
		}
	}
}

func TestServices(t *testing.T) {
	c := load(t)
	tests := []struct {
		service string
		image   string // exact image, or a prefix
		port    string
		health  string   // a word the health check must contain
		command []string // arguments the command must contain
		env     map[string]string
	}{
		{service: "localstack", image: "localstack/localstack:4.14.0", port: "4566", health: "/_localstack/health", env: map[string]string{"SERVICES": "sqs"}},
		{service: "elasticmq", image: "softwaremill/elasticmq-native:", port: "9324", health: "9324"},
		{service: "rabbitmq", image: "rabbitmq:4.", port: "5672", health: "ping"},
		{service: "redis", image: "redis:", port: "6379", health: "ping", command: []string{"--appendonly yes", "--appendfsync always"}},
		{service: "postgres", image: "postgres:", port: "5432", health: "pg_isready", command: []string{"fsync=on", "synchronous_commit=on"}},
		{service: "store", image: "postgres:", port: "5433", health: "pg_isready", command: []string{"fsync=on"}},
		{service: "nats", image: "nats:", port: "4222", health: "js-enabled-only", command: []string{"-js"}},
		{service: "mariadb", image: "mariadb:10.11.", port: "3306", health: "--innodb_initialized", command: []string{"--innodb-flush-log-at-trx-commit=1"}},
		{service: "mysql", image: "mysql:8.4.", port: "3307", health: "ping", command: []string{"--innodb-flush-log-at-trx-commit=1", "--sync-binlog=1"}},
	}
	for _, tc := range tests {
		t.Run(tc.service, func(t *testing.T) {
			s, ok := c.Services[tc.service]
			if !ok {
				t.Fatalf("no service %s", tc.service)
			}
			if !strings.HasPrefix(s.Image, tc.image) {
				t.Errorf("image %q, want %q", s.Image, tc.image)
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
	names := map[string]string{}
	for name, s := range c.Services {
		if s.Healthcheck == nil {
			t.Errorf("service %s has no health check", name)
		}
		if !pinned(s.Image) {
			t.Errorf("service %s: image %q is not pinned to a patch version", name, s.Image)
		}
		// Control commands name containers: each has a fixed, unique name.
		if s.ContainerName == "" {
			t.Errorf("service %s has no container_name", name)
		} else if other, dup := names[s.ContainerName]; dup {
			t.Errorf("services %s and %s share the container name %s", other, name, s.ContainerName)
		}
		names[s.ContainerName] = name
		// A broker the run killed must stay down until durachk starts it.
		if s.Restart != "no" {
			t.Errorf("service %s: restart %q, want \"no\"", name, s.Restart)
		}
	}
	// RabbitMQ keeps its data under a directory named after the node, which
	// is named after the host: a restarted container needs the same hostname.
	if s := c.Services["rabbitmq"]; s.Hostname == "" {
		t.Errorf("rabbitmq has no fixed hostname: a restarted container would not find its queues")
	}
}

// controlKnobs are the flat knobs of a target's broker control (see
// internal/targets: control.kill, control.start, control.pause, control.resume).
var controlKnobs = []string{"control.kill", "control.start", "control.pause", "control.resume"}

// wantControl is the docker command each control knob runs on a container.
var wantControl = map[string]*regexp.Regexp{
	"control.kill":   regexp.MustCompile(`^docker kill -s KILL ([a-z0-9-]+)$`),
	"control.start":  regexp.MustCompile(`^docker start ([a-z0-9-]+)$`),
	"control.pause":  regexp.MustCompile(`^docker pause ([a-z0-9-]+)$`),
	"control.resume": regexp.MustCompile(`^docker unpause ([a-z0-9-]+)$`),
}

type yamlTarget struct {
	config.Target
	u       *url.URL
	service string            // the compose service publishing its port
	control map[string]string // control knob → command
}

func loadTargets(t *testing.T, c composeFile) (*config.Config, []yamlTarget) {
	t.Helper()
	cfg, err := config.Load("durachk.yaml")
	if err != nil {
		t.Fatalf("durachk.yaml: %v", err)
	}
	ports := byPort(t, c)
	var out []yamlTarget
	for _, tg := range cfg.Targets {
		u, err := url.Parse(tg.URL)
		if err != nil {
			t.Fatalf("target %s: %v", tg.Name, err)
		}
		yt := yamlTarget{Target: tg, u: u, service: ports[u.Port()], control: map[string]string{}}
		for _, k := range controlKnobs {
			if v, ok := tg.Knobs[k]; ok {
				yt.control[k] = v
			}
		}
		out = append(out, yt)
	}
	return cfg, out
}

// parse parses a target's URL (control commands included) as durachk does.
func parse(t *testing.T, yt yamlTarget) targets.Spec {
	t.Helper()
	s, err := targets.Parse(yt.URL)
	if err != nil {
		t.Fatalf("target %s: %v", yt.Name, err)
	}
	return s
}

func TestDurachkYAML(t *testing.T) {
	c := load(t)
	cfg, ts := loadTargets(t, c)
	if len(ts) != 6 {
		t.Errorf("%d targets, want 6 (one per broker kind)", len(ts))
	}
	kinds := map[string]bool{}
	for _, yt := range ts {
		if yt.Name == "" {
			t.Errorf("target %s has no name (the baseline names it)", yt.URL)
		}
		if yt.service == "" {
			t.Errorf("target %s points at port %q, which no service of docker-compose.yml publishes", yt.Name, yt.u.Port())
		}
		kinds[parse(t, yt).Kind] = true
	}
	if len(kinds) != 6 {
		t.Errorf("broker kinds %v, want six different ones", kinds)
	}
	// The effect store is its own server: no control command may take it down.
	su, err := url.Parse(cfg.Store)
	if err != nil || su.Scheme != "postgres" {
		t.Fatalf("store %q is not a postgres URL", cfg.Store)
	}
	store := byPort(t, c)[su.Port()]
	if store == "" || !strings.HasPrefix(c.Services[store].Image, "postgres:") {
		t.Fatalf("store %q is not a Postgres service of docker-compose.yml", cfg.Store)
	}
	for _, yt := range ts {
		if yt.service == store {
			t.Errorf("target %s is the store's server %s: killing it would kill the store", yt.Name, store)
		}
	}
}

// TestControlCommands: every control command is the docker command for its
// knob, on the container of the service that serves that target, never on
// the store; a target has all four or none.
func TestControlCommands(t *testing.T) {
	c := load(t)
	cfg, ts := loadTargets(t, c)
	su, _ := url.Parse(cfg.Store)
	storeContainer := c.Services[byPort(t, c)[su.Port()]].ContainerName
	for _, yt := range ts {
		if len(yt.control) == 0 {
			continue
		}
		if len(yt.control) != len(controlKnobs) {
			t.Errorf("target %s has control commands %v: want all of %v", yt.Name, yt.control, controlKnobs)
		}
		want := c.Services[yt.service].ContainerName
		for k, cmd := range yt.control {
			m := wantControl[k].FindStringSubmatch(cmd)
			switch {
			case m == nil:
				t.Errorf("target %s: %s = %q, want %s", yt.Name, k, cmd, wantControl[k])
			case m[1] == storeContainer:
				t.Errorf("target %s: %s acts on the effect store's container %s", yt.Name, k, m[1])
			case m[1] != want:
				t.Errorf("target %s: %s acts on %s, but the target's port is served by %s", yt.Name, k, m[1], want)
			}
		}
	}
}

// TestExampleBaseline: examples/baseline.json is strict for this run (it names
// exactly durachk.yaml's targets, every contract of the catalogue for each),
// and every target it expects to pass durability.ack has control commands:
// on a runner without broker binaries the broker kill goes through them.
func TestExampleBaseline(t *testing.T) {
	c := load(t)
	_, ts := loadTargets(t, c)
	bl, err := reports.ReadBaseline("../examples/baseline.json")
	if err != nil {
		t.Fatal(err)
	}
	var names, ids []string
	for _, yt := range ts {
		names = append(names, yt.Name)
	}
	for _, ct := range contracts.Catalogue {
		ids = append(ids, ct.ID)
	}
	if err := bl.Check(names, ids); err != nil {
		t.Fatalf("examples/baseline.json does not fit compose/durachk.yaml: %v", err)
	}
	for _, yt := range ts {
		got := bl[yt.Name]
		if len(got) != len(ids) {
			t.Errorf("examples/baseline.json: %s lists %d contracts, want all %d", yt.Name, len(got), len(ids))
		}
		hasControl := yt.control["control.kill"] != "" && yt.control["control.start"] != ""
		switch v := got["durability.ack"]; {
		case v == contracts.Pass && !hasControl:
			t.Errorf("examples/baseline.json expects %s durability.ack pass, but the target has no control commands: it would be skipped", yt.Name)
		case v == contracts.Skipped && hasControl:
			t.Errorf("examples/baseline.json expects %s durability.ack skipped, but the target has control commands", yt.Name)
		}
	}
}

// pinnedAction is a third-party action pinned to a commit.
var pinnedAction = regexp.MustCompile(`^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+@[0-9a-f]{40}$`)
