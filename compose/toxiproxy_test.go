package compose

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/durachk/durachk/internal/targets"
)

// Toxiproxy in clusters.yml: an instance's proxies come from the JSON file
// mounted as its -config; clusters/toxiproxy.sh adds and removes toxics.

type proxy struct {
	Name     string `json:"name"`
	Listen   string `json:"listen"`
	Upstream string `json:"upstream"`
	Enabled  bool   `json:"enabled"`
}

func isToxiproxy(s service) bool { return strings.HasPrefix(s.Image, "ghcr.io/shopify/toxiproxy:") }

// toxiproxyConfig returns the proxies of a Toxiproxy service (the file its
// -config flag names, mounted from ./clusters/) and its flags.
func toxiproxyConfig(f clusterFiles, s service) (map[string]string, []proxy, error) {
	flags := map[string]string{}
	for _, a := range s.Command {
		k, v, _ := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		flags[k] = v
	}
	for _, v := range s.Volumes {
		src, dst, _ := strings.Cut(v, ":")
		dst, _, _ = strings.Cut(dst, ":")
		if dst != flags["config"] || !strings.HasPrefix(src, "./clusters/") {
			continue
		}
		var ps []proxy
		if err := json.Unmarshal([]byte(f[strings.TrimPrefix(src, "./")]), &ps); err != nil {
			return flags, nil, fmt.Errorf("%s: %w", src, err)
		}
		return flags, ps, nil
	}
	return flags, nil, fmt.Errorf("no ./clusters/ file mounted at -config=%s", flags["config"])
}

// parseSpec parses a target's URL as durachk does.
func parseSpec(raw string) (targets.Spec, error) { return targets.Parse(raw) }

// linksOf are the proxies that carry node's traffic, by name: NODE,
// X-to-NODE (in: what node sends goes downstream) and NODE-to-X (out: what
// it sends goes upstream).
func linksOf(ps []proxy, node string) map[string]string {
	out := map[string]string{}
	for _, p := range ps {
		switch {
		case p.Name == node, strings.HasSuffix(p.Name, "-to-"+node):
			out[p.Name] = "downstream"
		case strings.HasPrefix(p.Name, node+"-to-"):
			out[p.Name] = "upstream"
		}
	}
	return out
}

var (
	toxicAdd = regexp.MustCompile(`POST (http://127\.0\.0\.1:[0-9]+)/proxies/([a-z0-9-]+)/toxics (\{.*\})$`)
	toxicDel = regexp.MustCompile(`DELETE (http://127\.0\.0\.1:[0-9]+)/proxies/([a-z0-9-]+)/toxics/([a-z0-9-]+)$`)
)

type toxic struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Stream     string         `json:"stream"`
	Toxicity   float64        `json:"toxicity"`
	Attributes map[string]int `json:"attributes"`
}

