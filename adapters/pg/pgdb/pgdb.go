// Package pgdb is what the Postgres queue adapter (adapters/pg) and the Postgres
// effect store (pipeline/pgstore) share: a small pgx pool whose errors never carry
// credentials, validation of the schema names a run creates, provisioning and
// teardown of such a schema, and the mapping of connection-level failures onto the
// port's adapters.ErrUnavailable (the request was not applied) and
// adapters.ErrAmbiguous (it may have been).
package pgdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durachk/durachk/adapters"
)

// DefaultMaxConns is the pool size when Options.MaxConns is 0: the shared
// Postgres serves every worker process of a run, so each pool stays small.
const DefaultMaxConns = 4

var schemaRE = regexp.MustCompile(`^durachk_[a-z0-9_]{1,50}$`)

// ValidSchema reports whether name may be created and dropped by durachk: it must
// match ^durachk_[a-z0-9_]{1,50}$, so that `durachk cleanup` finds it and no user
// schema is ever touched.
func ValidSchema(name string) error {
	if !schemaRE.MatchString(name) {
		return fmt.Errorf("schema name %q must match %s", name, schemaRE)
	}
	return nil
}

// Options configure a pool. They are read once, by Open.
type Options struct {
	// MaxConns caps the pool; 0 means DefaultMaxConns.
	MaxConns int32
	// Session holds settings applied with set_config on every new connection
	// (in AfterConnect), e.g. synchronous_commit.
	Session map[string]string
}

// DB is a pgx pool plus what is needed to keep the password out of its errors.
// It is safe for concurrent use, as pgxpool.Pool is.
type DB struct {
	Pool   *pgxpool.Pool
	target string // host:port/database, for messages
	secret string // the password, scrubbed from every message
}

// Open parses url, connects a pool of at most opts.MaxConns connections and pings
// the server. A server that cannot be reached is an error wrapping
// adapters.ErrUnavailable; no returned error contains the password.
func Open(ctx context.Context, url string, opts Options) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx redacts the URL in its parse errors; scrub what may be left.
		return nil, &Error{Op: "parse postgres url", Err: err, secret: urlPassword(url)}
	}
	db := &DB{target: cfg.ConnConfig.Host + ":" + strconv.Itoa(int(cfg.ConnConfig.Port)) + "/" + cfg.ConnConfig.Database,
		secret: cfg.ConnConfig.Password}
	cfg.MaxConns = opts.MaxConns
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	cfg.MinConns = 0
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	if len(opts.Session) > 0 {
		keys := slices.Sorted(maps.Keys(opts.Session))
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			for _, k := range keys {
				if _, err := c.Exec(ctx, "SELECT set_config($1, $2, false)", k, opts.Session[k]); err != nil {
					return fmt.Errorf("set %s: %w", k, err)
				}
			}
			return nil
		}
	}
	db.Pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, db.Err("connect "+db.target, err, false)
	}
	if err := db.Pool.Ping(ctx); err != nil {
		db.Pool.Close()
		return nil, db.Err("connect "+db.target, err, false)
	}
	return db, nil
}

// Target names the server and database, without credentials.
func (db *DB) Target() string { return db.target }

// Close closes the pool; it waits for acquired connections to be released.
func (db *DB) Close() { db.Pool.Close() }

// Provision runs ddl in one transaction under an advisory lock on schema, so that
// several processes of one run may open the same namespace at once. ddl must be
// idempotent (CREATE ... IF NOT EXISTS).
func (db *DB) Provision(ctx context.Context, schema, ddl string) error {
	if err := ValidSchema(schema); err != nil {
		return err
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		return db.Err("provision "+schema, err, false)
	}
	defer Rollback(ctx, tx)
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", schema); err != nil {
		return db.Err("provision "+schema, err, false)
	}
	if _, err := tx.Exec(ctx, ddl); err != nil {
		return db.Err("provision "+schema, err, false)
	}
	return db.Err("provision "+schema, tx.Commit(ctx), true)
}

// DropSchema drops schema and everything in it. Dropping a missing schema is not
// an error.
func (db *DB) DropSchema(ctx context.Context, schema string) error {
	if err := ValidSchema(schema); err != nil {
		return err
	}
	return db.WithConn(ctx, "drop "+schema, func(c *pgxpool.Conn) error {
		_, err := c.Exec(ctx, "DROP SCHEMA IF EXISTS "+Ident(schema)+" CASCADE")
		return err
	})
}

