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
		"clusters/pg-watcher.sh", "clusters/rabbitmq-cluster.conf", "clusters/toxiproxy.json", "clusters/toxiproxy-host.json",
		"clusters/toxiproxy.sh", "clusters/status.sh"} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f[p] = string(b)
	}
	return f
}

// How clusters.yaml writes a node's commands: kill, start, pause and resume
// with docker compose, the network faults with clusters/toxiproxy.sh, and
// the status with clusters/status.sh.
var (
	nodeControl   = regexp.MustCompile(`^docker compose -f compose/clusters\.yml (kill|start|pause|unpause) ([a-z0-9-]+)$`)
	netControl    = regexp.MustCompile(`^sh compose/clusters/toxiproxy\.sh (partition|heal|lag|unlag) ([a-z0-9-]+)$`)
	statusControl = regexp.MustCompile(`^sh compose/clusters/status\.sh (redis|postgres|rabbitmq)$`)
	composeVerb   = map[string]string{"kill": "kill", "start": "start", "pause": "pause", "resume": "unpause"}
	statusKind    = map[string]string{"redis": "redis", "postgres": "postgres", "amqp": "rabbitmq"}
)

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
		if isToxiproxy(s) {
			flags, ps, err := toxiproxyConfig(f, s)
			if err != nil {
				return nil, []error{fmt.Errorf("%s: %v", name, err)}
			}
			if flags["host"] != "127.0.0.1" {
				errs = append(errs, fmt.Errorf("%s: on the host's network, its API must bind 127.0.0.1 only (-host=127.0.0.1)", name))
			}
			ports = append(ports, flags["port"])
			for _, p := range ps {
				h, port, err := net.SplitHostPort(p.Listen)
				if err != nil || h != "127.0.0.1" {
					errs = append(errs, fmt.Errorf("%s: proxy %s listens on %q: on the host's network, a proxy must bind 127.0.0.1 only", name, p.Name, p.Listen))
					continue
				}
				ports = append(ports, port)
			}
			return ports, errs
		}
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
//
// runScript also runs clusters/toxiproxy.sh (with a stand-in curl) for every
// node and action.
func checkClusters(f clusterFiles, runScript bool) []error {
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
	// Toxiproxy: each proxy's port (on 127.0.0.1) stands for the service its
	// upstream reaches; api says which instance's API holds each proxy.
	via := map[string]string{}  // 127.0.0.1 port of a proxy → upstream service
	inner := map[string]proxy{} // compose-network port → proxy (PEER_PORT, NODES)
	api := map[string]string{}  // proxy name → API base URL
	var proxies []proxy
	for _, name := range sortedKeys(c.Services) {
		s := c.Services[name]
		if !isToxiproxy(s) {
			continue
		}
		flags, ps, err := toxiproxyConfig(f, s)
		if err != nil {
			bad("%s: %v", name, err)
			continue
		}
		hostPort := map[string]string{} // container port → published 127.0.0.1 port
		for _, p := range s.Ports {
			if parts := strings.Split(p, ":"); len(parts) == 3 {
				hostPort[parts[2]] = parts[1]
			}
		}
		base := "http://127.0.0.1:" + flags["port"]
		if s.NetworkMode != "host" {
			base = "http://127.0.0.1:" + hostPort[flags["port"]]
		}
		for _, p := range ps {
			up := upstreamService(p.Upstream, owner)
			switch {
			case c.Services[up].Image == "" || isToxiproxy(c.Services[up]):
				bad("%s: proxy %s: upstream %s is no node of clusters.yml", name, p.Name, p.Upstream)
				continue
			case !p.Enabled:
				bad("%s: proxy %s is not enabled at start", name, p.Name)
			}
			if from, to, ok := strings.Cut(p.Name, "-to-"); p.Name != up && !(ok && to == up && c.Services[from].Image != "") {
				bad("%s: proxy %s reaches %s: name it %s (the clients' link) or SERVICE-to-%s", name, p.Name, up, up, up)
			}
			if _, dup := api[p.Name]; dup {
				bad("proxy %s is defined twice", p.Name)
			}
			api[p.Name] = base
			proxies = append(proxies, p)
			_, port, _ := net.SplitHostPort(p.Listen)
			if s.NetworkMode == "host" {
				via[port] = up
			} else {
				inner[port] = p
				if hp := hostPort[port]; hp != "" {
					via[hp] = up
				}
			}
		}
	}
	served := func(hostport string) string {
		h, p, err := net.SplitHostPort(hostport)
		if err != nil || h != "127.0.0.1" {
			return ""
		}
		if up := via[p]; up != "" {
			return up
		}
		return owner[p]
	}

	cfg, err := config.Parse([]byte(f["clusters.yaml"]))
	if err != nil {
		return append(errs, fmt.Errorf("clusters.yaml: %w", err))
	}
	controlled := map[string]bool{} // services some control command acts on
	var targetHosts, netNodes []string
	for _, tg := range cfg.Targets {
		s, err := parseSpec(tg.URL)
		if err != nil {
			bad("target %s does not parse: %v", tg.Name, err)
		} else if !targets.HasExternalCluster(s) {
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
		nodeKeys := map[string]map[string]bool{}
		for _, k := range sortedKeys(tg.Knobs) {
			v := tg.Knobs[k]
			rest, ok := strings.CutPrefix(k, "control.")
			if !ok {
				continue
			}
			node, action, perNode := strings.Cut(rest, ".")
			if !perNode {
				switch rest {
				case "timeout":
				case "status":
					if m := statusControl.FindStringSubmatch(v); m == nil || err != nil || m[1] != statusKind[s.Kind] {
						bad("target %s: %s = %q, want sh compose/clusters/status.sh %s", tg.Name, k, v, statusKind[s.Kind])
					}
				default:
					bad("target %s: %s acts on the whole cluster: the cluster contracts fault one node at a time", tg.Name, k)
				}
				continue
			}
			if _, ok := c.Services[node]; !ok {
				bad("target %s: node %s is no service of clusters.yml", tg.Name, node)
			}
			if nodeKeys[node] == nil {
				nodeKeys[node] = map[string]bool{}
			}
			nodeKeys[node][action] = true
			switch action {
			case targets.ActionAddr:
				if served(v) != node {
					bad("target %s: %s=%s, but that port is served by %q", tg.Name, k, v, served(v))
				}
				if _, p, _ := net.SplitHostPort(v); tg.Knobs["control."+node+".partition"] != "" && via[p] == "" {
					bad("target %s: %s=%s is the node's own port: a partition through Toxiproxy would not cut it", tg.Name, k, v)
				}
			case targets.ActionKill, targets.ActionStart, targets.ActionPause, targets.ActionResume:
				m := nodeControl.FindStringSubmatch(v)
				switch {
				case m == nil:
					bad("target %s: %s = %q, want %s", tg.Name, k, v, nodeControl)
				case m[1] != composeVerb[action]:
					bad("target %s: %s runs docker compose %s", tg.Name, k, m[1])
				case c.Services[m[2]].Image == "":
					bad("target %s: %s names %s, no service of clusters.yml", tg.Name, k, m[2])
				case m[2] != node:
					bad("target %s: %s acts on %s, not on the node %s", tg.Name, k, m[2], node)
				default:
					controlled[m[2]] = true
				}
			case "partition", "heal", "lag", "unlag":
				m := netControl.FindStringSubmatch(v)
				switch {
				case m == nil:
					bad("target %s: %s = %q, want %s", tg.Name, k, v, netControl)
				case m[1] != action:
					bad("target %s: %s runs toxiproxy.sh %s", tg.Name, k, m[1])
				case m[2] != node:
					bad("target %s: %s acts on %s, not on the node %s", tg.Name, k, m[2], node)
				case linksOf(proxies, node)[node] == "":
					bad("target %s: %s: no Toxiproxy proxy %s carries the clients' link to the node", tg.Name, k, node)
				default:
					controlled[node] = true
				}
			default:
				bad("target %s: %s: no control key durachk knows", tg.Name, k)
			}
		}
		for _, node := range sortedKeys(nodeKeys) {
			keys := nodeKeys[node]
			for _, a := range []string{"kill", "start", "pause", "resume", "addr"} {
				if !keys[a] {
					bad("target %s: node %s has no control.%s.%s", tg.Name, node, node, a)
				}
			}
			if net := keys["partition"] || keys["heal"] || keys["lag"] || keys["unlag"]; net {
				if !(keys["partition"] && keys["heal"] && keys["lag"] && keys["unlag"]) {
					bad("target %s: node %s has only some of partition, heal, lag, unlag", tg.Name, node)
				}
				netNodes = append(netNodes, node)
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
	for _, want := range []string{"sentinel monitor durachk 127.0.0.1 17001 2", "sentinel down-after-milliseconds durachk 500"} {
		if !strings.Contains(sconf, want) {
			bad("sentinel.sh lacks %q", want)
		}
	}
	if sentinels != 3 {
		bad("%d Sentinels, want 3 (quorum 2)", sentinels)
	}
	if !strings.Contains(f["clusters/pg-node.sh"], "pg_basebackup -h \"$PEER\" -p \"${PEER_PORT:-5432}\" -U postgres -D \"$D\" -R -X stream -c fast") {
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

	// Every link of a node with network faults goes through its proxies: the
	// Redis nodes announce their proxy ports and replicate through them (so
	// the Sentinels name the proxies); the Postgres nodes reach their peer,
	// and the watcher each node, through the link named after them.
	redisPort := regexp.MustCompile(`--port ([0-9]+)`)
	for _, name := range sortedKeys(c.Services) {
		s := c.Services[name]
		cmd := strings.Join(s.Command, " ")
		if strings.HasPrefix(cmd, "redis-server --bind") {
			if m := regexp.MustCompile(`--replica-announce-port ([0-9]+)`).FindStringSubmatch(cmd); m == nil || via[m[1]] != name {
				bad("%s: does not announce its own Toxiproxy port (--replica-announce-port): the Sentinels would hand out its own port, which no partition cuts", name)
			} else if p := redisPort.FindStringSubmatch(cmd); p == nil || owner[p[1]] != name {
				bad("%s: --port is not its own", name)
			}
			if m := regexp.MustCompile(`--replicaof 127\.0\.0\.1 ([0-9]+)`).FindStringSubmatch(cmd); m != nil && (via[m[1]] == "" || via[m[1]] == name) {
				bad("%s: replicates from port %s, no other node's Toxiproxy port", name, m[1])
			}
		}
		if s.Environment["PEER"] != "" {
			p, ok := inner[s.Environment["PEER_PORT"]]
			if s.Environment["PEER"] != "toxiproxy" || !ok || p.Name != name+"-to-"+upstreamService(p.Upstream, owner) || upstreamService(p.Upstream, owner) == name {
				bad("%s: reaches its peer at %s:%s, not through its own Toxiproxy link %s-to-PEER", name, s.Environment["PEER"], s.Environment["PEER_PORT"], name)
			}
		}
		if nodes := s.Environment["NODES"]; nodes != "" {
			for _, e := range strings.Fields(nodes) {
				n, hp, _ := strings.Cut(e, "=")
				h, port, _ := strings.Cut(hp, ":")
				if p, ok := inner[port]; h != "toxiproxy" || !ok || p.Name != name+"-to-"+n || upstreamService(p.Upstream, owner) != n {
					bad("%s: looks at %s through %s, not through its Toxiproxy link %s-to-%s", name, n, hp, name, n)
				}
			}
		}
	}
	if m := regexp.MustCompile(`sentinel monitor durachk 127\.0\.0\.1 ([0-9]+) `).FindStringSubmatch(sconf); m == nil || via[m[1]] != "redis-1" {
		bad("sentinel.sh does not monitor redis-1 through its Toxiproxy port")
	}
	if runScript && len(netNodes) > 0 {
		errs = append(errs, checkToxiproxyScript(f, netNodes, proxies, api)...)
	}
	return errs
}

func TestClusters(t *testing.T) {
	for _, err := range checkClusters(readClusterFiles(t), true) {
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
		{"port on every interface", cyml, `"127.0.0.1:5441:5441"`, `"0.0.0.0:5441:5441"`, "127.0.0.1 only"},
		{"port without address", cyml, `"127.0.0.1:5682:5672"`, `"5682:5672"`, "127.0.0.1 only"},
		{"host network bound to all", cyml, `"--bind", "127.0.0.1", "--port", "7002"`, `"--bind", "0.0.0.0", "--port", "7002"`, "bind 127.0.0.1"},
		{"sentinel bound to all", "clusters/sentinel.sh", "bind 127.0.0.1", "bind 0.0.0.0", "bind 127.0.0.1"},
		{"restart policy", cyml, "network_mode: host\n    restart: \"no\"", "network_mode: host\n    restart: unless-stopped", "restart"},
		{"unknown service in start", cyaml, "start redis-3", "start redis-9", "no service"},
		{"unknown node", cyaml, "      redis-3:\n", "      redis-9:\n", "no service"},
		{"kill of another node", cyaml, "kill: docker compose -f compose/clusters.yml kill pg-2", "kill: docker compose -f compose/clusters.yml kill pg-1", "not on the node"},
		{"start that kills", cyaml, "start: docker compose -f compose/clusters.yml start rabbit-2", "start: docker compose -f compose/clusters.yml kill rabbit-2", "runs docker compose kill"},
		{"another compose file", cyaml, "kill: docker compose -f compose/clusters.yml kill redis-1", "kill: docker compose -f compose/docker-compose.yml kill redis-1", "want"},
		{"addr of another node", cyaml, "addr: 127.0.0.1:17003", "addr: 127.0.0.1:17002", "served by"},
		{"addr past the proxy", cyaml, "addr: 127.0.0.1:17003", "addr: 127.0.0.1:7003", "would not cut it"},
		{"URL host no service serves", cyaml, "addr=127.0.0.1:5683", "addr=127.0.0.1:5699", "no 127.0.0.1 port"},
		{"store on a node", cyaml, "127.0.0.1:5439/test", "127.0.0.1:5441/test", "store"},
		{"unknown control action", cyaml, "        start: docker compose -f compose/clusters.yml start rabbit-3", "        restart: docker compose -f compose/clusters.yml start rabbit-3", "does not parse"},
		{"unknown knob", cyaml, "wait: {replicas: 1, timeout: 1s}", "wait: {replicas: 1, timeuot: 1s}", "does not parse"},
		{"one node left", cyaml, "      pg-2:\n        kill: docker compose -f compose/clusters.yml kill pg-2\n        start: docker compose -f compose/clusters.yml start pg-2\n        pause: docker compose -f compose/clusters.yml pause pg-2\n        resume: docker compose -f compose/clusters.yml unpause pg-2\n        partition: sh compose/clusters/toxiproxy.sh partition pg-2\n        heal: sh compose/clusters/toxiproxy.sh heal pg-2\n        lag: sh compose/clusters/toxiproxy.sh lag pg-2\n        unlag: sh compose/clusters/toxiproxy.sh unlag pg-2\n        addr: 127.0.0.1:5442\n", "", "not an existing cluster"},
		{"config key typo", cyaml, "\nstore:", "\nstor:", "unknown key"},
		{"sentinel quorum", "clusters/sentinel.sh", "127.0.0.1 17001 2", "127.0.0.1 17001 1", "sentinel monitor"},
		{"sentinel past the proxy", "clusters/sentinel.sh", "127.0.0.1 17001 2", "127.0.0.1 7001 2", "sentinel monitor"},
		{"resume that pauses", cyaml, "resume: docker compose -f compose/clusters.yml unpause redis-2", "resume: docker compose -f compose/clusters.yml pause redis-2", "runs docker compose pause"},
		{"partition of another node", cyaml, "partition: sh compose/clusters/toxiproxy.sh partition pg-1", "partition: sh compose/clusters/toxiproxy.sh partition pg-2", "not on the node pg-1"},
		{"heal that lags", cyaml, "heal: sh compose/clusters/toxiproxy.sh heal redis-1", "heal: sh compose/clusters/toxiproxy.sh lag redis-1", "runs toxiproxy.sh lag"},
		{"partition without heal", cyaml, "        heal: sh compose/clusters/toxiproxy.sh heal redis-3\n", "", "only some of"},
		{"partition of a node without proxies", cyaml, "        addr: 127.0.0.1:5683\n", "        partition: sh compose/clusters/toxiproxy.sh partition rabbit-3\n        heal: sh compose/clusters/toxiproxy.sh heal rabbit-3\n        lag: sh compose/clusters/toxiproxy.sh lag rabbit-3\n        unlag: sh compose/clusters/toxiproxy.sh unlag rabbit-3\n        addr: 127.0.0.1:5683\n", "no Toxiproxy proxy rabbit-3"},
		{"status of another broker", cyaml, "status: sh compose/clusters/status.sh postgres", "status: sh compose/clusters/status.sh redis", "want sh compose/clusters/status.sh postgres"},
		{"unknown node action", cyaml, "        unlag: sh compose/clusters/toxiproxy.sh unlag pg-2\n", "        unslow: sh compose/clusters/toxiproxy.sh unlag pg-2\n", "does not parse"},
		{"replica announces its own port", cyml, `"--replica-announce-port", "17002"`, `"--replica-announce-port", "7002"`, "does not announce its own Toxiproxy port"},
		{"replica syncs past the proxy", cyml, `"--replicaof", "127.0.0.1", "17001"]`, `"--replicaof", "127.0.0.1", "7001"]`, "no other node's Toxiproxy port"},
		{"standby reaches its peer directly", cyml, "PEER: toxiproxy\n      PEER_PORT: \"6021\"", "PEER: pg-1\n      PEER_PORT: \"5432\"", "not through its own Toxiproxy link"},
		{"standby on the other way's link", cyml, "PEER_PORT: \"6021\"", "PEER_PORT: \"6012\"", "not through its own Toxiproxy link"},
		{"watcher looks past the proxy", cyml, "pg-1=toxiproxy:6031", "pg-1=pg-1:5432", "not through its Toxiproxy link"},
		{"proxy to another node", "clusters/toxiproxy.json", `"listen": "0.0.0.0:6021", "upstream": "pg-1:5432"`, `"listen": "0.0.0.0:6021", "upstream": "pg-2:5432"`, "name it pg-2"},
		{"proxy to nothing", "clusters/toxiproxy-host.json", `"upstream": "127.0.0.1:7003"`, `"upstream": "127.0.0.1:7009"`, "no node of clusters.yml"},
		{"proxy on every interface", "clusters/toxiproxy-host.json", `"listen": "127.0.0.1:17002"`, `"listen": "0.0.0.0:17002"`, "must bind 127.0.0.1 only"},
		{"toxiproxy API on every interface", cyml, `command: ["-host=127.0.0.1", "-port=8474"`, `command: ["-host=0.0.0.0", "-port=8474"`, "must bind 127.0.0.1 only"},
		{"script skips a link", "clusters/toxiproxy.sh", "\t\t*-to-\"$node\") mine=in ;;\n", "", "want the node's links"},
		{"partition one way", "clusters/toxiproxy.sh", "\t\t\tadd durachk-partition-down timeout downstream '{\"timeout\": 0}'\n", "", "want both"},
		{"lag on the wrong stream", "clusters/toxiproxy.sh", "if [ $mine = in ]; then stream=downstream; else stream=upstream; fi", "stream=downstream", "want one latency toxic on the upstream stream"},
		{"heal that removes nothing", "clusters/toxiproxy.sh", "\t\t\tdel durachk-partition-up\n", "", "never removed"},
		{"wrong API", "clusters/toxiproxy.sh", `"toxiproxy.json 8475"`, `"toxiproxy.json 8474"`, "which the instance at"},
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
			errs := checkClusters(f, strings.HasPrefix(tc.file, "clusters/toxiproxy"))
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
		s, err := parseSpec(tg.URL)
		if err != nil {
			t.Fatal(err)
		}
		got := bl[tg.Name]
		if len(got) != len(ids) {
			t.Errorf("%s lists %d contracts, want all %d", tg.Name, len(got), len(ids))
		}
		mustSkip := map[string]string{"durability.power-loss": "a power loss needs a private broker"}
		// A node without a partition command cannot be partitioned; with them
		// (Redis, Postgres through Toxiproxy) the verdicts are h21-extcluster's
		// to measure.
		partitions := false
		for k := range tg.Knobs {
			partitions = partitions || strings.HasSuffix(k, ".partition")
		}
		if !partitions {
			mustSkip["partition.minority"] = "no node of the target has a partition command"
			mustSkip["partition.client"] = "no node of the target has a partition command"
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
