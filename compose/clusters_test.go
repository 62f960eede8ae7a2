package compose

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
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

// The files of the replicated setup, read from disk by default; the negative
// controls hand checkClusters mutated copies.
type clusterFiles map[string]string

func readClusterFiles(t *testing.T) clusterFiles {
	t.Helper()
	f := clusterFiles{}
	for _, p := range []string{"clusters.yml", "clusters.yaml", "clusters/sentinel.sh", "clusters/pg-node.sh",
		"clusters/pg-watcher.sh", "clusters/rabbitmq-cluster.conf"} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f[p] = string(b)
	}
	return f
}

// nodeControl is how clusters.yaml writes a node's kill and start.
var nodeControl = regexp.MustCompile(`^docker compose -f compose/clusters\.yml (kill|start) ([a-z0-9-]+)$`)

// script returns the ./clusters/ file a service runs (its entrypoint's or
// command's sh argument), mounted from volumes, or "".
func script(s service) string {
	args := append(slices.Clone(s.Entrypoint), s.Command...)
	for _, a := range args {
		if !strings.HasSuffix(a, ".sh") {
			continue
		}
		for _, v := range s.Volumes {
			src, dst, _ := strings.Cut(v, ":")
			if strings.HasPrefix(dst, a) && strings.HasPrefix(src, "./clusters/") {
				return strings.TrimPrefix(src, "./")
			}
		}
	}
	return ""
}

// hostPorts returns the ports a service serves on the host's 127.0.0.1, and
// what is wrong with how it does: a published port must be bound to
// 127.0.0.1; a service on the host's network publishes nothing and binds its
// listener to 127.0.0.1 itself (--bind 127.0.0.1, or `bind 127.0.0.1` in the
// configuration its script writes).
func hostPorts(f clusterFiles, name string, s service) ([]string, []error) {
	var ports []string
	var errs []error
	switch s.NetworkMode {
	case "":
		for _, p := range s.Ports {
			parts := strings.Split(p, ":")
			if len(parts) != 3 || parts[0] != "127.0.0.1" {
				errs = append(errs, fmt.Errorf("%s: port %q is not published on 127.0.0.1 only", name, p))
				continue
			}
			ports = append(ports, parts[1])
		}
	case "host":
		if len(s.Ports) > 0 {
			errs = append(errs, fmt.Errorf("%s: on the host's network, yet publishes %v", name, s.Ports))
		}
		cmd := strings.Join(s.Command, " ")
		binds := regexp.MustCompile(`--bind (\S+)`).FindAllStringSubmatch(cmd, -1)
		sc := script(s)
		scriptBinds := regexp.MustCompile(`(?m)^bind (.+)$`).FindAllStringSubmatch(f[sc], -1)
		loopback := len(binds)+len(scriptBinds) > 0
		for _, b := range append(binds, scriptBinds...) {
			loopback = loopback && b[1] == "127.0.0.1"
		}
		if !loopback {
			errs = append(errs, fmt.Errorf("%s: on the host's network, its listener must bind 127.0.0.1 only (--bind 127.0.0.1, or bind 127.0.0.1 in %s)", name, sc))
		}
		if m := regexp.MustCompile(`--port ([0-9]+)`).FindStringSubmatch(cmd); m != nil {
			ports = append(ports, m[1])
		} else if sc != "" && len(s.Command) == 3 {
			ports = append(ports, s.Command[2]) // sentinel.sh PORT
		}
	default:
		errs = append(errs, fmt.Errorf("%s: network_mode %q: want the compose network or host", name, s.NetworkMode))
	}
	return ports, errs
}

