package faults

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// Node faults, for replicated targets (a Redis primary with replicas, a
// Postgres primary with a standby, a RabbitMQ cluster). A node fault picks its
// victims with a selector (Fault.Node) when it fires, not by name in the plan,
// so one plan runs on any topology: "kill the primary" means whichever node is
// the primary at that moment.
const (
	// NodeKill fails the selected nodes at At as their hosts would fail: their
	// links are cut at once, dropping what was in flight from them, and the
	// server is SIGKILLed. Each is restarted after For (0: at the heal after
	// the last fault). A restarted node rejoins as the
	// topology says: a deposed Redis primary as a replica, a Postgres node as a
	// standby of the current primary (a fresh base backup), a RabbitMQ node on
	// its own data.
	NodeKill Kind = "node_kill"
	// NodePartition cuts the selected nodes from every other node, and from
	// every client on the other side, during [At, At+For); 0: until the heal.
	// A client pinned to a cut node (Plan.PinProducer) stays with it: it is
	// on the minority side.
	NodePartition Kind = "node_partition"
	// Failover promotes the most up-to-date live replica at At and points the
	// clients at it, where the topology does not fail over by itself (a
	// Postgres standby; Redis without Sentinel). Where it does (Sentinel, Raft),
	// it only marks when the plan expects the new primary.
	Failover Kind = "failover"
)

// LinkReplication is every replica → primary link of a replicated target
// (Redis replication, Postgres streaming): Latency and Blackhole on it lag or
// stall replication while clients keep writing to the primary.
const LinkReplication = "replication"

// Node selectors (Fault.Node and Plan.PinProducer), after Jepsen's
// nemesis specs; any other value names a node ("n2").
const (
	SelPrimary  = "primary"  // the node that accepts writes (the queue's leader on RabbitMQ)
	SelReplica  = "replica"  // one replica, seeded
	SelOne      = "one"      // one node, seeded
	SelMinority = "minority" // fewer than half the nodes (at least one), seeded
	SelMajority = "majority" // more than half the nodes, seeded
	SelAll      = "all"
	// SelPinned is the node the producer is pinned to (Plan.PinProducer).
	SelPinned = "pinned"
)

// IsNodeFault reports whether k acts on the nodes of a replicated target.
func IsNodeFault(k Kind) bool { return k == NodeKill || k == NodePartition || k == Failover }

// NeedsNodes reports whether plan has faults on a replicated target's nodes or
// its replication links.
func (p Plan) NeedsNodes() bool {
	if p.PinProducer != "" {
		return true
	}
	for _, f := range p.Faults {
		if IsNodeFault(f.Kind) || f.Link == LinkReplication {
			return true
		}
	}
	return false
}

// SelectNodes resolves a selector against nodes (in their order), the current
// primary ("" if none is known) and a seeded generator. It never returns an
// empty list without an error.
func SelectNodes(sel string, nodes []string, primary string, r *rand.Rand) ([]string, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("node selector %q: no nodes", sel)
	}
	shuffled := func(from []string) []string {
		out := slices.Clone(from)
		r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		return out
	}
	sorted := func(xs []string) []string {
		slices.SortFunc(xs, func(a, b string) int { return slices.Index(nodes, a) - slices.Index(nodes, b) })
		return xs
	}
	n := len(nodes)
	switch sel {
	case SelPrimary:
		if primary == "" {
			return nil, fmt.Errorf("node selector %q: no primary is known", sel)
		}
		return []string{primary}, nil
	case SelReplica:
		var rs []string
		for _, x := range nodes {
			if x != primary {
				rs = append(rs, x)
			}
		}
		if len(rs) == 0 {
			return nil, fmt.Errorf("node selector %q: no replica", sel)
		}
		return shuffled(rs)[:1], nil
	case SelOne:
		return shuffled(nodes)[:1], nil
	case SelMinority:
		return sorted(shuffled(nodes)[:max((n-1)/2, 1)]), nil
	case SelMajority:
		return sorted(shuffled(nodes)[:n/2+1]), nil
	case SelAll:
		return slices.Clone(nodes), nil
	}
	if slices.Contains(nodes, sel) {
		return []string{sel}, nil
	}
	return nil, fmt.Errorf("node selector %q: not a selector (%s) nor one of the nodes %s", sel,
		strings.Join([]string{SelPrimary, SelReplica, SelOne, SelMinority, SelMajority, SelAll}, ", "), strings.Join(nodes, ", "))
}

// NodeLink is the link of one node: while it is cut, every proxy that names it
// in Also drops what goes through it (a partition of the node). Safe for
// concurrent use.
func NodeLink(node string) *Link { return &Link{Name: "node:" + node} }

// Cut partitions (true) or heals (false) the link, whatever its windows say.
// A partition is silent, as on a real network: nothing is closed or refused;
// live connections stall and new ones are accepted and never answered (a
// blackhole), so each end finds out by its own timeouts — a Redis primary
// keeps counting a replica it cannot reach until min-replicas-max-lag
// passes. What was held is delivered once the link heals, as TCP
// retransmission would.
func (l *Link) Cut(on bool) { l.cut.Store(on) }

// IsCut reports whether Cut holds the link down.
func (l *Link) IsCut() bool { return l != nil && l.cut.Load() }
