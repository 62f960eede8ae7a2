// Package contracts holds the contract catalogue, the engine that runs a contract
// against a target, and the checker that turns a history and a final state into
// a verdict. Front ends: Test and Exercise for go test, a Ginkgo suite in the
// repository's tests, and the CLI.
package contracts

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/pipeline"
)

// Verdict of a contract on a target.
type Verdict string

const (
	Pass     Verdict = "pass"
	Violated Verdict = "violation"
	Unknown  Verdict = "unknown"
	Skipped  Verdict = "skipped"
)

// Contract is a named claim with its scenario and its negative controls. Values
// in the catalogue are immutable; share them freely.
type Contract struct {
	ID         string
	Claim      string
	Motivation string
	Labels     []string // fault:kill, fault:pause, ...
	// Needs returns why a target cannot run the contract, or "".
	Needs func(adapters.Capabilities) string
	// Scenario builds the workload and fault plan from a seed.
	Scenario func(seed uint64, jobs int) Scenario
	// Exercised returns why the run did not exercise the claim, or "": a run
	// that was asked for faults and applied none is unknown, never pass.
	Exercised func(Stats) string
	// Sabotages are deliberately broken variants the checker must flag.
	Sabotages []Sabotage
	// Properties, if set, are this contract's own checks, beyond the common
	// checker's (fencing.failover: PropTokenReissued).
	Properties func(ops []history.Op, final Final) []Violation
}

// Sabotage is one deliberately broken pipeline or configuration: the negative
// control of the properties it declares. It counts as caught only when the
// checker reports every one of them, each with a witness.
type Sabotage struct {
	Name string `json:"name"`
	What string `json:"what"`
	// Raises are the properties the checker must report.
	Raises   []Property               `json:"raises"`
	Pipeline pipeline.Sabotage        `json:"pipeline,omitzero"`
	Store    pipeline.MemStoreOptions `json:"store,omitzero"`
	// Broker-level breakage, as configurations of the broker under test.
	Volatile   bool `json:"volatile,omitempty"`    // no persistence
	BreakOrder bool `json:"break_order,omitempty"` // claims FIFO, delivers newest first
	// Unreplicated: a replicated broker acknowledges writes before any replica
	// has them (no WAIT, synchronous_commit=local, a classic queue).
	Unreplicated bool `json:"unreplicated,omitempty"`
	// DeliveryLimit: the broker dead-letters a job on its own at its n-th
	// delivery; UnfencedAck: the broker claims fenced acks and accepts stale
	// ones. Both break the embedded broker only (MemOnly).
	DeliveryLimit int  `json:"delivery_limit,omitempty"`
	UnfencedAck   bool `json:"unfenced_ack,omitempty"`
	// MemOnly: the breakage exists on the embedded target only; on any other
	// the sabotage is skipped with the reason.
	MemOnly bool `json:"mem_only,omitempty"`
	// Worker: a sabotage of the target's own worker (the worker protocol), by
	// the name the worker declares in its hello; handed to it as
	// worker.sabotage (WorkerSabotages).
	Worker string `json:"worker,omitempty"`
	// WritableReplicas: a replicated broker's replicas take writes of their
	// own (Redis replica-read-only no), which no primary ever sees.
	WritableReplicas bool `json:"writable_replicas,omitempty"`
	// Needs, if set, says why a target cannot be broken this way ("" if it can):
	// the sabotage is then skipped there with the reason.
	Needs func(adapters.Capabilities) string `json:"-"`
	// FsyncIgnored: the broker's disk acknowledges fsync and keeps nothing
	// until written back (a write cache that lies, fsync turned off).
	FsyncIgnored bool `json:"fsync_ignored,omitempty"`
}

// JobSpec is one job of a workload.
type JobSpec struct {
	Job adapters.Job
	// At is the offset from the start at which the producer sends it.
	At time.Duration
	// Twice: the producer sends it twice.
	Twice bool
	// Deadline is the job's deadline as an offset from the start; 0: none.
	Deadline time.Duration
}

// Scenario is a workload and a fault plan.
type Scenario struct {
	Name     string
	Jobs     []JobSpec
	Plan     faults.Plan
	Workers  int
	Lease    time.Duration
	Poll     time.Duration
	Canaries []string
	// Operator reprocesses dead-lettered jobs, and tries the refused paths.
	Operator bool
	// Limit on the run's virtual (embedded) or scaled (real) duration.
	Limit time.Duration
}

