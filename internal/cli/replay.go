package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	given := map[string]*target{}
	for _, spec := range o.Targets {
		t, err := resolve(ctx, spec, "", &logWriter{w: stderr})
		if err != nil {
			return err
		}
		given[t.Name()] = t
	}
	infos := map[string]reports.TargetInfo{}
	for _, ti := range doc.Targets {
		infos[ti.Name] = ti
	}
	want := map[string]bool{}
	for _, id := range o.Contracts {
		want[id] = true
	}
	var differ []string
	replayed := 0
	for _, rec := range doc.Results {
		if len(want) > 0 && !want[rec.Contract] {
			continue
		}
		t := given[rec.Target]
		if t == nil {
			ti := infos[rec.Target]
			if ti.Endpoint != "embedded" && !strings.HasPrefix(ti.URL, "mem") {
				fmt.Fprintf(stdout, "%s/%s: not replayed: give --target with the URL of %q (result.json keeps no credentials)\n", rec.Target, rec.Contract, rec.Target)
				continue
			}
			spec := ti.URL
			if spec == "" {
				spec = "mem"
			}
			if t, err = resolve(ctx, spec, "", nil); err != nil {
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
