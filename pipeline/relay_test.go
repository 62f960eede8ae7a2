package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/history"
)

type noHooks struct{}

func (noHooks) At(context.Context, CrashPoint, string) {}

// A failing channel parks events and never dead-letters them; only the
// consumer's rejection on a working channel spends an event's budget.
func TestRelayChannelFailuresSpendNoEventBudget(t *testing.T) {
	tests := []struct {
		name      string
		publish   error // every publish of the first 40 steps fails with it
		probeDown bool
		dead      bool // the event ends dead-lettered
		opens     bool // the circuit opens
	}{
		{name: "lost replies on a channel that answers its probe", publish: adapters.ErrAmbiguous},
		{name: "refused on a channel that answers its probe", publish: adapters.ErrUnavailable},
		{name: "channel down", publish: adapters.ErrUnavailable, probeDown: true, opens: true},
		{name: "rejected by the consumer", publish: ErrRejected, dead: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			log := &history.Log{}
			store := NewMemStore(MemStoreOptions{})
			if _, err := store.CommitResultWithEvent(ctx, req("j1", "acme:d1:v1", "h", 1)); err != nil {
				t.Fatal(err)
			}
			step := 0
			r := &Relay{Env: &Env{Process: "relay", Rec: log, Now: func() time.Time { return now }}, Store: store, Hooks: noHooks{},
				Batch: 8, BreakAfter: 5, ProbeEvery: time.Second, EventBudget: 5,
				Publish: func(ctx context.Context, e Event) error {
					if step < 40 {
						return tt.publish
					}
					return nil
				},
				Probe: func(ctx context.Context) error {
					if tt.probeDown && step < 40 {
						return adapters.ErrUnavailable
					}
					return nil
				}}
			for ; step < 60; step++ {
				if _, err := r.Step(ctx); err != nil {
					t.Fatal(err)
				}
				now = now.Add(time.Second)
			}
			st, _ := store.Snapshot(ctx)
			if got := st.Events[0].Dead; got != tt.dead {
				t.Errorf("event dead-lettered: %v, want %v", got, tt.dead)
			}
			if !tt.dead && !st.Events[0].Published {
				t.Errorf("event not published once the channel worked")
			}
			opens := 0
			for _, op := range log.Ops() {
				if op.F == history.Circuit && op.Value == "open" {
					opens++
				}
			}
			if (opens > 0) != tt.opens {
				t.Errorf("circuit opened %d times, want opens=%v", opens, tt.opens)
			}
		})
	}
}

// A consumer restarted under the same name counts its applications from 1
// again; named after its life too, it still takes a republished event's
// repeat for one (the relay crashed between publish and mark). Without a
// life of its own, it took the earlier life's application for its own.
func TestRestartedConsumerDropsARepeat(t *testing.T) {
	tests := []struct {
		name        string
		first, next string // the two lives
		want        string // the second application's outcome
	}{
		{name: "a new life", first: "relay", next: "relay.2", want: "dropped"},
		{name: "the same life again (no restart)", first: "relay", next: "relay", want: "applied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			log := &history.Log{}
			store := NewMemStore(MemStoreOptions{})
			e := Event{ID: "ev:acme:d1:v1", JobID: "j1", Key: "acme:d1:v1"}
			for _, life := range []string{tt.first, tt.next} {
				c := &Consumer{Env: &Env{Process: "consumer", Rec: log, Now: time.Now}, Store: store, Life: life}
				if err := c.Handle(ctx, e); err != nil {
					t.Fatal(err)
				}
			}
			var got []string
			for _, op := range log.Ops() {
				if op.F == history.Apply && op.Type == history.OK {
					got = append(got, op.Value)
				}
			}
			if len(got) != 2 || got[0] != "applied" || got[1] != tt.want {
				t.Errorf("applications %v, want [applied %s]", got, tt.want)
			}
		})
	}
}
