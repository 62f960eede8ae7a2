package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
)

// The administrative calls of the harness (cleanup, private servers, replicated
// topologies): the driver is imported by this package only. Each call opens a
// pool of one connection and closes it.

func adminDB(ctx context.Context, url string) (*db, error) {
	c, err := ParseURL(url, nil)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	c.cfg.DBName = "" // the server, whatever the URL's database
	return openDB(ctx, c, 1)
}

// DropDatabase drops a database durachk made (durachk_…); a missing one is not
// an error.
func DropDatabase(ctx context.Context, url, name string) error {
	d, err := adminDB(ctx, url)
	if err != nil {
		return err
	}
	defer d.close()
	return dropDatabase(ctx, d, name)
}

var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

var runDatabaseRE = regexp.MustCompile(`^durachk_([a-z0-9]{4,24})$`)

// DropRunDatabases drops the databases durachk_<run id> of url's server whose
// run is not live, and names each one it dropped.
func DropRunDatabases(ctx context.Context, url string, live func(runID string) bool) ([]string, error) {
	d, err := adminDB(ctx, url)
	if err != nil {
		return nil, err
	}
	defer d.close()
	rows, err := d.pool.QueryContext(ctx, `SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'durachk\_%' ORDER BY 1`)
	if err != nil {
		return nil, d.err("list databases", err, false)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return nil, d.err("list databases", err, false)
		}
		names = append(names, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, d.err("list databases", err, false)
	}
	var dropped []string
	for _, n := range names {
		m := runDatabaseRE.FindStringSubmatch(n)
		if m == nil || live(m[1]) {
			continue
		}
		if err := dropDatabase(ctx, d, n); err != nil {
			return dropped, err
		}
		dropped = append(dropped, "mysql database "+n)
	}
	return dropped, nil
}

// ServerVersion connects to url and names the server ("mariadb 10.11.19").
func ServerVersion(ctx context.Context, url string) (string, error) {
	d, err := adminDB(ctx, url)
	if err != nil {
		return "", err
	}
	defer d.close()
	st, err := readSettings(ctx, d)
	if err != nil {
		return "", err
	}
	return versionName(st), nil
}

// Ready pings the server at url: nil once it serves requests.
func Ready(ctx context.Context, url string) error {
	d, err := adminDB(ctx, url)
	if err != nil {
		return err
	}
	d.close()
	return nil
}

// Exec runs administrative statements on the server at url, in order, on one
// connection (CREATE USER, CHANGE MASTER TO, SET GLOBAL …).
func Exec(ctx context.Context, url string, stmts ...string) error {
	d, err := adminDB(ctx, url)
	if err != nil {
		return err
	}
	defer d.close()
	for _, s := range stmts {
		if _, err := d.pool.ExecContext(ctx, s); err != nil {
			return d.err("admin", err, true)
		}
	}
	return nil
}

// Status reads the server's variables and status values named (global), as
// strings; a name the server does not know is left out.
func Status(ctx context.Context, url string, names ...string) (map[string]string, error) {
	d, err := adminDB(ctx, url)
	if err != nil {
		return nil, err
	}
	defer d.close()
	out := map[string]string{}
	quoted := make([]string, 0, len(names))
	for _, n := range names {
		if !nameRE.MatchString(n) {
			return nil, fmt.Errorf("mysql: status: bad variable name %q", n)
		}
		quoted = append(quoted, "'"+n+"'")
	}
	where := " WHERE Variable_name IN (" + strings.Join(quoted, ", ") + ")"
	for _, stmt := range []string{"SHOW GLOBAL VARIABLES" + where, "SHOW GLOBAL STATUS" + where} {
		rows, err := d.pool.QueryContext(ctx, stmt)
		if err != nil {
			return nil, d.err("status", err, false)
		}
		want := map[string]bool{}
		for _, n := range names {
			want[n] = true
		}
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				rows.Close()
				return nil, d.err("status", err, false)
			}
			if want[k] {
				out[k] = v
			}
		}
		rows.Close()
	}
	return out, nil
}

// ReplicaStatus is the first row of SHOW SLAVE STATUS on the server at url
// (column → value), or nil when the server replicates from nobody.
func ReplicaStatus(ctx context.Context, url string) (map[string]string, error) {
	d, err := adminDB(ctx, url)
	if err != nil {
		return nil, err
	}
	defer d.close()
	rows, err := d.pool.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return nil, d.err("replica status", err, false)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, d.err("replica status", err, false)
	}
	if !rows.Next() {
		return nil, d.err("replica status", rows.Err(), false)
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, d.err("replica status", err, false)
	}
	out := map[string]string{}
	for i, c := range cols {
		out[c] = vals[i].String
	}
	return out, nil
}
