package contracts

import (
	"slices"
	"time"

	"github.com/durachk/durachk/pipeline"
)

// MaxLimit bounds a scenario's limit (scenario time: 24 h on the embedded
// target's virtual clock, 2.4 h on a real target): a plan file's limit is
// refused above it, and a catalogue scenario's fitted limit never passes it.
const MaxLimit = 24 * time.Hour

// perJob is the time a job takes a worker besides its slow step, allowed in
// fitLimit: nothing on the virtual clock, some milliseconds of round trips
// (×10 in scenario time) on a real target.
const perJob = 100 * time.Millisecond

// fitLimit makes a scenario's limit fit its workload: at least twice the
// least time the workload needs — its last send, then every job's slow step
// and a per-job allowance spread over the workers — plus a minute; never less
// than the scenario's own limit, never more than MaxLimit. At the default 24
// jobs every scenario keeps its own limit; with --jobs 10000 lease.heartbeat's
// 2500 jobs of 25 s on 4 workers need 4.3 h of scenario time, and get 9.1 h.
func fitLimit(sc Scenario) Scenario {
	var last, work time.Duration
	for _, j := range sc.Jobs {
		last = max(last, j.At)
		work += perJob
		if p, err := pipeline.DecodePayload(j.Job.Payload); err == nil {
			work += p.Slow
		}
	}
	need := last + work/time.Duration(max(sc.Workers, 1))
	sc.Limit = min(max(sc.Limit, 2*need+time.Minute), max(sc.Limit, MaxLimit))
	return sc
}

// The catalogue's scenarios fit their limit to the workload they are asked
// for (durachk plan writes the fitted limit out too).
func init() {
	for _, c := range append(slices.Clone(Catalogue), SeedScenarios...) {
		build := c.Scenario
		c.Scenario = func(seed uint64, jobs int) Scenario { return fitLimit(build(seed, jobs)) }
	}
}
