package targets

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durachk/durachk/adapters"
)

// For every kind: a run's namespace (with a job in it) and its store schema
// survive cleanup while the run holds its lock; once it lets go, cleanup of its
// target removes both and says so, one line each; cleanup of another target
// keeps the store schema (it names where the namespace is); a second cleanup
// finds nothing left.
func TestCleanupRemovesDeadRunsOnly(t *testing.T) {
	pg := os.Getenv("DURACHK_PG_URL")
	if pg == "" {
		t.Skip("DURACHK_PG_URL is not set")
	}
	tests := []struct {
		kind, env string
		want      []string // substrings of the lines of the cleanup after the run
	}{
		{"postgres", "DURACHK_PG_URL", []string{"postgres schema durachk_%s_q", "postgres schema durachk_%s (effect store)"}},
		{"redis", "DURACHK_REDIS_URL", []string{"redis key durachk:%s:stream", "postgres schema durachk_%s (effect store)"}},
		{"amqp", "DURACHK_AMQP_URL", []string{"rabbitmq queue durachk.%s (1 messages)", "rabbitmq queue durachk.%s.dlq", "postgres schema durachk_%s (effect store)"}},
		{"sqs", "DURACHK_SQS_URL", []string{"sqs queue ", "postgres schema durachk_%s (effect store)"}},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			raw := os.Getenv(tt.env)
			if raw == "" {
				t.Skipf("%s is not set", tt.env)
			}
			// The store is shared: once the run lets go, anyone's cleanup of
			// dead runs (another durachk on this machine) may remove its
			// schema before this test looks. A schema gone that way is
			// tried again with a new run, at most three times; one still
			// there that cleanup does not name fails the test.
			for try := 1; try <= 5; try++ {
				if cleanupOnce(t, raw, pg, tt.want) {
					return
				}
			}
			t.Error("another cleanup removed the dead run's store schema first in 5 runs of 5: nothing was shown")
		})
	}
}

