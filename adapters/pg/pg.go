// Package pg is the Postgres queue adapter: a jobs table in a schema of its own
// per run (durachk_<runid>_q), leased with SELECT ... FOR UPDATE SKIP LOCKED.
//
// A lease is one short statement (its own transaction): it claims the oldest
// visible job, sets lease_until, bumps the fencing token and the delivery count,
// and commits. No row lock is held while the job runs; the lease is the
// lease_until column, and every later call on the delivery (Ack, Nack, Extend,
// DeadLetter) names the job row and the token it was given, so a stale holder is
// refused with adapters.ErrStaleToken. All clocks are the database server's;
// the Go process's clock never decides whether a lease is live. A lease, an
// extension or a nack's delay runs from clock_timestamp(), the moment the row
// is written, not from now(), the statement's start: on a busy server a
// statement may start a second before it writes, and a lease computed from
// its start would be over before its holder got it.
//
// Visible: visible_at <= now() AND (lease_until IS NULL OR lease_until <= now()).
// The semantics mirror the reference broker adapters/mem: acceptance order,
// per-row tokens, Ack/Nack/DeadLetter accepted with the current token (even after
// the lease ran out, as long as no newer delivery exists), Extend only while the
// lease is live, native dead-lettering past an optional delivery limit, and an
// optional FIFO mode in which only the oldest job of a group is eligible.
package pg

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/adapters/pg/pgdb"
)

// Broker is the Capabilities.Broker name and the OpError target of this adapter.
const Broker = "postgres"

// DeliveryLimitReason is the reason the dead-letter table records for a job the
// queue dead-lettered itself, past Options.DeliveryLimit.
const DeliveryLimitReason = "delivery_limit"

// Options configure the queue. The zero value is an unordered queue without a
// delivery limit, on the server's synchronous_commit, with a pool of 4. They are
// read once, by Open.
type Options struct {
	// DeliveryLimit dead-letters a job natively when it would be delivered for
	// the (limit+1)-th time, as adapters/mem does. 0: no limit.
	DeliveryLimit int
	// FIFO delivers the jobs of one group in acceptance order, one at a time: only
	// the oldest job of a group is eligible, and only while it is not in flight.
	FIFO bool
	// SyncCommit, if set, is the synchronous_commit of every session of the pool
	// (on, off, local, remote_write, remote_apply). "off" makes the queue not
	// Durable.
	SyncCommit string
	// Unlogged creates the queue's tables UNLOGGED: the server truncates them in
	// crash recovery, so every accepted job is lost when the server is killed. A
	// known-bad configuration (the negative control of durability.ack).
	Unlogged bool
	// MaxConns caps the pool; 0 means pgdb.DefaultMaxConns (4).
	MaxConns int32
	// BreakOrder is a deliberately broken FIFO (newest first) that still claims
	// FIFO, as in adapters/mem: the negative control of order.fifo. Never set it
	// otherwise.
	BreakOrder bool
}

var syncCommitValues = []string{"on", "off", "local", "remote_write", "remote_apply"}

var runIDRE = regexp.MustCompile(`^[a-z0-9_]{1,40}$`)

// Schema returns the schema a queue of runID lives in: durachk_<runID>_q.
func Schema(runID string) string { return "durachk_" + runID + "_q" }

// Queue is a Postgres-backed adapters.Queue with Extender, DeadLetterer and
// Inspector. It is safe for concurrent use by the goroutines of one process, and
// any number of processes may open the same run's queue: leases are exclusive by
// the database's row locks, never by state in the Queue value.
type Queue struct {
	db      *pgdb.DB
	schema  string
	opts    Options
	caps    adapters.Capabilities
	q       queries
	version string
	closed  atomic.Bool
}

var (
	_ adapters.Queue        = (*Queue)(nil)
	_ adapters.Extender     = (*Queue)(nil)
	_ adapters.DeadLetterer = (*Queue)(nil)
	_ adapters.Inspector    = (*Queue)(nil)
)