// Metrics are distributions, never one number.
type Metrics struct {
	QueueWait  Dist `json:"queue_wait_ms"`
	Processing Dist `json:"processing_ms"`
	ToTerminal Dist `json:"time_to_terminal_ms"`
	Attempts   Dist `json:"attempts_per_job"`
}

// Dist summarises a distribution.
type Dist struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// Result is the verdict of one contract (or scenario) on one target. Every field
// is a function of the seed and the target except Wall, kept apart.
type Result struct {
	Contract   string      `json:"contract"`
	Claim      string      `json:"claim,omitempty"`
	Target     string      `json:"target"`
	Broker     string      `json:"broker"`
	MeasuredOn string      `json:"measured_on"`
	Verdict    Verdict     `json:"verdict"`
	Reason     string      `json:"reason,omitempty"`
	Sabotage   string      `json:"sabotage,omitempty"`
	Seed       uint64      `json:"seed"`
	Scenario   string      `json:"scenario"`
	Planned    []string    `json:"planned_faults,omitempty"`
	Violations []Violation `json:"violations,omitempty"`
	Stats      Stats       `json:"stats"`
	Metrics    Metrics     `json:"metrics"`
	HistoryLen int         `json:"history_len"`
	// Cluster is what a run on a replicated target adds: its topology, who was
	// primary when, recovered enqueues, delivery count regressions.
	Cluster *ClusterFacts `json:"cluster,omitempty"`
	// Trials are every run of the contract when there was more than one (see
	// Options.Trials and Options.Tries); the fields above are those of the
	// first violating trial, else the first unknown one, else the last.
	Trials []Trial       `json:"trials,omitempty"`
	Wall   time.Duration `json:"-"`
	RunIDs []string      `json:"-"` // the target's namespace of every Execute, in order; wall-clock data like Wall
}

// Trial is one run of a contract among several, with successive seeds.
type Trial struct {
	Seed       uint64      `json:"seed"`
	Verdict    Verdict     `json:"verdict"`
	Reason     string      `json:"reason,omitempty"`
	Violations []Violation `json:"violations,omitempty"`
	// SeedsTried are the seeds this trial ran, in order, when a run did not
	// exercise the claim and the next seed was tried; Seed is the last.
	SeedsTried []uint64 `json:"seeds_tried,omitempty"`
}

// Target runs scenarios against one broker and configuration. Implementations
// say in their doc whether Execute may be called concurrently.
type Target interface {
	Name() string
	// MeasuredOn names what a verdict is about: "mem", "postgres 15.19", "fauxqs 2.4.1", ...
	MeasuredOn() string
	Capabilities() adapters.Capabilities
	Execute(ctx context.Context, run Run) (Execution, error)
}

// Run is what the engine asks a target to execute.
type Run struct {
	Contract string
	Scenario Scenario
	Seed     uint64
	Sabotage *Sabotage // nil: the reference pipeline
}

// Disturber is a Target some of whose runs disturb the other runs on it at
// the same time, because a fault of theirs acts on what the runs share (the
// target's own broker, killed under its control commands; the nodes of an
// existing cluster). Disturbs says why a run of sc does ("" when it does not:
// its faults stay in its namespace, its processes, its proxies and its
// private broker); such a run must run alone (durachk explore waits for the
// rounds in flight and starts none beside it).
type Disturber interface {
	Disturbs(sc Scenario) string
}

// Execution is what a target hands back: the merged history and the final state.
type Execution struct {
	Ops   []history.Op
	Final Final
	Check CheckOptions
	// Unsettled, if set, says why a replicated target did not settle (no
	// primary known, a node that would not rejoin) after its last fault: the
	// final state cannot be trusted and the verdict is unknown.
	Unsettled string
	// RunID names the namespace the target made for this run ("" where it
	// makes none), so that a report can point at what a run left behind.
	RunID string
	// Unavailable says why the run ended early because the broker stopped
	// answering outside the plan's own faults ("broker unavailable for 4.0 s
	// from 3.1 s"); "" otherwise. Such a run is unknown, never a pass: its
	// final state could not be read.
	Unavailable string
	// OverBudget says why the run was stopped at its wall-time budget (see
	// the target's doc for how the budget is chosen); "" otherwise. Such a
	// run is unknown, never a pass: it did not finish.
	OverBudget string
}

// ErrUnavailable marks a target that could not be reached to carry out a run
// (its broker is down): the run is unknown, not an error of the harness, and
// a caller may go on with the next run.
var ErrUnavailable = errors.New("target unavailable")

// ErrUnknownContract is returned for an id not in the catalogue.
var ErrUnknownContract = fmt.Errorf("unknown contract")
