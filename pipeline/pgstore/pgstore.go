// Package pgstore is the Postgres effect store of real targets: pipeline.Store and
// pipeline.DualWriter on pgx, in a schema of its own per run (durachk_...), with
// the semantics of pipeline.MemStore: a per-job fence (a token below the highest
// seen is adapters.ErrStaleToken), results deduplicated by idempotency key and
// payload hash (same key, other hash: *pipeline.IdempotencyConflictError),
// idempotent dead letters, cancellations and publication marks, and audited
// reprocessing.
//
// CommitResultWithEvent is one transaction: fence compare-and-set, result insert,
// event insert, the BeforeCommit crash point, COMMIT. A connection lost or a
// deadline hit during COMMIT is adapters.ErrAmbiguous (the commit may or may not
// have happened; a retry dedupes); a failure before COMMIT was sent is
// adapters.ErrUnavailable (nothing was written).
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/adapters/pg/pgdb"
	"github.com/durachk/durachk/pipeline"
)

// Options configure the store. NoFence and KeyOnlyDedupe are the deliberately
// broken stores of pipeline.MemStoreOptions (the negative controls of
// fencing.zombie and idempotency.conflict); never set them otherwise.
type Options struct {
	NoFence       bool  // accept stale tokens
	KeyOnlyDedupe bool  // dedupe on the key alone, silently reusing a result for another payload
	MaxConns      int32 // pool size; 0 means pgdb.DefaultMaxConns (4)
}

// Store is a pipeline.Store in one Postgres schema. It is safe for concurrent use
// by the goroutines of one process, and several processes may open the same
// schema at once: every guarantee is enforced by the database, not by the Store
// value.
type Store struct {
	db     *pgdb.DB
	schema string
	opts   Options
	q      queries
}

var (
	_ pipeline.Store      = (*Store)(nil)
	_ pipeline.Starts     = (*Store)(nil)
	_ pipeline.DualWriter = (*Store)(nil)
)

// queries are the statements of one schema, built once at Open.
type queries struct {
	fence, insertResult, resultHash, insertEvent, deadEvent         string
	deadLetter, cancel, isCancelled, lockDead, audit, markReprocess string
	lockJob, markDone, isCommitted, isDeadOrCancelled, isDead       string
	insertAudit, pending, markPublished, purge, apply               string
	snapResults, snapEvents, snapApplied, snapDead, snapCancelled   string
	snapAudits                                                      string
	beginDelivery, endDelivery, ledger, crashed, started            string
}

