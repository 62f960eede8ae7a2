package contracts

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// SabotageResult is one sabotage of a self-test, on every seed it ran: caught
// when each seed's run was (see Caught: a violation verdict, raised by every
// property the sabotage declares, each with a witness).
type SabotageResult struct {
	Contract string
	Sabotage Sabotage
	// Result is the run of the first seed not caught, else of the last seed.
	Result Result
	// Caught: every seed's run was caught.
	Caught bool
	// Why the first seed not caught was not: the properties that did not
	// fire, or the verdict that was not a violation.
	Why string
	// Seeds holds one entry per seed asked for (none when skipped).
	Seeds []SeedResult
}

// SeedResult is one seed of a sabotage's self-test.
type SeedResult struct {
	Seed uint64 // the seed asked for
	// Ran are the seeds run for it, in order, when a run did not decide and
	// another seed was tried; the last is the one counted.
	Ran     []uint64
	Verdict Verdict
	Caught  bool
	Why     string
}

// Skipped reports whether the target could not run the sabotage.
func (r SabotageResult) Skipped() bool { return r.Result.Verdict == Skipped }

// CaughtOn counts the seeds whose run was caught.
func (r SabotageResult) CaughtOn() int {
	n := 0
	for _, s := range r.Seeds {
		if s.Caught {
			n++
		}
	}
	return n
}

// selfTestTries bounds the runs for one seed of a sabotage while they end
// unknown (a real target's timing did not bring the fault to bear, a cluster
// did not settle): such a run says nothing about the checker.
const selfTestTries = 3

// SelfTest runs every sabotage of cs against t on max(opts.Trials, 1) seeds,
// successive from opts.Seed, and says of each whether every seed's run was
// caught by the sabotage's own properties. A run that ends unknown is tried
// again with another seed, up to three times; the seeds tried for one seed
// never meet those of another (they step by the number of seeds). An error
// means a run could not be carried out (infrastructure), not a verdict.
func SelfTest(ctx context.Context, t Target, cs []*Contract, opts Options) ([]SabotageResult, error) {
	n := max(opts.Trials, 1)
	var out []SabotageResult
	declared, own := ownWorker(t)
	for _, c := range cs {
		sabotages := c.Sabotages
		if own {
			// The worker's own negative controls run beside the catalogue's,
			// whose breakage inside the reference worker is skipped.
			sabotages = append(append([]Sabotage(nil), sabotages...), workerSabotages(declared, c)...)
		}
		for _, s := range sabotages {
			sr := SabotageResult{Contract: c.ID, Sabotage: s, Caught: true}
			for k := range n {
				r, sd, err := selfTestSeed(ctx, t, c, s, opts, n, k)
				if err != nil {
					return out, err
				}
				if r.Verdict == Skipped {
					sr = SabotageResult{Contract: c.ID, Sabotage: s, Result: r}
					break
				}
				sr.Seeds = append(sr.Seeds, sd)
				if sr.Caught {
					sr.Result = r
				}
				if !sd.Caught && sr.Caught {
					sr.Caught, sr.Why = false, sd.Why
				}
			}
			out = append(out, sr)
		}
	}
	for _, name := range declared {
		if _, ok := WorkerSabotages[name]; !ok {
			out = append(out, SabotageResult{Contract: "-", Sabotage: Sabotage{Name: name, Worker: name},
				Result: Result{Target: t.Name(), Verdict: Skipped, Reason: fmt.Sprintf("the worker declares a sabotage %q, which durachk does not know: it cannot say which property must catch it (docs/worker-protocol.md lists the ones it knows)", name)}})
		}
	}
	return out, nil
}

