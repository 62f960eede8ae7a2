package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/reports"
)

// A result's reproduce command runs when pasted: the target's credential is
// a ${VAR} reference, the variable durachk.yaml took it from where known,
// never the credential nor the redaction mask.
func TestReproduceIsPasteable(t *testing.T) {
	c, _ := contracts.Lookup("durability.ack")
	spec := "amqp://guest:s3cr3t@127.0.0.1:5672/?name=q"
	for _, tt := range []struct {
		refs map[string]string
		want string
	}{
		{map[string]string{"s3cr3t": "RABBIT_PASSWORD"}, `--target "amqp://guest:${RABBIT_PASSWORD}@127.0.0.1:5672/?name=q"`},
		{nil, `--target "amqp://guest:${DURACHK_AMQP_PASSWORD}@127.0.0.1:5672/?name=q"`},
	} {
		got := reproduce(&target{spec: spec, refs: tt.refs}, c, RunOptions{}, 3)
		if !strings.Contains(got, tt.want) || strings.Contains(got, "s3cr3t") || strings.Contains(got, reports.Redacted) {
			t.Errorf("reproduce: %s\nwant it to hold %s, and neither the credential nor the mask", got, tt.want)
		}
	}

	// Through a config file on the shared RabbitMQ (its probe only: nothing
	// runs): the variable the file names is the one the command names.
	if os.Getenv("DURACHK_AMQP_URL") == "" || os.Getenv("DURACHK_PG_URL") == "" {
		return // the unit part above ran; CI sets both
	}
	t.Setenv("DURACHK_TEST_RABBIT_PASSWORD", "guest")
	cfg := filepath.Join(t.TempDir(), "durachk.yaml")
	os.WriteFile(cfg, []byte("targets:\n  - name: orders\n    url: amqp://guest:${DURACHK_TEST_RABBIT_PASSWORD}@127.0.0.1:5672/\n"), 0o644)
	ts, err := resolveAll(context.Background(), &RunOptions{Config: cfg}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := reproduce(ts[0], c, RunOptions{}, 3)
	if !strings.Contains(got, "${DURACHK_TEST_RABBIT_PASSWORD}@127.0.0.1:5672/") {
		t.Errorf("reproduce from durachk.yaml: %s: want the file's variable", got)
	}
}
