package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/reports"
)

// ReplayOptions are the flags of `durachk replay`.
type ReplayOptions struct {
	Result    string   // a result.json
	Contracts []string // only these (default: every result)
	Targets   []string // URLs (with credentials) for real targets, matched by name
}

// Replay re-runs every result of a past run with its seed, on the same target,
// and says for each whether it reproduced: the same verdict and, on the
// embedded target (deterministic), the same statistics too. A real target is
// replayed only when --target gives its URL (result.json keeps no credentials);
// otherwise it is listed as not replayed. It fails (exit 1) if any result came
// out differently.
func Replay(ctx context.Context, o ReplayOptions, stdout, stderr io.Writer) error {
	doc, err := reports.ReadJSON(o.Result)
	if err != nil {
		return ConfigError(err)
	}
	if doc.Jobs < 0 || doc.Jobs > maxJobs {
		// No run could have written it: replaying it would allocate without bound.
		return ConfigError(fmt.Errorf("replay: %s: jobs %d: want %s", o.Result, doc.Jobs, jobsBound))
	}
	infos := map[string]reports.TargetInfo{}
	var names []string
	for _, ti := range doc.Targets {
		infos[ti.Name] = ti
		names = append(names, ti.Name)
	}
	given := map[string]*target{}
	for _, spec := range o.Targets {
		t, err := resolve(ctx, spec, "", &logWriter{w: stderr})
		if err != nil {
			return err
		}
		if _, ok := infos[t.Name()]; !ok {
			return ConfigError(fmt.Errorf("replay: --target %s is named %q, which %s does not have (its targets: %s)",
				reports.Clip(reports.RedactURL(spec)), t.Name(), o.Result, strings.Join(names, ", ")))
		}
		given[t.Name()] = t
	}
	want := map[string]bool{}
	for _, id := range o.Contracts {
		if _, err := lookupAny(id); err != nil {
			return ConfigError(fmt.Errorf("replay: %w", err))
		}
		want[id] = true
	}
	// Everything asked for must be replayable before anything runs.
	has := map[string]bool{}
	var todo []contracts.Result
	for _, rec := range doc.Results {
		has[rec.Contract] = true
		if len(want) > 0 && !want[rec.Contract] {
			continue
		}
		todo = append(todo, rec)
	}
	for _, id := range o.Contracts {
		if !has[id] {
			return ConfigError(fmt.Errorf("replay: %s has no result of %s", o.Result, id))
		}
	}
	if len(todo) == 0 {
		return ConfigError(fmt.Errorf("replay: %s has no result to replay", o.Result))
	}
	var missing []string
	for _, rec := range todo {
		if given[rec.Target] == nil && !embedded(infos[rec.Target]) && !slices.Contains(missing, rec.Target) {
			missing = append(missing, rec.Target)
		}
	}
	if len(missing) > 0 {
		return ConfigError(fmt.Errorf("replay: %s measured real target(s) %s: give --target with the URL of each (result.json keeps no credentials)",
			o.Result, strings.Join(missing, ", ")))
	}
	var differ []string
	replayed := 0
	for _, rec := range todo {
		t := given[rec.Target]
		if t == nil {
			if t, err = resolveMem(memSpec(infos[rec.Target])); err != nil {
				return err
			}
		}
		c, err := lookupAny(rec.Contract)
		if err != nil {
			return ConfigError(err)
		}
		var got contracts.Result
		if rec.Sabotage != "" {
			s, ok := sabotageNamed(c, rec.Sabotage)
			if !ok {
				return ConfigError(fmt.Errorf("%s: no sabotage %q", rec.Contract, rec.Sabotage))
			}
			got, err = contracts.EvaluateSabotage(ctx, t.Target, c, s, contracts.Options{Seed: rec.Seed, Jobs: doc.Jobs})
		} else {
			got, err = contracts.Evaluate(ctx, t.Target, c, contracts.Options{Seed: rec.Seed, Jobs: doc.Jobs})
		}
		if err != nil {
			return ConfigError(err)
		}
		replayed++
		same := got.Verdict == rec.Verdict
		if same && t.info.Endpoint == "embedded" {
			a, _ := json.Marshal(got.Stats)
			b, _ := json.Marshal(rec.Stats)
			same = string(a) == string(b)
		}
		if same {
			fmt.Fprintf(stdout, "%s/%s: reproduced: %s\n", rec.Target, rec.Contract, got.Verdict)
			continue
		}
		line := fmt.Sprintf("%s/%s: recorded %s, replayed %s", rec.Target, rec.Contract, rec.Verdict, got.Verdict)
		if got.Verdict == rec.Verdict {
			line += " (statistics differ)"
		}
		fmt.Fprintln(stdout, line)
		differ = append(differ, line)
	}
	fmt.Fprintf(stdout, "\n%d replayed, %d reproduced\n", replayed, replayed-len(differ))
	if len(differ) > 0 {
		return &ExitError{Code: ExitViolation, Err: fmt.Errorf("%d result(s) did not reproduce", len(differ))}
	}
	return nil
}

func lookupAny(id string) (*contracts.Contract, error) {
	if strings.HasPrefix(id, "scenario/") {
		return contracts.LookupScenario(id)
	}
	return contracts.Lookup(id)
}

func sabotageNamed(c *contracts.Contract, name string) (contracts.Sabotage, bool) {
	for _, s := range c.Sabotages {
		if s.Name == name {
			return s, true
		}
	}
	return contracts.Sabotage{}, false
}

// embedded reports whether a recorded target is the embedded one, which
// replay rebuilds from the record itself.
func embedded(ti reports.TargetInfo) bool {
	return ti.Endpoint == "embedded" || ti.Kind == "mem"
}

// memSpec rebuilds the --target of a recorded embedded target: its name and
// its knobs (delivery_limit, ...), so that a replay runs what was measured.
func memSpec(ti reports.TargetInfo) string {
	q := url.Values{}
	if ti.Name != "" && ti.Name != "mem" {
		q.Set("name", ti.Name)
	}
	for k, v := range ti.Settings {
		q.Set(k, v)
	}
	if len(q) == 0 {
		return "mem"
	}
	return "mem?" + q.Encode()
}