// checkClusters is the validation clusters.yml and clusters.yaml get before
// any Docker engine: what they promise in README.md, and what `durachk run -c`
// refuses before it reaches a network (the config loader, strict target parsing).
func checkClusters(f clusterFiles) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	var c composeFile
	if err := yaml.Unmarshal([]byte(f["clusters.yml"]), &c); err != nil {
		return []error{fmt.Errorf("clusters.yml: %w", err)}
	}
	if len(c.Services) == 0 {
		return []error{errors.New("clusters.yml: no services")}
	}
	owner := map[string]string{} // host port → service
	for name, s := range c.Services {
		if !pinned(s.Image) {
			bad("%s: image %q is not pinned to a patch version", name, s.Image)
		}
		if s.Restart != "no" {
			bad("%s: restart %q, want \"no\": a node durachk killed must stay down until it starts it", name, s.Restart)
		}
		if s.Healthcheck == nil || len(s.Healthcheck.Test) == 0 {
			bad("%s: no health check (make clusters-up waits for them)", name)
		}
		ports, perrs := hostPorts(f, name, s)
		errs = append(errs, perrs...)
		for _, p := range ports {
			if other, dup := owner[p]; dup {
				bad("port %s is served by %s and %s", p, other, name)
			}
			owner[p] = name
		}
	}
	served := func(hostport string) string {
		h, p, err := net.SplitHostPort(hostport)
		if err != nil || h != "127.0.0.1" {
			return ""
		}
		return owner[p]
	}

	cfg, err := config.Parse([]byte(f["clusters.yaml"]))
	if err != nil {
		return append(errs, fmt.Errorf("clusters.yaml: %w", err))
	}
	controlled := map[string]bool{} // services some control command acts on
	var targetHosts []string
	for _, tg := range cfg.Targets {
		s, err := targets.Parse(tg.URL)
		if err != nil {
			bad("target %s does not parse: %v", tg.Name, err)
			continue
		}
		if !targets.HasExternalCluster(s) {
			bad("target %s is not an existing cluster with two or more nodes under control commands", tg.Name)
		}
		u, _ := url.Parse(tg.URL)
		hosts := append(strings.Split(u.Host, ","), u.Query()["addr"]...)
		for _, h := range hosts {
			if served(h) == "" {
				bad("target %s: %s is no 127.0.0.1 port of clusters.yml", tg.Name, h)
			}
		}
		targetHosts = append(targetHosts, hosts...)
		for k, v := range tg.Knobs {
			rest, ok := strings.CutPrefix(k, "control.")
			if !ok {
				continue
			}
			node, action, perNode := strings.Cut(rest, ".")
			if !perNode {
				bad("target %s: %s acts on the whole cluster: the cluster contracts kill one node at a time", tg.Name, k)
				continue
			}
			if _, ok := c.Services[node]; !ok {
				bad("target %s: node %s is no service of clusters.yml", tg.Name, node)
			}
			switch action {
			case targets.ActionAddr:
				if served(v) != node {
					bad("target %s: %s=%s, but that port is served by %q", tg.Name, k, v, served(v))
				}
			case targets.ActionKill, targets.ActionStart:
				m := nodeControl.FindStringSubmatch(v)
				switch {
				case m == nil:
					bad("target %s: %s = %q, want %s", tg.Name, k, v, nodeControl)
				case m[1] != action:
					bad("target %s: %s runs docker compose %s", tg.Name, k, m[1])
				case c.Services[m[2]].Image == "":
					bad("target %s: %s names %s, no service of clusters.yml", tg.Name, k, m[2])
				case m[2] != node:
					bad("target %s: %s acts on %s, not on the node %s", tg.Name, k, m[2], node)
				default:
					controlled[m[2]] = true
				}
			default:
				bad("target %s: %s: only kill, start and addr per node", tg.Name, k)
			}
		}
	}
	su, err := url.Parse(cfg.Store)
	if err != nil || cfg.Store == "" {
		bad("clusters.yaml has no store")
	} else if st := served(su.Host); st == "" || !strings.HasPrefix(c.Services[st].Image, "postgres:") {
		bad("store %s is no Postgres service of clusters.yml", su.Host)
	} else if controlled[st] || slices.ContainsFunc(targetHosts, func(h string) bool { return served(h) == st }) {
		bad("the store's server %s is a cluster node: killing it would take the store", st)
	}

	// The topologies README.md describes.
	sentinels := 0
	for name, s := range c.Services {
		cmd := strings.Join(s.Command, " ")
		switch {
		case strings.HasPrefix(cmd, "redis-server") && !strings.Contains(cmd, "--repl-diskless-sync-delay 0"):
			bad("%s: no repl-diskless-sync-delay 0 (a replica's first sync would wait 5 s)", name)
		case script(s) == "clusters/sentinel.sh":
			sentinels++
		}
	}
	sconf := f["clusters/sentinel.sh"]
	for _, want := range []string{"sentinel monitor durachk 127.0.0.1 7001 2", "sentinel down-after-milliseconds durachk 500"} {
		if !strings.Contains(sconf, want) {
			bad("sentinel.sh lacks %q", want)
		}
	}
	if sentinels != 3 {
		bad("%d Sentinels, want 3 (quorum 2)", sentinels)
	}
	if !strings.Contains(f["clusters/pg-node.sh"], "pg_basebackup -h \"$PEER\" -U postgres -D \"$D\" -R -X stream -c fast") {
		bad("pg-node.sh does not make the standby with pg_basebackup -R -X stream -c fast")
	}
	if !strings.Contains(f["clusters/pg-watcher.sh"], "pg_promote(") {
		bad("pg-watcher.sh promotes nothing")
	}
	var cookies []string
	for name, s := range c.Services {
		if !strings.HasPrefix(s.Image, "rabbitmq:") {
			continue
		}
		cookies = append(cookies, s.Environment["RABBITMQ_ERLANG_COOKIE"])
		if !strings.Contains(f["clusters/rabbitmq-cluster.conf"], "= rabbit@"+s.Hostname+"\n") || s.Hostname != name {
			bad("%s (hostname %q) is not a node of rabbitmq-cluster.conf's classic peer discovery", name, s.Hostname)
		}
	}
	if slices.Sort(cookies); len(cookies) != 3 || cookies[0] == "" || cookies[0] != cookies[2] {
		bad("RabbitMQ: want three nodes sharing one Erlang cookie, have %d", len(cookies))
	}
	return errs
}

