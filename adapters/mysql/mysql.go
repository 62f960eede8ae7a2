// Package mysql is the MySQL/MariaDB queue adapter: a jobs table in a database
// of its own per run (durachk_<runid>), leased with SELECT … FOR UPDATE SKIP
// LOCKED (MySQL 8.0+, MariaDB 10.6+). It is the only package importing
// github.com/go-sql-driver/mysql.
//
// A lease is one short READ COMMITTED transaction: it locks the oldest visible
// job (rows another lease holds locked are skipped), sets lease_until, bumps the
// fencing token and the delivery count, reads the row and commits. No row lock
// is held while the job runs; the lease is the lease_until column, and every
// later call on the delivery (Ack, Nack, Extend, DeadLetter) names the job row
// and the token it was given, so that a stale holder is refused with
// adapters.ErrStaleToken. All clocks are the database server's UTC_TIMESTAMP(6).
//
// Visible: visible_at <= now AND (lease_until IS NULL OR lease_until <= now).
// The semantics mirror the reference broker adapters/mem, as adapters/pg does:
// acceptance order, per-row tokens, Ack/Nack/DeadLetter accepted with the
// current token (even after the lease ran out, as long as no newer delivery
// exists), Extend only while the lease is live, native dead-lettering past an
// optional delivery limit, and an optional FIFO mode in which only the oldest
// job of a group is eligible.
//
// On a Galera cluster row locks are local to a node until commit: two workers
// on two nodes may lock the same row, and the second commit fails
// certification (error 1213, rolled back): a definite refusal
// (adapters.ErrUnavailable), after which the worker leases again.
package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/durachk/durachk/adapters"
)

// Broker is the Capabilities.Broker name and the OpError target.
const Broker = "mysql"

// DeliveryLimitReason is the reason the dead-letter table records for a job the
// queue dead-lettered itself, past Options.DeliveryLimit.
const DeliveryLimitReason = "delivery_limit"

// Options configure the queue. The zero value is an unordered queue without a
// delivery limit, with a pool of 4. They are read once, by Open.
type Options struct {
	// DeliveryLimit dead-letters a job natively when it would be delivered for
	// the (limit+1)-th time, as adapters/mem does. 0: no limit.
	DeliveryLimit int
	// FIFO delivers the jobs of one group in acceptance order, one at a time.
	FIFO bool
	// MaxConns caps the pool; 0 means DefaultMaxConns.
	MaxConns int
	// Session are session variables set on every connection, e.g.
	// wsrep_sync_wait (Galera's causal reads).
	Session map[string]string
	// Volatile keeps the jobs table in the MEMORY engine: the server empties it
	// when it restarts, so every accepted job is lost in a crash. A known-bad
	// configuration (the negative control of durability.ack).
	Volatile bool
	// Unreplicated: the queue's writes are not replicated (binary log off for
	// its sessions, or wsrep_on off on Galera): the negative control of the
	// cluster contracts. Needs a user allowed to set them (SUPER).
	Unreplicated bool
	// Notes are added to the capabilities' notes (what the harness does
	// with this target).
	Notes []string
	// BreakOrder is a deliberately broken FIFO (newest first) that still
	// claims FIFO, as in adapters/mem: the negative control of order.fifo.
	BreakOrder bool
	// PreparedStatements sends the queue's statements as server-side
	// prepared statements (the binary protocol: the Go driver's own default,
	// interpolateParams=false) instead of as text with their parameters
	// interpolated by the driver (interpolateParams=true).
	PreparedStatements bool
}

var runIDRE = regexp.MustCompile(`^[a-z0-9_]{1,40}$`)

// Database returns the database a queue of runID lives in: durachk_<runID>.
func Database(runID string) string { return "durachk_" + runID }

