package targets

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/durachk/durachk/adapters/pg/pgdb"
	"github.com/durachk/durachk/internal/redact"
)

// cleanupPostgres drops the queue schemas (durachk_<runid>_q) of dead runs in
// the target's database. The effect store's schemas are the generic part of
// Cleanup.
func cleanupPostgres(ctx context.Context, s Spec, c Scope) ([]string, error) {
	return dropDeadSchemas(ctx, s.URL, queueSchemaRE, c.Live)
}

var (
	queueSchemaRE = regexp.MustCompile(`^durachk_([a-z0-9]{4,24})_q$`)
	storeSchemaRE = regexp.MustCompile(`^durachk_([a-z0-9]{4,24})$`)
)

// dropDeadSchemas drops the schemas of url's database that re matches (its
// first group is the run id) and whose run is not live.
func dropDeadSchemas(ctx context.Context, url string, re *regexp.Regexp, live func(string) bool) ([]string, error) {
	db, schemas, err := openSchemas(ctx, url)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var dropped []string
	for _, n := range schemas {
		m := re.FindStringSubmatch(n)
		if m == nil || live(m[1]) {
			continue
		}
		if err := db.DropSchema(ctx, n); err != nil {
			return dropped, fmt.Errorf("cleanup %s: %w", Redact(url), err)
		}
		dropped = append(dropped, "postgres schema "+n)
	}
	return dropped, nil
}

func durachkSchemas(ctx context.Context, db *pgdb.DB) ([]string, error) {
	rows, err := db.Pool.Query(ctx, `SELECT nspname FROM pg_namespace WHERE nspname LIKE 'durachk\_%' ORDER BY 1`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		if pgdb.ValidSchema(n) == nil {
			out = append(out, n)
		}
	}
	return out, rows.Err()
}

// openSchemas opens the database at url and lists its durachk schemas
// (durachkSchemas). The caller closes db.
func openSchemas(ctx context.Context, url string) (db *pgdb.DB, schemas []string, err error) {
	db, err = pgdb.Open(ctx, url, pgdb.Options{MaxConns: 1})
	if err != nil {
		return nil, nil, fmt.Errorf("cleanup %s: %w", Redact(url), err)
	}
	if schemas, err = durachkSchemas(ctx, db); err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("cleanup %s: %w", Redact(url), err)
	}
	return db, schemas, nil
}

const runLockSQL = `hashtextextended('durachk.run:' || $1, 0)`

// registryTable is the table, in the run's effect-store schema, that says which
// target the run used: cleanup needs it to find the namespaces of a run on a
// broker that cannot list them (RabbitMQ over AMQP), and to leave a run's
// store schema in place until the target that holds its namespace is cleaned.
const registryTable = "durachk_run"