// checkToxiproxyScript runs clusters/toxiproxy.sh ACTION NODE for each node
// and action with a stand-in curl that records each request, and checks
// that it puts the right toxics on exactly the node's links, at the API of
// the instance that holds them (api: proxy name → API base URL).
func checkToxiproxyScript(f clusterFiles, nodes []string, proxies []proxy, api map[string]string) []error {
	var errs []error
	dir, err := os.MkdirTemp("", "durachk-toxiproxy-test-")
	if err != nil {
		return []error{err}
	}
	defer os.RemoveAll(dir)
	for _, p := range []string{"clusters/toxiproxy.sh", "clusters/toxiproxy.json", "clusters/toxiproxy-host.json"} {
		if err := os.MkdirAll(filepath.Join(dir, "clusters"), 0o755); err != nil {
			return []error{err}
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(f[p]), 0o644); err != nil {
			return []error{err}
		}
	}
	bin, log := filepath.Join(dir, "bin"), filepath.Join(dir, "curl.log")
	// curl's arguments, one request a line: METHOD URL [BODY]; a DELETE
	// answers 404 (the toxic is not there), which heal and unlag accept.
	fake := `#!/bin/sh
m=GET u= d=
while [ $# -gt 0 ]; do
	case $1 in
	-X) m=$2; shift ;;
	-d) d=$2; shift ;;
	-o|-H|-w) shift ;;
	http*) u=$1 ;;
	esac
	shift
done
printf '%s %s %s\n' "$m" "$u" "$d" >>"$CURL_LOG"
[ "$m" = DELETE ] && printf 404
exit 0
`
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return []error{err}
	}
	if err := os.WriteFile(filepath.Join(bin, "curl"), []byte(fake), 0o755); err != nil {
		return []error{err}
	}
	run := func(action, node string) (string, error) {
		_ = os.Remove(log)
		cmd := exec.Command("sh", filepath.Join(dir, "clusters/toxiproxy.sh"), action, node)
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "CURL_LOG="+log)
		out, err := cmd.CombinedOutput()
		b, _ := os.ReadFile(log)
		if err != nil {
			return string(b), fmt.Errorf("%v: %s", err, out)
		}
		return string(b), nil
	}
	for _, node := range nodes {
		links := linksOf(proxies, node)
		for _, action := range []string{"partition", "heal", "lag", "unlag"} {
			got, err := run(action, node)
			bad := func(format string, a ...any) {
				errs = append(errs, fmt.Errorf("toxiproxy.sh %s %s: "+format, append([]any{action, node}, a...)...))
			}
			if err != nil {
				bad("%v", err)
				continue
			}
			touched := map[string][]toxic{}
			for _, l := range strings.Split(strings.TrimSpace(got), "\n") {
				l = strings.TrimSpace(l)
				if m := toxicAdd.FindStringSubmatch(l); m != nil {
					var tx toxic
					if err := json.Unmarshal([]byte(m[3]), &tx); err != nil {
						bad("body %s: %v", m[3], err)
					}
					if api[m[2]] != m[1] {
						bad("POST to %s for proxy %s, which the instance at %q holds", m[1], m[2], api[m[2]])
					}
					touched[m[2]] = append(touched[m[2]], tx)
				} else if m := toxicDel.FindStringSubmatch(l); m != nil {
					if api[m[2]] != m[1] {
						bad("DELETE to %s for proxy %s, which the instance at %q holds", m[1], m[2], api[m[2]])
					}
					touched[m[2]] = append(touched[m[2]], toxic{Name: m[3]})
				} else if l != "" {
					bad("unexpected request %q", l)
				}
			}
			if have, want := sortedKeys(touched), sortedKeys(links); !slices.Equal(have, want) {
				bad("acts on the proxies %v, want the node's links %v", have, want)
			}
			for p, txs := range touched {
				switch action {
				case "partition":
					var streams []string
					for _, tx := range txs {
						if tx.Type != "timeout" || tx.Attributes["timeout"] != 0 || tx.Toxicity != 1 {
							bad("%s: toxic %+v, want a timeout toxic, timeout 0, toxicity 1", p, tx)
						}
						streams = append(streams, tx.Stream)
					}
					if slices.Sort(streams); !slices.Equal(streams, []string{"downstream", "upstream"}) {
						bad("%s: streams %v, want both", p, streams)
					}
				case "lag":
					if len(txs) != 1 || txs[0].Type != "latency" || txs[0].Attributes["latency"] <= 0 || txs[0].Stream != links[p] || txs[0].Toxicity != 1 {
						bad("%s: toxics %+v, want one latency toxic on the %s stream (what %s sends)", p, txs, links[p], node)
					}
				case "heal", "unlag":
					want := map[string][]string{"heal": {"durachk-partition-down", "durachk-partition-up"}, "unlag": {"durachk-lag"}}[action]
					var names []string
					for _, tx := range txs {
						names = append(names, tx.Name)
					}
					slices.Sort(names)
					if !slices.Equal(names, want) {
						bad("%s: deletes %v, want %v", p, names, want)
					}
				}
			}
			// heal and unlag remove what partition and lag add.
			if action == "partition" || action == "lag" {
				for p, txs := range touched {
					for _, tx := range txs {
						if !strings.Contains(f["clusters/toxiproxy.sh"], "del "+tx.Name) {
							bad("%s: toxic %s is never removed", p, tx.Name)
						}
					}
				}
			}
		}
	}
	if _, err := run("partition", "no-such-node"); err == nil {
		errs = append(errs, fmt.Errorf("toxiproxy.sh partition no-such-node succeeded: a node without proxies must be refused"))
	}
	return errs
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// upstreamService names the service a proxy's upstream reaches: a compose
// service name, or a 127.0.0.1 port a service on the host's network serves.
func upstreamService(up string, direct map[string]string) string {
	h, p, err := net.SplitHostPort(up)
	if err != nil {
		return ""
	}
	if h == "127.0.0.1" {
		return direct[p]
	}
	return h
}
