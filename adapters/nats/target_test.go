package nats_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	nq "github.com/durachk/durachk/adapters/nats"
	"github.com/durachk/durachk/adapters/queuetest"
	"github.com/durachk/durachk/internal/natsserver"
	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/internal/runner/runnertest"
	"github.com/durachk/durachk/internal/targets"
)

// TestMain lets the runner re-execute this test binary as its child
// processes: workers, the watchdog, and the private JetStream server.
func TestMain(m *testing.M) {
	natsserver.ServeIfAsked()
	runner.ServeChildIfAsked()
	code := m.Run()
	runnertest.RemoveBinary()
	os.Exit(code)
}

// TestParseKnobs checks the nats:// target's knobs: JetStream's own settings
// are accepted and validated, anything else is a configuration error naming
// the key, and a password never shows.
func TestParseKnobs(t *testing.T) {
	tests := []struct {
		name    string
		url     string
		wantErr string // "" : accepted
		want    map[string]string
	}{
		{name: "plain", url: "nats://127.0.0.1:4222", want: map[string]string{}},
		{name: "production profile", url: "nats://127.0.0.1:4222?storage=file&replicas=1&retention=workqueue&max_deliver=5&ack_wait=30s&max_msgs=100000&max_bytes=1073741824&discard=new&duplicate_window=2m&max_age=24h&private-instance.sync_interval=always&name=jobs-js",
			want: map[string]string{"storage": "file", "replicas": "1", "retention": "workqueue", "max_deliver": "5", "ack_wait": "30s",
				"max_msgs": "100000", "max_bytes": "1073741824", "discard": "new", "duplicate_window": "2m", "max_age": "24h", "private-instance.sync_interval": "always"}},
		{name: "memory", url: "nats://127.0.0.1:4222?storage=memory", want: map[string]string{"storage": "memory"}},
		{name: "unlimited deliveries", url: "nats://127.0.0.1:4222?max_deliver=-1", want: map[string]string{"max_deliver": "-1"}},
		{name: "sync interval duration", url: "nats://127.0.0.1:4222?private-instance.sync_interval=1s", want: map[string]string{"private-instance.sync_interval": "1s"}},
		{name: "unknown knob", url: "nats://127.0.0.1:4222?max_deliveries=5", wantErr: `unknown setting "max_deliveries"`},
		{name: "bare sync_interval is the private instance's", url: "nats://127.0.0.1:4222?sync_interval=always", wantErr: `unknown setting "sync_interval"`},
		{name: "bad storage", url: "nats://127.0.0.1:4222?storage=disk", wantErr: "storage"},
		{name: "bad retention", url: "nats://127.0.0.1:4222?retention=fifo", wantErr: "retention"},
		{name: "bad discard", url: "nats://127.0.0.1:4222?discard=oldest", wantErr: "discard"},
		{name: "zero max_deliver", url: "nats://127.0.0.1:4222?max_deliver=0", wantErr: "max_deliver"},
		{name: "bad replicas", url: "nats://127.0.0.1:4222?replicas=7", wantErr: "replicas"},
		{name: "bad ack_wait", url: "nats://127.0.0.1:4222?ack_wait=soon", wantErr: "ack_wait"},
		{name: "window beyond max_age", url: "nats://127.0.0.1:4222?max_age=1m&duplicate_window=2m", wantErr: "duplicate_window"},
		{name: "bad sync interval", url: "nats://127.0.0.1:4222?private-instance.sync_interval=never", wantErr: "sync_interval"},
		{name: "path", url: "nats://127.0.0.1:4222/jobs", wantErr: "path"},
		{name: "password stays out of errors", url: "nats://u:s3cretpw@127.0.0.1:4222?nope=1", wantErr: "xxxxx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := targets.Parse(tt.url)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, targets.ErrBadTarget) {
					t.Fatalf("Parse = %v, want ErrBadTarget naming %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "s3cretpw") {
					t.Errorf("error shows the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Kind != "nats" || fmt.Sprint(s.Options) != fmt.Sprint(tt.want) {
				t.Errorf("kind %q options %v, want nats and %v", s.Kind, s.Options, tt.want)
			}
			if u, _ := url.Parse(s.URL); u.RawQuery != "" {
				t.Errorf("knobs left in the client URL %s", s.URL)
			}
		})
	}
}

