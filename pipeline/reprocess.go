package pipeline

import (
	"context"
	"strconv"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/history"
)

// Reprocess turns a dead-lettered job into a new job at operation version + 1,
// audited with the operator's id; the dead job stays dead. It is idempotent per
// dead job: a repeat re-enqueues the same new job, which the store dedupes.
// inPlace is the negative control of dlq.reprocess (the dead job is re-enqueued as
// it was, unaudited); never set it otherwise.
func Reprocess(ctx context.Context, env *Env, store Store, q adapters.Queue, dead adapters.Job, operator string, inPlace bool) (adapters.Job, error) {
	env.Record(history.Op{Type: history.Invoke, F: history.Reprocess, Job: dead.ID, Value: operator})
	fail := func(err error) (adapters.Job, error) {
		env.Record(history.Op{Type: history.Fail, F: history.Reprocess, Job: dead.ID, Value: operator, Err: reprocessCode(err)})
		return adapters.Job{}, err
	}
	next := dead
	if !inPlace {
		if operator == "" {
			return fail(ErrOperatorRequired)
		}
		next.ID = dead.ID + ".v" + strconv.Itoa(dead.Version+1)
		next.Version = dead.Version + 1
		next.CreatedAt = env.Now()
		if _, err := store.RecordReprocess(ctx, Audit{OldJob: dead.ID, NewJob: next.ID, Operator: operator, At: env.Now()}); err != nil {
			return fail(err)
		}
	}
	if err := Enqueue(ctx, env, q, next); err != nil {
		return fail(err)
	}
	env.Record(history.Op{Type: history.OK, F: history.Reprocess, Job: dead.ID, Value: next.ID})
	return next, nil
}

func reprocessCode(err error) string {
	switch err {
	case ErrOperatorRequired:
		return "operator_required"
	case ErrNotDeadLettered:
		return "not_dead_lettered"
	case ErrCancelledJob:
		return "cancelled"
	}
	return ErrorCode(err)
}
