package driver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/pipeline"
)

// flakyStore loses the reply of the first n commits: each lands, and its
// caller is told the outcome is unknown.
type flakyStore struct {
	*pipeline.MemStore
	n int
}

func (s *flakyStore) CommitResultWithEvent(ctx context.Context, req pipeline.CommitRequest) (bool, error) {
	deduped, err := s.MemStore.CommitResultWithEvent(ctx, req)
	if s.n > 0 && err == nil {
		s.n--
		return false, fmt.Errorf("%w: reply lost", adapters.ErrAmbiguous)
	}
	return deduped, err
}

type noHooks struct{}

func (noHooks) At(context.Context, pipeline.CrashPoint, string) {}

// A commit whose reply was lost more times in a row than the server's
// tries is retried until its outcome is known — deduped, here — and never
// answered "unavailable" (nothing committed), which would have the worker
// retry or give up a job whose effect may have landed.
func TestEffectResolvesAnAmbiguousCommit(t *testing.T) {
	for _, lost := range []int{0, 1, storeTries, 3 * storeTries} {
		t.Run(fmt.Sprint(lost), func(t *testing.T) {
			log := &history.Log{}
			s := &Server{Env: &pipeline.Env{Process: "w1", Rec: log, Now: time.Now}, Store: &flakyStore{pipeline.NewMemStore(pipeline.MemStoreOptions{}), lost},
				Hooks: noHooks{}, Backoff: time.Millisecond}
			s.jobs, s.reasons = map[string]held{}, map[string]string{}
			j := adapters.Job{ID: "j1", Tenant: "acme", DocumentID: "doc-1", Version: 1, MaxAttempts: 3, Payload: pipeline.Payload{Doc: "doc-1", Text: "invoice 1"}.Encode()}
			key, err := pipeline.BuildKey(j.Tenant, j.DocumentID, j.Version)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			outcome, _ := s.effect(ctx, held{d: adapters.Delivery{Job: j, Token: 1, Attempt: 1}, key: key, id: "w1/1"})
			want := OutcomeApplied
			if lost > 0 {
				want = OutcomeDeduped // the lost commit landed: the one answered dedupes
			}
			if outcome != want {
				t.Errorf("%d replies lost: outcome %s, want %s", lost, outcome, want)
			}
		})
	}
}
