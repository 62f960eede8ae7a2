package runner

import (
	"runtime"

	"github.com/durachk/durachk/internal/loadavg"
)

// MaxStretch bounds Stretch.
const MaxStretch = 4

// Stretch is how much slower than DefaultScale a real run's clock goes on a
// busy machine: $DURACHK_LOAD_FACTOR when set, else half the one-minute load
// average per CPU (two runnable threads per CPU is what the scenarios are
// timed for: this project's CI runs four test packages at a time on two
// cores), between 1 and MaxStretch. Every scenario time stretches alike, so
// a run keeps its order of events. Why: a worker heartbeats every third of its
// lease (1 s at DefaultScale); one starved of CPU for two thirds of it loses
// the lease to another worker (preempted, a duplicate), which a busy machine
// caused, not the broker.
func Stretch() float64 {
	if f, ok := loadavg.Fixed(MaxStretch); ok {
		return f
	}
	return loadavg.Clamp(loadavg.PerCPU()/2, MaxStretch)
}

// StretchFor is Stretch for parallel runs about to start at once on this
// machine (durachk explore --parallel on a real target): at least their
// number per CPU, between 1 and MaxStretch, since the load they will make is
// not yet in the load average Stretch reads. Without it the first rounds run
// on an idle machine's clock while the rounds beside them starve their
// workers (a lease lost to a worker that missed its heartbeats: preempted,
// which the machine caused). $DURACHK_LOAD_FACTOR, when set, wins.
func StretchFor(parallel int) float64 {
	if f, ok := loadavg.Fixed(MaxStretch); ok {
		return f
	}
	return max(Stretch(), loadavg.Clamp(float64(parallel)/float64(runtime.NumCPU()), MaxStretch))
}
