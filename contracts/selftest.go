package contracts

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// SabotageResult is one sabotage of a self-test: caught when the checker
// reported every property the sabotage declares, each with a witness.
type SabotageResult struct {
	Contract string
	Sabotage Sabotage
	Result   Result
	Caught   bool
	// Why it was not caught: the properties that did not fire.
	Why string
}

// Skipped reports whether the target could not run the sabotage.
func (r SabotageResult) Skipped() bool { return r.Result.Verdict == Skipped }

// selfTestTries bounds the seeds a sabotaged run is tried with while it does
// not exercise its claim (a real target's timing did not bring the fault to
// bear): such a run says nothing about the checker.
const selfTestTries = 3

// SelfTest runs every sabotage of cs against t and says of each whether it
// was caught by its own properties. A run that did not exercise its claim is
// tried again with the next seed, up to three seeds. An error means a run
// could not be carried out (infrastructure), not a verdict.
func SelfTest(ctx context.Context, t Target, cs []*Contract, opts Options) ([]SabotageResult, error) {
	var out []SabotageResult
	for _, c := range cs {
		for _, s := range c.Sabotages {
			o := opts
			var sr SabotageResult
			for try := 0; try < selfTestTries; try++ {
				r, err := EvaluateSabotage(ctx, t, c, s, o)
				if err != nil {
					return out, err
				}
				sr = SabotageResult{Contract: c.ID, Sabotage: s, Result: r}
				if r.Verdict != Skipped {
					sr.Caught, sr.Why = Caught(r, s)
				}
				if sr.Caught || r.Verdict != Unknown {
					break
				}
				o.Seed++
			}
			out = append(out, sr)
		}
	}
	return out, nil
}

// MissedError names every sabotage a self-test did not catch and the
// properties that should have caught it.
type MissedError struct {
	Missed []SabotageResult
}

func (e *MissedError) Error() string {
	parts := make([]string, len(e.Missed))
	for i, m := range e.Missed {
		parts[i] = fmt.Sprintf("%s/%s on %s (%s)", m.Contract, m.Sabotage.Name, m.Result.Target, m.Why)
	}
	return "sabotages not caught: " + strings.Join(parts, "; ")
}

// Missed returns a *MissedError for the sabotages not caught, or nil.
func Missed(rs []SabotageResult) error {
	var m []SabotageResult
	for _, r := range rs {
		if !r.Caught && !r.Skipped() {
			m = append(m, r)
		}
	}
	if len(m) == 0 {
		return nil
	}
	return &MissedError{Missed: m}
}

// SelfTestContracts are the catalogue and the seed scenarios that carry a
// negative control, or those named (contract ids, scenario names).
func SelfTestContracts(ids []string) ([]*Contract, error) {
	if len(ids) == 0 {
		out := append([]*Contract(nil), Catalogue...)
		for _, s := range SeedScenarios {
			if len(s.Sabotages) > 0 {
				out = append(out, s)
			}
		}
		return out, nil
	}
	var out []*Contract
	for _, id := range ids {
		c, err := Lookup(id)
		if errors.Is(err, ErrUnknownContract) {
			if sc, serr := LookupScenario(id); serr == nil {
				c, err = sc, nil
			}
		}
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}
