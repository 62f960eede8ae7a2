package targets

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"sort"
	"strings"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/internal/driver"
)

// A target with worker.command runs a worker of a team's own through the
// worker protocol (docs/worker-protocol.md) instead of the reference
// pipeline's: the URL is the broker its library runs on, worker.command the
// program, worker.sabotage a sabotage the worker declares (negative controls),
// and every other worker.<name> knob goes to the worker as <name>.
const (
	WorkerCommand  = "worker.command"
	WorkerSabotage = "worker.sabotage"
	workerPrefix   = "worker."
)

// workerKnobs takes the worker.* knobs off u. A relative command path is made
// absolute: workers run in the run's directory.
func workerKnobs(u *url.URL) (map[string]string, error) {
	q := u.Query()
	out := map[string]string{}
	for k := range q {
		if strings.HasPrefix(k, workerPrefix) {
			out[k] = q.Get(k)
			q.Del(k)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	cmd := strings.Fields(out[WorkerCommand])
	if len(cmd) == 0 {
		return nil, fmt.Errorf("%w: worker knobs without %s", ErrBadTarget, WorkerCommand)
	}
	if strings.Contains(cmd[0], "/") && !filepath.IsAbs(cmd[0]) {
		abs, err := filepath.Abs(cmd[0])
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrBadTarget, WorkerCommand, err)
		}
		cmd[0] = abs
	}
	out[WorkerCommand] = strings.Join(cmd, " ")
	u.RawQuery = q.Encode()
	return out, nil
}

// HasWorker reports whether s runs a worker of its own through the protocol.
func HasWorker(s Spec) bool { return s.Options[WorkerCommand] != "" }

// WorkerNamespace is the name everything a worker creates for the run lives
// under: the queue namespace the target kind's cleanup removes (on Postgres a
// schema of that name).
func WorkerNamespace(s Spec) string { return "durachk_" + s.RunID + "_q" }

// WorkerConfig is the configuration a worker of s is started with, and its
// command.
func WorkerConfig(s Spec, role, process string) (string, driver.Config) {
	knobs := map[string]string{}
	var keys []string
	for k, v := range s.Options {
		if strings.HasPrefix(k, workerPrefix) && k != WorkerCommand && k != WorkerSabotage {
			knobs[strings.TrimPrefix(k, workerPrefix)] = v
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return s.Options[WorkerCommand], driver.Config{Role: role, Process: process, RunID: s.RunID, Namespace: WorkerNamespace(s),
		BrokerURL: s.URL, Knobs: knobs, Sabotage: s.Options[WorkerSabotage]}
}

// openWorkerQueue starts the worker of s in the admin role.
func openWorkerQueue(ctx context.Context, s Spec) (adapters.Queue, error) {
	command, cfg := WorkerConfig(s, driver.RoleAdmin, "admin")
	return driver.OpenAdmin(ctx, command, "", cfg)
}