const ddl = `
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.jobs (
	id           bigserial PRIMARY KEY, -- acceptance order
	job_id       text NOT NULL,
	tenant       text NOT NULL,
	document_id  text NOT NULL,
	version      bigint NOT NULL,
	payload      bytea,
	created_at   timestamptz NOT NULL,
	deadline     timestamptz,           -- NULL: no deadline
	max_attempts bigint NOT NULL,
	grp          text NOT NULL DEFAULT '',
	visible_at   timestamptz NOT NULL DEFAULT now(),
	lease_until  timestamptz,           -- NULL: never leased, or nacked
	token        bigint NOT NULL DEFAULT 0,
	deliveries   integer NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_grp ON {s}.jobs (grp, id) WHERE grp <> '';
CREATE TABLE IF NOT EXISTS {s}.dead (
	id           bigint PRIMARY KEY,    -- the row id it had in jobs
	seq          bigserial NOT NULL UNIQUE,
	job_id       text NOT NULL,
	tenant       text NOT NULL,
	document_id  text NOT NULL,
	version      bigint NOT NULL,
	payload      bytea,
	created_at   timestamptz NOT NULL,
	deadline     timestamptz,
	max_attempts bigint NOT NULL,
	grp          text NOT NULL,
	token        bigint NOT NULL,
	deliveries   integer NOT NULL,
	reason       text NOT NULL,
	by_broker    boolean NOT NULL DEFAULT false, -- moved by the queue at its delivery limit, not by DeadLetter
	dead_at      timestamptz NOT NULL DEFAULT now()
);`

// jobCols are the columns a delivery is built from, in scan order.
const jobCols = `id, job_id, tenant, document_id, version, payload, created_at, deadline, max_attempts, grp, token, deliveries`

// queries are the statements of one queue, built once at Open.
type queries struct {
	enqueue, lease, token, ack, nack, extend, deadLetter, inspectJobs, inspectDead string
}

// leaseSQL builds the lease statement. The candidate is claimed with FOR UPDATE
// SKIP LOCKED; under READ COMMITTED a row leased by a concurrent statement is
// re-checked against the visibility condition on its newest version, so two
// statements never lease one row. With a delivery limit, a candidate that has
// been delivered limit times is moved to the dead table instead and reported
// with dead = true (the caller then leases again).
func leaseSQL(opts Options) string {
	first, before := "ASC", "<"
	if opts.BreakOrder {
		first, before = "DESC", ">"
	}
	eligible := `j.visible_at <= now() AND (j.lease_until IS NULL OR j.lease_until <= now())`
	if opts.FIFO {
		// The first row of the group, whatever its state, blocks the rest.
		eligible += ` AND (j.grp = '' OR NOT EXISTS (SELECT 1 FROM {s}.jobs o WHERE o.grp <> '' AND o.grp = j.grp AND o.id ` + before + ` j.id))`
	}
	over := "false"
	if opts.DeliveryLimit > 0 {
		over = "j.deliveries >= " + strconv.Itoa(opts.DeliveryLimit)
	}
	pick := `SELECT j.id, ` + over + ` AS over FROM {s}.jobs j WHERE ` + eligible + `
		ORDER BY j.id ` + first + ` FOR UPDATE SKIP LOCKED LIMIT 1`
	update := `UPDATE {s}.jobs j SET lease_until = clock_timestamp() + $1::interval, token = j.token + 1, deliveries = j.deliveries + 1
		FROM c WHERE j.id = c.id AND NOT c.over RETURNING ` + prefixed("j", jobCols)
	if opts.DeliveryLimit == 0 {
		return `WITH c AS (` + pick + `), u AS (` + update + `) SELECT false, ` + jobCols + ` FROM u`
	}
	return `WITH c AS (` + pick + `),
		d AS (DELETE FROM {s}.jobs j USING c WHERE j.id = c.id AND c.over RETURNING ` + prefixed("j", jobCols) + `),
		ins AS (INSERT INTO {s}.dead (` + jobCols + `, reason, by_broker) SELECT ` + jobCols + `, '` + DeliveryLimitReason + `', true FROM d),
		u AS (` + update + `)
		SELECT false, ` + jobCols + ` FROM u UNION ALL SELECT true, ` + jobCols + ` FROM d`
}

