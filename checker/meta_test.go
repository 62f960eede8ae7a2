package checker

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/pipeline"
)

func TestParseMetaMatchesEncodingJSON(t *testing.T) {
	tests := []struct {
		name string
		job  adapters.Job
	}{
		{"plain", adapters.Job{Tenant: "acme", DocumentID: "doc-1", Version: 1, MaxAttempts: 3, Payload: pipeline.Payload{Doc: "doc-1"}.Encode()}},
		{"deadline and group", adapters.Job{Tenant: "globex", DocumentID: "d", Version: 7, MaxAttempts: 1,
			Deadline: time.Unix(1700000000, 5), Group: "g-1", Payload: pipeline.Payload{Doc: "d", FailPermanent: true, Crash: true, FailTransient: -1}.Encode()}},
		{"quote in doc id falls back", adapters.Job{Tenant: "acme", DocumentID: `a"b,c`, Version: 2, MaxAttempts: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := json.Marshal(pipeline.MetaOf(tt.job))
			var want, got pipeline.JobMeta
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatal(err)
			}
			parseMeta(string(b), &got)
			if got != want {
				t.Fatalf("parseMeta(%s) = %+v, want %+v", b, got, want)
			}
		})
	}
}
