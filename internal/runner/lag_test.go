package runner

import (
	"context"
	"testing"
	"time"

	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/internal/targets"
)

// lagging is a cluster that lags its replication by commands.
type lagging struct{ targets.Cluster }

func (lagging) Lag(context.Context, time.Duration, time.Duration) ([]string, error) { return nil, nil }
func (lagging) Unlag(context.Context) error                                         { return nil }

// A latency on the replication link becomes a lag and its end for a cluster
// that lags by commands (an existing cluster's control.<node>.lag), and
// nothing for one whose proxies follow the link's windows (a private one).
func TestLagEvents(t *testing.T) {
	plan := faults.Plan{Faults: []faults.Fault{
		{Kind: faults.Latency, Link: faults.LinkReplication, At: time.Second, For: 5 * time.Second, Delay: 200 * time.Millisecond},
		{Kind: faults.Latency, Link: faults.LinkBroker, At: time.Second, For: 5 * time.Second, Delay: 200 * time.Millisecond},
		{Kind: faults.Blackhole, Link: faults.LinkReplication, At: time.Second, For: 5 * time.Second},
		{Kind: faults.NodeKill, Node: faults.SelPrimary, At: 2 * time.Second},
	}}
	evs := lagEvents(lagging{}, plan)
	if len(evs) != 2 || evs[0].kind != "lag" || evs[0].at != time.Second || evs[0].f.Delay != 200*time.Millisecond ||
		evs[1].kind != "unlag" || evs[1].at != 6*time.Second {
		t.Errorf("lagEvents = %+v; want a lag at 1s and its end at 6s", evs)
	}
	var private targets.Cluster
	if evs := lagEvents(private, plan); len(evs) != 0 {
		t.Errorf("lagEvents of a cluster that is no Lagger = %+v, want none", evs)
	}
}
