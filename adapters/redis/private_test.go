package redis_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	rq "github.com/durachk/durachk/adapters/redis"
	"github.com/durachk/durachk/internal/targets"
)

// TestParseKnobs checks the redis:// target's knobs: Redis's own settings are
// accepted and validated, anything else is a configuration error naming the key.
func TestParseKnobs(t *testing.T) {
	tests := []struct {
		name    string
		url     string
		wantErr string // "" : accepted
		want    map[string]string
	}{
		{name: "plain", url: "redis://127.0.0.1:6379/0", want: map[string]string{}},
		{name: "production profile", url: "redis://127.0.0.1:6379/0?stream.maxlen=100000&stream.approximate=true&claim-min-idle=30s&block=2000&private-instance.appendonly=yes&private-instance.appendfsync=everysec&name=jobs-redis",
			want: map[string]string{"stream.maxlen": "100000", "stream.approximate": "true", "claim-min-idle": "30s", "block": "2000",
				"private-instance.appendonly": "yes", "private-instance.appendfsync": "everysec"}},
		{name: "minid retention", url: "redis://127.0.0.1:6379/0?stream.minid=24h", want: map[string]string{"stream.minid": "24h"}},
		{name: "minid id", url: "redis://127.0.0.1:6379/0?stream.minid=1700000000000-0", want: map[string]string{"stream.minid": "1700000000000-0"}},
		{name: "empty save", url: "redis://127.0.0.1:6379/0?private-instance.save=", want: map[string]string{"private-instance.save": ""}},
		{name: "save pairs", url: "redis://127.0.0.1:6379/0?private-instance.save=3600+1+300+100", want: map[string]string{"private-instance.save": "3600 1 300 100"}},
		{name: "driver option passes through", url: "redis://127.0.0.1:6379/0?dial_timeout=2s", want: map[string]string{}},
		{name: "unknown knob", url: "redis://127.0.0.1:6379/0?stream.maxlength=5", wantErr: `unknown setting "stream.maxlength"`},
		{name: "bad maxlen", url: "redis://127.0.0.1:6379/0?stream.maxlen=0", wantErr: "stream.maxlen"},
		{name: "maxlen and minid", url: "redis://127.0.0.1:6379/0?stream.maxlen=5&stream.minid=1h", wantErr: "exclude each other"},
		{name: "bad minid", url: "redis://127.0.0.1:6379/0?stream.minid=yesterday", wantErr: "stream.minid"},
		{name: "bad approximate", url: "redis://127.0.0.1:6379/0?stream.approximate=maybe", wantErr: "stream.approximate"},
		{name: "zero claim-min-idle", url: "redis://127.0.0.1:6379/0?claim-min-idle=0", wantErr: "claim-min-idle"},
		{name: "bad block", url: "redis://127.0.0.1:6379/0?block=soon", wantErr: "block"},
		{name: "bad appendonly", url: "redis://127.0.0.1:6379/0?private-instance.appendonly=true", wantErr: "private-instance.appendonly"},
		{name: "bad appendfsync", url: "redis://127.0.0.1:6379/0?private-instance.appendfsync=sometimes", wantErr: "private-instance.appendfsync"},
		{name: "bad save", url: "redis://127.0.0.1:6379/0?private-instance.save=60", wantErr: "private-instance.save"},
		{name: "password stays out of errors", url: "redis://u:s3cretpw@127.0.0.1:6379/0?nope=1", wantErr: "xxxxx"},
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
			if s.Kind != "redis" || fmt.Sprint(s.Options) != fmt.Sprint(tt.want) {
				t.Errorf("kind %q options %v, want redis and %v", s.Kind, s.Options, tt.want)
			}
			if u, _ := url.Parse(s.URL); u.Query().Has("name") || u.Query().Has("stream.maxlen") {
				t.Errorf("knobs left in the driver URL %s", s.URL)
			}
		})
	}
}

