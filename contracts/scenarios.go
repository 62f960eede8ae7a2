package contracts

import (
	"math/rand/v2"
	"time"

	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/pipeline"
)

// The seed scenarios: named fault plans from the fail-safe event queue the
// project grew from. Each is checked for the same invariants as every contract:
// no accepted job lost, no effect applied twice, acceptance order kept where
// claimed, no job attempted more often than the policy allows.
var SeedScenarios = []*Contract{
	scenario("channel-down-20s", "the relay → consumer channel is down for 20 s",
		func(seed uint64, n int) Scenario {
			return base("channel down 20 s", workload(seed, n, nil),
				faults.Fault{Kind: faults.LinkDown, Link: faults.LinkChannel, At: 200 * time.Millisecond, For: 20 * time.Second})
		}, func(s Stats) string { return atLeast("faults on the channel", linkFaults(s, faults.LinkChannel), 1) }),
	scenario("flapping-channel", "the channel goes down and up in a seeded pattern for 60 s",
		func(seed uint64, n int) Scenario {
			return base("flapping channel", workload(seed, n, nil),
				faults.Fault{Kind: faults.Flap, Link: faults.LinkChannel, For: 60 * time.Second})
		}, func(s Stats) string { return atLeast("faults on the channel", linkFaults(s, faults.LinkChannel), 1) }),
	scenario("replies-lost-30pct", "30 % of replies are lost on every link for 60 s",
		func(seed uint64, n int) Scenario {
			var fs []faults.Fault
			for _, l := range []string{faults.LinkChannel, faults.LinkStore, faults.LinkBroker} {
				fs = append(fs, faults.Fault{Kind: faults.ReplyLoss, Link: l, For: 60 * time.Second, Rate: 0.3})
			}
			return base("30 % of replies lost", workload(seed, n, nil), fs...)
		}, func(s Stats) string { return atLeast("replies lost", s.Faults["reply_lost"], 1) }),
	scenario("poison-job", "two jobs kill their worker on every delivery",
		func(seed uint64, n int) Scenario {
			return base("poison job", workload(seed, n, everyNth(7, func(p *pipeline.Payload) { p.Crash = true }, 2)))
		}, func(s Stats) string { return atLeast("poison crashes", s.Faults["crash:poison"], 2) }),
	scenario("poison-event", "the consumer rejects two jobs' events on every delivery, on a healthy channel",
		func(seed uint64, n int) Scenario {
			return base("poison event", workload(seed, n, everyNth(6, func(p *pipeline.Payload) { p.PoisonEvent = true }, 2)))
		}, func(s Stats) string { return atLeast("outbox events dead-lettered", s.EventsDeadLettered, 2) },
		Sabotage{Name: "naive-breaker", What: "the relay's breaker counts a rejected event as a dead channel and never probes",
			Raises: []Property{PropCircuitOnHealthy}, Pipeline: pipeline.Sabotage{NaiveBreaker: true}}),
	scenario("stubborn-job", "two jobs fail transiently forever",
		func(seed uint64, n int) Scenario {
			return base("stubborn job", workload(seed, n, everyNth(5, func(p *pipeline.Payload) { p.FailTransient = -1 }, 2)))
		}, func(s Stats) string { return atLeast("dead-lettered jobs", s.DeadLettered, 2) }),
	scenario("restarts-during-outage", "the broker link is down for 20 s while workers are killed and restarted",
		func(seed uint64, n int) Scenario {
			return base("worker restarts during an outage", workload(seed, n, nil),
				faults.Fault{Kind: faults.LinkDown, Link: faults.LinkBroker, At: 500 * time.Millisecond, For: 20 * time.Second},
				faults.Fault{Kind: faults.Kill, Process: "w1", At: 5 * time.Second},
				faults.Fault{Kind: faults.Kill, Process: "w2", At: 10 * time.Second},
				faults.Fault{Kind: faults.Kill, Process: "w3", At: 15 * time.Second})
		}, func(s Stats) string {
			return firstOf(atLeast("faults on the broker link", linkFaults(s, faults.LinkBroker), 1), atLeast("worker kills", s.Faults["kill"], 1))
		}),
	scenario("producer-sends-twice", "the producer sends every job twice",
		func(seed uint64, n int) Scenario {
			return base("producer sends twice", workload(seed, n, func(_ int, _ *rand.Rand, j *JobSpec) { j.Twice = true }))
		}, func(s Stats) string { return atLeast("deduped commits", s.Deduped, 1) }),
	scenario("everything-at-once", "all of the above in one run",
		func(seed uint64, n int) Scenario {
			sc := base("everything at once", workload(seed, n, func(i int, r *rand.Rand, j *JobSpec) {
				j.Twice = i%4 == 0
				switch i {
				case 3:
					setPayload(j, func(p *pipeline.Payload) { p.Crash = true })
				case 5:
					setPayload(j, func(p *pipeline.Payload) { p.FailTransient = -1 })
				}
			}))
			sc.Plan.Faults = []faults.Fault{
				{Kind: faults.LinkDown, Link: faults.LinkChannel, At: 200 * time.Millisecond, For: 20 * time.Second},
				{Kind: faults.Flap, Link: faults.LinkChannel, At: 20 * time.Second, For: 40 * time.Second},
				{Kind: faults.ReplyLoss, Link: faults.LinkStore, For: 60 * time.Second, Rate: 0.3},
				{Kind: faults.ReplyLoss, Link: faults.LinkBroker, For: 60 * time.Second, Rate: 0.3},
				{Kind: faults.LinkDown, Link: faults.LinkBroker, At: 30 * time.Second, For: 20 * time.Second},
				{Kind: faults.Kill, Process: "w1", At: 35 * time.Second},
				{Kind: faults.Kill, Process: "w2", At: 40 * time.Second},
			}
			return sc
		}, func(s Stats) string { return atLeast("faults applied", len(s.Faults), 3) }),
}

