package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/internal/redact"
	"github.com/durachk/durachk/internal/targets"
)

// The wall-time budget of one run (one seed of one contract on a real
// target). Every wait of a run has a bound of its own, but a run strings many
// together — a cluster's start and its retry, the plan, a settle, the final
// reads — and a broker that answers slowly at each can stretch a 50 s
// history over minutes. The budget bounds the whole: past it the run is
// stopped, its verdict is unknown with the reason, and it is torn down as on
// any other path (the teardown has its own bound, teardownLimit).
//
// It is the scenario's time limit, scaled as the run scales it, plus an
// allowance for each thing the run does outside that limit:
const (
	// setupAllowance: registering the run in the store and opening the queue
	// and the store (each bounded by setupLimit).
	setupAllowance = setupLimit
	// clusterAllowance: starting a private cluster (3 RabbitMQ nodes: 8-10 s
	// idle, up to 41 s loaded), once more on fresh ports if it failed.
	clusterAllowance = 90 * time.Second
	// brokerAllowance: starting a private broker for a broker kill or power
	// loss (a RabbitMQ node: 2.4-5 s), and again its restart, whose time
	// supervise adds to the run's deadline.
	brokerAllowance = 45 * time.Second
	// finishAllowance: stopping the children (3 s at most) and reading the
	// final state of store and broker.
	finishAllowance = 20 * time.Second
	// teardownLimit bounds the teardown after the run, budget or not.
	teardownLimit = 30 * time.Second
)

// errOverBudget is the cause of a run's context when its budget ran out.
var errOverBudget = errors.New("wall-time budget passed")

// Budget is the wall time one run of sc may take on t (see the allowances
// above), and what it is made of.
func (t *Target) Budget(sc contracts.Scenario) (time.Duration, string) {
	if t.budget > 0 {
		return t.budget, "set by the caller"
	}
	limit := scale(sc, t.Scale).Limit
	total := setupAllowance + limit + finishAllowance
	parts := []string{fmt.Sprintf("limit %s", limit)}
	switch {
	case targets.HasPrivateCluster(t.Spec) || (sc.Plan.NeedsNodes() && targets.HasExternalCluster(t.Spec)):
		// The controller's faults may wait for what they put at risk
		// (riskWait), and the settle after the heal may outlast the limit.
		total += clusterAllowance + riskWait + settleTimeout
		parts = append(parts, fmt.Sprintf("cluster start %s", clusterAllowance), fmt.Sprintf("fault trigger %s", riskWait), fmt.Sprintf("settle %s", settleTimeout))
	case needsBrokerKill(sc.Plan):
		total += 2 * brokerAllowance
		parts = append(parts, fmt.Sprintf("broker start and restart %s", 2*brokerAllowance))
		if slices.ContainsFunc(sc.Plan.Faults, sc.Plan.AnchoredToAck) {
			// The kill waits for an acknowledgement to anchor to (riskWait).
			total += riskWait
			parts = append(parts, fmt.Sprintf("fault trigger %s", riskWait))
		}
	}
	parts = append(parts, fmt.Sprintf("setup %s", setupAllowance), fmt.Sprintf("final reads %s", finishAllowance))
	return total, strings.Join(parts, " + ")
}

// Disturbs says why a run of sc disturbs the other runs on the target at the
// same time (contracts.Disturber): it kills or cuts the power of the target's
// own broker (control commands), or faults the nodes of a cluster durachk did
// not start. "" when its faults stay its own: its processes, its proxies, a
// private broker or cluster of its own.
func (t *Target) Disturbs(sc contracts.Scenario) string {
	if targets.HasPrivateCluster(t.Spec) {
		return ""
	}
	if needsBrokerKill(sc.Plan) && t.Spec.ControlKills() {
		return "it kills the target's own broker (control commands)"
	}
	for _, f := range sc.Plan.Faults {
		switch f.Kind {
		case faults.NodeKill, faults.NodePartition, faults.Failover:
			return "it faults the nodes of a cluster durachk did not start (" + string(f.Kind) + ")"
		}
	}
	return ""
}

// Execute runs one scenario and returns the merged history and the final
// state, within its budget (Budget): a run still going when the budget runs
// out is stopped and torn down, and its execution says why (OverBudget).
func (t *Target) Execute(ctx context.Context, rc contracts.Run) (contracts.Execution, error) {
	budget, parts := t.Budget(rc.Scenario)
	bctx, cancel := context.WithTimeoutCause(ctx, budget, errOverBudget)
	defer cancel()
	if t.budgetAt != nil {
		// A test's own moment: the budget runs out when it says.
		var end context.CancelCauseFunc
		bctx, end = context.WithCancelCause(ctx)
		defer end(nil)
		t.budgetAt(func() { end(errOverBudget) })
	}
	ex, err := t.execute(bctx, rc)
	if ctx.Err() == nil && errors.Is(context.Cause(bctx), errOverBudget) && (err != nil || ex.OverBudget != "") {
		// Stopped wherever it was (starting, running, reading the final
		// state): unknown, whatever it had found so far.
		ex.OverBudget = fmt.Sprintf("the run was stopped at its wall-time budget of %s (%s) and torn down", budget, parts)
		ex.Unsettled, ex.Unavailable = "", ""
		if err != nil {
			// Where it was: an error of a step the budget ended, its URLs
			// without credentials.
			ex.OverBudget += " (it was at: " + redact.Line(redact.Command(err.Error())) + ")"
		}
		return ex, nil
	}
	return ex, err
}

// overBudget reports whether the run's budget has run out.
func (r *run) overBudget() bool {
	return errors.Is(context.Cause(r.ctx), errOverBudget)
}
