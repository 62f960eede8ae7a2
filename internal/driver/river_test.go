package driver_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/internal/targets"
)

// riverTarget builds the River driver (a module of its own: drivers/river)
// and returns the shared Postgres with it and knobs.
func riverTarget(t *testing.T, knobs string) *runner.Target {
	t.Helper()
	url := os.Getenv("DURACHK_PG_URL")
	if url == "" {
		t.Skip("DURACHK_PG_URL is not set: no Postgres to run River on")
	}
	bin := filepath.Join(t.TempDir(), "river")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join("..", "..", "drivers", "river")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build drivers/river: %v\n%s", err, out)
	}
	spec, err := targets.Parse(url + "&name=river&worker.command=" + bin + knobs)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := runner.New(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// River with its default configuration: idempotency and cancellation pass;
// nothing renews a running job, so lease.heartbeat is skipped with the
// reason; a setting River does not have is refused.
func TestRiverDefault(t *testing.T) {
	tg := riverTarget(t, "")
	c, _ := contracts.Lookup("lease.heartbeat")
	if why := c.Needs(tg.Capabilities()); why == "" {
		t.Errorf("lease.heartbeat runs on River, which renews nothing")
	}
	for _, id := range []string{"idempotency.conflict", "cancel.terminal"} {
		runnertest.SeekPasses(t, "river × "+id, 1, func(seed uint64) contracts.Result { return evaluate(t, tg, id, seed) })
	}
	spec, err := targets.Parse(os.Getenv("DURACHK_PG_URL") + "&worker.command=" + tg.Spec.Options["worker.command"] + "&worker.RescueAfter=1s")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runner.New(context.Background(), spec); err == nil {
		t.Errorf("River started with a knob it does not have (RescueAfter)")
	}
}