const ddl = `
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.fences (
	job_id  text PRIMARY KEY,
	highest numeric(20,0) NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.results (
	key          text PRIMARY KEY,          -- the idempotency key
	seq          bigserial NOT NULL UNIQUE, -- commit order for Snapshot
	job_id       text NOT NULL,
	tenant       text NOT NULL,
	hash         text NOT NULL,
	token        numeric(20,0) NOT NULL,
	event_id     text NOT NULL,
	result       text NOT NULL,
	committed_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS {s}.events (
	id           text PRIMARY KEY,
	seq          bigserial NOT NULL UNIQUE, -- creation order
	key          text NOT NULL,
	job_id       text NOT NULL,
	created_at   timestamptz NOT NULL DEFAULT now(),
	published    boolean NOT NULL DEFAULT false,
	published_at timestamptz,
	body         text NOT NULL DEFAULT '',
	dead_reason  text                       -- set: parked for good, never pending again
);
CREATE INDEX IF NOT EXISTS events_pending ON {s}.events (seq) WHERE NOT published AND dead_reason IS NULL;
CREATE TABLE IF NOT EXISTS {s}.applied (
	id       text PRIMARY KEY,
	count    integer NOT NULL,
	first_by text NOT NULL -- the application that applied it first
);
CREATE TABLE IF NOT EXISTS {s}.dead_letters (
	job_id      text PRIMARY KEY,
	seq         bigserial NOT NULL UNIQUE,
	tenant      text NOT NULL,
	key         text NOT NULL,
	reason      text NOT NULL,
	attempt     integer NOT NULL,
	at          timestamptz NOT NULL,
	reprocessed boolean NOT NULL DEFAULT false
);
CREATE TABLE IF NOT EXISTS {s}.cancelled (
	job_id text PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS {s}.committed_jobs (
	job_id text PRIMARY KEY -- every job with a successful commit, new or deduped
);
CREATE TABLE IF NOT EXISTS {s}.deliveries (
	job_id   text NOT NULL,
	delivery text NOT NULL,                 -- the worker that reached it: process/sequence
	ended    boolean NOT NULL DEFAULT false, -- given back or spent, without a terminal outcome
	spent    boolean NOT NULL DEFAULT false, -- by the job's own failure
	PRIMARY KEY (job_id, delivery)
);
-- The broker's attempt number of the delivery (0: not counted); added for
-- schemas made before it.
ALTER TABLE {s}.deliveries ADD COLUMN IF NOT EXISTS attempt integer NOT NULL DEFAULT 0;
-- Its worker's slot and incarnation (pipeline.Incarnation): a later
-- incarnation started (incarnations) proves the holder dead.
ALTER TABLE {s}.deliveries ADD COLUMN IF NOT EXISTS slot text NOT NULL DEFAULT '';
ALTER TABLE {s}.deliveries ADD COLUMN IF NOT EXISTS inc integer NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS {s}.incarnations (
	slot text PRIMARY KEY,
	inc  integer NOT NULL -- the latest incarnation of the worker slot started
);
CREATE TABLE IF NOT EXISTS {s}.audits (
	old_job  text PRIMARY KEY,
	seq      bigserial NOT NULL UNIQUE,
	new_job  text NOT NULL,
	operator text NOT NULL,
	at       timestamptz NOT NULL
);`

