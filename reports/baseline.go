package reports

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/durachk/durachk/contracts"
)

// Baseline is the verdict expected per target and contract. A user may expect
// a known violation or skip: the gate is about change, not about perfection.
type Baseline map[string]map[string]contracts.Verdict

// ReadBaseline reads a baseline: either a JSON object mapping target →
// contract → verdict, or a previous result.json (its verdicts become the
// expected ones).
func ReadBaseline(path string) (Baseline, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("baseline %s: %w", path, err)
	}
	if _, ok := probe["schema"]; ok {
		d, err := ReadJSON(path)
		if err != nil {
			return nil, fmt.Errorf("baseline: %w", err)
		}
		return BaselineOf(d), nil
	}
	var bl Baseline
	if err := json.Unmarshal(b, &bl); err != nil {
		return nil, fmt.Errorf("baseline %s: want {\"target\": {\"contract\": \"verdict\"}}: %w", path, err)
	}
	for t, cs := range bl {
		for c, v := range cs {
			switch v {
			case contracts.Pass, contracts.Violated, contracts.Unknown, contracts.Skipped:
			default:
				return nil, fmt.Errorf("baseline %s: %s: %s: verdict %q: want pass, violation, unknown or skipped", path, t, c, v)
			}
		}
	}
	return bl, nil
}

// BaselineOf turns a document's verdicts into a baseline.
func BaselineOf(d *Document) Baseline {
	bl := Baseline{}
	for _, r := range d.Results {
		if bl[r.Target] == nil {
			bl[r.Target] = map[string]contracts.Verdict{}
		}
		bl[r.Target][r.Contract] = r.Verdict
	}
	return bl
}

// Difference is one verdict that is not the expected one. Expected is empty
// for a result the baseline does not list.
type Difference struct {
	Target, Contract string
	Expected, Got    contracts.Verdict
}

func (d Difference) String() string {
	exp := string(d.Expected)
	if exp == "" {
		exp = "(not in baseline)"
	}
	return fmt.Sprintf("%s: %s %s → %s", d.Target, d.Contract, exp, d.Got)
}

// Compare checks a document against a baseline. It returns the regressions
// (a listed result whose verdict differs, a skip where a pass was expected
// included; and an unlisted result that is a violation or unknown), and the
// baseline's targets that the run did not measure (not regressions: a run may
// select a subset).
func (bl Baseline) Compare(d *Document) (diffs []Difference, unmeasured []string) {
	ran := map[string]bool{}
	for _, r := range d.Results {
		ran[r.Target] = true
		exp, listed := bl[r.Target][r.Contract]
		switch {
		case listed && exp != r.Verdict:
			diffs = append(diffs, Difference{Target: r.Target, Contract: r.Contract, Expected: exp, Got: r.Verdict})
		case !listed && (r.Verdict == contracts.Violated || r.Verdict == contracts.Unknown):
			diffs = append(diffs, Difference{Target: r.Target, Contract: r.Contract, Got: r.Verdict})
		}
	}
	for t := range bl {
		if !ran[t] {
			unmeasured = append(unmeasured, t)
		}
	}
	sort.Strings(unmeasured)
	return diffs, unmeasured
}
