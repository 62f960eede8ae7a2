// Package runnertest holds what the tests on real brokers and clusters share:
// seeking across seeds for the class of an outcome, and bounds on wall time
// that stretch with the machine's load.
//
// Real brokers and clusters are not deterministic: what a seed exposes in one
// run it may not in the next (a failover a moment later, a busy machine). A
// test on them asserts the class of an outcome — a witnessed violation of a
// property, or no violation at all — and seeks across seeds until it sees it
// (Seek, SeekViolation, SeekPasses); none asserts what one seed gives.
package runnertest

import (
	"slices"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters/queuetest"
	"github.com/durachk/durachk/contracts"
)

// MaxSeeds bounds a seek: a known violation that five seeds in a row do not
// expose is a regression.
const MaxSeeds = 5

// Seek runs run with seed first, then with the seed after the last one a run
// tried (a run that did not exercise its claim has already tried the next
// ones: Result.Seed is the last), until done accepts a result or MaxSeeds runs
// were made. It returns every result, in order, and whether the last was
// accepted.
func Seek(t testing.TB, first uint64, run func(seed uint64) contracts.Result, done func(contracts.Result) bool) ([]contracts.Result, bool) {
	t.Helper()
	var rs []contracts.Result
	for seed := first; len(rs) < MaxSeeds; {
		r := run(seed)
		rs = append(rs, r)
		if done(r) {
			return rs, true
		}
		t.Logf("seed %d: %s (%s): not what the test seeks; the next seed", r.Seed, r.Verdict, r.Reason)
		seed = max(r.Seed, seed) + 1
	}
	return rs, false
}

// SeekViolation seeks, from seed 1, a run that raises a witnessed violation of p and
// returns it; it fails the test when MaxSeeds runs raised none.
func SeekViolation(t testing.TB, what string, p contracts.Property, run func(seed uint64) contracts.Result) contracts.Result {
	t.Helper()
	return SeekViolationOf(t, what, []contracts.Property{p}, run)
}

// SeekViolationOf is SeekViolation for a class of several properties: one
// fault whose symptom depends on timing (an asynchronous failover rolls back
// acknowledged enqueues, lost, or acknowledged acks, delivered again). It
// logs the first three witnessed violations of the run it returns.
func SeekViolationOf(t testing.TB, what string, ps []contracts.Property, run func(seed uint64) contracts.Result) contracts.Result {
	t.Helper()
	rs, ok := Seek(t, 1, run, func(r contracts.Result) bool {
		return r.Verdict == contracts.Violated && slices.ContainsFunc(ps, func(p contracts.Property) bool { return Witnessed(r, p) })
	})
	last := rs[len(rs)-1]
	if !ok {
		t.Fatalf("%s: no witnessed violation %v in %d seeds; the last: %s (%s)", what, ps, len(rs), last.Verdict, last.Reason)
	}
	logged := 0
	for _, v := range last.Violations {
		if slices.Contains(ps, v.Property) && len(v.Witness) > 0 && logged < 3 {
			t.Logf("%s, seed %d: %s %s: %s", what, last.Seed, v.Property, v.Job, v.Message)
			logged++
		}
	}
	return last
}

// SeekPasses seeks, from seed 1, n passing runs of a configuration known to
// be good and returns them. A violation fails the test at once (known-good
// never violates); an unknown (a cluster that did not settle in time, a run
// that did not exercise its claim) is logged and the next seed tried; fewer
// than n passes in MaxSeeds runs fail the test. It returns only when it found
// the n passes.
func SeekPasses(t testing.TB, what string, n int, run func(seed uint64) contracts.Result) []contracts.Result {
	t.Helper()
	var passed []contracts.Result
	var violated *contracts.Result
	rs, ok := Seek(t, 1, run, func(r contracts.Result) bool {
		switch r.Verdict {
		case contracts.Violated:
			violated = &r
			return true
		case contracts.Pass:
			passed = append(passed, r)
		}
		return len(passed) == n
	})
	if violated != nil {
		for _, v := range violated.Violations {
			t.Logf("  %s %s: %s", v.Property, v.Job, v.Message)
			// The witness, so that a failure seen once in CI can be read
			// without its history (which the test's directory takes away).
			for _, b := range v.Because {
				t.Logf("    because %s", b)
			}
			for _, op := range v.Witness {
				t.Logf("    %+v", op)
			}
		}
		t.Fatalf("%s, seed %d: violation (%s), want pass", what, violated.Seed, violated.Reason)
	}
	if !ok {
		last := rs[len(rs)-1]
		t.Fatalf("%s: %d passes in %d seeds, want %d; the last: %s (%s)", what, len(passed), len(rs), n, last.Verdict, last.Reason)
	}
	return passed
}

// Witnessed says whether r holds a violation of p with its witness.
func Witnessed(r contracts.Result, p contracts.Property) bool {
	for _, v := range r.Violations {
		if v.Property == p && len(v.Witness) > 0 {
			return true
		}
	}
	return false
}

// Loaded stretches a bound on wall time by the machine's load
// (queuetest.LoadFactor): a bound that guards against a hang must not fail
// because a CPU hog ran beside the test.
func Loaded(d time.Duration) time.Duration {
	return time.Duration(float64(d) * queuetest.LoadFactor())
}
