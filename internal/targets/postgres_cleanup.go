package targets

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/durachk/durachk/adapters/pg/pgdb"
)

// cleanupPostgres drops every schema named durachk_* in the target's database
// and in the effect store's: what runs killed with SIGKILL (which cannot tear
// down) left behind. Schemas of runs that are still going (they hold their run
// lock, see HoldRun) are left alone.
func cleanupPostgres(ctx context.Context, s Spec) ([]string, error) {
	var dropped []string
	var errs []error
	seen := map[string]bool{}
	for _, u := range []string{s.URL, s.StoreURL} {
		if u == "" || seen[u] {
			continue
		}
		seen[u] = true
		d, err := dropDurachkSchemas(ctx, u, s.StoreURL, nil)
		dropped = append(dropped, d...)
		errs = append(errs, err)
	}
	return dropped, errors.Join(errs...)
}

// dropDurachkSchemas drops the dead durachk_* schemas of url's database; only,
// if set, narrows them further (tests must not touch other tests' schemas).
func dropDurachkSchemas(ctx context.Context, url, storeURL string, only func(schema string) bool) ([]string, error) {
	locks, err := pgdb.Open(ctx, storeURL, pgdb.Options{MaxConns: 1})
	if err != nil {
		return nil, fmt.Errorf("cleanup %s: %w", Redact(storeURL), err)
	}
	defer locks.Close()
	db, err := pgdb.Open(ctx, url, pgdb.Options{MaxConns: 1})
	if err != nil {
		return nil, fmt.Errorf("cleanup %s: %w", Redact(url), err)
	}
	defer db.Close()
	rows, err := db.Pool.Query(ctx, `SELECT nspname FROM pg_namespace WHERE nspname LIKE 'durachk\_%' ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("cleanup %s: %w", Redact(url), err)
	}
	var schemas []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return nil, err
		}
		schemas = append(schemas, n)
	}
	rows.Close()
	var dropped []string
	for _, n := range schemas {
		if err := pgdb.ValidSchema(n); err != nil || (only != nil && !only(n)) {
			continue // not a name durachk makes: leave it
		}
		runID := strings.TrimSuffix(strings.TrimPrefix(n, "durachk_"), "_q")
		if live, err := runIsLive(ctx, locks, runID); err != nil || live {
			continue // a run still going owns it
		}
		if err := db.DropSchema(ctx, n); err != nil {
			return dropped, fmt.Errorf("cleanup %s: %w", Redact(url), err)
		}
		dropped = append(dropped, "postgres schema "+n)
	}
	return dropped, nil
}

const runLockSQL = `hashtextextended('durachk.run:' || $1, 0)`

// HoldRun marks the run of s as live until release is called: it holds a
// session advisory lock, keyed by the run id, on a connection of its own to the
// effect store's database. Cleanup skips the namespaces of a run whose lock is
// held. If durachk dies, the server drops the connection and with it the lock.
func HoldRun(ctx context.Context, s Spec) (release func(), err error) {
	db, err := pgdb.Open(ctx, s.StoreURL, pgdb.Options{MaxConns: 1})
	if err != nil {
		return nil, fmt.Errorf("hold run %s: %w", s.RunID, err)
	}
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("hold run %s: %w", s.RunID, err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(`+runLockSQL+`)`, s.RunID); err != nil {
		conn.Release()
		db.Close()
		return nil, fmt.Errorf("hold run %s: %w", s.RunID, err)
	}
	return func() {
		conn.Release()
		db.Close() // closing the session releases the lock
	}, nil
}

// runIsLive reports whether a run holds its lock in the database of db.
func runIsLive(ctx context.Context, db *pgdb.DB, runID string) (bool, error) {
	var got bool
	if err := db.Pool.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+runLockSQL+`)`, runID).Scan(&got); err != nil {
		return false, err
	}
	if got {
		_, err := db.Pool.Exec(ctx, `SELECT pg_advisory_unlock(`+runLockSQL+`)`, runID)
		return false, err
	}
	return true, nil
}

// LiveRuns opens the effect store's database to tell which runs still hold
// their lock; cleanups of every kind skip those runs' namespaces. Call done
// when finished.
func LiveRuns(ctx context.Context, storeURL string) (live func(runID string) bool, done func(), err error) {
	db, err := pgdb.Open(ctx, storeURL, pgdb.Options{MaxConns: 1})
	if err != nil {
		return nil, nil, fmt.Errorf("cleanup %s: %w", Redact(storeURL), err)
	}
	return func(runID string) bool {
		l, err := runIsLive(ctx, db, runID)
		return err != nil || l // unknown counts as live: never drop what may be in use
	}, db.Close, nil
}
