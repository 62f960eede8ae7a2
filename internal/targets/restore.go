package targets

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/durachk/durachk/adapters/pg/pgdb"
)

// What a run must undo on a broker it did not start. A run that faults an
// existing cluster's node (control.<node>.kill, .partition, .lag) or a
// broker under control commands (control.kill, .pause) records, before each
// fault, the node and the action that undoes it — start, heal, unlag,
// resume — in its registry (the effect store's schema of the run), and
// deletes the record once it undid it. The commands themselves are not
// recorded (they are credentials): a run killed with SIGKILL leaves the
// records, and `durachk cleanup` runs the undoing commands of the target it
// is given (restoreRun) before it removes the run's namespaces and
// registry. The record goes through the connection that holds the run's lock
// (HoldRun), so a run records only where this process holds it: every run
// durachk makes; a test that attaches a cluster without holding a run
// records nothing.

// faultsTable is the table of a run's registry schema that holds what the
// run faulted and has not undone yet: one row per node (""; the broker
// itself) and undoing action.
const faultsTable = "durachk_run_faults"

// heldRun is a run this process holds (HoldRun): exec runs a statement on the
// connection that holds its lock.
type heldRun struct {
	mu     sync.Mutex
	schema string
	exec   func(ctx context.Context, sql string, args ...any) error
	gone   bool
}

var held sync.Map // run id → *heldRun

func (h *heldRun) run(sql string, args ...any) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone {
		return errors.New("the run no longer holds its lock")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return h.exec(ctx, sql, args...)
}

// noteFault records, before the fault, that the run must run undo on node
// ("": the broker) if it dies before it undoes it itself. A fault that cannot
// be recorded is not made.
func noteFault(runID, node, undo string) error {
	v, ok := held.Load(runID)
	if !ok {
		return nil
	}
	h := v.(*heldRun)
	err := h.run(`INSERT INTO `+pgdb.Ident(h.schema, faultsTable)+` (node, undo) VALUES ($1, $2) ON CONFLICT DO NOTHING`, node, undo)
	if err != nil {
		return fmt.Errorf("%w: record in the run's registry what undoes the fault (control.%s), before it: %v", ErrControl, controlKey(node, undo), err)
	}
	return nil
}

// noteUndone removes the record of noteFault once the run undid the fault.
// Best effort: a record left makes cleanup run an undoing command again,
// which must succeed when there is nothing to undo.
func noteUndone(runID, node, undo string) {
	if v, ok := held.Load(runID); ok {
		h := v.(*heldRun)
		_ = h.run(`DELETE FROM `+pgdb.Ident(h.schema, faultsTable)+` WHERE node = $1 AND undo = $2`, node, undo)
	}
}

func controlKey(node, action string) string {
	if node == "" {
		return action
	}
	return node + "." + action
}

// pendingFault is a fault a dead run made and did not undo.
type pendingFault struct{ node, undo string }

// pendingFaults reads what run id left to undo (none for a run registered
// before runs recorded it).
func pendingFaults(ctx context.Context, db *pgdb.DB, id string) ([]pendingFault, error) {
	rows, err := db.Pool.Query(ctx, `SELECT node, undo FROM `+pgdb.Ident("durachk_"+id, faultsTable))
	if err != nil {
		if strings.Contains(err.Error(), "does not exist") {
			return nil, nil
		}
		return nil, err
	}
	defer rows.Close()
	var out []pendingFault
	for rows.Next() {
		var f pendingFault
		if err := rows.Scan(&f.node, &f.undo); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	// Heal, unlag and resume before the starts: a node started while still
	// cut off cannot rejoin.
	rank := map[string]int{ActionHeal: 0, ActionUnlag: 1, ActionResume: 2, ActionStart: 3}
	sort.Slice(out, func(i, j int) bool {
		if rank[out[i].undo] != rank[out[j].undo] {
			return rank[out[i].undo] < rank[out[j].undo]
		}
		return out[i].node < out[j].node
	})
	return out, rows.Err()
}

var undid = map[string]string{ActionStart: "killed", ActionHeal: "cut off", ActionUnlag: "lagged", ActionResume: "paused"}

// restoreRun undoes, with s's control commands, every fault dead run id
// recorded and did not undo, then waits until the broker (or the cluster:
// every node it started serving, a primary that every live node follows)
// answers, and forgets the records. One line per command and one for the
// wait. A fault the target has no command for is an error: the records
// (and the run's registry) stay for a cleanup given the run's commands.
func restoreRun(ctx context.Context, db *pgdb.DB, s Spec, id string) ([]string, error) {
	pending, err := pendingFaults(ctx, db, id)
	if err != nil || len(pending) == 0 {
		return nil, err
	}
	what := func(f pendingFault) string {
		if f.node == "" {
			return fmt.Sprintf("run %s had %s the broker", id, undid[f.undo])
		}
		return fmt.Sprintf("run %s had %s node %s", id, undid[f.undo], f.node)
	}
	for _, f := range pending {
		if s.ControlCommand(f.node, f.undo) == "" {
			return nil, fmt.Errorf("%s and the target has no control.%s to undo it: give the target with the control commands the run had", what(f), controlKey(f.node, f.undo))
		}
	}
	s.RunID = id // as the run's commands had it (DURACHK_RUN_ID)
	var lines []string
	var started []string
	for _, f := range pending {
		if err := RunControl(ctx, s, f.node, f.undo); err != nil {
			return lines, fmt.Errorf("%s: %w", what(f), err)
		}
		lines = append(lines, fmt.Sprintf("ran control.%s (%s)", controlKey(f.node, f.undo), what(f)))
		if f.undo == ActionStart {
			started = append(started, f.node)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 2*s.ControlTimeout())
	defer cancel()
	if HasExternalCluster(s) {
		c := &externalCluster{s: s, nodes: externalNodes(s), down: map[string]bool{}}
		for _, n := range started {
			if n == "" || !slices.Contains(c.nodes, n) {
				continue
			}
			if err := c.awaitServing(wctx, n); err != nil {
				return lines, err
			}
		}
		if err := c.Settle(wctx); err != nil {
			return lines, fmt.Errorf("the cluster the run faulted does not settle after the undoing commands: %v", err)
		}
		lines = append(lines, "the cluster answers again: every node serves, and follows its primary")
	} else {
		err := pollUntil(wctx, 200*time.Millisecond, func() error { return Ready(wctx, s) })
		if err != nil {
			return lines, fmt.Errorf("the broker the run faulted does not answer after the undoing commands: %s", scrubURL(err.Error(), s.URL))
		}
		lines = append(lines, "the broker answers again")
	}
	if _, err := db.Pool.Exec(ctx, `DELETE FROM `+pgdb.Ident("durachk_"+id, faultsTable)); err != nil {
		return lines, err
	}
	return lines, nil
}
