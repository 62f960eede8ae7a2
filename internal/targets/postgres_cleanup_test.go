package targets

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"slices"
	"testing"

	"github.com/durachk/durachk/pipeline/pgstore"
)

func TestCleanupSkipsLiveRuns(t *testing.T) {
	url := os.Getenv("DURACHK_PG_URL")
	if url == "" {
		t.Skip("DURACHK_PG_URL is not set")
	}
	ctx := context.Background()
	spec := Spec{Kind: "postgres", URL: url, StoreURL: url, RunID: "tcleanup" + randSuffix()}
	st, err := pgstore.Open(ctx, url, spec.StoreSchema(), pgstore.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	t.Cleanup(func() { _ = TeardownStore(ctx, spec) })
	only := func(n string) bool { return n == spec.StoreSchema() }

	release, err := HoldRun(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	dropped, err := dropDurachkSchemas(ctx, url, url, only)
	if err != nil {
		t.Fatal(err)
	}
	if len(dropped) != 0 {
		t.Fatalf("cleanup dropped %v of a live run", dropped)
	}
	release()
	dropped, err = dropDurachkSchemas(ctx, url, url, only)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(dropped, "postgres schema "+spec.StoreSchema()) {
		t.Fatalf("cleanup after the run ended dropped %v, want %s", dropped, spec.StoreSchema())
	}
}

func randSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
