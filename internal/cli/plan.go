package cli

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/plans"
)

// PlanOptions are the flags of `durachk plan`.
type PlanOptions struct {
	Contract string
	Scenario string
	Seed     uint64
	Jobs     int
	Output   string // "" or "-": stdout (YAML); a .json path: JSON
}

// Plan carries out `durachk plan`: the scenario a catalogue contract or
// seed scenario builds from the seed, written out as a plan file.
func Plan(o PlanOptions, stdout io.Writer) error {
	if (o.Contract == "") == (o.Scenario == "") {
		return ConfigError(fmt.Errorf("plan: name one --contract or one --scenario"))
	}
	if err := checkJobs("plan", o.Jobs); err != nil {
		return err
	}
	var c *contracts.Contract
	var err error
	if o.Contract != "" {
		c, err = contracts.Lookup(o.Contract)
	} else {
		c, err = contracts.LookupScenario(o.Scenario)
	}
	if err != nil {
		return ConfigError(err)
	}
	p, err := plans.FromContract(c, o.Seed, o.Jobs)
	if err != nil {
		return fmt.Errorf("plan of %s: %w", c.ID, err) // a scenario the format cannot hold: durachk's bug
	}
	if o.Output == "" || o.Output == "-" {
		b, err := p.Marshal(false)
		if err != nil {
			return err
		}
		_, err = stdout.Write(b)
		return err
	}
	if err := p.Write(o.Output); err != nil {
		return ConfigError(err)
	}
	return nil
}

// planInfo is where a plan contract of a run came from.
type planInfo struct {
	path string
	seed uint64
	jobs int                 // the plan's jobs, count expanded
	sab  *contracts.Sabotage // the plan's sabotage, or nil
	plan *plans.Plan         // recorded beside each verdict, for re-judging
}

// loadPlans reads the --plan files as contracts "plan/<file name without
// its extension>", with their seeds.
func loadPlans(paths []string) ([]*contracts.Contract, map[string]planInfo, error) {
	var out []*contracts.Contract
	infos := map[string]planInfo{}
	for _, path := range paths {
		p, err := plans.Read(path)
		if err != nil {
			return nil, nil, ConfigError(err)
		}
		id := "plan/" + planName(path)
		if prev, ok := infos[id]; ok {
			return nil, nil, ConfigError(fmt.Errorf("--plan %s and %s: both would be %s: rename one", prev.path, path, id))
		}
		c, err := p.AsContract(id)
		if err != nil {
			return nil, nil, ConfigError(err)
		}
		pi := planInfo{path: path, seed: p.Seed, plan: p}
		pi.jobs, _ = p.Size()
		if p.Sabotage != "" {
			if pi.sab, err = plans.LookupSabotage(p.Sabotage); err != nil {
				return nil, nil, ConfigError(err)
			}
		}
		infos[id] = pi
		out = append(out, c)
	}
	return out, infos, nil
}

// seedOf is the seed contract c runs with: a plan's own, unless --seed was
// given.
func seedOf(o RunOptions, c *contracts.Contract) uint64 {
	if pi, ok := o.plans[c.ID]; ok && !o.SeedSet {
		return pi.seed
	}
	return o.Seed
}

// planName is a plan file's name without its extension, in the characters a
// contract id allows (others become -).
func planName(path string) string {
	name := []byte(strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)))
	for i, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') || i == 0 && (c == '.' || c == '_' || c == '-') {
			name[i] = 'x'
		}
	}
	if len(name) == 0 {
		return "x"
	}
	return string(name)
}
