package targets

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/internal/ports"
)

// Replicated topologies. A target names one with the private-cluster.* knobs
// of its kind (durachk starts the nodes as its own children, loopback only, one
// 127.0.x.y address per node) and the contracts whose plans fault nodes
// (faults.NeedsNodes) run on a fresh cluster of that shape; every other
// contract runs on the target's URL as before.

// ClusterPrefix starts every knob that shapes a private cluster.
const ClusterPrefix = "private-cluster."

// ErrAutomaticFailover is returned by Cluster.Failover on a topology that
// elects its new primary by itself (Sentinel, Raft): the harness waits for it.
var ErrAutomaticFailover = errors.New("the topology fails over by itself")

// Cluster is a replicated topology whose nodes a run faults one by one. Its
// methods are safe for concurrent use.
type Cluster interface {
	// Describe names the topology for logs and reports, e.g. "redis primary +
	// 2 replicas + 3 sentinels".
	Describe() string
	// Nodes names the nodes, n1 first (the first primary, where there is one).
	Nodes() []string
	// URL is what every process of the run connects to: a Sentinel URL, a
	// multi-host URL, a node list, or an address that follows the primary.
	URL() string
	// NodeURL reaches node directly, by a link that no partition cuts: a client
	// on that node's side of a partition.
	NodeURL(node string) (string, error)
	// Primary is the node that takes writes now (the run's queue leader on
	// RabbitMQ), as the topology itself says; "" if none is known.
	Primary(ctx context.Context) (string, error)
	// Kill SIGKILLs node and waits until it is gone.
	Kill(node string) error
	// Restart starts a killed node again; it rejoins as the topology says.
	Restart(ctx context.Context, node string) error
	// Failover promotes the most up-to-date live replica and points the clients
	// at it; ErrAutomaticFailover where the topology does it itself.
	Failover(ctx context.Context) (string, error)
	// Partition cuts nodes from every other node and from the clients of URL.
	Partition(nodes []string) error
	// Heal ends every partition.
	Heal() error
	// Settle waits until a primary is known, reachable through URL, and every
	// live node follows it; its error says what did not settle.
	Settle(ctx context.Context) error
	// Unpin moves the clients pinned to a node (NodeURL) to the primary, as a
	// client on the minority side finds the primary once the partition heals.
	Unpin(ctx context.Context) error
	// StartTime is how long the cluster took to start and settle.
	StartTime() time.Duration
	// Stop kills every node and helper, closes the proxies and removes the
	// data. Idempotent.
	Stop() error
}

// PartitionTimer is a cluster whose nodes decide by a timeout of their own
// what a node cut off by a partition does: it learns that it is cut off
// (RabbitMQ's net_ticktime, Galera's inactive timeout), or it stops waiting
// for a replica and acknowledges without one (MariaDB's semi-synchronous
// timeout), or it starts refusing writes (Redis min-replicas-max-lag). A
// partition meant to show what the cut-off side does must outlast it, in wall
// time: the broker's timers do not stretch with the machine's load as the
// scenario's times do.
type PartitionTimer interface {
	// PartitionTimeout is the longest such timeout, in wall time, and what
	// it is; 0 where the topology has none.
	PartitionTimeout() (time.Duration, string)
}

// ClusterEnv is what a cluster gets from the run that starts it.
type ClusterEnv struct {
	Dir   string // the run directory: data, sockets and logs go below it
	RunID string
	// Links are the run's fault links; faults.LinkReplication, if present,
	// lags or stalls every replication link the cluster puts through a proxy.
	Links map[string]*faults.Link
	// OnFault is told of every fault a proxy of the cluster applied (kind, link).
	OnFault func(kind, link string)
	// Logf, if set, takes progress lines.
	Logf func(format string, args ...any)
}

func (e ClusterEnv) logf(format string, args ...any) {
	if e.Logf != nil {
		e.Logf(format, args...)
	}
}

// ClusterKind is what a broker kind offers for replicated topologies.
type ClusterKind struct {
	// Knobs are the kind's private-cluster.* (and client) knobs, accepted by
	// its Parse.
	Knobs map[string]bool
	// Check validates the knobs of a parsed spec.
	Check func(s Spec) error
	// Can says why a private cluster cannot start on this machine, or nil.
	Can func() error
	// Start starts a private cluster shaped by s's knobs and returns it with s
	// pointing at it.
	Start func(ctx context.Context, s Spec, env ClusterEnv) (Cluster, Spec, error)
	// Describe names the topology s's knobs shape, without starting it.
	Describe func(s Spec) string
	// Adjust, if set, corrects the capabilities read from the target's own
	// server for what the private cluster's nodes are (their persistence).
	Adjust func(s Spec, c *adapters.Capabilities)
}

// AdjustForCluster corrects c for the private cluster s names, if any.
func AdjustForCluster(s Spec, c *adapters.Capabilities) {
	k, err := kindOf(s)
	if err != nil || k.Cluster == nil || k.Cluster.Adjust == nil || !HasPrivateCluster(s) {
		return
	}
	k.Cluster.Adjust(s, c)
}

