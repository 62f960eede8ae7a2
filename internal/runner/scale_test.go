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
