package targets

import (
	"context"
	"errors"
	"fmt"

	"github.com/durachk/durachk/adapters/pg/pgdb"
)

// cleanupPostgres drops every schema named durachk_* in the target's database
// and in the effect store's: what runs killed with SIGKILL (which cannot tear
// down) left behind. It must not run while another durachk run uses the same
// database.
func cleanupPostgres(ctx context.Context, s Spec) ([]string, error) {
	var dropped []string
	var errs []error
	seen := map[string]bool{}
	for _, u := range []string{s.URL, s.StoreURL} {
		if u == "" || seen[u] {
			continue
		}
		seen[u] = true
		d, err := dropDurachkSchemas(ctx, u)
		dropped = append(dropped, d...)
		errs = append(errs, err)
	}
	return dropped, errors.Join(errs...)
}

func dropDurachkSchemas(ctx context.Context, url string) ([]string, error) {
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
		if err := pgdb.ValidSchema(n); err != nil {
			continue // not a name durachk makes: leave it
		}
		if err := db.DropSchema(ctx, n); err != nil {
			return dropped, fmt.Errorf("cleanup %s: %w", Redact(url), err)
		}
		dropped = append(dropped, "postgres schema "+n)
	}
	return dropped, nil
}
