package checker

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/history"
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

// A witness's enqueue record carries the metadata as recorded: regenerated
// from the compact form where that gives the same bytes, kept as it was where
// it does not (another writer's field order, spacing or fields).
func TestWitnessKeepsTheRecordedMetadata(t *testing.T) {
	full := pipeline.JobMeta{Tenant: "acme", Doc: "doc-1", Version: 2, MaxAttempts: 3, Deadline: 1700000000000000005, Group: "g-1",
		Hash: "0a110432a2772aeccc07a91e9a4f1e0e3ba6b67c33185283caf1349567921c0e", Permanent: true, Poison: true, Stubborn: true,
		FailTransient: -1, AgeBudget: 180e9, Created: 1699999999000000000}
	b, _ := json.Marshal(full)
	for _, raw := range []string{
		string(b),
		`{"tenant":"acme","doc":"doc-1","v":2,"max":3,"hash":"ABC"}`,       // a hash that is not lowercase hex
		`{ "tenant": "acme", "doc": "doc-1", "v": 2, "max": 3 }`,           // another writer's spacing
		`{"max":3,"v":2,"doc":"doc-1","tenant":"acme","hash":"x"}`,         // another field order
		`{"tenant":"acme","doc":"doc-1","v":2,"max":3,"extra":"kept too"}`, // a field the pipeline does not write
	} {
		ops := []history.Op{
			{T: 1, Process: "producer", Seq: 1, Type: history.Invoke, F: history.Enqueue, Job: "a", Key: "acme:doc-1:v2", Value: raw},
			{T: 2, Process: "producer", Seq: 2, Type: history.OK, F: history.Enqueue, Job: "a", Key: "acme:doc-1:v2"},
		}
		r := Check(ops, Final{Drained: true}, Options{})
		if len(r.Violations) != 1 || r.Violations[0].Property != Lost {
			t.Fatalf("%s: %v", raw, properties(r.Violations))
		}
		if got := r.Violations[0].Witness[0]; got != ops[0] {
			t.Errorf("witness enqueue = %+v, want the record %+v", got, ops[0])
		}
	}
	// The pipeline's own metadata is regenerated, not kept.
	c := New(Options{})
	c.Observe(history.Op{T: 1, Process: "producer", Seq: 1, Type: history.Invoke, F: history.Enqueue, Job: "a", Key: "acme:doc-1:v2", Value: string(b)})
	if c.jobs["a"].enqInv.value != metaRegen {
		t.Errorf("the pipeline's metadata %s is kept, not regenerated", b)
	}
}
