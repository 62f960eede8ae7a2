// Package loadavg says how busy this machine is, for what durachk times: the
// one-minute load average per CPU (/proc/loadavg), or the factor
// $DURACHK_LOAD_FACTOR fixes. The conformance suite stretches its timed steps
// by it (adapters/queuetest) and real runs their scenario clock
// (internal/runner), so that a lease meant to stay live does not run out
// because other work held the CPUs.
package loadavg

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Env names the environment variable that fixes the factor (a number ≥ 1),
// e.g. on a machine whose load average says nothing about the CPU a process
// gets.
const Env = "DURACHK_LOAD_FACTOR"

// Fixed returns the factor $DURACHK_LOAD_FACTOR fixes, clamped to [1, max],
// and whether it is set.
func Fixed(max float64) (float64, bool) {
	v := os.Getenv(Env)
	if v == "" {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, false
	}
	return Clamp(f, max), true
}

// PerCPU is the one-minute load average per CPU (a runnable thread gets about
// 1/PerCPU of a CPU once it passes 1); 0 where it cannot be read.
func PerCPU() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	return Parse(string(b), runtime.NumCPU())
}

// Parse is PerCPU for a /proc/loadavg line and a CPU count.
func Parse(loadavg string, cpus int) float64 {
	f := strings.Fields(loadavg)
	if len(f) == 0 || cpus < 1 {
		return 0
	}
	l, err := strconv.ParseFloat(f[0], 64)
	if err != nil || l < 0 {
		return 0
	}
	return l / float64(cpus)
}

// Clamp bounds a factor to [1, max] (NaN is 1).
func Clamp(f, max float64) float64 {
	if !(f >= 1) {
		return 1
	}
	return min(f, max)
}

// Patience is d, an idle machine's bound on a wait, stretched by the factor
// $DURACHK_LOAD_FACTOR fixes, else by the load average per CPU, between 1
// and max: on a busy machine a server's answer comes late without anything
// being wrong with it (a Postgres connection's start-up answered 1 s late
// beside two busy loops, and the failover it was for gave up).
func Patience(d time.Duration, max float64) time.Duration {
	return time.Duration(float64(d) * Factor(max))
}

// Factor is the factor $DURACHK_LOAD_FACTOR fixes, else the load average per
// CPU, between 1 and max.
func Factor(max float64) float64 {
	if f, ok := Fixed(max); ok {
		return f
	}
	return Clamp(PerCPU(), max)
}
