package rabbit_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/durachk/durachk/internal/targets"
)

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
