package contracts

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/checker"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/pipeline"
)

// PropTokenReissued: after a failover the broker handed a job to a new holder
// with a fencing token no greater than one the store had already accepted
// from another holder, so the store cannot fence the old one out. Checked by
// fencing.failover only (Contract.Properties), on targets whose tokens are
// exact.
const PropTokenReissued Property = "token_reissued"

// ClusterFacts are what a run on a replicated target adds to its result: the
// topology, who was primary when, and what the failovers did.
type ClusterFacts struct {
	Topology string `json:"topology"`
	// Primaries lists who was primary, in order: "n1 at 0s", "n3 at 1.83s".
	Primaries []string `json:"primaries"`
	Failovers int      `json:"failovers"`
	// Recovered counts jobs whose every enqueue was ambiguous (no
	// acknowledgement) and that were delivered anyway: neither lost (never
	// acknowledged) nor a duplicate.
	Recovered     int      `json:"recovered"`
	RecoveredJobs []string `json:"recovered_jobs,omitempty"`
	// Regressions says, per job, where the broker's delivery count went down
	// (a failover to a replica that had not seen the last deliveries) and what
	// that did to the token and the attempt budget.
	Regressions []string `json:"delivery_count_regressions,omitempty"`
	// Settled is the controller's last word: "settled in 1.2s".
	Settled string `json:"settled,omitempty"`
}

// clusterFacts reads the controller's node records of a run; nil if the run
// was not on a replicated target.
func clusterFacts(ops []history.Op) *ClusterFacts {
	var f *ClusterFacts
	var t0 int64
	for _, op := range ops {
		if t0 == 0 || op.T < t0 {
			t0 = op.T
		}
	}
	for _, op := range ops {
		switch {
		case op.F == history.Node && (strings.HasPrefix(op.Value, "started in ") || strings.HasPrefix(op.Value, "attached: ")):
			if f == nil {
				f = &ClusterFacts{}
			}
			f.Topology = op.Value
		case op.F == history.Node && op.Value == "primary" && f != nil:
			f.Primaries = append(f.Primaries, fmt.Sprintf("%s at %.2fs", op.Target, float64(op.T-t0)/1e9))
		case op.F == history.Node && strings.HasPrefix(op.Value, "settled in ") && f != nil:
			f.Settled = op.Value
		case op.F == history.Fault && op.Value == "failover" && f != nil:
			f.Failovers++
		}
	}
	if f == nil {
		return nil
	}
	recovered(ops, f)
	f.Regressions = regressions(ops)
	return f
}

// recovered counts the jobs delivered although none of their enqueues was
// acknowledged.
func recovered(ops []history.Op, f *ClusterFacts) {
	acked := map[string]bool{}
	tried := map[string]bool{}
	seen := map[string]bool{}
	for _, op := range ops {
		switch {
		case op.F == history.Enqueue && op.Type == history.OK:
			acked[op.Job] = true
		case op.F == history.Enqueue && op.Type == history.Info:
			tried[op.Job] = true
		case op.F == history.Lease && op.Type == history.OK && tried[op.Job] && !acked[op.Job] && !seen[op.Job]:
			seen[op.Job] = true
			f.Recovered++
			f.RecoveredJobs = append(f.RecoveredJobs, op.Job)
		}
	}
}

type leaseRec struct {
	idx     int
	proc    string
	token   uint64
	attempt int
	fenced  bool // the store accepted this delivery's token
	fence   int  // the fence record that says so
}

// leasesByJob groups the deliveries of jobs enqueued once (the tokens of two
// messages of one job are not comparable), with whether the store accepted
// each one's token.
func leasesByJob(ops []history.Op) (map[string][]*leaseRec, []string) {
	enqueues := map[string]int{}
	for _, op := range ops {
		if op.F == history.Enqueue && op.Type == history.Invoke {
			enqueues[op.Job]++
		}
	}
	byJob := map[string][]*leaseRec{}
	var order []string
	open := map[string]*leaseRec{} // process → its latest delivery
	for i, op := range ops {
		if op.Job == "" || enqueues[op.Job] != 1 {
			continue
		}
		switch {
		case op.F == history.Lease && op.Type == history.OK:
			l := &leaseRec{idx: i, proc: op.Process, token: op.Token, attempt: op.Attempt}
			if len(byJob[op.Job]) == 0 {
				order = append(order, op.Job)
			}
			byJob[op.Job] = append(byJob[op.Job], l)
			open[op.Process] = l
		case op.F == history.Fence && op.Type == history.OK:
			if l := open[op.Process]; l != nil && l.token == op.Token && op.Job == ops[l.idx].Job {
				l.fenced, l.fence = true, i
			}
		}
	}
	return byJob, order
}