func prefixed(alias, cols string) string {
	parts := strings.Split(cols, ", ")
	for i, p := range parts {
		parts[i] = alias + "." + p
	}
	return strings.Join(parts, ", ")
}

func newQueries(schema string, opts Options) queries {
	s := strings.NewReplacer("{s}", pgdb.Ident(schema)).Replace
	return queries{
		enqueue: s(`INSERT INTO {s}.jobs (job_id, tenant, document_id, version, payload, created_at, deadline, max_attempts, grp)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`),
		lease:  s(leaseSQL(opts)),
		token:  s(`SELECT token FROM {s}.jobs WHERE id = $1`),
		ack:    s(`DELETE FROM {s}.jobs WHERE id = $1 AND token = $2`),
		nack:   s(`UPDATE {s}.jobs SET lease_until = NULL, visible_at = clock_timestamp() + $3::interval WHERE id = $1 AND token = $2`),
		extend: s(`UPDATE {s}.jobs SET lease_until = clock_timestamp() + $3::interval WHERE id = $1 AND token = $2 AND lease_until > clock_timestamp()`),
		deadLetter: s(`WITH m AS (DELETE FROM {s}.jobs WHERE id = $1 AND token = $2 RETURNING ` + jobCols + `)
			INSERT INTO {s}.dead (` + jobCols + `, reason) SELECT ` + jobCols + `, $3::text FROM m`),
		inspectJobs: s(`SELECT job_id, lease_until IS NOT NULL AND lease_until > now() FROM {s}.jobs ORDER BY id`),
		inspectDead: s(`SELECT job_id, by_broker, reason, deliveries, dead_at FROM {s}.dead ORDER BY seq`),
	}
}

// Open connects to url (its password never appears in an error), creates the
// run's schema Schema(runID) and its tables if they do not exist yet, and reads
// the server's durability settings for Capabilities. runID must match
// ^[a-z0-9_]{1,40}$. An unreachable server is an error wrapping
// adapters.ErrUnavailable.
func Open(ctx context.Context, url, runID string, opts Options) (*Queue, error) {
	if !runIDRE.MatchString(runID) {
		return nil, fmt.Errorf("pg: run id %q must match %s", runID, runIDRE)
	}
	if opts.DeliveryLimit < 0 {
		return nil, fmt.Errorf("pg: negative delivery limit %d", opts.DeliveryLimit)
	}
	var session map[string]string
	if opts.SyncCommit != "" {
		if !slices.Contains(syncCommitValues, opts.SyncCommit) {
			return nil, fmt.Errorf("pg: synchronous_commit %q is not one of %s", opts.SyncCommit, strings.Join(syncCommitValues, ", "))
		}
		session = map[string]string{"synchronous_commit": opts.SyncCommit}
	}
	schema := Schema(runID)
	db, err := pgdb.Open(ctx, url, pgdb.Options{MaxConns: opts.MaxConns, Session: session})
	if err != nil {
		return nil, fmt.Errorf("pg: %w", err)
	}
	q := &Queue{db: db, schema: schema, opts: opts, q: newQueries(schema, opts)}
	if err := q.open(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("pg: %w", err)
	}
	return q, nil
}

