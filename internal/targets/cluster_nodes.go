package targets

import (
	"fmt"
	"time"
)

// namedNode is a node of a private cluster.
type namedNode interface{ nodeName() string }

// clusterNodes is what every private cluster keeps of its nodes, whatever
// the broker: the nodes in order (n1 first), the client URL and how long the
// cluster took to start. Each cluster embeds it.
type clusterNodes[N namedNode] struct {
	kind  string // "postgres cluster": names the cluster in errors
	nodes []N
	url   string
	took  time.Duration
}

func (s *clusterNodes[N]) URL() string              { return s.url }
func (s *clusterNodes[N]) StartTime() time.Duration { return s.took }

// Nodes names the nodes in order.
func (s *clusterNodes[N]) Nodes() []string {
	out := make([]string, 0, len(s.nodes))
	for _, n := range s.nodes {
		out = append(out, n.nodeName())
	}
	return out
}

func (s *clusterNodes[N]) node(name string) (N, error) {
	for _, n := range s.nodes {
		if n.nodeName() == name {
			return n, nil
		}
	}
	var none N
	return none, fmt.Errorf("%s: no node %q", s.kind, name)
}

func (n *clusterNode) nodeName() string { return n.name }
func (n *pgNode) nodeName() string      { return n.name }
func (n *rabbitNode) nodeName() string  { return n.name }
func (n *redisNode) nodeName() string   { return n.name }