// checkTokenReissue is PropTokenReissued: a delivery whose token is no greater
// than a token the store accepted from an earlier delivery to another holder.
func checkTokenReissue(ops []history.Op, _ Final) []Violation {
	byJob, order := leasesByJob(ops)
	var vs []Violation
	for _, job := range order {
		ls := byJob[job]
		for i, l := range ls {
			for _, prev := range ls[:i] {
				if prev.fenced && prev.proc != l.proc && l.token <= prev.token {
					vs = append(vs, Violation{Property: PropTokenReissued, Job: job,
						Message: fmt.Sprintf("%s was handed token %d after the store had accepted token %d from %s: the store cannot fence the old holder out", l.proc, l.token, prev.token, prev.proc),
						Witness: []history.Op{ops[prev.idx], ops[prev.fence], ops[l.idx]}})
					break
				}
			}
		}
	}
	return vs
}

// regressions describes every job whose delivery count went down, and what
// followed: whether the new holder's token was accepted, and how often the
// job was executed against its budget.
func regressions(ops []history.Op) []string {
	byJob, order := leasesByJob(ops)
	executions := map[string]int{}
	budget := map[string]int{}
	for _, op := range ops {
		if op.F == history.Extract && op.Type == history.Invoke {
			executions[op.Job]++
		}
		if op.F == history.Enqueue && op.Type == history.Invoke {
			var m pipeline.JobMeta
			if err := json.Unmarshal([]byte(op.Value), &m); err == nil {
				budget[op.Job] = m.MaxAttempts
			}
		}
	}
	var out []string
	for _, job := range order {
		ls := byJob[job]
		for i := 1; i < len(ls); i++ {
			hi := slices.MaxFunc(ls[:i], func(a, b *leaseRec) int { return a.attempt - b.attempt })
			if ls[i].attempt >= hi.attempt || ls[i].attempt == 0 {
				continue
			}
			what := "the store refused its token as stale"
			if ls[i].fenced {
				what = "the store accepted its token"
			}
			out = append(out, fmt.Sprintf("%s: delivery count %d → %d (%s after %s); %s; executed %d times, budget %d",
				job, hi.attempt, ls[i].attempt, ls[i].proc, hi.proc, what, executions[job], budget[job]))
			break
		}
	}
	sort.Strings(out)
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("… %d more", len(out)-10))
	}
	return out
}

// maxPerProperty bounds the violations a contract's own property keeps
// (the checker keeps as many of each of its own).
const maxPerProperty = 5

// clusterLimit bounds a cluster contract's run (60 s on real targets): its
// last fault ends by 13 s, and a cluster may take 40 s more to settle (a
// RabbitMQ autoheal under load).
const clusterLimit = 10 * time.Minute

// needsNodes is the Needs of the cluster contracts.
var needsNodes = needs("the target is not a replicated topology durachk can fault node by node (private-cluster.* knobs)",
	func(c adapters.Capabilities) bool { return c.NodeFaults })

// needsPartitions is the Needs of partition.minority.
func needsPartitions(c adapters.Capabilities) string {
	if why := needsNodes(c); why != "" {
		return why
	}
	if !c.NodePartitions {
		return "durachk cannot cut this topology's nodes apart (an existing cluster without control.<node>.partition and .heal on every node)"
	}
	return ""
}

// needsExactTokens is the Needs of fencing.failover.
func needsExactTokens(c adapters.Capabilities) string {
	if why := needsNodes(c); why != "" {
		return why
	}
	if c.Token != adapters.Native && c.Token != adapters.Emulated {
		return "the broker's fencing token is not exact (" + string(c.Token) + "): a reissue cannot be told from its approximation"
	}
	return ""
}

// failedOver is the Exercised of the cluster contracts: the plan's node fault
// happened and a new primary took over.
func failedOver(fault string) func(Stats) string {
	return func(s Stats) string {
		return firstOf(atLeast(strings.ReplaceAll(fault, "_", " ")+"s", s.Faults[fault], 1), atLeast("failovers to a new primary", s.Faults["failover"], 1))
	}
}

// partitioned is the Exercised of the partition contracts: a node was cut
// away and the producer pinned to it tried to enqueue while it was.
// Where the history says a partition must outlast a timeout of the
// topology (checker.OutlastNote: a semi-synchronous primary's fallback, a
// node noticing its peers gone), a node must have been cut off that long.
func partitioned(s Stats) string {
	why := firstOf(atLeast("partitions", s.Faults["node_partition"], 1),
		atLeast("enqueues attempted during the partition", s.EnqueuesInPartition, 1))
	if why == "" && s.PartitionMustOutlastMs > 0 {
		timeout := time.Duration(s.PartitionMustOutlastMs) * time.Millisecond
		why = atLeast(fmt.Sprintf("partitions that outlasted the topology's timeout (%s)", timeout), s.PartitionsOutlasting, 1)
	}
	return why
}

