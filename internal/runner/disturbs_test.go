package runner

import (
	"testing"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/internal/targets"
)

// A round disturbs the others on its target when a fault of it acts on what
// they share: the target's own broker killed under control commands, the
// nodes of a cluster durachk did not start; never when its faults stay its
// own (links, its processes, a private broker or cluster).
func TestDisturbs(t *testing.T) {
	control := map[string]string{targets.ActionKill: "docker kill x", targets.ActionStart: "docker start x"}
	private := map[string]string{targets.ClusterPrefix + "replicas": "2"}
	sc := func(kinds ...faults.Kind) contracts.Scenario {
		var p faults.Plan
		for _, k := range kinds {
			p.Faults = append(p.Faults, faults.Fault{Kind: k})
		}
		return contracts.Scenario{Plan: p}
	}
	for _, c := range []struct {
		spec    targets.Spec
		sc      contracts.Scenario
		disturb bool
	}{
		{targets.Spec{}, sc(faults.Kill, faults.LinkDown, faults.ReplyLoss), false},
		{targets.Spec{}, sc(faults.BrokerCrash), false}, // a private instance of its own
		{targets.Spec{}, sc(faults.PowerLoss), false},
		{targets.Spec{Control: control}, sc(faults.Kill, faults.Latency), false},
		{targets.Spec{Control: control}, sc(faults.Kill, faults.BrokerCrash), true},
		{targets.Spec{Control: control}, sc(faults.PowerLoss), true},
		{targets.Spec{Options: private}, sc(faults.NodeKill, faults.NodePartition, faults.BrokerCrash), false},
		{targets.Spec{}, sc(faults.NodePartition), true},
		{targets.Spec{}, sc(faults.Failover), true},
	} {
		tg := &Target{Spec: c.spec}
		if got := tg.Disturbs(c.sc); (got != "") != c.disturb {
			t.Errorf("control %v, options %v, faults %v: Disturbs %q, want disturbing %t", c.spec.Control, c.spec.Options, c.sc.Plan.Faults, got, c.disturb)
		}
	}
}