// Queue is a MySQL/MariaDB-backed adapters.Queue with Extender, DeadLetterer
// and Inspector. Any number of processes may open the same run's queue: leases
// are exclusive by the server's row locks (and on Galera by certification),
// never by state in the Queue value.
type Queue struct {
	db      *db
	cfg     *Config
	name    string // the database
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

// ddl creates the run's tables; {d} is the database, {engine} and {payload}
// the jobs table's engine and payload type (MEMORY has no BLOBs).
var ddl = []string{
	`CREATE DATABASE IF NOT EXISTS {d}`,
	`CREATE TABLE IF NOT EXISTS {d}.jobs (
	id           BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, -- acceptance order
	job_id       VARCHAR(255) NOT NULL,
	tenant       VARCHAR(255) NOT NULL,
	document_id  VARCHAR(255) NOT NULL,
	version      BIGINT NOT NULL,
	payload      {payload},
	created_at   DATETIME(6) NOT NULL,
	deadline     DATETIME(6) NULL,          -- NULL: no deadline
	max_attempts BIGINT NOT NULL,
	grp          VARCHAR(255) NOT NULL DEFAULT '',
	visible_at   DATETIME(6) NOT NULL,
	lease_until  DATETIME(6) NULL,          -- NULL: never leased, or nacked
	token        BIGINT NOT NULL DEFAULT 0,
	deliveries   INT NOT NULL DEFAULT 0,
	KEY jobs_grp (grp, id)
) ENGINE={engine} DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	`CREATE TABLE IF NOT EXISTS {d}.dead (
	seq          BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	id           BIGINT NOT NULL UNIQUE,    -- the row id it had in jobs
	job_id       VARCHAR(255) NOT NULL,
	tenant       VARCHAR(255) NOT NULL,
	document_id  VARCHAR(255) NOT NULL,
	version      BIGINT NOT NULL,
	payload      LONGBLOB,
	created_at   DATETIME(6) NOT NULL,
	deadline     DATETIME(6) NULL,
	max_attempts BIGINT NOT NULL,
	grp          VARCHAR(255) NOT NULL,
	token        BIGINT NOT NULL,
	deliveries   INT NOT NULL,
	reason       VARCHAR(255) NOT NULL,
	by_broker    BOOLEAN NOT NULL DEFAULT FALSE, -- moved by the queue at its delivery limit, not by DeadLetter
	dead_at      DATETIME(6) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
}

// volatilePayload bounds a payload in the MEMORY engine (fixed-size rows).
const volatilePayload = "VARBINARY(16000)"

// jobCols are the columns a delivery is built from, in scan order.
const jobCols = `id, job_id, tenant, document_id, version, payload, created_at, deadline, max_attempts, grp, token, deliveries`

// now is the server's clock.
const now = `UTC_TIMESTAMP(6)`

// queries are the statements of one queue, built once at Open.
type queries struct {
	enqueue, pick, claim, read, moveDead, deleteRow, token, ack, nack, extend, lockToken, deadLetter, inspectJobs, inspectDead string
}

func newQueries(database string, opts Options) queries {
	s := strings.NewReplacer("{d}", ident(database)).Replace
	first, before := "ASC", "<"
	if opts.BreakOrder {
		first, before = "DESC", ">"
	}
	visible := `j.visible_at <= ` + now + ` AND (j.lease_until IS NULL OR j.lease_until <= ` + now + `)`
	eligible := visible
	if opts.FIFO {
		// The first row of the group, whatever its state, blocks the rest. The
		// subquery is a plain read (not locking, so not skipping): a row that
		// another lease holds locked still blocks its successors.
		eligible += ` AND (j.grp = '' OR NOT EXISTS (SELECT 1 FROM {d}.jobs o WHERE o.grp <> '' AND o.grp = j.grp AND o.id ` + before + ` j.id))`
	}
	return queries{
		enqueue: s(`INSERT INTO {d}.jobs (job_id, tenant, document_id, version, payload, created_at, deadline, max_attempts, grp, visible_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ` + now + `)`),
		pick: s(`SELECT j.id, j.deliveries FROM {d}.jobs j WHERE ` + eligible + ` ORDER BY j.id ` + first + ` LIMIT 1 FOR UPDATE SKIP LOCKED`),
		// The claim checks visibility again: on the MEMORY engine (no row
		// locks) two leases may pick one row, and only one claims it.
		claim:       s(`UPDATE {d}.jobs j SET j.token = j.token + 1, j.deliveries = j.deliveries + 1, j.lease_until = ` + now + ` + INTERVAL ? MICROSECOND WHERE j.id = ? AND ` + visible),
		read:        s(`SELECT ` + jobCols + ` FROM {d}.jobs WHERE id = ?`),
		moveDead:    s(`INSERT INTO {d}.dead (` + jobCols + `, reason, by_broker, dead_at) SELECT ` + jobCols + `, ?, ?, ` + now + ` FROM {d}.jobs WHERE id = ?`),
		deleteRow:   s(`DELETE FROM {d}.jobs WHERE id = ?`),
		token:       s(`SELECT token FROM {d}.jobs WHERE id = ?`),
		lockToken:   s(`SELECT token FROM {d}.jobs WHERE id = ? FOR UPDATE`),
		ack:         s(`DELETE FROM {d}.jobs WHERE id = ? AND token = ?`),
		nack:        s(`UPDATE {d}.jobs SET lease_until = NULL, visible_at = ` + now + ` + INTERVAL ? MICROSECOND WHERE id = ? AND token = ?`),
		extend:      s(`UPDATE {d}.jobs SET lease_until = ` + now + ` + INTERVAL ? MICROSECOND WHERE id = ? AND token = ? AND lease_until > ` + now),
		inspectJobs: s(`SELECT job_id, lease_until IS NOT NULL AND lease_until > ` + now + ` FROM {d}.jobs ORDER BY id`),
		inspectDead: s(`SELECT job_id, by_broker, reason, deliveries, dead_at FROM {d}.dead ORDER BY seq`),
	}
}

// Open connects to url (mysql://user:password@host:port/db; its password never
// appears in an error), creates the run's database Database(runID) and its
// tables if they do not exist yet (not on a read-only replica, which gets them
// from its primary), and reads the server's durability settings for
// Capabilities. runID must match ^[a-z0-9_]{1,40}$. An unreachable server is
// an error wrapping adapters.ErrUnavailable.
func Open(ctx context.Context, url, runID string, opts Options) (*Queue, error) {
	if !runIDRE.MatchString(runID) {
		return nil, fmt.Errorf("mysql: run id %q must match %s", runID, runIDRE)
	}
	if opts.DeliveryLimit < 0 {
		return nil, fmt.Errorf("mysql: negative delivery limit %d", opts.DeliveryLimit)
	}
	session := map[string]string{}
	for k, v := range opts.Session {
		session[k] = v
	}
	if opts.Unreplicated {
		session["sql_log_bin"] = "0"
	}
	c, err := ParseURL(url, session)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	c.cfg.InterpolateParams = !opts.PreparedStatements
	d, err := openDB(ctx, c, opts.MaxConns)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	q := &Queue{db: d, cfg: c, name: Database(runID), opts: opts, q: newQueries(Database(runID), opts)}
	if err := q.open(ctx); err != nil {
		d.close()
		return nil, fmt.Errorf("mysql: %w", err)
	}
	return q, nil
}

// settings are the server variables the capabilities rest on.
type settings struct {
	version, comment, trxCommit, syncBinlog, logBin, doublewrite, wsrepOn, readOnly string
}

func readSettings(ctx context.Context, d *db) (settings, error) {
	var s settings
	rows, err := d.pool.QueryContext(ctx, `SHOW GLOBAL VARIABLES WHERE Variable_name IN
		('version', 'version_comment', 'innodb_flush_log_at_trx_commit', 'sync_binlog', 'log_bin', 'innodb_doublewrite', 'wsrep_on', 'read_only')`)
	if err != nil {
		return s, d.err("read server settings", err, false)
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return s, d.err("read server settings", err, false)
		}
		switch k {
		case "version":
			s.version = v
		case "version_comment":
			s.comment = v
		case "innodb_flush_log_at_trx_commit":
			s.trxCommit = v
		case "sync_binlog":
			s.syncBinlog = v
		case "log_bin":
			s.logBin = v
		case "innodb_doublewrite":
			s.doublewrite = v
		case "wsrep_on":
			s.wsrepOn = v
		case "read_only":
			s.readOnly = v
		}
	}
	return s, d.err("read server settings", rows.Err(), false)
}

// versionName is "mariadb 10.11.19" or "mysql 8.4.5".
func versionName(st settings) string {
	v := strings.SplitN(st.version, "-", 2)[0]
	if strings.Contains(strings.ToLower(st.version+" "+st.comment), "mariadb") {
		return "mariadb " + v
	}
	return "mysql " + v
}

func (q *Queue) open(ctx context.Context) error {
	st, err := readSettings(ctx, q.db)
	if err != nil {
		return err
	}
	if q.opts.Unreplicated && st.wsrepOn == "ON" {
		// Galera replicates by write sets, not by the binary log.
		q.db.close()
		d, err := openDB(ctx, q.cfg.with(map[string]string{"wsrep_on": "OFF"}), q.opts.MaxConns)
		if err != nil {
			return err
		}
		q.db = d
	}
	q.version = versionName(st)
	if st.readOnly != "ON" {
		if err := q.provision(ctx); err != nil {
			return err
		}
	}
	q.caps = capabilities(q.opts, st)
	q.caps.Notes = append(q.caps.Notes, q.opts.Notes...)
	return nil
}

// provision creates the run's database and tables (idempotent: several
// processes of one run may open the queue at once).
func (q *Queue) provision(ctx context.Context) error {
	if err := validDatabase(q.name); err != nil {
		return err
	}
	engine, payload := "InnoDB", "LONGBLOB"
	if q.opts.Volatile {
		engine, payload = "MEMORY", volatilePayload
	}
	r := strings.NewReplacer("{d}", ident(q.name), "{engine}", engine, "{payload}", payload)
	for _, stmt := range ddl {
		if _, err := q.db.pool.ExecContext(ctx, r.Replace(stmt)); err != nil {
			return q.db.err("provision "+q.name, err, false)
		}
	}
	return nil
}

// capabilities are the documented semantics of this adapter on a server with
// the given settings.
func capabilities(opts Options, st settings) adapters.Capabilities {
	// innodb_flush_log_at_trx_commit (MariaDB and MySQL manuals): 1 writes and
	// flushes the redo log at every commit; 2 writes it at every commit and
	// flushes it about once a second (a crash of the server loses nothing, a
	// crash of the machine up to a second); 0 writes and flushes about once a
	// second (a crash of the server loses up to a second too).
	durable := st.trxCommit == "1" && !opts.Volatile
	notes := []string{
		"lease, visibility and delay clocks are the database server's UTC_TIMESTAMP(6), not the worker's clock",
		"the dead-letter table (durachk_<run id>.dead) is part of the queue",
		fmt.Sprintf("innodb_flush_log_at_trx_commit=%s, sync_binlog=%s, log_bin=%s, innodb_doublewrite=%s", st.trxCommit, st.syncBinlog, st.logBin, st.doublewrite),
	}
	switch st.trxCommit {
	case "2":
		notes = append(notes, "innodb_flush_log_at_trx_commit=2: a commit is written to the OS at once and flushed about once a second: it survives a crash of the server, not of the machine (power loss)")
	case "0":
		notes = append(notes, "innodb_flush_log_at_trx_commit=0: the redo log is written and flushed about once a second: a crash of the server itself may lose the last second of commits")
	}
	if st.wsrepOn == "ON" {
		notes = append(notes, "Galera (wsrep_on): row locks are local to a node until commit; a second lease of a row on another node fails certification (error 1213) and is refused")
	}
	if opts.PreparedStatements {
		notes = append(notes, "interpolateParams=false: the queue's statements are server-side prepared statements (the binary protocol, the Go driver's default)")
	} else {
		notes = append(notes, "interpolateParams=true: the queue's statements are sent as text, their parameters interpolated by the driver")
	}
	if opts.DeliveryLimit > 0 {
		notes = append(notes, fmt.Sprintf("delivery limit %d: a job is dead-lettered natively instead of its delivery %d", opts.DeliveryLimit, opts.DeliveryLimit+1))
	}
	if opts.BreakOrder {
		notes = append(notes, "deliberately broken FIFO (newest first): a negative control")
	}
	if opts.Volatile {
		notes = append(notes, "jobs in a MEMORY table: a restart of the server empties the queue")
	}
	if opts.Unreplicated {
		notes = append(notes, "the queue's writes are not replicated (sql_log_bin=0, or wsrep_on=OFF on Galera): a negative control")
	}
	if !durable && !opts.Volatile {
		notes = append(notes, "an acknowledged Enqueue may be lost if the machine fails (innodb_flush_log_at_trx_commit is not 1): not durable")
	}
	return adapters.Capabilities{
		Broker: Broker, Lease: adapters.Native, LeaseExtension: adapters.Native,
		Token: adapters.Native, FencedAck: true, DeliveryCount: adapters.Native,
		DeadLetter: adapters.Native, DelayedNack: adapters.Native, FIFO: opts.FIFO || opts.BreakOrder,
		Durable: durable, Notes: notes,
	}
}

// ServerVersion names what the queue runs on, e.g. "mariadb 10.11.19".
func (q *Queue) ServerVersion() string { return q.version }

// Capabilities are read once at Open.
func (q *Queue) Capabilities() adapters.Capabilities { return q.caps }

// Database is the database the queue lives in.
func (q *Queue) Database() string { return q.name }

// Close closes the pool; later calls fail with adapters.ErrClosed. Idempotent.
func (q *Queue) Close() error {
	if !q.closed.Swap(true) {
		q.db.close()
	}
	return nil
}

// Drop removes the queue's database with its jobs and dead letters. Call it
// before Close.
func (q *Queue) Drop(ctx context.Context) error {
	if q.closed.Load() {
		return fmt.Errorf("mysql: drop %s: %w", q.name, adapters.ErrClosed)
	}
	if err := dropDatabase(ctx, q.db, q.name); err != nil {
		return fmt.Errorf("mysql: %w", err)
	}
	return nil
}

func dropDatabase(ctx context.Context, d *db, name string) error {
	if err := validDatabase(name); err != nil {
		return err
	}
	_, err := d.pool.ExecContext(ctx, "DROP DATABASE IF EXISTS "+ident(name))
	return d.err("drop "+name, err, false)
}

func opErr(op string, d adapters.Delivery, err error) error {
	if err == nil {
		return nil
	}
	return &adapters.OpError{Target: Broker, Op: op, JobID: d.Job.ID, Attempt: d.Attempt, Err: err}
}

func micros(d time.Duration) int64 { return d.Microseconds() }

// Enqueue inserts job; it is visible at once. A lost reply is
// adapters.ErrAmbiguous: a retry may enqueue a second copy (at-least-once).
func (q *Queue) Enqueue(ctx context.Context, job adapters.Job) error {
	d := adapters.Delivery{Job: job}
	if q.closed.Load() {
		return opErr("enqueue", d, adapters.ErrClosed)
	}
	var deadline any
	if !job.Deadline.IsZero() {
		deadline = job.Deadline.UTC()
	}
	payload := job.Payload
	if payload == nil {
		payload = []byte{}
	}
	return opErr("enqueue", d, q.db.withConn(ctx, "enqueue", func(c *sql.Conn) error {
		_, err := c.ExecContext(ctx, q.q.enqueue, job.ID, job.Tenant, job.DocumentID, job.Version, payload,
			job.CreatedAt.UTC(), deadline, job.MaxAttempts, job.Group)
		return err
	}))
}

// Lease claims the oldest visible job for lease (FIFO: the oldest of its
// group, and only while it is not in flight) in one committed transaction, or
// returns adapters.ErrNoJob. With a delivery limit, jobs delivered limit times
// are moved to the dead-letter table on the way. A lost reply to the commit is
// adapters.ErrAmbiguous: a lease may have been granted, and will expire.
func (q *Queue) Lease(ctx context.Context, lease time.Duration) (adapters.Delivery, error) {
	var none adapters.Delivery
	if q.closed.Load() {
		return none, opErr("lease", none, adapters.ErrClosed)
	}
	for {
		d, again, err := q.leaseOnce(ctx, lease)
		if err != nil {
			return none, err
		}
		if !again {
			return d, nil
		}
		if err := ctx.Err(); err != nil {
			return none, opErr("lease", none, q.db.err("lease", err, false))
		}
	}
}

// leaseOnce is one lease transaction; again: it moved a job past its delivery
// limit, or lost the row to another lease, and the caller should look again.
func (q *Queue) leaseOnce(ctx context.Context, lease time.Duration) (d adapters.Delivery, again bool, err error) {
	var none adapters.Delivery
	fail := func(err error, write bool) (adapters.Delivery, bool, error) {
		return none, false, opErr("lease", none, q.db.err("lease", err, write))
	}
	tx, err := q.db.pool.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return fail(err, false)
	}
	defer rollback(tx)
	var id int64
	var deliveries int
	switch err := tx.QueryRowContext(ctx, q.q.pick).Scan(&id, &deliveries); {
	case errors.Is(err, sql.ErrNoRows):
		return none, false, adapters.ErrNoJob
	case err != nil:
		return fail(err, false)
	}
	if q.opts.DeliveryLimit > 0 && deliveries >= q.opts.DeliveryLimit {
		if _, err := tx.ExecContext(ctx, q.q.moveDead, DeliveryLimitReason, true, id); err != nil {
			return fail(err, false)
		}
		if _, err := tx.ExecContext(ctx, q.q.deleteRow, id); err != nil {
			return fail(err, false)
		}
		if err := tx.Commit(); err != nil {
			return fail(err, true)
		}
		return none, true, nil
	}
	res, err := tx.ExecContext(ctx, q.q.claim, micros(lease), id)
	if err != nil {
		return fail(err, false)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return none, true, nil // taken meanwhile (MEMORY engine): look again
	}
	var token int64
	var deadline sql.NullTime
	var rowID int64
	if err := tx.QueryRowContext(ctx, q.q.read, id).Scan(&rowID, &d.Job.ID, &d.Job.Tenant, &d.Job.DocumentID, &d.Job.Version,
		&d.Job.Payload, &d.Job.CreatedAt, &deadline, &d.Job.MaxAttempts, &d.Job.Group, &token, &d.Attempt); err != nil {
		return fail(err, false)
	}
	if d.Attempt != deliveries+1 {
		// The transaction does not see its own claim: the server rolled it
		// back under us without reporting it (MariaDB 10.11 Galera, a
		// conflicting write applied from another node), and the statements
		// after the rollback ran outside it. Its COMMIT would say OK for a
		// lease nobody holds.
		return fail(errRolledBack, false)
	}
	if err := tx.Commit(); err != nil {
		return fail(err, true)
	}
	d.Job.CreatedAt = d.Job.CreatedAt.UTC()
	if deadline.Valid {
		d.Job.Deadline = deadline.Time.UTC()
	}
	if len(d.Job.Payload) == 0 {
		d.Job.Payload = nil
	}
	d.Token = uint64(token)
	d.Receipt = strconv.FormatInt(id, 10) + ":" + strconv.FormatUint(d.Token, 10)
	return d, false, nil
}

