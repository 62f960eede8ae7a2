package runner

import (
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/pipeline"
)

// Scenario times, the age budget among them, are scaled onto wall time.
func TestScaleAgeBudget(t *testing.T) {
	tests := []struct {
		name string
		p    pipeline.Payload
		want time.Duration
	}{
		{"default", pipeline.Payload{Doc: "d"}, pipeline.DefaultAgeBudget / 10},
		{"named", pipeline.Payload{Doc: "d", AgeBudget: time.Minute}, 6 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := contracts.Scenario{Jobs: []contracts.JobSpec{{Job: adapters.Job{ID: "j", Payload: tt.p.Encode()}}}}
			out := scale(sc, 0.1)
			if got := pipeline.AgeBudgetOf(out.Jobs[0].Job); got != tt.want {
				t.Errorf("age budget %v, want %v", got, tt.want)
			}
			if got := pipeline.MetaOf(out.Jobs[0].Job).AgeBudget; got != int64(tt.want) {
				t.Errorf("enqueue record's age budget %d, want %d", got, tt.want)
			}
		})
	}
}

// On a busy machine a real run's clock goes slower: the factor fixed by the
// environment, else from the load average, never below 1 or above MaxStretch;
// every scenario time of the run stretches by it.
func TestStretch(t *testing.T) {
	t.Setenv("DURACHK_LOAD_FACTOR", "2.5")
	if got := Stretch(); got != 2.5 {
		t.Errorf("fixed 2.5: %v", got)
	}
	t.Setenv("DURACHK_LOAD_FACTOR", "9")
	if got := Stretch(); got != MaxStretch {
		t.Errorf("fixed 9: %v, want %v", got, MaxStretch)
	}
	t.Setenv("DURACHK_LOAD_FACTOR", "")
	if got := Stretch(); got < 1 || got > MaxStretch {
		t.Errorf("from the load average: %v", got)
	}
	t.Setenv("DURACHK_LOAD_FACTOR", "2")
	tg := &Target{Scale: DefaultScale * Stretch()}
	c, _ := contracts.Lookup("lease.heartbeat")
	sc := scale(c.Scenario(1, contracts.DefaultJobs), tg.Scale)
	if want := time.Duration(float64(c.Scenario(1, contracts.DefaultJobs).Lease) * DefaultScale * 2); sc.Lease != want {
		t.Errorf("lease at stretch 2: %v, want %v", sc.Lease, want)
	}
}
