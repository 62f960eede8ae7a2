package pipeline

import (
	"context"
	"encoding/json"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/history"
)

// JobMeta is what an enqueue record tells the checker about its job.
type JobMeta struct {
	Tenant      string `json:"tenant"`
	Doc         string `json:"doc"`
	Version     int    `json:"v"`
	MaxAttempts int    `json:"max"`
	Deadline    int64  `json:"deadline,omitempty"` // Unix ns; 0: none
	Group       string `json:"group,omitempty"`
	Hash        string `json:"hash"`
	Permanent   bool   `json:"permanent,omitempty"`
	Poison      bool   `json:"poison,omitempty"`
	Stubborn    bool   `json:"stubborn,omitempty"`
	// FailTransient: the job fails its first n attempts transiently (-1: every
	// attempt, then Stubborn is set too). A job with n ≥ MaxAttempts is
	// dead-lettered by design.
	FailTransient int `json:"fail_transient,omitempty"`
	// AgeBudget (ns) bounds how long infrastructure failures (broker or store
	// unavailable, timeouts) may hold the job up before the pipeline's written
	// policy for it applies; 0: none.
	AgeBudget int64 `json:"age_budget,omitempty"`
	// Created (Unix ns; 0: not said) is the job's creation time, from which its
	// age is measured.
	Created int64 `json:"created,omitempty"`
	// Quick: the job's work has no slow step, so the pipeline never renews
	// its lease while it works; a holder found in that work after its lease
	// ran out was stalled (a starved process), not working without renewing.
	// Absent in histories recorded before it (then nothing is assumed).
	Quick bool `json:"quick,omitempty"`
}

// MetaOf describes job for the history.
func MetaOf(job adapters.Job) JobMeta {
	m := JobMeta{Tenant: job.Tenant, Doc: job.DocumentID, Version: job.Version, MaxAttempts: job.MaxAttempts,
		Group: job.Group, Hash: Hash(job.Payload), AgeBudget: int64(AgeBudgetOf(job))}
	if !job.Deadline.IsZero() {
		m.Deadline = job.Deadline.UnixNano()
	}
	if !job.CreatedAt.IsZero() {
		m.Created = job.CreatedAt.UnixNano()
	}
	if p, err := DecodePayload(job.Payload); err == nil {
		// A job that fails below a version fails permanently at this one.
		m.Permanent = p.FailPermanent || job.Version < p.FailBelowVersion
		m.Poison, m.Stubborn, m.FailTransient = p.Crash, p.FailTransient < 0, p.FailTransient
		m.Quick = p.Slow <= 0
	}
	return m
}

// Enqueue hands job to q and records it; the ok record means the broker
// acknowledged the job, so from then on it must not be lost.
func Enqueue(ctx context.Context, env *Env, q adapters.Queue, job adapters.Job) error {
	meta, _ := json.Marshal(MetaOf(job))
	key, _ := BuildKey(job.Tenant, job.DocumentID, job.Version)
	env.Record(history.Op{Type: history.Invoke, F: history.Enqueue, Job: job.ID, Key: key, Value: string(meta)})
	err := q.Enqueue(ctx, job)
	env.Record(history.Op{Type: RecordType(err), F: history.Enqueue, Job: job.ID, Key: key, Err: ErrorCode(err)})
	return err
}