func newQueries(schema string) queries {
	s := strings.NewReplacer("{s}", pgdb.Ident(schema)).Replace
	return queries{
		// The row lock taken here is held until COMMIT: a concurrent Fence with a
		// higher token waits, so commit and re-lease are linearized.
		fence: s(`INSERT INTO {s}.fences AS f (job_id, highest) VALUES ($1, $2)
			ON CONFLICT (job_id) DO UPDATE SET highest = GREATEST(f.highest, EXCLUDED.highest)
			RETURNING highest`),
		// ON CONFLICT DO NOTHING waits for a concurrent insert of the same key to
		// finish; resultHash then reads the winner (a new snapshot per statement).
		insertResult: s(`INSERT INTO {s}.results (key, job_id, tenant, hash, token, event_id, result)
			VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (key) DO NOTHING`),
		resultHash:  s(`SELECT hash FROM {s}.results WHERE key = $1`),
		insertEvent: s(`INSERT INTO {s}.events (id, key, job_id, body) VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING`),
		deadEvent:   s(`UPDATE {s}.events SET dead_reason = $2 WHERE id = $1 AND NOT published AND dead_reason IS NULL`),
		deadLetter: s(`INSERT INTO {s}.dead_letters (job_id, tenant, key, reason, attempt, at)
			VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (job_id) DO NOTHING`),
		cancel: s(`INSERT INTO {s}.cancelled (job_id) VALUES ($1) ON CONFLICT (job_id) DO NOTHING`),
		// One terminal outcome per job: commits, dead letters and cancellations of
		// one job take this lock, so "committed" and "dead" cannot both be written.
		lockJob:     s(`SELECT pg_advisory_xact_lock(hashtextextended('durachk.job:' || $1, 0))`),
		markDone:    s(`INSERT INTO {s}.committed_jobs (job_id) VALUES ($1) ON CONFLICT (job_id) DO NOTHING`),
		isCommitted: s(`SELECT EXISTS (SELECT 1 FROM {s}.committed_jobs WHERE job_id = $1)`),
		isDeadOrCancelled: s(`SELECT EXISTS (SELECT 1 FROM {s}.dead_letters WHERE job_id = $1)
			OR EXISTS (SELECT 1 FROM {s}.cancelled WHERE job_id = $1)`),
		isDead:        s(`SELECT EXISTS (SELECT 1 FROM {s}.dead_letters WHERE job_id = $1)`),
		isCancelled:   s(`SELECT EXISTS (SELECT 1 FROM {s}.cancelled WHERE job_id = $1)`),
		lockDead:      s(`SELECT 1 FROM {s}.dead_letters WHERE job_id = $1 FOR UPDATE`),
		audit:         s(`SELECT old_job, new_job, operator, at FROM {s}.audits WHERE old_job = $1`),
		markReprocess: s(`UPDATE {s}.dead_letters SET reprocessed = true WHERE job_id = $1`),
		insertAudit:   s(`INSERT INTO {s}.audits (old_job, new_job, operator, at) VALUES ($1, $2, $3, $4)`),
		pending: s(`SELECT id, key, job_id, created_at, published, published_at, body, dead_reason FROM {s}.events
			WHERE NOT published AND dead_reason IS NULL ORDER BY seq LIMIT $1`),
		markPublished: s(`UPDATE {s}.events SET published = true, published_at = $2
			WHERE id = ANY($1) AND NOT published`),
		purge: s(`DELETE FROM {s}.events WHERE published AND published_at < $1`),
		apply: s(`INSERT INTO {s}.applied AS a (id, count, first_by) VALUES ($1, 1, $2)
			ON CONFLICT (id) DO UPDATE SET count = a.count + 1 RETURNING first_by`),
		snapResults:   s(`SELECT key, job_id, tenant, hash, token, event_id FROM {s}.results ORDER BY seq`),
		snapEvents:    s(`SELECT id, key, job_id, created_at, published, published_at, body, dead_reason FROM {s}.events ORDER BY seq`),
		snapApplied:   s(`SELECT id, count FROM {s}.applied`),
		snapDead:      s(`SELECT job_id, tenant, key, reason, attempt, at, reprocessed FROM {s}.dead_letters ORDER BY seq`),
		snapCancelled: s(`SELECT job_id FROM {s}.cancelled ORDER BY job_id COLLATE "C"`),
		snapAudits:    s(`SELECT old_job, new_job, operator, at FROM {s}.audits ORDER BY seq`),
		beginDelivery: s(`INSERT INTO {s}.deliveries (job_id, delivery, attempt, slot, inc) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`),
		// Ledger.Crashed and Unsure: the attempts below $3 whose every
		// delivery is unended, with a holder known dead and not.
		crashed: s(`SELECT count(*) FILTER (WHERE dead), count(*) FILTER (WHERE NOT dead) FROM (
			SELECT d.attempt, coalesce(bool_or(i.inc > d.inc), false) AS dead
			FROM {s}.deliveries d LEFT JOIN {s}.incarnations i ON i.slot = d.slot
			WHERE d.job_id = $1 AND d.delivery <> $2 AND d.attempt >= 1 AND d.attempt < $3
			GROUP BY d.attempt HAVING bool_and(NOT d.ended)) a`),
		started: s(`INSERT INTO {s}.incarnations AS i (slot, inc) VALUES ($1, $2)
			ON CONFLICT (slot) DO UPDATE SET inc = GREATEST(i.inc, EXCLUDED.inc)`),
		// The first end counts: a retry after an unknown outcome changes nothing.
		endDelivery: s(`INSERT INTO {s}.deliveries AS d (job_id, delivery, ended, spent) VALUES ($1, $2, true, $3)
			ON CONFLICT (job_id, delivery) DO UPDATE SET ended = true, spent = EXCLUDED.spent WHERE NOT d.ended`),
		ledger: s(`SELECT count(*), count(*) FILTER (WHERE ended), count(*) FILTER (WHERE spent),
			EXISTS (SELECT 1 FROM {s}.committed_jobs WHERE job_id = $1),
			EXISTS (SELECT 1 FROM {s}.dead_letters WHERE job_id = $1) OR EXISTS (SELECT 1 FROM {s}.cancelled WHERE job_id = $1)
			FROM {s}.deliveries WHERE job_id = $1 AND delivery <> $2`),
	}
}