// DescribeCluster names the private topology s shapes, or "".
func DescribeCluster(s Spec) string {
	k, err := kindOf(s)
	if err != nil || k.Cluster == nil || k.Cluster.Describe == nil || !HasPrivateCluster(s) {
		return ""
	}
	return k.Cluster.Describe(s)
}

// HasPrivateCluster reports whether s names a private cluster.
func HasPrivateCluster(s Spec) bool {
	for k := range s.Options {
		if strings.HasPrefix(k, ClusterPrefix) {
			return true
		}
	}
	return false
}

// CanFaultNodes reports whether runs of s can fault a replicated topology node
// by node, and if not, why.
func CanFaultNodes(s Spec) error {
	k, err := kindOf(s)
	if err != nil {
		return err
	}
	if k.Cluster == nil {
		return fmt.Errorf("durachk cannot start or fault a replicated %s topology", k.Name)
	}
	if HasExternalCluster(s) {
		return nil
	}
	if !HasPrivateCluster(s) {
		return fmt.Errorf("the target is not a replicated topology durachk can fault node by node: name one with the %s* knobs, or an existing one with control.<node>.kill, .start and .addr for each node", ClusterPrefix)
	}
	if k.Cluster.Can != nil {
		return k.Cluster.Can()
	}
	return nil
}

// StartCluster starts the private cluster s names, or attaches to the
// existing cluster its control commands name.
func StartCluster(ctx context.Context, s Spec, env ClusterEnv) (Cluster, Spec, error) {
	k, err := kindOf(s)
	if err != nil {
		return nil, s, err
	}
	if HasExternalCluster(s) {
		return attachExternalCluster(ctx, s, env)
	}
	if k.Cluster == nil || !HasPrivateCluster(s) {
		return nil, s, fmt.Errorf("%w: %s names no private cluster", ErrBadTarget, s.Name)
	}
	return k.Cluster.Start(ctx, s, env)
}

// checkCluster runs the kind's knob checks after Parse.
func checkCluster(k *Kind, s Spec) error {
	if k.Cluster == nil {
		return nil
	}
	if HasPrivateCluster(s) && k.Cluster.Check == nil {
		return fmt.Errorf("%w: %s: no private clusters", ErrBadTarget, k.Name)
	}
	if k.Cluster.Check != nil {
		return k.Cluster.Check(s)
	}
	return nil
}

// nodeNames are n1..nN.
func nodeNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "n" + strconv.Itoa(i+1)
	}
	return out
}

// LoopbackBlock is the run's own /24 in 127/8, which Linux routes to lo:
// node i listens on 127.0.B.(10+i), helpers (Sentinels) on 127.0.B.(20+j).
// B comes from the run id, so that concurrent runs rarely share addresses and
// rules that name an address (nftables) stay the run's own.
func LoopbackBlock(runID string) string {
	h := uint32(2166136261)
	for i := 0; i < len(runID); i++ {
		h ^= uint32(runID[i])
		h *= 16777619
	}
	return "127.0." + strconv.Itoa(int(2+h%250))
}

// FreePortOn returns a port free on the loopback address ip, and on every
// other address too (ports.Free).
func FreePortOn(ip string) (int, error) { return ports.Free(ip) }

// startAll runs start for every item at once and joins the errors.
func startAll[T any](items []T, start func(T) error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(items))
	for i, it := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = start(it)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// pollUntil calls ok every step until it returns nil or ctx ends; the error
// is ok's last.
func pollUntil(ctx context.Context, step time.Duration, ok func() error) error {
	for {
		err := ok()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(step):
		}
	}
}

// proxySet is the proxies of a cluster, closed together.
type proxySet struct {
	mu sync.Mutex
	ps []*faults.Proxy
}

func (s *proxySet) start(p *faults.Proxy) (*faults.Proxy, error) {
	if err := p.Start(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.ps = append(s.ps, p)
	s.mu.Unlock()
	return p, nil
}

func (s *proxySet) close(p *faults.Proxy) {
	s.mu.Lock()
	for i, x := range s.ps {
		if x == p {
			s.ps = append(s.ps[:i], s.ps[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
	p.Close()
}

// cutTo drops every live connection of the proxies whose upstream is addr
// (and of extra), with the bytes they hold: the host at addr failed.
func (s *proxySet) cutTo(addr string, extra ...*faults.Proxy) {
	s.mu.Lock()
	var ps []*faults.Proxy
	for _, p := range s.ps {
		if p.UpstreamAddr() == addr || slices.Contains(extra, p) {
			ps = append(ps, p)
		}
	}
	s.mu.Unlock()
	for _, p := range ps {
		p.CutAll()
	}
}

func (s *proxySet) closeAll() {
	s.mu.Lock()
	ps := s.ps
	s.ps = nil
	s.mu.Unlock()
	for _, p := range ps {
		p.Close()
	}
}

// sortedKnobs lists the keys of m in order (for messages).
func sortedKnobs(m map[string]bool) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ", ")
}

// gone reports whether a process durachk started (and did not kill itself)
// is no longer there: something else ended it.
func (p *PrivateProcess) gone() bool {
	return p.started && p.cmd != nil && p.cmd.Process != nil && syscall.Kill(p.cmd.Process.Pid, 0) != nil
}