// Ident quotes an identifier.
func Ident(parts ...string) string { return pgx.Identifier(parts).Sanitize() }

// Rollback ends tx if it is still open. It runs on a context that outlives ctx's
// cancellation (bounded by a few seconds), so that a caller whose context was
// cancelled, or whose goroutine is leaving through runtime.Goexit, still returns
// the connection to the pool. A failed rollback closes the connection, which ends
// the transaction on the server as well.
func Rollback(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = tx.Rollback(ctx)
}

// Err maps err from operation op onto the port's sentinels and scrubs the
// password from its text. write says whether the failed request could have been
// applied on its own: true for a COMMIT or a single-statement write, false for a
// read or a statement inside a transaction that was not committed.
//
//   - the server answered with an error (other than a shutdown or connection
//     failure): returned as is, wrapped; it is definite.
//   - no connection could be made, or write is false: wrapped with
//     adapters.ErrUnavailable.
//   - the connection failed or timed out during a write: wrapped with
//     adapters.ErrAmbiguous.
//
// pgconn.SafeToRetry is deliberately not trusted for writes: when the reply to a
// statement that was sent is lost, pgx (v5.12) may report the follow-up
// "conn closed" lock error, which claims SafeToRetry. A write is only known
// unsent when no connection could be had; WithConn separates that case.
//
// Context errors stay in the chain (errors.Is(err, context.Canceled) holds).
func (db *DB) Err(op string, err error, write bool) error {
	if err == nil {
		return nil
	}
	var ce *pgconn.ConnectError
	e := &Error{Op: op, Err: err, secret: db.secret}
	switch {
	case !connLevel(err):
	case !write || errors.As(err, &ce):
		e.Kind = adapters.ErrUnavailable
	default:
		e.Kind = adapters.ErrAmbiguous
	}
	return e
}

// WithConn runs the single-statement write fn on a connection of the pool. A
// failure to get a connection is adapters.ErrUnavailable (nothing was sent); an
// error of fn is mapped by Err with write = true.
func (db *DB) WithConn(ctx context.Context, op string, fn func(c *pgxpool.Conn) error) error {
	c, err := db.Pool.Acquire(ctx)
	if err != nil {
		return db.Err(op, err, false)
	}
	defer c.Release()
	return db.Err(op, fn(c), true)
}

// connLevel: err is about the connection, not a definite answer of the server.
func connLevel(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08: connection exception; 57P0x: the server is shutting down or
		// starting up; 53300: too many connections, refused at connect (8
		// explore rounds overlapping on one server once ended an exploration:
		// a worker exited on it instead of waiting, as for an outage).
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P") || pgErr.Code == "53300"
	}
	var ne net.Error
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) || errors.As(err, &ne) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// Error is a failed operation. Its text never contains the password; Unwrap
// yields the sentinel Kind (if any) and the underlying error. It is not changed
// after it is made, so it may be shared between goroutines.
type Error struct {
	Op     string
	Kind   error // adapters.ErrUnavailable, adapters.ErrAmbiguous or nil
	Err    error
	secret string
}

func (e *Error) Error() string {
	s := e.Op + ": "
	if e.Kind != nil {
		s += e.Kind.Error() + ": "
	}
	s += e.Err.Error()
	if e.secret != "" {
		s = strings.ReplaceAll(s, e.secret, "xxxxx")
	}
	return s
}

func (e *Error) Unwrap() []error {
	if e.Kind != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Err}
}

// urlPassword extracts the password of a postgres:// URL for scrubbing, without
// trusting the URL to be well formed.
func urlPassword(url string) string {
	rest, ok := strings.CutPrefix(url, "postgres://")
	if !ok {
		rest, ok = strings.CutPrefix(url, "postgresql://")
	}
	if !ok {
		if _, after, ok := strings.Cut(url, "password="); ok {
			pw, _, _ := strings.Cut(after, " ")
			return strings.Trim(pw, "'")
		}
		return ""
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return ""
	}
	_, pw, _ := strings.Cut(rest[:at], ":")
	return pw
}