// Open connects to url (its password never appears in an error) and creates
// schema and its tables if they do not exist yet; several processes of one run
// may open the same schema. schema must match ^durachk_[a-z0-9_]{1,50}$. An
// unreachable server is an error wrapping adapters.ErrUnavailable.
func Open(ctx context.Context, url, schema string, opts Options) (*Store, error) {
	if err := pgdb.ValidSchema(schema); err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	db, err := pgdb.Open(ctx, url, pgdb.Options{MaxConns: opts.MaxConns})
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	if err := db.Provision(ctx, schema, strings.ReplaceAll(ddl, "{s}", pgdb.Ident(schema))); err != nil {
		db.Close()
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	return &Store{db: db, schema: schema, opts: opts, q: newQueries(schema)}, nil
}

// Schema is the schema the store lives in.
func (s *Store) Schema() string { return s.schema }

// Drop removes the schema and everything in it. The Store stays open (and
// useless) until Close.
func (s *Store) Drop(ctx context.Context) error {
	return s.wrap(s.db.DropSchema(ctx, s.schema))
}

// DropSchema removes schema, and everything in it, from the server at url
// without creating it first (Open provisions every table: tearing down a
// schema never made, such as a probe's, cost a DDL transaction, which on a
// loaded server outlasted its teardown's bound). A missing schema is not an
// error.
func DropSchema(ctx context.Context, url, schema string) error {
	if err := pgdb.ValidSchema(schema); err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	db, err := pgdb.Open(ctx, url, pgdb.Options{MaxConns: 1})
	if err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	defer db.Close()
	if err := db.DropSchema(ctx, schema); err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	return nil
}

// Close closes the pool. It is idempotent.
func (s *Store) Close() error {
	s.db.Close()
	return nil
}

func (s *Store) wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("pgstore: %w", err)
}

// exec runs a single-statement write.
func (s *Store) exec(ctx context.Context, op, sql string, args ...any) error {
	return s.wrap(s.db.WithConn(ctx, op, func(c *pgxpool.Conn) error {
		_, err := c.Exec(ctx, sql, args...)
		return err
	}))
}

// dbErr maps a pgx error of op (see pgdb.DB.Err).
func (s *Store) dbErr(op string, err error, write bool) error {
	return s.wrap(s.db.Err(op, err, write))
}

func stale(jobID string, token, highest uint64) error {
	return fmt.Errorf("pgstore: job %s token %d below fence %d: %w", jobID, token, highest, adapters.ErrStaleToken)
}

// Fence raises the job's highest token to token in one statement;
// adapters.ErrStaleToken if a higher one was seen. Idempotent.
func (s *Store) Fence(ctx context.Context, jobID string, token uint64) error {
	var highest uint64
	err := s.db.WithConn(ctx, "fence "+jobID, func(c *pgxpool.Conn) error {
		return c.QueryRow(ctx, s.q.fence, jobID, token).Scan(&highest)
	})
	if err != nil {
		return s.wrap(err)
	}
	if highest > token && !s.opts.NoFence {
		return stale(jobID, token, highest)
	}
	return nil
}

// Begin fences token and records the delivery in one transaction, and returns
// the job's ledger without the delivery; a stale token records nothing.
func (s *Store) Begin(ctx context.Context, jobID string, token uint64, delivery string, attempt int) (pipeline.Ledger, error) {
	op := "begin " + jobID
	var led pipeline.Ledger
	tx, err := s.db.Pool.Begin(ctx)
	if err != nil {
		return led, s.dbErr(op, err, false)
	}
	defer pgdb.Rollback(ctx, tx)
	var highest uint64
	if err := tx.QueryRow(ctx, s.q.fence, jobID, token).Scan(&highest); err != nil {
		return led, s.dbErr(op, err, false)
	}
	if highest > token && !s.opts.NoFence {
		return led, stale(jobID, token, highest)
	}
	slot, inc := pipeline.Incarnation(pipeline.DeliveryProcess(delivery))
	if _, err := tx.Exec(ctx, s.q.beginDelivery, jobID, delivery, attempt, slot, inc); err != nil {
		return led, s.dbErr(op, err, false)
	}
	if err := s.scanLedger(ctx, tx, jobID, delivery, &led); err != nil {
		return led, s.dbErr(op, err, false)
	}
	if err := tx.QueryRow(ctx, s.q.crashed, jobID, delivery, attempt).Scan(&led.Crashed, &led.Unsure); err != nil {
		return led, s.dbErr(op, err, false)
	}
	return led, s.dbErr(op, tx.Commit(ctx), true)
}