func (q *Queue) open(ctx context.Context) error {
	schemaDDL := strings.ReplaceAll(ddl, "{s}", pgdb.Ident(q.schema))
	if q.opts.Unlogged {
		schemaDDL = strings.ReplaceAll(schemaDDL, "CREATE TABLE", "CREATE UNLOGGED TABLE")
	}
	// A standby (a client of a replicated target connected to a replica) takes
	// no DDL: the run's schema comes to it from the primary, and its writes
	// are refused (read-only transaction), as a replica's are.
	var standby bool
	if err := q.db.Pool.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&standby); err != nil {
		return q.db.Err("read recovery state", err, false)
	}
	if !standby {
		if err := q.db.Provision(ctx, q.schema, schemaDDL); err != nil {
			return err
		}
	}
	var syncCommit, fsync string
	err := q.db.Pool.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), current_setting('fsync'), current_setting('server_version')`).Scan(&syncCommit, &fsync, &q.version)
	if err != nil {
		return q.db.Err("read durability settings", err, false)
	}
	q.caps = capabilities(q.opts, q.schema, syncCommit, fsync)
	return nil
}

// capabilities are the documented semantics of this adapter on a server with the
// given settings.
func capabilities(opts Options, schema, syncCommit, fsync string) adapters.Capabilities {
	durable := syncCommit != "off" && fsync != "off" && !opts.Unlogged
	notes := []string{
		"lease, visibility and delay clocks are the database server's (clock_timestamp() where one starts), not the worker's clock",
		"the dead-letter table (durachk_<run id>_q.dead) is part of the queue",
		"synchronous_commit=" + syncCommit + ", fsync=" + fsync,
	}
	if opts.DeliveryLimit > 0 {
		notes = append(notes, fmt.Sprintf("delivery limit %d: a job is dead-lettered natively instead of its delivery %d", opts.DeliveryLimit, opts.DeliveryLimit+1))
	}
	if opts.BreakOrder {
		notes = append(notes, "deliberately broken FIFO (newest first): a negative control")
	}
	if opts.Unlogged {
		notes = append(notes, "UNLOGGED tables: crash recovery empties the queue")
	}
	if !durable {
		notes = append(notes, "an acknowledged Enqueue may be lost if the server crashes (synchronous_commit or fsync is off): not durable")
	}
	return adapters.Capabilities{
		Broker: Broker, Lease: adapters.Native, LeaseExtension: adapters.Native,
		Token: adapters.Native, FencedAck: true, DeliveryCount: adapters.Native,
		DeadLetter: adapters.Native, DelayedNack: adapters.Native, FIFO: opts.FIFO || opts.BreakOrder,
		Durable: durable, BrokerKill: false, Notes: notes,
	}
}

// ServerVersion names what the queue runs on, e.g. "postgres 15.19".
func (q *Queue) ServerVersion() string {
	v, _, _ := strings.Cut(q.version, " ")
	return "postgres " + v
}

// Capabilities are read once at Open.
func (q *Queue) Capabilities() adapters.Capabilities { return q.caps }

// Schema is the schema the queue lives in.
func (q *Queue) Schema() string { return q.schema }

// Close closes the pool; later calls fail with adapters.ErrClosed. Idempotent.
func (q *Queue) Close() error {
	if !q.closed.Swap(true) {
		q.db.Close()
	}
	return nil
}

// Drop removes the queue's schema with its jobs and dead letters. Call it before
// Close.
func (q *Queue) Drop(ctx context.Context) error {
	if q.closed.Load() {
		return fmt.Errorf("pg: drop %s: %w", q.schema, adapters.ErrClosed)
	}
	if err := q.db.DropSchema(ctx, q.schema); err != nil {
		return fmt.Errorf("pg: %w", err)
	}
	return nil
}

// opErr wraps err of op on delivery d (zero for Enqueue, Lease and Inspect).
// Errors from the database are mapped by pgdb before they get here.
func opErr(op string, d adapters.Delivery, err error) error {
	if err == nil {
		return nil
	}
	return &adapters.OpError{Target: Broker, Op: op, JobID: d.Job.ID, Attempt: d.Attempt, Err: err}
}

// Enqueue inserts job; it is visible at once. A lost reply is
// adapters.ErrAmbiguous: a retry may enqueue a second copy (at-least-once).
func (q *Queue) Enqueue(ctx context.Context, job adapters.Job) error {
	d := adapters.Delivery{Job: job}
	if q.closed.Load() {
		return opErr("enqueue", d, adapters.ErrClosed)
	}
	var deadline *time.Time
	if !job.Deadline.IsZero() {
		deadline = &job.Deadline
	}
	return opErr("enqueue", d, q.db.WithConn(ctx, "enqueue", func(c *pgxpool.Conn) error {
		_, err := c.Exec(ctx, q.q.enqueue, job.ID, job.Tenant, job.DocumentID, job.Version, job.Payload,
			job.CreatedAt, deadline, job.MaxAttempts, job.Group)
		return err
	}))
}

// Lease claims the oldest visible job for lease (FIFO: the oldest of its group,
// and only while it is not in flight) in one committed statement, or returns
// adapters.ErrNoJob. With a delivery limit, jobs delivered limit times are moved
// to the dead-letter table on the way, as adapters/mem does. A lost reply is
// adapters.ErrAmbiguous: a lease may have been granted, and will expire.
func (q *Queue) Lease(ctx context.Context, lease time.Duration) (adapters.Delivery, error) {
	var none adapters.Delivery
	if q.closed.Load() {
		return none, opErr("lease", none, adapters.ErrClosed)
	}
	for {
		var dead bool
		var d adapters.Delivery
		var id, token int64
		var deadline *time.Time
		err := q.db.WithConn(ctx, "lease", func(c *pgxpool.Conn) error {
			return c.QueryRow(ctx, q.q.lease, lease).Scan(&dead, &id, &d.Job.ID, &d.Job.Tenant, &d.Job.DocumentID,
				&d.Job.Version, &d.Job.Payload, &d.Job.CreatedAt, &deadline, &d.Job.MaxAttempts, &d.Job.Group, &token, &d.Attempt)
		})
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return none, adapters.ErrNoJob
		case err != nil:
			return none, opErr("lease", none, err)
		case dead:
			continue // moved past its delivery limit; look again
		}
		d.Job.CreatedAt = d.Job.CreatedAt.UTC()
		if deadline != nil {
			d.Job.Deadline = deadline.UTC()
		}
		d.Token = uint64(token)
		d.Receipt = receipt(id, d.Token)
		return d, nil
	}
}

func receipt(id int64, token uint64) string {
	return strconv.FormatInt(id, 10) + ":" + strconv.FormatUint(token, 10)
}

// rowID is the jobs row named by d's receipt.
func rowID(d adapters.Delivery) (int64, error) {
	idStr, _, ok := strings.Cut(d.Receipt, ":")
	id, err := strconv.ParseInt(idStr, 10, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("pg: bad receipt %q", d.Receipt)
	}
	return id, nil
}

// querier is what onDelivery needs: a pooled connection, or a caller's
// transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// onDelivery runs the write of op for d with the given statement (its first two
// parameters are the row id and the token), on tx if it is not nil, else on the
// pool. When the write touches no row it finds out why: the row is gone
// (adapters.ErrLeaseLost), it has a newer token (adapters.ErrStaleToken), or else
// (Extend of an expired lease) ErrLeaseLost.
func (q *Queue) onDelivery(ctx context.Context, tx pgx.Tx, op, sql string, d adapters.Delivery, args ...any) error {
	if q.closed.Load() {
		return opErr(op, d, adapters.ErrClosed)
	}
	id, err := rowID(d)
	if err != nil {
		return opErr(op, d, err)
	}
	var touched bool
	write := func(db querier) error {
		tag, err := db.Exec(ctx, sql, append([]any{id, int64(d.Token)}, args...)...)
		touched = tag.RowsAffected() > 0
		return err
	}
	why := func(db querier) error {
		var token int64
		switch err := db.QueryRow(ctx, q.q.token, id).Scan(&token); {
		case errors.Is(err, pgx.ErrNoRows):
			return adapters.ErrLeaseLost
		case err != nil:
			return q.db.Err(op, err, false) // the write touched nothing: definite
		case uint64(token) != d.Token:
			return adapters.ErrStaleToken
		}
		return adapters.ErrLeaseLost
	}
	if tx != nil {
		// Nothing is applied before the caller commits.
		if err := write(tx); err != nil {
			return opErr(op, d, q.db.Err(op, err, false))
		}
		if touched {
			return nil
		}
		return opErr(op, d, why(tx))
	}
	var verdict error
	err = q.db.WithConn(ctx, op, func(c *pgxpool.Conn) error {
		if err := write(c); err != nil || touched {
			return err
		}
		verdict = why(c)
		return nil
	})
	if err == nil {
		err = verdict
	}
	return opErr(op, d, err)
}

// Ack deletes the job if d is its current delivery: adapters.ErrStaleToken once a
// newer delivery exists, adapters.ErrLeaseLost once the job is gone.
func (q *Queue) Ack(ctx context.Context, d adapters.Delivery) error {
	return q.onDelivery(ctx, nil, "ack", q.q.ack, d)
}

// AckTx is Ack inside the caller's transaction tx: the job's row is deleted when,
// and only when, tx commits. It is for the profile in which the ack commits
// together with the store's result (see pgstore.Store.CommitResultWithEventTx);
// the queue's schema must then be in the store's database. The row stays locked
// by tx until it ends, so a concurrent Lease skips it. Errors are those of Ack;
// after one, tx should be rolled back.
func (q *Queue) AckTx(ctx context.Context, tx pgx.Tx, d adapters.Delivery) error {
	return q.onDelivery(ctx, tx, "ack", q.q.ack, d)
}

// AckIn returns AckTx of d as a function of the transaction, the form
// pgstore.Store.CommitResultWithEventTx takes, so that callers can join the ack
// to the store's commit without naming the driver's types.
func (q *Queue) AckIn(d adapters.Delivery) func(ctx context.Context, tx pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error { return q.AckTx(ctx, tx, d) }
}

// Nack clears the lease and makes the job visible after delay, if d is its
// current delivery.
func (q *Queue) Nack(ctx context.Context, d adapters.Delivery, delay time.Duration) error {
	return q.onDelivery(ctx, nil, "nack", q.q.nack, d, delay)
}

// Extend moves the lease end of a live delivery to clock_timestamp()+lease;
// adapters.ErrLeaseLost once the lease expired or the job is gone,
// adapters.ErrStaleToken once a newer delivery exists.
func (q *Queue) Extend(ctx context.Context, d adapters.Delivery, lease time.Duration) error {
	return q.onDelivery(ctx, nil, "extend", q.q.extend, d, lease)
}

// DeadLetter moves the current delivery's job to the dead-letter table with
// reason, in one statement.
func (q *Queue) DeadLetter(ctx context.Context, d adapters.Delivery, reason string) error {
	return q.onDelivery(ctx, nil, "dead letter", q.q.deadLetter, d, reason)
}

// Inspect lists what is left, by job id, from one snapshot: queued (including
// delayed) and in flight in acceptance order, dead letters in the order they
// died. Moved lists the dead letters the queue moved itself past its delivery
// limit (reason delivery_limit, the deliveries they had, the server's time),
// never those of DeadLetter.
func (q *Queue) Inspect(ctx context.Context) (adapters.Inventory, error) {
	var inv adapters.Inventory
	var none adapters.Delivery
	if q.closed.Load() {
		return inv, opErr("inspect", none, adapters.ErrClosed)
	}
	tx, err := q.db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return inv, opErr("inspect", none, q.db.Err("inspect", err, false))
	}
	defer pgdb.Rollback(ctx, tx)
	rows, _ := tx.Query(ctx, q.q.inspectJobs)
	var id string
	var inFlight bool
	_, err = pgx.ForEachRow(rows, []any{&id, &inFlight}, func() error {
		if inFlight {
			inv.InFlight = append(inv.InFlight, id)
		} else {
			inv.Queued = append(inv.Queued, id)
		}
		return nil
	})
	if err != nil {
		return adapters.Inventory{}, opErr("inspect", none, q.db.Err("inspect", err, false))
	}
	rows, _ = tx.Query(ctx, q.q.inspectDead)
	var byBroker bool
	var reason string
	var deliveries int
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&id, &byBroker, &reason, &deliveries, &at}, func() error {
		inv.DeadLettered = append(inv.DeadLettered, id)
		if byBroker {
			inv.Moved = append(inv.Moved, adapters.BrokerAction{Job: id, Action: adapters.ActionDeadLettered,
				Reason: reason, Deliveries: deliveries, At: at.UTC()})
		}
		return nil
	})
	if err != nil {
		return adapters.Inventory{}, opErr("inspect", none, q.db.Err("inspect", err, false))
	}
	return inv, nil
}
