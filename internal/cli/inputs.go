package cli

import (
	"fmt"
	"strings"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/targets"
	"github.com/durachk/durachk/reports"
)

// maxJobs bounds --jobs: far above any scenario's default (24), low enough
// that a typo cannot make a run allocate for hours.
const maxJobs = 10000

// checkRun validates what a run was asked before it connects to any broker:
// --out, --jobs, the selection and the baseline, which must name only targets
// and contracts the run measures (a strict baseline: anything else is a
// configuration error, exit 3, not a regression). It returns the selection
// and the baseline (nil without --baseline).
func checkRun(o *RunOptions) ([]*contracts.Contract, reports.Baseline, error) {
	if o.Out == "" {
		return nil, nil, ConfigError(fmt.Errorf("--out: empty: name the directory for result.json and the reports"))
	}
	if err := checkJobs(o.Jobs); err != nil {
		return nil, nil, err
	}
	cs, err := selection(*o)
	if err != nil {
		return nil, nil, err
	}
	pcs, infos, err := loadPlans(o.Plans)
	if err != nil {
		return nil, nil, err
	}
	cs, o.plans = append(cs, pcs...), infos
	if len(pcs) == len(cs) && len(pcs) > 0 && !o.SeedSet {
		o.Seed = infos[pcs[0].ID].seed // the document's seed: the plan's
	}
	if o.Baseline == "" {
		return cs, nil, nil
	}
	bl, err := reports.ReadBaseline(o.Baseline)
	if err != nil {
		return nil, nil, ConfigError(err)
	}
	names, err := targetNames(o)
	if err != nil {
		return nil, nil, err
	}
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	if err := bl.Check(names, ids); err != nil {
		return nil, nil, ConfigError(fmt.Errorf("%s: %w", o.Baseline, err))
	}
	return cs, bl, nil
}

func checkJobs(n int) error {
	if n < 0 || n > maxJobs {
		return ConfigError(fmt.Errorf("--jobs %d: want 1 to %d (0: each contract's default)", n, maxJobs))
	}
	return nil
}

// targetNames returns the names the run's targets will have, from their specs
// alone (no broker is reached).
func targetNames(o *RunOptions) ([]string, error) {
	ss, _, err := specs(o)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, spec := range ss {
		if isMem(spec) {
			t, err := resolveMem(spec)
			if err != nil {
				return nil, err
			}
			names = append(names, t.Name())
			continue
		}
		s, err := targets.Parse(spec)
		if err != nil {
			return nil, ConfigError(err)
		}
		names = append(names, s.Name)
	}
	return names, nil
}

func isMem(spec string) bool { return spec == "mem" || strings.HasPrefix(spec, "mem?") }

// checkSpecs refuses an empty target (`--target ”`, `url: ${UNSET}` expanded
// to nothing): it would silently mean the embedded target.
func checkSpecs(ss []string) error {
	for i, s := range ss {
		if strings.TrimSpace(s) == "" {
			return ConfigError(fmt.Errorf("target %d is empty: want mem or a broker URL", i+1))
		}
	}
	return nil
}
