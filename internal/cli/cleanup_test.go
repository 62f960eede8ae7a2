package cli

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters/pg/pgdb"
	"github.com/durachk/durachk/internal/targets"
)

// `cleanup --run ID` without a target cannot reach what the run left: its
// target's URL, credentials and control commands are not recorded. It is a
// configuration error (exit 3) of one line that says so, names the endpoint
// the run registered (or that the store knows none), and removes nothing:
// the run's registry is still there for a cleanup given its target. (It
// exited 0 and removed nothing.)
func TestCleanupRunNeedsTarget(t *testing.T) {
	pg := os.Getenv("DURACHK_PG_URL")
	if pg == "" {
		t.Skip("DURACHK_PG_URL is not set")
	}
	t.Setenv("DURACHK_STORE_URL", pg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A run of a Redis nothing serves: the test never reaches it.
	s, err := targets.Parse("redis://127.0.0.1:1/0")
	if err != nil {
		t.Fatal(err)
	}
	s.StoreURL, s.RunID = pg, "tcln"+strconv.FormatInt(time.Now().UnixNano(), 36)
	release, err := targets.HoldRun(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	release()
	defer func() { _ = targets.TeardownStore(context.Background(), s) }()
	for _, tt := range []struct {
		runs []string
		want string
	}{
		{[]string{s.RunID}, "(it used redis://127.0.0.1:1/0)"},
		{[]string{"zzzz0000"}, "(its registry in the effect store names none)"},
	} {
		var out bytes.Buffer
		err := Cleanup(ctx, RunOptions{}, tt.runs, &out)
		if Code(err) != ExitConfig {
			t.Fatalf("cleanup --run %v: exit %d (%v), want %d", tt.runs, Code(err), err, ExitConfig)
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") || !strings.Contains(msg, "needs the target the run used, with --target URL or -c durachk.yaml") || !strings.Contains(msg, tt.want) {
			t.Errorf("cleanup --run %v: %q; want one line asking for the target, with %q", tt.runs, msg, tt.want)
		}
		if out.Len() > 0 {
			t.Errorf("cleanup --run %v did something: %s", tt.runs, out.String())
		}
	}
	db, err := pgdb.Open(ctx, pg, pgdb.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, s.StoreSchema()).Scan(&n); err != nil || n != 1 {
		t.Errorf("the run's registry after cleanup without a target: %d schemas, %v; want it kept", n, err)
	}
}