// Started records that a worker process runs (pipeline.Starts): the latest
// incarnation of its slot. Idempotent.
func (s *Store) Started(ctx context.Context, process string) error {
	slot, inc := pipeline.Incarnation(process)
	return s.exec(ctx, "started "+process, s.q.started, slot, inc)
}

// End records how delivery ended (the first end counts) and returns the job's
// ledger with it.
func (s *Store) End(ctx context.Context, jobID, delivery string, spent bool) (pipeline.Ledger, error) {
	op := "end " + jobID
	var led pipeline.Ledger
	tx, err := s.db.Pool.Begin(ctx)
	if err != nil {
		return led, s.dbErr(op, err, false)
	}
	defer pgdb.Rollback(ctx, tx)
	if _, err := tx.Exec(ctx, s.q.endDelivery, jobID, delivery, spent); err != nil {
		return led, s.dbErr(op, err, false)
	}
	if err := s.scanLedger(ctx, tx, jobID, "", &led); err != nil {
		return led, s.dbErr(op, err, false)
	}
	return led, s.dbErr(op, tx.Commit(ctx), true)
}

func (s *Store) scanLedger(ctx context.Context, tx pgx.Tx, jobID, except string, led *pipeline.Ledger) error {
	return tx.QueryRow(ctx, s.q.ledger, jobID, except).Scan(&led.Seen, &led.Ended, &led.Spent, &led.Committed, &led.Terminal)
}

// CommitResultWithEvent writes the result and its outbox event in one
// transaction; see the package doc for its outcomes.
func (s *Store) CommitResultWithEvent(ctx context.Context, req pipeline.CommitRequest) (bool, error) {
	return s.commit(ctx, req, true, nil)
}

// CommitResultWithEventTx is CommitResultWithEvent with also run inside the same
// transaction, after the result and event are written and before BeforeCommit:
// e.g. pg.Queue.AckTx, so that the ack commits if and only if the result does
// (the queue's schema must be in the same database). also runs only when the
// result is new: a deduped or rejected commit rolls back without calling it, and
// the caller acks as usual. An error from also rolls everything back and is
// returned.
func (s *Store) CommitResultWithEventTx(ctx context.Context, req pipeline.CommitRequest, also func(ctx context.Context, tx pgx.Tx) error) (bool, error) {
	return s.commit(ctx, req, true, also)
}

// WriteResult is the first half of the naive dual write (the negative control of
// outbox.atomic): the result alone, fenced and deduped, committed at once.
func (s *Store) WriteResult(ctx context.Context, req pipeline.CommitRequest) (bool, error) {
	return s.commit(ctx, req, false, nil)
}

// WriteEvent is the second half of the naive dual write.
func (s *Store) WriteEvent(ctx context.Context, req pipeline.CommitRequest) error {
	return s.exec(ctx, "write event "+req.EventID, s.q.insertEvent, req.EventID, req.Key, req.JobID, req.Result)
}