// rowID is the jobs row named by d's receipt.
func rowID(d adapters.Delivery) (int64, error) {
	idStr, _, ok := strings.Cut(d.Receipt, ":")
	id, err := strconv.ParseInt(idStr, 10, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("mysql: bad receipt %q", d.Receipt)
	}
	return id, nil
}

// onDelivery runs the autocommit write of op for d (its parameters: args,
// then the row id and the token). When it touches no row it finds out why:
// the row is gone (adapters.ErrLeaseLost), it has a newer token
// (adapters.ErrStaleToken), or else (Extend of an expired lease) ErrLeaseLost.
func (q *Queue) onDelivery(ctx context.Context, op, stmt string, d adapters.Delivery, args ...any) error {
	if q.closed.Load() {
		return opErr(op, d, adapters.ErrClosed)
	}
	id, err := rowID(d)
	if err != nil {
		return opErr(op, d, err)
	}
	var verdict error
	err = q.db.withConn(ctx, op, func(c *sql.Conn) error {
		res, err := c.ExecContext(ctx, stmt, append(args, id, int64(d.Token))...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n > 0 {
			return nil
		}
		verdict = q.why(ctx, c, op, id, d.Token)
		return nil
	})
	if err == nil {
		err = verdict
	}
	return opErr(op, d, err)
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// why explains a write on (id, token) that touched nothing.
func (q *Queue) why(ctx context.Context, c querier, op string, id int64, token uint64) error {
	var got int64
	switch err := c.QueryRowContext(ctx, q.q.token, id).Scan(&got); {
	case errors.Is(err, sql.ErrNoRows):
		return adapters.ErrLeaseLost
	case err != nil:
		return q.db.err(op, err, false) // the write touched nothing: definite
	case uint64(got) != token:
		return adapters.ErrStaleToken
	}
	return adapters.ErrLeaseLost
}

// Ack deletes the job if d is its current delivery: adapters.ErrStaleToken once
// a newer delivery exists, adapters.ErrLeaseLost once the job is gone.
func (q *Queue) Ack(ctx context.Context, d adapters.Delivery) error {
	return q.onDelivery(ctx, "ack", q.q.ack, d)
}

// Nack clears the lease and makes the job visible after delay, if d is its
// current delivery.
func (q *Queue) Nack(ctx context.Context, d adapters.Delivery, delay time.Duration) error {
	return q.onDelivery(ctx, "nack", q.q.nack, d, micros(delay))
}

// Extend moves the lease end of a live delivery to now+lease;
// adapters.ErrLeaseLost once the lease expired or the job is gone,
// adapters.ErrStaleToken once a newer delivery exists.
func (q *Queue) Extend(ctx context.Context, d adapters.Delivery, lease time.Duration) error {
	return q.onDelivery(ctx, "extend", q.q.extend, d, micros(lease))
}

// DeadLetter moves the current delivery's job to the dead-letter table with
// reason, in one transaction that locks the row first.
func (q *Queue) DeadLetter(ctx context.Context, d adapters.Delivery, reason string) error {
	const op = "dead letter"
	if q.closed.Load() {
		return opErr(op, d, adapters.ErrClosed)
	}
	id, err := rowID(d)
	if err != nil {
		return opErr(op, d, err)
	}
	tx, err := q.db.pool.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return opErr(op, d, q.db.err(op, err, false))
	}
	defer rollback(tx)
	var token int64
	switch err := tx.QueryRowContext(ctx, q.q.lockToken, id).Scan(&token); {
	case errors.Is(err, sql.ErrNoRows):
		return opErr(op, d, adapters.ErrLeaseLost)
	case err != nil:
		return opErr(op, d, q.db.err(op, err, false))
	case uint64(token) != d.Token:
		return opErr(op, d, adapters.ErrStaleToken)
	}
	if _, err := tx.ExecContext(ctx, q.q.moveDead, reason, false, id); err != nil {
		return opErr(op, d, q.db.err(op, err, false))
	}
	if _, err := tx.ExecContext(ctx, q.q.deleteRow, id); err != nil {
		return opErr(op, d, q.db.err(op, err, false))
	}
	return opErr(op, d, q.db.err(op, tx.Commit(), true))
}

// Inspect lists what is left, by job id, from one snapshot: queued (including
// delayed) and in flight in acceptance order, dead letters in the order they
// died. Moved lists the dead letters the queue moved itself past its delivery
// limit, never those of DeadLetter.
func (q *Queue) Inspect(ctx context.Context) (adapters.Inventory, error) {
	var inv adapters.Inventory
	var none adapters.Delivery
	if q.closed.Load() {
		return inv, opErr("inspect", none, adapters.ErrClosed)
	}
	fail := func(err error) (adapters.Inventory, error) {
		return adapters.Inventory{}, opErr("inspect", none, q.db.err("inspect", err, false))
	}
	tx, err := q.db.pool.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return fail(err)
	}
	defer rollback(tx)
	rows, err := tx.QueryContext(ctx, q.q.inspectJobs)
	if err != nil {
		return fail(err)
	}
	for rows.Next() {
		var id string
		var inFlight bool
		if err := rows.Scan(&id, &inFlight); err != nil {
			rows.Close()
			return fail(err)
		}
		if inFlight {
			inv.InFlight = append(inv.InFlight, id)
		} else {
			inv.Queued = append(inv.Queued, id)
		}
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	rows.Close()
	rows, err = tx.QueryContext(ctx, q.q.inspectDead)
	if err != nil {
		return fail(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, reason string
		var byBroker bool
		var deliveries int
		var at time.Time
		if err := rows.Scan(&id, &byBroker, &reason, &deliveries, &at); err != nil {
			return fail(err)
		}
		inv.DeadLettered = append(inv.DeadLettered, id)
		if byBroker {
			inv.Moved = append(inv.Moved, adapters.BrokerAction{Job: id, Action: adapters.ActionDeadLettered,
				Reason: reason, Deliveries: deliveries, At: at.UTC()})
		}
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	return inv, nil
}