// A run's lock is gone once its release returns: a cleanup right after a run
// ends (CI's cleanup after the tests) finds the run dead. Closing the session
// alone left the lock to the backend's exit, which a loaded server took long
// enough for the next cleanup to find the run still live.
func TestReleasedRunIsDeadAtOnce(t *testing.T) {
	pg := os.Getenv("DURACHK_PG_URL")
	if pg == "" {
		t.Skip("DURACHK_PG_URL is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	live, done, err := LiveRuns(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	for i := range 20 {
		s := Spec{Kind: "postgres", URL: pg, StoreURL: pg, RunID: "trel" + randSuffix()}
		release, err := HoldRun(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if !live(s.RunID) {
			release()
			t.Fatalf("try %d: a held run is not live", i)
		}
		release()
		dead := !live(s.RunID)
		if err := TeardownStore(ctx, s); err != nil {
			t.Fatal(err)
		}
		if !dead {
			t.Fatalf("try %d: the run is still live right after its release", i)
		}
	}
}

// RunsOf finds the runs a command started by the id it printed (their
// registry's parent), held or not; not another command's, nor a run
// without a parent.
func TestRunsOfAParent(t *testing.T) {
	pg := os.Getenv("DURACHK_PG_URL")
	if pg == "" {
		t.Skip("DURACHK_PG_URL is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	parent, other := "tpar"+randSuffix(), "tpar"+randSuffix()
	var mine []string
	for i, p := range []string{parent, other, parent, ""} {
		s := Spec{Kind: "postgres", URL: pg, StoreURL: pg, RunID: "trof" + randSuffix(), Parent: p}
		release, err := HoldRun(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			release() // dead runs are found too
		} else {
			defer release()
		}
		defer func() { _ = TeardownStore(ctx, s) }()
		if p == parent {
			mine = append(mine, s.RunID)
		}
	}
	slices.Sort(mine)
	got, err := RunsOf(ctx, pg, []string{parent})
	if err != nil || !slices.Equal(got, mine) {
		t.Errorf("RunsOf(%s) = %v, %v; want %v", parent, got, err, mine)
	}
	if got, err := RunsOf(ctx, pg, []string{"tpar" + randSuffix()}); err != nil || len(got) != 0 {
		t.Errorf("RunsOf a parent that started nothing = %v, %v", got, err)
	}
}

// AwaitDead returns a run still holding its lock after the grace, and
// returns as soon as a held run lets go within it (a cleanup named a run
// killed a moment ago).
func TestAwaitDead(t *testing.T) {
	pg := os.Getenv("DURACHK_PG_URL")
	if pg == "" {
		t.Skip("DURACHK_PG_URL is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := Spec{Kind: "postgres", URL: pg, StoreURL: pg, RunID: "tawd" + randSuffix()}
	release, err := HoldRun(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = TeardownStore(ctx, s) }()
	dead := "tawd" + randSuffix() // never held
	still, err := AwaitDead(ctx, pg, []string{s.RunID, dead}, 300*time.Millisecond)
	if err != nil || !slices.Equal(still, []string{s.RunID}) {
		release()
		t.Fatalf("AwaitDead of a held run and a dead one = %v, %v; want the held one", still, err)
	}
	go func() {
		time.Sleep(500 * time.Millisecond)
		release()
	}()
	start := time.Now()
	still, err = AwaitDead(ctx, pg, []string{s.RunID}, 30*time.Second)
	if err != nil || len(still) != 0 {
		t.Fatalf("AwaitDead of a run released within the grace = %v, %v; want none", still, err)
	}
	if d := time.Since(start); d >= 30*time.Second {
		t.Errorf("AwaitDead took the whole grace (%v) for a run released after 0.5 s", d)
	}
}

// cleanupSpec is the target at raw with its effect store at pg and a run id
// of its own.
func cleanupSpec(t *testing.T, raw, pg string) Spec {
	t.Helper()
	spec, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	spec.StoreURL = pg
	spec.RunID = "tclean" + randSuffix()
	return spec
}

// enqueueOne leaves one job (j1) in the run's namespace.
func enqueueOne(ctx context.Context, t *testing.T, spec Spec) {
	t.Helper()
	q, err := OpenQueue(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Enqueue(ctx, adapters.Job{ID: "j1", Tenant: "acme", DocumentID: "d1", Version: 1, MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	q.Close()
}

// cleanupOnce is one run of TestCleanupRemovesDeadRunsOnly's subtest; it
// reports false when another cleanup removed the dead run's store schema
// before the test's own did.
func cleanupOnce(t *testing.T, raw, pg string, want []string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := cleanupSpec(t, raw, pg)
	only := []string{spec.RunID}
	release, err := HoldRun(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	defer func() {
		if !released {
			release()
		}
		_ = Teardown(context.Background(), spec)
	}()
	enqueueOne(ctx, t, spec)
	st, err := OpenStore(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()

	lines, err := Cleanup(ctx, spec, only)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 0 {
		t.Fatalf("cleanup touched a live run: %v", lines)
	}
	release()
	released = true

	// Another target's cleanup keeps the store schema: it names the
	// target (an AMQP broker where no run is registered: nothing dialled).
	other, err := Parse("amqp://guest:guest@127.0.0.1:1/")
	if err != nil {
		t.Fatal(err)
	}
	other.StoreURL = pg
	lines, err = Cleanup(ctx, other, only)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) == 0 && !storeSchemaExists(t, pg, "durachk_"+spec.RunID) {
		t.Logf("run %s: another cleanup removed its store schema first; again with a new run", spec.RunID)
		return false
	}
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "kept effect-store schema durachk_"+spec.RunID) {
		t.Fatalf("cleanup of another target: %v, want the store schema kept", lines)
	}

	lines, err = Cleanup(ctx, spec, only)
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, w := range want {
		if strings.Contains(w, "%s") {
			w = strings.ReplaceAll(w, "%s", spec.RunID)
		}
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "removed ") && strings.Contains(l, w) }) {
			missing = append(missing, w)
		}
	}
	storeLine := "postgres schema durachk_" + spec.RunID + " (effect store)"
	if slices.Contains(missing, storeLine) && !storeSchemaExists(t, pg, "durachk_"+spec.RunID) {
		t.Logf("run %s: another cleanup removed its store schema first; again with a new run", spec.RunID)
		return false
	}
	for _, w := range missing {
		t.Errorf("cleanup after the run: no line with %q in %v", w, lines)
	}
	lines, err = Cleanup(ctx, spec, only)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 0 {
		t.Errorf("second cleanup still found %v", lines)
	}
	return true
}

func TestEndpoint(t *testing.T) {
	tests := []struct{ url, want string }{
		{"postgres://u:pw@localhost/test?sslmode=disable", "postgres://127.0.0.1:5432/test"},
		{"redis://:pw@127.0.0.1:6380", "redis://127.0.0.1:6380/0"},
		{"amqp://guest:guest@127.0.0.1:5672/?queue-arguments.x-queue-type=quorum", "amqp://127.0.0.1:5672/"},
		{"amqp://guest:guest@127.0.0.1/vh", "amqp://127.0.0.1:5672/vh"},
		{"sqs://aws?region=eu-west-1", "sqs://aws/?region=eu-west-1"},
		{"sqs://127.0.0.1:9324?endpoint-kind=fauxqs", "sqs://127.0.0.1:9324/?region=us-east-1"},
	}
	for _, tt := range tests {
		s, err := Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := Endpoint(s); got != tt.want {
			t.Errorf("Endpoint(%s) = %s, want %s", tt.url, got, tt.want)
		}
	}
}

func TestSQSRunID(t *testing.T) {
	for u, want := range map[string]string{
		"http://127.0.0.1:9324/000000000000/durachk-abcd1234":          "abcd1234",
		"http://127.0.0.1:9324/000000000000/durachk-abcd1234-dlq.fifo": "abcd1234",
		"http://127.0.0.1:9324/000000000000/durachk-abcd1234.fifo":     "abcd1234",
		"http://127.0.0.1:9324/000000000000/orders":                    "",
		"http://127.0.0.1:9324/000000000000/durachk-UPPER":             "",
	} {
		if got := sqsRunID(u); got != want {
			t.Errorf("sqsRunID(%s) = %q, want %q", u, got, want)
		}
	}
}

func randSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// storeSchemaExists reports whether the effect store at pg has schema name.
func storeSchemaExists(t *testing.T, pg, name string) bool {
	t.Helper()
	c, err := pgx.Connect(context.Background(), pg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var n int
	if err := c.QueryRow(context.Background(), `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// AMQP cannot list queues: cleanup finds a RabbitMQ run's queues by the
// names its registry entry (the store schema) gives. A run named by the
// caller whose schema is already gone is still removed, by the names the
// target's options give it; a cleanup naming another run leaves it alone.
func TestCleanupNamedRabbitRunWithoutSchema(t *testing.T) {
	pg, raw := os.Getenv("DURACHK_PG_URL"), os.Getenv("DURACHK_AMQP_URL")
	if pg == "" || raw == "" {
		t.Skip("DURACHK_PG_URL or DURACHK_AMQP_URL is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := cleanupSpec(t, raw, pg)
	defer func() { _ = Teardown(context.Background(), spec) }()
	enqueueOne(ctx, t, spec)
	if storeSchemaExists(t, pg, "durachk_"+spec.RunID) {
		t.Fatalf("the run has a store schema: the case needs a run without one")
	}
	lines, err := Cleanup(ctx, spec, []string{"tclean" + randSuffix()})
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 0 {
		t.Fatalf("cleanup of another run: %v, want nothing", lines)
	}
	lines, err = Cleanup(ctx, spec, []string{spec.RunID})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"removed rabbitmq queue durachk." + spec.RunID + " (1 messages)", "removed rabbitmq queue durachk." + spec.RunID + ".dlq ("} {
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, w) }) {
			t.Errorf("cleanup of the named run: no line %q in %v", w, lines)
		}
	}
	if lines, err = Cleanup(ctx, spec, []string{spec.RunID}); err != nil || len(lines) != 0 {
		t.Errorf("second cleanup: %v, %v; want nothing left", lines, err)
	}
}
