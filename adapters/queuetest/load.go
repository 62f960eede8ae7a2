package queuetest

import (
	"os"
	"runtime"
	"strconv"
	"strings"
)

// LoadEnv names the environment variable that fixes LoadFactor (a number ≥ 1),
// e.g. on a machine whose load average says nothing about the CPU a test gets.
const LoadEnv = "DURACHK_LOAD_FACTOR"

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
func LoadFactor() float64 {
	if v := os.Getenv(LoadEnv); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return clampLoad(f)
		}
	}
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 1
	}
	return loadFactorOf(string(b), runtime.NumCPU())
}

// loadFactorOf is LoadFactor for a /proc/loadavg line and a CPU count.
func loadFactorOf(loadavg string, cpus int) float64 {
	f := strings.Fields(loadavg)
	if len(f) == 0 || cpus < 1 {
		return 1
	}
	l, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 1
	}
	return clampLoad(l / float64(cpus))
}

func clampLoad(f float64) float64 {
	if !(f >= 1) { // NaN too
		return 1
	}
	return min(f, MaxLoadFactor)
}