func TestClusters(t *testing.T) {
	for _, err := range checkClusters(readClusterFiles(t)) {
		t.Error(err)
	}
}

// TestClustersRejects: the negative controls of checkClusters — each mutated
// copy of the files must be refused, for the reason given.
func TestClustersRejects(t *testing.T) {
	const cyml, cyaml = "clusters.yml", "clusters.yaml"
	tests := []struct {
		name, file, old, new, want string
	}{
		{"latest image", cyml, "image: redis:7.0.15", "image: redis:latest", "not pinned"},
		{"untagged image", cyml, "image: rabbitmq:3.10.25-management", "image: rabbitmq", "not pinned"},
		{"minor tag only", cyml, "image: postgres:15.14", "image: postgres:15", "not pinned"},
		{"port on every interface", cyml, `"127.0.0.1:5441:5432"`, `"0.0.0.0:5441:5432"`, "127.0.0.1 only"},
		{"port without address", cyml, `"127.0.0.1:5682:5672"`, `"5682:5672"`, "127.0.0.1 only"},
		{"host network bound to all", cyml, `"--bind", "127.0.0.1", "--port", "7002"`, `"--bind", "0.0.0.0", "--port", "7002"`, "bind 127.0.0.1"},
		{"sentinel bound to all", "clusters/sentinel.sh", "bind 127.0.0.1", "bind 0.0.0.0", "bind 127.0.0.1"},
		{"restart policy", cyml, "network_mode: host\n    restart: \"no\"", "network_mode: host\n    restart: unless-stopped", "restart"},
		{"unknown service in start", cyaml, "start redis-3", "start redis-9", "no service"},
		{"unknown node", cyaml, "      redis-3:\n", "      redis-9:\n", "no service"},
		{"kill of another node", cyaml, "kill: docker compose -f compose/clusters.yml kill pg-2", "kill: docker compose -f compose/clusters.yml kill pg-1", "not on the node"},
		{"start that kills", cyaml, "start: docker compose -f compose/clusters.yml start rabbit-2", "start: docker compose -f compose/clusters.yml kill rabbit-2", "runs docker compose kill"},
		{"another compose file", cyaml, "kill: docker compose -f compose/clusters.yml kill redis-1", "kill: docker compose -f compose/docker-compose.yml kill redis-1", "want"},
		{"addr of another node", cyaml, "addr: 127.0.0.1:7003", "addr: 127.0.0.1:7002", "served by"},
		{"URL host no service serves", cyaml, "addr=127.0.0.1:5683", "addr=127.0.0.1:5699", "no 127.0.0.1 port"},
		{"store on a node", cyaml, "127.0.0.1:5439/test", "127.0.0.1:5441/test", "store"},
		{"unknown control action", cyaml, "        start: docker compose -f compose/clusters.yml start rabbit-3", "        restart: docker compose -f compose/clusters.yml start rabbit-3", "does not parse"},
		{"unknown knob", cyaml, "wait: {replicas: 1, timeout: 1s}", "wait: {replicas: 1, timeuot: 1s}", "does not parse"},
		{"one node left", cyaml, "      pg-2:\n        kill: docker compose -f compose/clusters.yml kill pg-2\n        start: docker compose -f compose/clusters.yml start pg-2\n        addr: 127.0.0.1:5442\n", "", "not an existing cluster"},
		{"config key typo", cyaml, "\nstore:", "\nstor:", "unknown key"},
		{"sentinel quorum", "clusters/sentinel.sh", "127.0.0.1 7001 2", "127.0.0.1 7001 1", "sentinel monitor"},
		{"cookie differs", cyml, "environment: {RABBITMQ_ERLANG_COOKIE: durachk-compose-cluster-cookie}\n    volumes: [\"./clusters/rabbitmq-cluster.conf:/etc/rabbitmq/conf.d/20-durachk-cluster.conf:ro\"]\n    ports:\n      - \"127.0.0.1:5683",
			"environment: {RABBITMQ_ERLANG_COOKIE: other}\n    volumes: [\"./clusters/rabbitmq-cluster.conf:/etc/rabbitmq/conf.d/20-durachk-cluster.conf:ro\"]\n    ports:\n      - \"127.0.0.1:5683", "cookie"},
	}
	orig := readClusterFiles(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := clusterFiles{}
			for k, v := range orig {
				f[k] = v
			}
			if !strings.Contains(f[tc.file], tc.old) {
				t.Fatalf("%s no longer contains %q: update the mutation", tc.file, tc.old)
			}
			f[tc.file] = strings.Replace(f[tc.file], tc.old, tc.new, 1)
			errs := checkClusters(f)
			if !slices.ContainsFunc(errs, func(err error) bool { return strings.Contains(err.Error(), tc.want) }) {
				t.Errorf("mutated %s accepted (want an error containing %q); errors: %v", tc.file, tc.want, errs)
			}
		})
	}
}

