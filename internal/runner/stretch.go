package runner

import "github.com/durachk/durachk/internal/loadavg"

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
