package rabbit_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/internal/targets"
)

// TestMain lets the runner re-execute this test binary as its child processes.
func TestMain(m *testing.M) {
	runner.ServeChildIfAsked()
	os.Exit(m.Run())
}

// The amqp:// target kind: knobs, typed queue arguments, and no password in
// any error.
func TestParseTarget(t *testing.T) {
	const pw = "s3cret-Passw0rd"
	base := "amqp://durachk:" + pw + "@127.0.0.1:5672/?"
	tests := []struct {
		name     string
		query    string
		wantErr  string
		wantName string
		wantOpt  map[string]string
	}{
		{name: "classic profile", query: "queue-arguments.x-queue-type=classic", wantName: "rabbitmq-classic",
			wantOpt: map[string]string{"queue-arguments.x-queue-type": "classic"}},
		{name: "quorum profile", query: "name=q&queue-arguments.x-queue-type=quorum&queue-arguments.x-delivery-limit=5&queue-arguments.x-dead-letter-exchange=dlx&prefetch=0&heartbeat=2",
			wantName: "q", wantOpt: map[string]string{"queue-arguments.x-delivery-limit": "5", "heartbeat": "2", "prefetch": "0"}},
		{name: "the arguments with which the broker moves jobs on its own", query: "queue-arguments.x-message-ttl=60000&queue-arguments.x-max-length=1000&queue-arguments.x-overflow=drop-head&queue-arguments.x-delivery-limit=5&queue-arguments.x-dead-letter-exchange=dlx",
			wantName: "rabbitmq", wantOpt: map[string]string{"queue-arguments.x-message-ttl": "60000", "queue-arguments.x-max-length": "1000", "queue-arguments.x-overflow": "drop-head", "queue-arguments.x-delivery-limit": "5"}},
		{name: "driver parameters pass through", query: "connection_timeout=1000", wantName: "rabbitmq"},
		{name: "unknown knob", query: "prefech=1", wantErr: `unknown setting "prefech"`},
		{name: "argument without x-", query: "queue-arguments.delivery-limit=5", wantErr: "start with x-"},
		{name: "stream is not a work queue", query: "queue-arguments.x-queue-type=stream", wantErr: "x-queue-type"},
		{name: "bad prefetch", query: "prefetch=-1", wantErr: "prefetch"},
		{name: "heartbeat off", query: "heartbeat=0", wantErr: "heartbeat"},
		{name: "bad confirms", query: "confirms=maybe", wantErr: "confirms"},
		{name: "bad delayed-nack", query: "delayed-nack=later", wantErr: "delayed-nack"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := targets.Parse(base + tt.query)
			if tt.wantErr != "" {
				if !errors.Is(err, targets.ErrBadTarget) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrBadTarget mentioning %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), pw) {
					t.Errorf("error contains the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Kind != "amqp" || s.Name != tt.wantName {
				t.Errorf("kind %q name %q, want amqp and %q", s.Kind, s.Name, tt.wantName)
			}
			for k, v := range tt.wantOpt {
				if s.Options[k] != v {
					t.Errorf("option %s = %q, want %q", k, s.Options[k], v)
				}
			}
			if strings.Contains(s.URL, "queue-arguments") || strings.Contains(s.URL, "name=") {
				t.Errorf("knobs left in the driver URL %s", targets.Redact(s.URL))
			}
			if strings.Contains(targets.Redact(s.URL), pw) {
				t.Errorf("redacted URL keeps the password")
			}
		})
	}
}

// A run of retry.bounded through real processes on the profiles whose broker
// moves jobs on its own: the final inventory lists them with the x-death
// reason, and never a job the pipeline dead-lettered (an ok dead_letter in the
// history).
func TestBrokerActionsInARun(t *testing.T) {
	raw := os.Getenv("DURACHK_AMQP_URL")
	if raw == "" {
		t.Skip("DURACHK_AMQP_URL is not set: e.g. DURACHK_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/")
	}
	if testing.Short() {
		t.Skip("contract runs with real processes take seconds each")
	}
	c, err := contracts.Lookup("retry.bounded")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, knobs, action, reason string
	}{
		{"quorum delivery limit", "queue-arguments.x-queue-type=quorum&queue-arguments.x-delivery-limit=1&queue-arguments.x-dead-letter-exchange=dlx", adapters.ActionDeadLettered, "delivery_limit"},
		{"quorum message TTL", "queue-arguments.x-queue-type=quorum&queue-arguments.x-message-ttl=1&queue-arguments.x-dead-letter-exchange=dlx", adapters.ActionExpired, "expired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), runnertest.Loaded(2*time.Minute))
			defer cancel()
			spec, err := targets.Parse(strings.TrimSuffix(raw, "/") + "/?" + tt.knobs)
			if err != nil {
				t.Fatal(err)
			}
			target, err := runner.New(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			// Seek a run where the broker moved a job (whether a poison job
			// is delivered past the limit, or a job outlives its TTL, before
			// the run drains depends on the run); every run's moves are checked.
			for seed := uint64(1); seed <= runnertest.MaxSeeds; seed++ {
				ex, err := target.Execute(ctx, contracts.Run{Contract: c.ID, Scenario: c.Scenario(seed, contracts.DefaultJobs), Seed: seed})
				if err != nil {
					t.Fatal(err)
				}
				byPipeline := map[string]bool{}
				for _, op := range ex.Ops {
					if op.F == history.DeadLetter && op.Type == history.OK {
						byPipeline[op.Job] = true
					}
				}
				inv := ex.Final.Broker
				dead := map[string]bool{}
				for _, id := range inv.DeadLettered {
					dead[id] = true
				}
				for _, m := range inv.Moved {
					if m.Action != tt.action || m.Reason != tt.reason || m.At.IsZero() || !dead[m.Job] {
						t.Errorf("moved %+v, want %s with reason %s, a time, in the DLQ", m, tt.action, tt.reason)
					}
					if byPipeline[m.Job] {
						t.Errorf("%s was dead-lettered by the pipeline, yet listed as moved by the broker", m.Job)
					}
				}
				if len(inv.Moved) > 0 {
					t.Logf("seed %d: %d dead letters, %d of them moved by the broker, e.g. %+v", seed, len(inv.DeadLettered), len(inv.Moved), inv.Moved[0])
					return
				}
				t.Logf("seed %d: nothing moved by the broker; the next seed", seed)
			}
			t.Fatalf("nothing moved by the broker in %d seeds", runnertest.MaxSeeds)
		})
	}
}
