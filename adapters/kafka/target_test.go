package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	kq "github.com/durachk/durachk/adapters/kafka"
	"github.com/durachk/durachk/adapters/queuetest"
	"github.com/durachk/durachk/internal/targets"
)

// TestParseKnobs checks the kafka:// target's knobs: Kafka's own settings
// are accepted and validated, anything else is a configuration error naming
// the key, and a password never shows.
func TestParseKnobs(t *testing.T) {
	tests := []struct {
		name    string
		url     string
		wantErr string // "" : accepted
		want    map[string]string
	}{
		{name: "plain", url: "kafka://127.0.0.1:9092", want: map[string]string{}},
		{name: "production profile", url: "kafka://u:pw@127.0.0.1:9092?acks=all&enable.idempotence=true&auto.offset.reset=earliest&session.timeout.ms=45000&heartbeat.interval.ms=3000&rebalance.timeout.ms=60000&group.protocol=consumer&num.partitions=6&replication.factor=3&min.insync.replicas=2&unclean.leader.election.enable=false&sasl.mechanism=SCRAM-SHA-512&fifo=true&name=jobs",
			want: map[string]string{"acks": "all", "enable.idempotence": "true", "auto.offset.reset": "earliest", "session.timeout.ms": "45000", "heartbeat.interval.ms": "3000",
				"rebalance.timeout.ms": "60000", "group.protocol": "consumer", "num.partitions": "6", "replication.factor": "3", "min.insync.replicas": "2",
				"unclean.leader.election.enable": "false", "sasl.mechanism": "SCRAM-SHA-512", "fifo": "true"}},
		{name: "acks 1 without idempotence", url: "kafka://127.0.0.1:9092?acks=1&enable.idempotence=false", want: map[string]string{"acks": "1", "enable.idempotence": "false"}},
		{name: "fsync per write", url: "kafka://127.0.0.1:9092?private-instance.log.flush.interval.messages=1", want: map[string]string{"private-instance.log.flush.interval.messages": "1"}},
		{name: "acks 1 needs idempotence off", url: "kafka://127.0.0.1:9092?acks=1", wantErr: "enable.idempotence=false"},
		{name: "bad acks", url: "kafka://127.0.0.1:9092?acks=2", wantErr: "acks"},
		{name: "bad reset", url: "kafka://127.0.0.1:9092?auto.offset.reset=none", wantErr: "auto.offset.reset"},
		{name: "bad protocol", url: "kafka://127.0.0.1:9092?group.protocol=share", wantErr: "group.protocol"},
		{name: "bad session timeout", url: "kafka://127.0.0.1:9092?session.timeout.ms=soon", wantErr: "session.timeout.ms"},
		{name: "bad partitions", url: "kafka://127.0.0.1:9092?num.partitions=0", wantErr: "num.partitions"},
		{name: "flush interval kfake cannot run", url: "kafka://127.0.0.1:9092?private-instance.log.flush.interval.messages=100", wantErr: "log.flush.interval.messages"},
		{name: "unknown knob", url: "kafka://127.0.0.1:9092?linger.ms=5", wantErr: `unknown setting "linger.ms"`},
		{name: "path", url: "kafka://127.0.0.1:9092/jobs", wantErr: "path"},
		{name: "no host: a private kfake per run", url: "kafka://?fifo=true", want: map[string]string{"fifo": "true"}},
		{name: "no host, fsync per write", url: "kafka://?private-instance.log.flush.interval.messages=1", want: map[string]string{"private-instance.log.flush.interval.messages": "1"}},
		{name: "no host with credentials", url: "kafka://u:pw@", wantErr: "host:port"},
		{name: "no host with a path", url: "kafka:///jobs", wantErr: "kafka://"},
		{name: "no host, sasl", url: "kafka://?sasl.mechanism=PLAIN", wantErr: "sasl.mechanism"},
		{name: "no host, control commands", url: "kafka://?control.kill=true&control.start=true", wantErr: "control.*"},
		{name: "share group", url: "kafka://?group.type=share&group.share.record.lock.duration.ms=2000&group.share.delivery.count.limit=3",
			want: map[string]string{"group.type": "share", "group.share.record.lock.duration.ms": "2000", "group.share.delivery.count.limit": "3"}},
		{name: "bad group type", url: "kafka://127.0.0.1:9092?group.type=classic", wantErr: "group.type"},
		{name: "share group with fifo", url: "kafka://127.0.0.1:9092?group.type=share&fifo=true", wantErr: "fifo"},
		{name: "delivery limit below Kafka's bound", url: "kafka://?group.type=share&group.share.delivery.count.limit=1", wantErr: "group.share.delivery.count.limit"},
		{name: "bad lock", url: "kafka://?group.type=share&group.share.record.lock.duration.ms=0", wantErr: "group.share.record.lock.duration.ms"},
		{name: "password stays out of errors", url: "kafka://u:s3cretpw@127.0.0.1:9092?nope=1", wantErr: "xxxxx"},
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
			if s.Kind != "kafka" || fmt.Sprint(s.Options) != fmt.Sprint(tt.want) {
				t.Errorf("kind %q options %v, want kafka and %v", s.Kind, s.Options, tt.want)
			}
			u, _ := url.Parse(s.URL)
			if u.RawQuery != "" {
				t.Errorf("knobs left in the client URL %s", s.URL)
			}
			if got, want := targets.PrivateOnly(s), u.Host == ""; got != want {
				t.Errorf("PrivateOnly(%s) = %v, want %v", s.URL, got, want)
			}
		})
	}
}