// TestClustersBaseline: ../examples/clusters-baseline.json names exactly
// clusters.yaml's targets with the whole catalogue, and expects skipped
// exactly where an existing cluster gives durachk no way to run a contract.
func TestClustersBaseline(t *testing.T) {
	cfg, err := config.Load("clusters.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bl, err := reports.ReadBaseline("../examples/clusters-baseline.json")
	if err != nil {
		t.Fatal(err)
	}
	var names, ids []string
	for _, tg := range cfg.Targets {
		names = append(names, tg.Name)
	}
	for _, ct := range contracts.Catalogue {
		ids = append(ids, ct.ID)
	}
	if err := bl.Check(names, ids); err != nil {
		t.Fatalf("examples/clusters-baseline.json does not fit compose/clusters.yaml: %v", err)
	}
	for _, tg := range cfg.Targets {
		s, err := targets.Parse(tg.URL)
		if err != nil {
			t.Fatal(err)
		}
		got := bl[tg.Name]
		if len(got) != len(ids) {
			t.Errorf("%s lists %d contracts, want all %d", tg.Name, len(got), len(ids))
		}
		mustSkip := map[string]string{
			"partition.minority":    "durachk cannot partition an existing cluster's nodes",
			"partition.client":      "durachk cannot partition an existing cluster's nodes",
			"durability.power-loss": "a power loss needs a private broker",
		}
		if !s.ControlKills() {
			mustSkip["durability.ack"] = "no control.kill for the whole broker"
		}
		if s.Kind == "amqp" {
			mustSkip["fencing.failover"] = "RabbitMQ's token is approximate"
		}
		for id, why := range mustSkip {
			if got[id] != contracts.Skipped {
				t.Errorf("%s %s: expected %s, but it can only be skipped: %s", tg.Name, id, got[id], why)
			}
		}
		if targets.HasExternalCluster(s) && got["durability.failover"] == contracts.Skipped {
			t.Errorf("%s durability.failover: expected skipped, but the target has node control commands", tg.Name)
		}
	}
}

// TestClustersMakefile: the Makefile's cluster targets use clusters.yml.
func TestClustersMakefile(t *testing.T) {
	b, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	mk := string(b)
	for _, want := range []string{"clusters-up:", "clusters-down:", "clusters-test:", "clusters.yml", "up -d --wait", "down -v",
		"-c " + path.Join("compose", "clusters.yaml"), "--baseline " + path.Join("examples", "clusters-baseline.json")} {
		if !strings.Contains(mk, want) {
			t.Errorf("Makefile lacks %q", want)
		}
	}
}