func scenario(name, claim string, sc func(uint64, int) Scenario, ex func(Stats) string, sabotages ...Sabotage) *Contract {
	return &Contract{ID: "scenario/" + name, Sabotages: sabotages, Claim: claim + ": no accepted job lost, no effect applied twice, order kept where claimed, no job attempted beyond its budget",
		Motivation: "seed scenario of the fail-safe event queue", Labels: []string{"scenario"}, Scenario: sc, Exercised: ex}
}

func everyNth(k int, f func(p *pipeline.Payload), limit int) func(int, *rand.Rand, *JobSpec) {
	seen := 0
	return func(i int, _ *rand.Rand, j *JobSpec) {
		if i%k == k-1 && seen < limit {
			seen++
			setPayload(j, f)
		}
	}
}

// LookupScenario returns the seed scenario called name (with or without the
// "scenario/" prefix).
func LookupScenario(name string) (*Contract, error) {
	for _, c := range SeedScenarios {
		if c.ID == name || c.ID == "scenario/"+name {
			return c, nil
		}
	}
	return nil, &UnknownError{Kind: "scenario", Name: name}
}

// UnknownError names an id that is not in the catalogue.
type UnknownError struct{ Kind, Name string }

func (e *UnknownError) Error() string { return "unknown " + e.Kind + " " + `"` + e.Name + `"` }

// Unwrap lets callers branch on ErrUnknownContract for any unknown name.
func (e *UnknownError) Unwrap() error { return ErrUnknownContract }

// linkFaults counts what was applied on a link: refused calls or connections,
// partitions, hung connections, lost replies and resets.
func linkFaults(s Stats, link string) int {
	n := 0
	for _, kind := range []string{"refused", "partition", "blackhole", "reply_lost", "reset"} {
		n += s.Faults[kind+":"+link]
	}
	return n
}
