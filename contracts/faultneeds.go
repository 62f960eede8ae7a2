package contracts

import (
	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/faults"
)

// FaultKinds are every fault kind durachk can apply, in a stable order.
var FaultKinds = []faults.Kind{
	faults.CrashAt, faults.PauseAt, faults.Kill, faults.BrokerCrash, faults.PowerLoss,
	faults.LinkDown, faults.ReplyLoss, faults.Flap, faults.Blackhole, faults.Latency, faults.Reset,
	faults.NodeKill, faults.NodePartition, faults.Failover,
}

// FaultNeeds says why a target with capabilities c cannot apply a fault of
// kind k, or "" if it can: a broker kill needs a broker the harness can kill
// and restart, a power loss a private instance on a lazy file system, node
// faults a replicated topology. Process faults and link faults need nothing:
// every target runs its processes and links through durachk.
func FaultNeeds(k faults.Kind, c adapters.Capabilities) string {
	switch k {
	case faults.BrokerCrash:
		return brokerKill(c)
	case faults.PowerLoss:
		return needsPowerLoss(c)
	case faults.NodeKill, faults.Failover:
		return needsNodes(c)
	case faults.NodePartition:
		return needsPartitions(c)
	}
	return ""
}

// PlanNeeds says why a target with capabilities c cannot apply every fault of
// plan p, or "" if it can.
func PlanNeeds(p faults.Plan, c adapters.Capabilities) string {
	for _, f := range p.Faults {
		if why := FaultNeeds(f.Kind, c); why != "" {
			return why
		}
		if f.Link == faults.LinkReplication {
			if why := needsNodes(c); why != "" {
				return why
			}
		}
	}
	if p.PinProducer != "" {
		return needsNodes(c)
	}
	return ""
}