// TestCleanupRemovesDeadRuns: the topics and group of a run that died
// without its teardown are removed by the target's cleanup, and a live run's
// are kept (the control).
func TestCleanupRemovesDeadRuns(t *testing.T) {
	u := brokerURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dead, live := queuetest.RunID(), queuetest.RunID()
	for _, id := range []string{dead, live} {
		q, err := kq.Open(ctx, u, id, kq.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Enqueue(ctx, queuetest.Job("a")); err != nil {
			t.Fatal(err)
		}
		d, err := q.Lease(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Ack(ctx, d); err != nil { // the group now has a commit
			t.Fatal(err)
		}
		q.Close() // no Drop: as a run killed with SIGKILL
	}
	k, _ := targets.Lookup("kafka")
	removed, err := k.Cleanup(ctx, targets.Spec{Kind: "kafka", URL: u, Options: map[string]string{}},
		targets.Scope{Live: func(id string) bool { return id != dead }})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"topic durachk-" + dead + "-jobs", "topic durachk-" + dead + "-jobs.dlq", "group durachk-" + dead} {
		if !slices.Contains(removed, want) {
			t.Errorf("cleanup removed %v, want %s among them", removed, want)
		}
	}
	if left, err := kq.Leftovers(ctx, u, "", dead); err != nil || len(left) > 0 {
		t.Errorf("left of the dead run: %v %v", left, err)
	}
	left, err := kq.Leftovers(ctx, u, "", live)
	if err != nil || len(left) != 3 {
		t.Errorf("the live run's topics and group: %v %v, want all three kept", left, err)
	}
	if _, err := k.Cleanup(ctx, targets.Spec{Kind: "kafka", URL: u, Options: map[string]string{}},
		targets.Scope{Live: func(id string) bool { return id != live }}); err != nil {
		t.Fatal(err)
	}
}

// TestPrivateBrokerKill starts a private kfake per profile, produces,
// SIGKILLs and restarts it, and counts what survived: with a data directory
// every acknowledged record survives a kill (fsync per write or not: a kill
// leaves the page cache), and the no-persistence negative control keeps
// none. Stop leaves no directory.
func TestPrivateBrokerKill(t *testing.T) {
	for _, tc := range []struct {
		name     string
		url      string
		volatile bool
		survive  bool
	}{
		{"page cache", "kafka://127.0.0.1:9092", false, true},
		{"fsync per write", "kafka://127.0.0.1:9092?private-instance.log.flush.interval.messages=1", false, true},
		{"no persistence (negative control)", "kafka://127.0.0.1:9092", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := targets.Parse(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			s.RunID, s.Volatile = queuetest.RunID(), tc.volatile
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			inst, ps, err := targets.StartPrivate(ctx, s, dir)
			if err != nil {
				t.Fatal(err)
			}
			defer inst.Stop()
			q, err := kq.Open(ctx, ps.URL, s.RunID, kq.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				if err := q.Enqueue(ctx, queuetest.Job(fmt.Sprint("j", i))); err != nil {
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
			q, err = kq.Open(ctx, ps.URL, s.RunID, kq.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			inv, err := q.Inspect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(inv.Queued); (got == 5) != tc.survive || (got != 0 && got != 5) {
				t.Errorf("%d of 5 acknowledged records after a kill, want %v", got, map[bool]string{true: "all 5", false: "none"}[tc.survive])
			}
			if v := q.ServerVersion(); !strings.HasPrefix(v, "kfake ") || !strings.HasSuffix(v, "(emulator)") {
				t.Errorf("private broker is %q, want kfake <version> (emulator)", v)
			}
			if err := inst.Stop(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, "kafka")); !os.IsNotExist(err) {
				t.Errorf("stop left the data directory (%v)", err)
			}
		})
	}
}

// TestPrivateBrokerIsPrivate: the private kfake listens on loopback only and
// takes no request without its own credentials (the control: with them it
// answers).
func TestPrivateBrokerIsPrivate(t *testing.T) {
	raw := brokerURL(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if u.Hostname() != "127.0.0.1" {
		t.Errorf("private kfake at %s, want 127.0.0.1", u.Host)
	}
	if pw, ok := u.User.Password(); !ok || len(pw) < 16 {
		t.Errorf("private kfake has no password of its own")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := kq.Ready(ctx, raw, ""); err != nil {
		t.Fatalf("with its credentials: %v", err)
	}
	for name, user := range map[string]*url.Userinfo{"no credentials": nil, "wrong password": url.UserPassword(u.User.Username(), "not-the-password")} {
		v := *u
		v.User = user
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := kq.Ready(ctx, v.String(), "")
		cancel()
		if err == nil {
			t.Errorf("%s: the private kfake answered", name)
		}
	}
}

// TestUnreachable: a broker nobody serves is ErrUnavailable, and the
// password stays out of the error.
func TestUnreachable(t *testing.T) {
	queuetest.Unreachable(t, func(addr, pw string) string { return "kafka://u:" + pw + "@" + addr },
		func(ctx context.Context, raw string) error {
			q, err := kq.Open(ctx, raw, queuetest.RunID(), kq.Options{})
			if err == nil {
				q.Close()
			}
			return err
		})
}

// TestClosedAtOnceIsUnavailable: a broker address whose connections are
// closed as soon as they open (a partition's proxy cutting the link) is
// ErrUnavailable, which a worker retries, not a configuration error. The
// control: the private kfake opens.
func TestClosedAtOnceIsUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := kq.Open(ctx, "kafka://"+ln.Addr().String(), queuetest.RunID(), kq.Options{})
	if err == nil {
		q.Close()
		t.Fatal("opened through a link that closes every connection")
	}
	if !errors.Is(err, adapters.ErrUnavailable) {
		t.Errorf("Open = %v, want ErrUnavailable", err)
	}
	open(t, kq.Options{})
}
