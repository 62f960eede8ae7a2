package queuetest

import "github.com/durachk/durachk/internal/loadavg"

// LoadEnv names the environment variable that fixes LoadFactor (a number ≥ 1),
// e.g. on a machine whose load average says nothing about the CPU a test gets.
const LoadEnv = loadavg.Env

// MaxLoadFactor bounds LoadFactor: beyond it a machine is too busy for timed
// steps to mean anything, and waiting longer only hides that.
const MaxLoadFactor = 8

// LoadFactor is how many times longer than on an idle machine a step may take
// here now: $DURACHK_LOAD_FACTOR when set, else the one-minute load average
// per CPU (a runnable thread gets about NumCPU/load of a CPU), between 1 and
// MaxLoadFactor; 1 where the load average cannot be read. The suite stretches
// every duration of a script and its patience by it, so that a lease a script
// means to stay live does not run out because the machine was busy (a CPU hog
// beside the tests, or go test running packages side by side); tests that wait
// for brokers in other packages scale their bounds the same way.
func LoadFactor() float64 { return loadavg.Factor(MaxLoadFactor) }