// HoldRun marks the run of s as live until release is called: it holds a
// session advisory lock, keyed by the run id, on a connection of its own to the
// effect store's database. Cleanup skips the namespaces of a run whose lock is
// held. If durachk dies, the server drops the connection and with it the lock.
// Before it returns, the run is registered: its store schema exists with a
// row naming the target's kind, endpoint and knobs, so that whatever the run
// creates next can be found by cleanup.
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
	fail := func(err error) (func(), error) {
		conn.Release()
		db.Close()
		return nil, fmt.Errorf("hold run %s: %w", s.RunID, err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(`+runLockSQL+`)`, s.RunID); err != nil {
		return fail(err)
	}
	opts := map[string]string{}
	for k, v := range s.Options {
		if !redact.Sensitive(k) {
			opts[k] = v
		}
	}
	b, _ := json.Marshal(opts)
	schema := pgdb.Ident(s.StoreSchema())
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fail(err)
	}
	for _, q := range []string{
		`CREATE SCHEMA IF NOT EXISTS ` + schema,
		`CREATE TABLE IF NOT EXISTS ` + schema + `.` + registryTable + ` (kind text NOT NULL, endpoint text NOT NULL, options jsonb NOT NULL, started timestamptz NOT NULL DEFAULT now(), parent text NOT NULL DEFAULT '')`,
		// What the run must undo on a broker it did not start (restore.go).
		`CREATE TABLE IF NOT EXISTS ` + schema + `.` + faultsTable + ` (node text NOT NULL, undo text NOT NULL, PRIMARY KEY (node, undo))`,
	} {
		if _, err := tx.Exec(ctx, q); err != nil {
			_ = tx.Rollback(ctx)
			return fail(err)
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.`+registryTable+` (kind, endpoint, options, parent) VALUES ($1, $2, $3, $4)`, s.Kind, Endpoint(s), string(b), s.Parent); err != nil {
		_ = tx.Rollback(ctx)
		return fail(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fail(err)
	}
	h := &heldRun{schema: s.StoreSchema(), exec: func(ctx context.Context, sql string, args ...any) error {
		_, err := conn.Exec(ctx, sql, args...)
		return err
	}}
	held.Store(s.RunID, h)
	return func() {
		held.Delete(s.RunID)
		h.mu.Lock()
		h.gone = true
		h.mu.Unlock()
		// Unlocked before the session closes: a closed session's lock goes
		// only once its backend has processed the goodbye, and a cleanup
		// right after the run (on a loaded server) would still find the run
		// live. The close releases it anyway if the unlock fails.
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = conn.Exec(uctx, `SELECT pg_advisory_unlock(`+runLockSQL+`)`, s.RunID)
		cancel()
		conn.Release()
		db.Close()
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

// AwaitDead waits up to grace for each of runs to release its run lock in
// the store at storeURL and returns those still live. A run killed a moment
// ago holds its lock until the server notices its session ended, which a
// loaded server may take a while to do (a loaded CI run: a cleanup right
// after a SIGKILL found the run live and removed nothing).
func AwaitDead(ctx context.Context, storeURL string, runs []string, grace time.Duration) ([]string, error) {
	live, done, err := LiveRuns(ctx, storeURL)
	if err != nil {
		return nil, err
	}
	defer done()
	deadline := time.Now().Add(grace)
	var still []string
	for _, id := range runs {
		for live(id) && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		if live(id) {
			still = append(still, id)
		}
	}
	return still, nil
}

// DeadRun is a run whose store schema outlived it.
type DeadRun struct {
	ID string
	// Registered: the schema names the run's target (HoldRun); the fields
	// below are set only then.
	Registered bool
	Kind       string
	Endpoint   string
	Options    map[string]string
}

// RunsOf returns the runs registered in the effect store at storeURL whose
// parent (Spec.Parent: the command that started them) is one of parents,
// live or not, in schema order. Runs registered before the registry named
// parents are not found by theirs.
func RunsOf(ctx context.Context, storeURL string, parents []string) ([]string, error) {
	db, schemas, err := openSchemas(ctx, storeURL)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var out []string
	for _, n := range schemas {
		m := storeSchemaRE.FindStringSubmatch(n)
		if m == nil {
			continue
		}
		var parent string
		err := db.Pool.QueryRow(ctx, `SELECT parent FROM `+pgdb.Ident(n, registryTable)+` LIMIT 1`).Scan(&parent)
		switch {
		case err == nil:
			if parent != "" && slices.Contains(parents, parent) {
				out = append(out, m[1])
			}
		case strings.Contains(err.Error(), "does not exist") || strings.Contains(err.Error(), "no rows"):
			// No registry, or one from before parents were recorded.
		default:
			return nil, fmt.Errorf("read %s: %w", n, err)
		}
	}
	return out, nil
}

// RunTargets returns the endpoints (Endpoint) that the runs ids, and the
// runs whose parent is one of them (RunsOf), registered in the effect store
// at storeURL, in order, each once: what `durachk cleanup --run` needs named.
func RunTargets(ctx context.Context, storeURL string, ids []string) ([]string, error) {
	kids, err := RunsOf(ctx, storeURL, ids)
	if err != nil {
		return nil, err
	}
	db, err := pgdb.Open(ctx, storeURL, pgdb.Options{MaxConns: 1})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var out []string
	for _, id := range append(slices.Clone(ids), kids...) {
		var ep string
		err := db.Pool.QueryRow(ctx, `SELECT endpoint FROM `+pgdb.Ident("durachk_"+id, registryTable)+` LIMIT 1`).Scan(&ep)
		switch {
		case err == nil:
			if !slices.Contains(out, ep) {
				out = append(out, ep)
			}
		case strings.Contains(err.Error(), "does not exist") || strings.Contains(err.Error(), "no rows"):
		default:
			return nil, fmt.Errorf("read the registry of run %s: %w", id, err)
		}
	}
	return out, nil
}

// deadRuns lists the runs with a store schema in db that hold no lock.
func deadRuns(ctx context.Context, db *pgdb.DB, live func(string) bool) ([]DeadRun, error) {
	schemas, err := durachkSchemas(ctx, db)
	if err != nil {
		return nil, err
	}
	var out []DeadRun
	for _, n := range schemas {
		m := storeSchemaRE.FindStringSubmatch(n)
		if m == nil || live(m[1]) {
			continue
		}
		r := DeadRun{ID: m[1]}
		var opts string
		err := db.Pool.QueryRow(ctx, `SELECT kind, endpoint, options::text FROM `+pgdb.Ident(n, registryTable)+` LIMIT 1`).Scan(&r.Kind, &r.Endpoint, &opts)
		if err == nil {
			r.Registered = true
			_ = json.Unmarshal([]byte(opts), &r.Options)
		} else if !strings.Contains(err.Error(), "does not exist") && !strings.Contains(err.Error(), "no rows") {
			return nil, fmt.Errorf("read %s: %w", n, err)
		}
		out = append(out, r)
	}
	return out, nil
}