// TestPrivateInstanceDurability starts a private redis-server per profile,
// enqueues, SIGKILLs and restarts it, and counts what survived: the AOF keeps
// every acknowledged XADD, memory only keeps none. It also checks that Stop
// leaves no server running.
func TestPrivateInstanceDurability(t *testing.T) {
	if err := targets.CanKillBroker(targets.Spec{Kind: "redis"}); err != nil {
		t.Skip(err)
	}
	tests := []struct {
		name         string
		url          string
		volatile     bool
		wantSurvived int
	}{
		// No case for the default profile (appendfsync everysec): Redis answers
		// before it writes the AOF buffer while a background fsync is slow
		// ("postponed AOF write"), so a kill -9 may lose acknowledged writes. How
		// many depends on the disk at that moment: no survival count is honest.
		{"AOF always", "redis://127.0.0.1:6379/0?private-instance.appendonly=yes&private-instance.appendfsync=always", false, 3},
		{"appendonly no", "redis://127.0.0.1:6379/0?private-instance.appendonly=no&private-instance.save=", false, 0},
		{"no-persistence negative control", "redis://127.0.0.1:6379/0?private-instance.appendonly=yes", true, 0},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			spec, err := targets.Parse(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			spec.RunID, spec.Volatile = fmt.Sprintf("tpriv%d", i), tt.volatile
			inst, pspec, err := targets.StartPrivate(ctx, spec, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			pu, err := url.Parse(inst.URL())
			if err != nil {
				t.Fatal(err)
			}
			addr := pu.Host
			defer func() {
				if err := inst.Stop(); err != nil {
					t.Errorf("stop: %v", err)
				}
				if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
					c.Close()
					t.Errorf("private redis-server still accepts connections on %s after Stop", addr)
				}
			}()
			if pspec.URL == spec.URL || pu.Hostname() != "127.0.0.1" {
				t.Fatalf("private spec URL %q", pspec.URL)
			}
			q, err := targets.OpenQueue(ctx, pspec)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"a", "b", "c"} {
				if err := q.Enqueue(ctx, adapters.Job{ID: id, Tenant: "acme", DocumentID: id, Version: 1, MaxAttempts: 3}); err != nil {
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
				t.Errorf("%d of 3 acknowledged jobs survived kill -9 (%v), want %d", got, inv.Queued, tt.wantSurvived)
			}
			durable := q.Capabilities().Durable
			if durable != (tt.wantSurvived == 3) {
				t.Errorf("capabilities say durable=%v on this profile: %q", durable, q.Capabilities().Notes)
			}
		})
	}
}

// The queue opened by the target kind carries the knobs into the adapter.
func TestOpenQueueAppliesKnobs(t *testing.T) {
	u := testURL(t)
	spec, err := targets.Parse(u + "?stream.maxlen=2&claim-min-idle=250ms")
	if err != nil {
		t.Fatal(err)
	}
	spec.RunID = "tknobs" + fmt.Sprint(time.Now().UnixNano()%1e9)
	ctx := context.Background()
	q, err := targets.OpenQueue(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := targets.TeardownQueue(ctx, spec); err != nil {
			t.Error(err)
		}
		q.Close()
	}()
	notes := strings.Join(q.Capabilities().Notes, "\n")
	for _, want := range []string{"MAXLEN 2", "min-idle 250ms (claim-min-idle)", "private redis-server", "appendonly=yes appendfsync=everysec"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	if v, ok := q.(interface{ ServerVersion() string }); !ok || !strings.HasPrefix(v.ServerVersion(), "redis ") {
		t.Errorf("no ServerVersion")
	}
	if _, ok := q.(*rq.Queue); !ok {
		t.Errorf("OpenQueue gave %T", q)
	}
}

func testURL(t testing.TB) string {
	u := os.Getenv("DURACHK_REDIS_URL")
	if u == "" {
		t.Skip("DURACHK_REDIS_URL is not set: this test needs a Redis server, e.g. DURACHK_REDIS_URL=redis://127.0.0.1:6379/0")
	}
	return u
}

// Cleanup deletes the keys runs create and nothing else. It runs against a
// private server: on a shared one it would take the keys of live runs too.
func TestCleanupDeletesOnlyRunKeys(t *testing.T) {
	if err := targets.CanKillBroker(targets.Spec{Kind: "redis"}); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec, err := targets.Parse("redis://127.0.0.1:6379/0")
	if err != nil {
		t.Fatal(err)
	}
	spec.RunID = "tcleanup"
	inst, pspec, err := targets.StartPrivate(ctx, spec, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Stop()
	q, err := targets.OpenQueue(ctx, pspec)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Enqueue(ctx, adapters.Job{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	rdb := q.(*rq.Queue).Client()
	keep := []string{"durachk:tcleanup:notours", "durachk:Upper:stream", "orders:stream", "durachk", "durachk_tcleanup_qx", "durachk_Up_q:jobs:1"}
	// A worker's namespace (the worker protocol: durachk_<runid>_q:...).
	for _, k := range append(keep, "durachk_tcleanup_q:jobs:1") {
		if err := rdb.Set(ctx, k, "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	k, _ := targets.Lookup("redis")
	// The kind's part only: the shared effect store is not this test's to clean.
	removed, err := k.Cleanup(ctx, pspec, targets.Scope{Live: func(string) bool { return false }})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if fmt.Sprint(removed) != "[redis key durachk:tcleanup:ids redis key durachk:tcleanup:stream redis key durachk_tcleanup_q:jobs:1]" {
		t.Errorf("removed %v, want the run's stream, entry index and its worker's key only", removed)
	}
	for _, k := range keep {
		if n, err := rdb.Exists(ctx, k).Result(); err != nil || n != 1 {
			t.Errorf("cleanup deleted %s", k)
		}
	}
}
