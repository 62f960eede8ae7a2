package runnertest

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/durachk/durachk/adapters/pg/pgdb"
)

// Leftovers lists what a run left: its schemas in the store at
// $DURACHK_PG_URL, its run directory, live children naming that directory.
func Leftovers(t *testing.T, runID, dir string) []string {
	t.Helper()
	var left []string
	db, err := pgdb.Open(context.Background(), os.Getenv("DURACHK_PG_URL"), pgdb.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Pool.Query(context.Background(), `SELECT nspname FROM pg_namespace WHERE nspname LIKE $1`, "durachk_"+runID+"%")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		_ = rows.Scan(&n)
		left = append(left, "schema "+n)
	}
	rows.Close()
	if _, err := os.Stat(dir); err == nil {
		left = append(left, "directory "+dir)
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		b, err := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), dir) {
			left = append(left, "process "+p.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return left
}