// TestPrivateServerDurability starts a private JetStream server per profile,
// enqueues, SIGKILLs and restarts it, and counts what survived: file storage
// keeps every acknowledged publish (with the default sync interval too: a
// kill leaves the page cache), memory storage keeps none, and neither does
// the negative control. Stop leaves no server running and no directory.
func TestPrivateServerDurability(t *testing.T) {
	if err := targets.CanKillBroker(targets.Spec{Kind: "nats"}); err != nil {
		t.Fatal(err) // this binary serves the private server (TestMain)
	}
	tests := []struct {
		name         string
		url          string
		volatile     bool
		wantSurvived int
	}{
		{"file, default sync_interval", "nats://127.0.0.1:4222", false, 3},
		{"file, sync_interval always", "nats://127.0.0.1:4222?private-instance.sync_interval=always", false, 3},
		{"memory storage", "nats://127.0.0.1:4222?storage=memory", false, 0},
		{"no-persistence negative control", "nats://127.0.0.1:4222?storage=file", true, 0},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			spec, err := targets.Parse(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			spec.RunID, spec.Volatile = fmt.Sprintf("tpriv%d%s", i, queuetest.RunID()[1:7]), tt.volatile
			dir := t.TempDir()
			inst, pspec, err := targets.StartPrivate(ctx, spec, dir)
			if err != nil {
				t.Fatal(err)
			}
			pu, err := url.Parse(inst.URL())
			if err != nil {
				t.Fatal(err)
			}
			if pu.Hostname() != "127.0.0.1" {
				t.Errorf("private server on %s, want loopback", pu.Host)
			}
			if pw, _ := pu.User.Password(); pw == "" {
				t.Error("private server without a password")
			}
			defer func() {
				if err := inst.Stop(); err != nil {
					t.Errorf("stop: %v", err)
				}
				if c, err := net.DialTimeout("tcp", pu.Host, time.Second); err == nil {
					c.Close()
					t.Errorf("private server still accepts connections on %s after Stop", pu.Host)
				}
				if _, err := os.Stat(dir + "/nats"); !os.IsNotExist(err) {
					t.Errorf("the server's directory is left: %v", err)
				}
			}()
			q, err := targets.OpenQueue(ctx, pspec)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"a", "b", "c"} {
				if err := q.Enqueue(ctx, queuetest.Job(id)); err != nil {
					t.Fatal(err)
				}
			}
			q.Close()
			if err := inst.Kill(); err != nil {
				t.Fatal(err)
			}
			if err := inst.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			q, err = targets.OpenQueue(ctx, pspec)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			inv, err := q.(adapters.Inspector).Inspect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(inv.Queued); got != tt.wantSurvived {
				t.Errorf("%d of 3 acknowledged jobs survived the kill (%v), want %d", got, inv.Queued, tt.wantSurvived)
			}
			if q.Capabilities().Durable != (tt.wantSurvived == 3) {
				t.Errorf("declared durable %v, but %d of 3 survived", q.Capabilities().Durable, len(inv.Queued))
			}
		})
	}
}

// A private server's password and port are its own, and the spec points at it.
func TestPrivateServerIsPrivate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec, err := targets.Parse("nats://127.0.0.1:4222?private-instance.sync_interval=always")
	if err != nil {
		t.Fatal(err)
	}
	spec.RunID = "tpriv" + queuetest.RunID()[1:9]
	inst, pspec, err := targets.StartPrivate(ctx, spec, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Stop()
	if pspec.URL == spec.URL || pspec.URL != inst.URL() {
		t.Errorf("spec URL %s, instance %s", targets.Redact(pspec.URL), targets.Redact(inst.URL()))
	}
	u, _ := url.Parse(inst.URL())
	wrong := *u
	wrong.User = url.UserPassword("durachk", "guessed")
	if _, err := nq.ServerVersion(ctx, wrong.String()); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Errorf("the private server with a wrong password: %v, want an authorization violation", err)
	}
	anonymous := *u
	anonymous.User = nil
	if _, err := nq.ServerVersion(ctx, anonymous.String()); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Errorf("the private server without credentials: %v, want an authorization violation", err)
	}
	v, err := nq.ServerVersion(ctx, inst.URL())
	if err != nil || !strings.HasPrefix(v, "nats-server 2.") {
		t.Errorf("version %q %v", v, err)
	}
	if v != "nats-server "+natsserver.Version {
		t.Errorf("private server is %q, want the embedded %s", v, natsserver.Version)
	}
}