// selfTestSeed runs seed k of n of sabotage s: opts.Seed+k, and while its run
// ends unknown and not caught, that seed plus n times the runs it has tried.
func selfTestSeed(ctx context.Context, t Target, c *Contract, s Sabotage, opts Options, n, k int) (Result, SeedResult, error) {
	o := opts
	o.Trials = n
	tries := o.Tries
	if tries <= 0 {
		tries = DefaultTries
	}
	sd := SeedResult{Seed: opts.Seed + uint64(k)}
	var r Result
	for try := 0; try < selfTestTries; try++ {
		var err error
		// Seed o.Seed+k; a run that did not exercise the claim tries the seed
		// n further, up to tries runs (EvaluateTrial).
		r, err = EvaluateSabotageTrial(ctx, t, c, s, o, k)
		if err != nil || r.Verdict == Skipped {
			return r, sd, err
		}
		if len(r.Trials) == 1 && len(r.Trials[0].SeedsTried) > 0 {
			sd.Ran = append(sd.Ran, r.Trials[0].SeedsTried...)
		} else {
			sd.Ran = append(sd.Ran, r.Seed)
		}
		sd.Verdict = r.Verdict
		sd.Caught, sd.Why = Caught(r, s)
		if sd.Caught || r.Verdict != Unknown {
			break
		}
		o.Seed += uint64(n * tries)
	}
	if len(sd.Ran) == 1 {
		sd.Ran = nil
	}
	return r, sd, nil
}

// MissedError names every sabotage a self-test did not catch, the seeds it
// was not caught on and the properties that should have caught it.
type MissedError struct {
	Missed []SabotageResult
}

func (e *MissedError) Error() string {
	parts := make([]string, len(e.Missed))
	for i, m := range e.Missed {
		var seeds []string
		for _, sd := range m.Seeds {
			if !sd.Caught {
				seeds = append(seeds, fmt.Sprint(sd.Seed))
			}
		}
		on := ""
		switch {
		case len(m.Seeds) > 1:
			on = fmt.Sprintf(", not caught on %d of %d seeds (seed %s)", len(seeds), len(m.Seeds), strings.Join(seeds, ", "))
		case len(m.Seeds) == 1:
			on = ", seed " + seeds[0]
		}
		parts[i] = fmt.Sprintf("%s/%s on %s%s (%s)", m.Contract, m.Sabotage.Name, m.Result.Target, on, m.Why)
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

// OwnWorker is implemented by targets that can run a worker of their own
// (the worker protocol's worker.command) in place of the reference
// pipeline's: ok when this one does, with the sabotages its worker declares.
type OwnWorker interface {
	OwnWorker() (sabotages []string, ok bool)
}

// ownWorker returns the sabotages t's own worker declares, and whether t
// runs one.
func ownWorker(t Target) ([]string, bool) {
	if w, ok := t.(OwnWorker); ok {
		return w.OwnWorker()
	}
	return nil, false
}

func own(t Target) bool { _, ok := ownWorker(t); return ok }

// WorkerSabotages are the sabotages a worker of one's own may declare
// (docs/worker-protocol.md), by name: the contract each runs on and the
// property it must raise there.
var WorkerSabotages = map[string]struct {
	Contract string
	Sabotage Sabotage
}{
	"ack-before-effect": {"lease.redelivery", Sabotage{Name: "ack-before-effect", Worker: "ack-before-effect",
		What: "the worker completes its job as soon as it received it, then runs the effect", Raises: []Property{PropLost}}},
	"ignore-token": {"fencing.zombie", Sabotage{Name: "ignore-token", Worker: "ignore-token",
		What: "the worker completes a job without checking that its lock is still its own", Raises: []Property{PropStaleAck}}},
	"swallow-errors": {"retry.bounded", Sabotage{Name: "swallow-errors", Worker: "swallow-errors",
		What: "the worker catches its job's failure and completes the job", Raises: []Property{PropLost}}},
}

// workerSabotages are the declared sabotages of a target's own worker that
// run on c.
func workerSabotages(declared []string, c *Contract) (run []Sabotage) {
	for _, name := range declared {
		if ws, ok := WorkerSabotages[name]; ok && ws.Contract == c.ID {
			run = append(run, ws.Sabotage)
		}
	}
	return run
}