func (s *Store) commit(ctx context.Context, req pipeline.CommitRequest, withEvent bool, also func(context.Context, pgx.Tx) error) (deduped bool, err error) {
	op := "commit " + req.Key
	tx, err := s.db.Pool.Begin(ctx)
	if err != nil {
		return false, s.dbErr(op, err, false)
	}
	// Every return before COMMIT rolls back, including runtime.Goexit from a
	// crash point in BeforeCommit.
	defer pgdb.Rollback(ctx, tx)
	if _, err := tx.Exec(ctx, s.q.lockJob, req.JobID); err != nil {
		return false, s.dbErr(op, err, false)
	}
	var terminal bool
	if err := tx.QueryRow(ctx, s.q.isDeadOrCancelled, req.JobID).Scan(&terminal); err != nil {
		return false, s.dbErr(op, err, false)
	}
	if terminal {
		return false, pipeline.ErrAlreadyTerminal
	}
	var highest uint64
	if err := tx.QueryRow(ctx, s.q.fence, req.JobID, req.Token).Scan(&highest); err != nil {
		return false, s.dbErr(op, err, false)
	}
	if highest > req.Token && !s.opts.NoFence {
		return false, stale(req.JobID, req.Token, highest)
	}
	tag, err := tx.Exec(ctx, s.q.insertResult, req.Key, req.JobID, req.Tenant, req.PayloadHash, req.Token, req.EventID, req.Result)
	if err != nil {
		return false, s.dbErr(op, err, false)
	}
	if tag.RowsAffected() == 0 {
		var existing string
		if err := tx.QueryRow(ctx, s.q.resultHash, req.Key).Scan(&existing); err != nil {
			return false, s.dbErr(op, err, false)
		}
		if existing != req.PayloadHash && !s.opts.KeyOnlyDedupe {
			return false, &pipeline.IdempotencyConflictError{Key: req.Key, ExistingHash: existing, NewHash: req.PayloadHash}
		}
		// Nothing new, but the job is done: record that (and only that).
		if _, err := tx.Exec(ctx, s.q.markDone, req.JobID); err != nil {
			return false, s.dbErr(op, err, false)
		}
		return true, s.dbErr(op, tx.Commit(ctx), true)
	}
	if _, err := tx.Exec(ctx, s.q.markDone, req.JobID); err != nil {
		return false, s.dbErr(op, err, false)
	}
	if withEvent {
		if _, err := tx.Exec(ctx, s.q.insertEvent, req.EventID, req.Key, req.JobID, req.Result); err != nil {
			return false, s.dbErr(op, err, false)
		}
		if also != nil {
			if err := also(ctx, tx); err != nil {
				return false, s.dbErr(op, err, false)
			}
		}
		if req.BeforeCommit != nil {
			req.BeforeCommit(ctx) // the mid_commit crash point: written, not committed
		}
	}
	// Definitely not committed when the caller gave up or the connection is
	// already gone: the deferred rollback (or the server, on the closed
	// connection) ends the transaction.
	if err := ctx.Err(); err != nil {
		return false, s.wrap(fmt.Errorf("%s: not committed: %w", op, err))
	}
	if tx.Conn().IsClosed() {
		return false, fmt.Errorf("pgstore: %s: connection closed before COMMIT: %w", op, adapters.ErrUnavailable)
	}
	return false, s.dbErr(op, tx.Commit(ctx), true)
}

// DeadLetter records rec; idempotent per job id (the first record wins);
// pipeline.ErrAlreadyCommitted if the job committed.
func (s *Store) DeadLetter(ctx context.Context, rec pipeline.DeadLetterRecord) error {
	return s.terminal(ctx, "dead letter "+rec.JobID, rec.JobID, s.q.isCancelled, s.q.deadLetter, rec.JobID, rec.Tenant, rec.Key, rec.Reason, rec.Attempt, rec.At)
}

// Cancel records a terminal cancellation; idempotent; pipeline.ErrAlreadyCommitted
// if the job committed.
func (s *Store) Cancel(ctx context.Context, jobID string) error {
	return s.terminal(ctx, "cancel "+jobID, jobID, s.q.isDead, s.q.cancel, jobID)
}

