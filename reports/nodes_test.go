package reports

import (
	"fmt"
	"strings"
	"testing"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/history"
)

func TestNodeLanes(t *testing.T) {
	ops := []history.Op{
		{T: 0, F: history.Node, Value: "primary", Target: "n1"},
		{T: 1e9, F: history.Fault, Value: "node_kill", Target: "n1"},
		{T: 2e9, F: history.Node, Value: "primary", Target: "n3"},
		{T: 3e9, F: history.Fault, Value: "node_partition", Target: "n2"},
		{T: 4e9, F: history.Fault, Value: "node_restart", Target: "n1"},
		{T: 5e9, F: history.Fault, Value: "node_heal", Target: "n2"},
		{T: 6e9, F: history.Enqueue, Type: history.OK, Job: "j"},
	}
	nodes, spans := nodeSpans(ops)
	if strings.Join(nodes, ",") != "n1,n2,n3" {
		t.Fatalf("lanes %v", nodes)
	}
	// n1 stays primary, as the history says, until n3 is seen as primary.
	want := map[string]bool{"n1 primary 0-2": true, "n1 down 1-4": true, "n3 primary 2-6": true, "n2 cut 3-5": true}
	for _, s := range spans {
		k := fmt.Sprintf("%s %s %d-%d", s.node, s.state, s.from/1e9, s.to/1e9)
		if !want[k] {
			t.Errorf("unexpected span %s", k)
		}
		delete(want, k)
	}
	if len(want) > 0 {
		t.Errorf("missing spans %v", want)
	}
	svg := string(NodeLanes(ops))
	for _, s := range []string{">n1<", ">n2<", ">n3<", "#2e7d32", "#c62828", "#ef6c00"} {
		if !strings.Contains(svg, s) {
			t.Errorf("the node lanes lack %q", s)
		}
	}
	if NodeLanes(ops[6:]) != "" {
		t.Error("node lanes for a history without node records")
	}
}

func TestClusterLine(t *testing.T) {
	if ClusterLine(nil) != "" {
		t.Fatal("a line for a target without a cluster")
	}
	got := ClusterLine(&contracts.ClusterFacts{Topology: "started in 1s: redis", Primaries: []string{"n1 at 0s", "n2 at 2s"}, Failovers: 1, Recovered: 1, RecoveredJobs: []string{"job-004"}})
	for _, s := range []string{"n1 at 0s → n2 at 2s", "1 failover", "1 recovered", "job-004"} {
		if !strings.Contains(got, s) {
			t.Errorf("%q lacks %q", got, s)
		}
	}
}