// withClusterContext adds to each witness of a lost job on a replicated target
// what proves and explains it: the broker's acknowledgement of the enqueue,
// who was primary then, and the node faults and failovers that followed. Each
// operation appears once. The checker's "because" line for a broker that
// went down names the latest node event before the end (often the rejoin);
// on a cluster it is replaced by the fault that explains the loss: a
// partition in force when the enqueue was acknowledged, else the first node
// kill (or partition, or broker crash) after it, then the failover that
// followed.
func withClusterContext(ops []history.Op, vs []Violation) {
	acked := map[string]int{}
	for i, op := range ops {
		if op.F == history.Enqueue && op.Type == history.OK {
			if _, ok := acked[op.Job]; !ok {
				acked[op.Job] = i
			}
		}
	}
	for k := range vs {
		v := &vs[k]
		at, ok := acked[v.Job]
		if v.Property != PropLost || !ok {
			continue
		}
		extra := []history.Op{ops[at]}
		primary := -1
		for i := at - 1; i >= 0; i-- {
			if ops[i].F == history.Node && ops[i].Value == "primary" {
				primary = i
				extra = append(extra, ops[i])
				break
			}
		}
		// A partition in force when the enqueue was acknowledged.
		cut := -1
		for i := at - 1; i >= 0; i-- {
			if ops[i].F == history.Fault && ops[i].Value == "node_heal" {
				break
			}
			if ops[i].F == history.Fault && ops[i].Value == "node_partition" {
				cut = i
				extra = append(extra, ops[i])
				break
			}
		}
		lost, failover := -1, -1
		for i := at + 1; i < len(ops) && len(extra) < 6; i++ {
			op := ops[i]
			if op.F != history.Fault {
				continue
			}
			switch op.Value {
			case "node_kill", "node_partition", "broker_crash", "power_loss":
				if lost < 0 {
					lost = i
				}
			case "failover":
				if failover < 0 && (lost >= 0 || cut >= 0) {
					failover = i
				}
			default:
				continue
			}
			extra = append(extra, op)
		}
		v.Witness = onceEach(append(v.Witness, extra...))
		sort.SliceStable(v.Witness, func(i, j int) bool { return v.Witness[i].T < v.Witness[j].T })
		v.Because = clusterBecause(v, ops, at, primary, cut, lost, failover)
	}
}

// onceEach keeps the first of each operation the witness holds twice (the
// checker's witness already has the acknowledged enqueue, and its crash may
// be the failover added here).
func onceEach(ops []history.Op) []history.Op {
	seen := make(map[history.Op]bool, len(ops))
	out := ops[:0]
	for _, op := range ops {
		if !seen[op] {
			seen[op] = true
			out = append(out, op)
		}
	}
	return out
}

// brokerWentDown is how the checker's because line about a crash after the
// enqueue ends.
const brokerWentDown = ": the broker went down after it accepted the job"

// clusterBecause rewrites v's because lines on a cluster: the checker's line
// about the broker going down gives way to the node faults that explain the
// loss (indices into ops; -1 when there is none). Without any, the checker's
// lines stay as they are.
func clusterBecause(v *Violation, ops []history.Op, at, primary, cut, lost, failover int) []string {
	if cut < 0 && lost < 0 {
		return v.Because
	}
	desc := func(i int) string { return checker.Describe(ops[i], v.T0) }
	acker := ""
	if primary >= 0 {
		acker = ops[primary].Target
	}
	var why []string
	if cut >= 0 {
		node := ops[cut].Target
		switch {
		case node != "" && node == acker:
			why = append(why, fmt.Sprintf("%s: the primary, %s, was cut off from the other nodes when it acknowledged %s at %s",
				desc(cut), node, v.Job, checker.Since(ops[at].T, v.T0)))
		default:
			why = append(why, fmt.Sprintf("%s: %s was cut off from the other nodes when the primary%s acknowledged %s at %s",
				desc(cut), nodeOr(node, "a node"), apposition(acker), v.Job, checker.Since(ops[at].T, v.T0)))
		}
	}
	if lost >= 0 && (cut < 0 || ops[lost].Value != "node_partition") {
		what := map[string]string{"node_kill": "was killed", "node_partition": "was cut off from the other nodes",
			"broker_crash": "went down", "power_loss": "lost power"}[ops[lost].Value]
		node := ops[lost].Target
		switch {
		case node != "" && node == acker:
			why = append(why, fmt.Sprintf("%s: the primary that acknowledged %s, %s, %s after it did", desc(lost), v.Job, node, what))
		default:
			why = append(why, fmt.Sprintf("%s: %s %s after the primary%s acknowledged %s", desc(lost), nodeOr(node, "the broker"), what,
				apposition(acker), v.Job))
		}
	}
	if failover >= 0 {
		why = append(why, fmt.Sprintf("%s: %s took over as primary", desc(failover), nodeOr(ops[failover].Target, "another node")))
	}
	var out []string
	replaced := false
	for _, l := range v.Because {
		if strings.HasSuffix(l, brokerWentDown) {
			if !replaced {
				out = append(out, why...)
				replaced = true
			}
			continue
		}
		out = append(out, l)
	}
	if !replaced {
		// After the line that says the broker accepted the job.
		out = slices.Insert(out, min(1, len(out)), why...)
	}
	return out
}

// apposition is ", s,", or "" for an empty s.
func apposition(s string) string {
	if s == "" {
		return ""
	}
	return ", " + s + ","
}

func nodeOr(node, otherwise string) string {
	if node == "" {
		return otherwise
	}
	return node
}