// terminal writes a non-commit terminal outcome under the job's lock, unless the
// job committed or has the other non-commit outcome (the query other).
func (s *Store) terminal(ctx context.Context, op, jobID, other, sql string, args ...any) error {
	tx, err := s.db.Pool.Begin(ctx)
	if err != nil {
		return s.dbErr(op, err, false)
	}
	defer pgdb.Rollback(ctx, tx)
	if _, err := tx.Exec(ctx, s.q.lockJob, jobID); err != nil {
		return s.dbErr(op, err, false)
	}
	var done bool
	if err := tx.QueryRow(ctx, s.q.isCommitted, jobID).Scan(&done); err != nil {
		return s.dbErr(op, err, false)
	}
	if done {
		return pipeline.ErrAlreadyCommitted
	}
	if err := tx.QueryRow(ctx, other, jobID).Scan(&done); err != nil {
		return s.dbErr(op, err, false)
	}
	if done {
		return pipeline.ErrAlreadyTerminal
	}
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		return s.dbErr(op, err, false)
	}
	return s.dbErr(op, tx.Commit(ctx), true)
}

// RecordReprocess marks the dead job reprocessed and writes the audit entry in one
// transaction. Its sentinel errors (pipeline.ErrOperatorRequired,
// ErrCancelledJob, ErrNotDeadLettered) are returned unwrapped, as MemStore does. A
// repeat returns the first audit.
func (s *Store) RecordReprocess(ctx context.Context, a pipeline.Audit) (pipeline.Audit, error) {
	if a.Operator == "" {
		return pipeline.Audit{}, pipeline.ErrOperatorRequired
	}
	op := "reprocess " + a.OldJob
	tx, err := s.db.Pool.Begin(ctx)
	if err != nil {
		return pipeline.Audit{}, s.dbErr(op, err, false)
	}
	defer pgdb.Rollback(ctx, tx)
	var cancelled bool
	if err := tx.QueryRow(ctx, s.q.isCancelled, a.OldJob).Scan(&cancelled); err != nil {
		return pipeline.Audit{}, s.dbErr(op, err, false)
	}
	if cancelled {
		return pipeline.Audit{}, pipeline.ErrCancelledJob
	}
	// The row lock serializes concurrent reprocessing of one dead job.
	var one int
	switch err := tx.QueryRow(ctx, s.q.lockDead, a.OldJob).Scan(&one); {
	case errors.Is(err, pgx.ErrNoRows):
		return pipeline.Audit{}, pipeline.ErrNotDeadLettered
	case err != nil:
		return pipeline.Audit{}, s.dbErr(op, err, false)
	}
	var prev pipeline.Audit
	switch err := tx.QueryRow(ctx, s.q.audit, a.OldJob).Scan(&prev.OldJob, &prev.NewJob, &prev.Operator, &prev.At); {
	case err == nil:
		prev.At = prev.At.UTC()
		return prev, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return pipeline.Audit{}, s.dbErr(op, err, false)
	}
	if _, err := tx.Exec(ctx, s.q.markReprocess, a.OldJob); err != nil {
		return pipeline.Audit{}, s.dbErr(op, err, false)
	}
	if _, err := tx.Exec(ctx, s.q.insertAudit, a.OldJob, a.NewJob, a.Operator, a.At); err != nil {
		return pipeline.Audit{}, s.dbErr(op, err, false)
	}
	if err := tx.Commit(ctx); err != nil {
		return pipeline.Audit{}, s.dbErr(op, err, true)
	}
	return a, nil
}

// PendingEvents returns up to limit unpublished events in creation order (limit
// 0: none, negative: all, as MemStore).
func (s *Store) PendingEvents(ctx context.Context, limit int) ([]pipeline.Event, error) {
	if limit == 0 {
		return nil, nil
	}
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	rows, err := s.db.Pool.Query(ctx, s.q.pending, lim)
	if err != nil {
		return nil, s.dbErr("pending events", err, false)
	}
	out, err := pgx.CollectRows(rows, scanEvent)
	return out, s.dbErr("pending events", err, false)
}

func scanEvent(row pgx.CollectableRow) (pipeline.Event, error) {
	var e pipeline.Event
	var at *time.Time
	var dead *string
	if err := row.Scan(&e.ID, &e.Key, &e.JobID, &e.CreatedAt, &e.Published, &at, &e.Body, &dead); err != nil {
		return e, err
	}
	if dead != nil {
		e.Dead, e.DeadReason = true, *dead
	}
	e.CreatedAt = e.CreatedAt.UTC()
	if at != nil {
		e.PublishedAt = at.UTC()
	}
	return e, nil
}

// MarkPublished marks the events published at at; idempotent (an event keeps its
// first publication time).
func (s *Store) MarkPublished(ctx context.Context, ids []string, at time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	return s.exec(ctx, "mark published", s.q.markPublished, ids, at)
}

// DeadLetterEvent parks an unpublished event for good with reason; idempotent.
func (s *Store) DeadLetterEvent(ctx context.Context, id, reason string) error {
	return s.exec(ctx, "dead letter event "+id, s.q.deadEvent, id, reason)
}

// PurgePublished removes events published before cutoff and returns how many.
func (s *Store) PurgePublished(ctx context.Context, cutoff time.Time) (int, error) {
	var n int64
	err := s.db.WithConn(ctx, "purge published", func(c *pgxpool.Conn) error {
		tag, err := c.Exec(ctx, s.q.purge, cutoff)
		n = tag.RowsAffected()
		return err
	})
	return int(n), s.wrap(err)
}

// ApplyEvent counts the consumer's application of eventID and reports whether
// the first application was by by. The count is not idempotent (an ErrAmbiguous
// may have counted); the answer is, per by.
func (s *Store) ApplyEvent(ctx context.Context, eventID, by string) (bool, error) {
	var first string
	err := s.db.WithConn(ctx, "apply "+eventID, func(c *pgxpool.Conn) error {
		return c.QueryRow(ctx, s.q.apply, eventID, by).Scan(&first)
	})
	return err == nil && first == by, s.wrap(err)
}

// Snapshot reads the whole state from one consistent snapshot: results in commit
// order, events in creation order, dead letters and audits in insertion order,
// cancelled job ids sorted bytewise (as sort.Strings). Times are UTC, with the
// database's microsecond precision.
func (s *Store) Snapshot(ctx context.Context) (pipeline.State, error) {
	const op = "snapshot"
	st := pipeline.State{Applied: map[string]int{}}
	tx, err := s.db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return st, s.dbErr(op, err, false)
	}
	defer pgdb.Rollback(ctx, tx)
	reads := []struct {
		sql  string
		each func(pgx.Rows) error
	}{
		{s.q.snapResults, func(r pgx.Rows) error {
			var x pipeline.Result
			err := r.Scan(&x.Key, &x.JobID, &x.Tenant, &x.Hash, &x.Token, &x.EventID)
			st.Results = append(st.Results, x)
			return err
		}},
		{s.q.snapEvents, func(r pgx.Rows) error {
			e, err := scanEvent(r)
			st.Events = append(st.Events, e)
			return err
		}},
		{s.q.snapApplied, func(r pgx.Rows) error {
			var id string
			var n int
			err := r.Scan(&id, &n)
			st.Applied[id] = n
			return err
		}},
		{s.q.snapDead, func(r pgx.Rows) error {
			var d pipeline.DeadLetterRecord
			err := r.Scan(&d.JobID, &d.Tenant, &d.Key, &d.Reason, &d.Attempt, &d.At, &d.Reprocessed)
			d.At = d.At.UTC()
			st.DeadLetters = append(st.DeadLetters, d)
			return err
		}},
		{s.q.snapCancelled, func(r pgx.Rows) error {
			var id string
			err := r.Scan(&id)
			st.Cancelled = append(st.Cancelled, id)
			return err
		}},
		{s.q.snapAudits, func(r pgx.Rows) error {
			var a pipeline.Audit
			err := r.Scan(&a.OldJob, &a.NewJob, &a.Operator, &a.At)
			a.At = a.At.UTC()
			st.Audits = append(st.Audits, a)
			return err
		}},
	}
	for _, rd := range reads {
		if err := eachRow(ctx, tx, rd.sql, rd.each); err != nil {
			return pipeline.State{}, s.dbErr(op, err, false)
		}
	}
	return st, nil
}

// eachRow runs sql and calls each for every row.
func eachRow(ctx context.Context, tx pgx.Tx, sql string, each func(pgx.Rows) error) error {
	rows, err := tx.Query(ctx, sql)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
