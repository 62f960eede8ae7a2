package targets

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestEffectiveSettings: knob > server > default, each setting's source and
// why a default was used; the effective value lands under
// private-instance.<name>, Postgres's synchronous_commit knob included.
func TestEffectiveSettings(t *testing.T) {
	tests := []struct {
		name string
		defs []DurabilitySetting
		opts map[string]string
		srv  ServerSettings
		want []Setting
	}{
		{name: "server", defs: redisDurability[:2],
			srv:  ServerSettings{Values: map[string]string{"appendonly": "no", "appendfsync": "always"}},
			want: []Setting{{Name: "appendonly", Value: "no", Source: SourceServer}, {Name: "appendfsync", Value: "always", Source: SourceServer}}},
		{name: "a knob wins over the server", defs: redisDurability[:2],
			opts: map[string]string{"private-instance.appendfsync": "always"},
			srv:  ServerSettings{Values: map[string]string{"appendonly": "no", "appendfsync": "everysec"}},
			want: []Setting{{Name: "appendonly", Value: "no", Source: SourceServer}, {Name: "appendfsync", Value: "always", Source: SourceKnob, ServerValue: "everysec"}}},
		{name: "a knob that says what the server says", defs: redisDurability[1:2],
			opts: map[string]string{"private-instance.appendfsync": "always"},
			srv:  ServerSettings{Values: map[string]string{"appendfsync": "always"}},
			want: []Setting{{Name: "appendfsync", Value: "always", Source: SourceKnob}}},
		{name: "unread: the default, named with why", defs: redisDurability[:2],
			srv: ServerSettings{Values: map[string]string{"appendonly": "yes"}, Unread: map[string]string{"appendfsync": "CONFIG disabled or renamed"}},
			want: []Setting{{Name: "appendonly", Value: "yes", Source: SourceServer},
				{Name: "appendfsync", Value: "everysec", Source: SourceDefault, Note: "not readable from the server (CONFIG disabled or renamed)"}}},
		{name: "a knob over an unread setting", defs: redisDurability[1:2],
			opts: map[string]string{"private-instance.appendfsync": "no"},
			srv:  ServerSettings{Unread: map[string]string{"appendfsync": "CONFIG disabled or renamed"}},
			want: []Setting{{Name: "appendfsync", Value: "no", Source: SourceKnob}}},
		{name: "nothing read at all", defs: redisDurability[2:3],
			want: []Setting{{Name: "save", Value: "", Source: SourceDefault, Note: "not readable from the server"}}},
		{name: "a server value the private instance cannot take", defs: pgDurability[2:3],
			srv: ServerSettings{Values: map[string]string{"wal_sync_method": "fsync_writethrough"}},
			want: []Setting{{Name: "wal_sync_method", Value: "fdatasync", Source: SourceDefault,
				Note: "the server's value fsync_writethrough cannot be given to the private instance (want fdatasync, fsync, open_sync or open_datasync)"}}},
		{name: "a value its version fixes", defs: natsDurability,
			srv:  ServerSettings{Values: map[string]string{"sync_interval": "60s"}, Notes: map[string]string{"sync_interval": "fixed"}},
			want: []Setting{{Name: "sync_interval", Value: "60s", Source: SourceServer, Note: "fixed"}}},
		{name: "postgres's synchronous_commit knob", defs: pgDurability[:2],
			opts: map[string]string{"synchronous_commit": "off"},
			srv:  ServerSettings{Values: map[string]string{"fsync": "off", "synchronous_commit": "on"}},
			want: []Setting{{Name: "fsync", Value: "off", Source: SourceServer}, {Name: "synchronous_commit", Value: "off", Source: SourceKnob, ServerValue: "on"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := fmt.Sprint(tt.opts)
			opts, got := Effective(tt.defs, tt.opts, tt.srv)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("settings\n got %+v\nwant %+v", got, tt.want)
			}
			for _, s := range got {
				if opts[PrivateKnob(s.Name)] != s.Value {
					t.Errorf("options[%s] = %q, want the effective %q", PrivateKnob(s.Name), opts[PrivateKnob(s.Name)], s.Value)
				}
			}
			if fmt.Sprint(tt.opts) != before {
				t.Errorf("the target's own options changed: %v, were %v", tt.opts, before)
			}
		})
	}
}

// TestPrivateProfilesTakeEffectiveValues: what ReadDurability puts in a spec
// reaches the private server's configuration; the negative control still
// wins.
func TestPrivateProfilesTakeEffectiveValues(t *testing.T) {
	opts, _ := Effective(redisDurability, nil, ServerSettings{Values: map[string]string{"appendonly": "no", "appendfsync": "always", "save": "60 1", "no-appendfsync-on-rewrite": "yes"}})
	s := Spec{Kind: "redis", Options: opts}
	if p := privateRedisProfile(s); p != (redisProfile{appendonly: "no", appendfsync: "always", save: "60 1", noFsyncOnRewrite: "yes"}) {
		t.Errorf("redis profile %+v", p)
	}
	s.Volatile = true
	if p := privateRedisProfile(s); p.appendonly != "no" || p.save != "" {
		t.Errorf("the negative control's profile %+v, want memory only", p)
	}
	opts, _ = Effective(mysqlDurability, map[string]string{"private-instance.sync_binlog": "1"}, ServerSettings{Values: map[string]string{"innodb_flush_log_at_trx_commit": "0", "sync_binlog": "0", "log_bin": "ON"}})
	if got := privateMySQLProfile(Spec{Options: opts}).String(); got != "innodb_flush_log_at_trx_commit=0 sync_binlog=1 innodb_doublewrite=ON log_bin=ON" {
		t.Errorf("mariadb profile %s", got)
	}
	opts, _ = Effective(pgDurability, nil, ServerSettings{Values: map[string]string{"fsync": "off", "synchronous_commit": "local"}})
	args := strings.Join(privatePostgresArgs(Spec{Options: opts}, "/d", 1), " ")
	for _, w := range []string{"fsync=off", "synchronous_commit=local", "wal_sync_method=fdatasync", "full_page_writes=on"} {
		if !strings.Contains(args, "-c "+w) {
			t.Errorf("postgres args %s lack %s", args, w)
		}
	}
}

// TestReadDurabilityOnlyForPrivateInstances: a target whose durability
// contracts do not run on a private instance of its own reads nothing and
// keeps its options.
func TestReadDurabilityOnlyForPrivateInstances(t *testing.T) {
	for _, raw := range []string{
		"redis://127.0.0.1:1/0?control.kill=true&control.start=true",
		"redis://127.0.0.1:1/0?private-cluster.replicas=1",
		"postgres://postgres@127.0.0.1:1/test?transactional_ack=true",
		"sqs://127.0.0.1:1/000000000000",
	} {
		s, err := Parse(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		got, d := ReadDurability(context.Background(), s)
		if d != nil || fmt.Sprint(got.Options) != fmt.Sprint(s.Options) {
			t.Errorf("%s: durability %+v, options %v", raw, d, got.Options)
		}
	}
}

// TestReadDurabilityUnreachable: a server that cannot be asked leaves every
// setting at durachk's default, each named with why.
func TestReadDurabilityUnreachable(t *testing.T) {
	s, err := Parse("redis://127.0.0.1:1/0?private-instance.appendfsync=always")
	if err != nil {
		t.Fatal(err)
	}
	if err := CanKillBroker(s); err != nil {
		t.Skip(err)
	}
	got, d := ReadDurability(context.Background(), s)
	if d == nil || len(d.Settings) != len(redisDurability) {
		t.Fatalf("durability %+v, want every redis setting", d)
	}
	for _, st := range d.Settings {
		switch {
		case st.Name == "appendfsync":
			if st.Source != SourceKnob || st.Value != "always" {
				t.Errorf("%+v, want the knob's always", st)
			}
		case st.Source != SourceDefault || !strings.HasPrefix(st.Note, "not readable from the server (") || !strings.Contains(st.Note, "refused"):
			t.Errorf("%+v, want the default, named as unreadable with the refused connection", st)
		}
		if got.Options[PrivateKnob(st.Name)] != st.Value {
			t.Errorf("options %v lack %s=%q", got.Options, st.Name, st.Value)
		}
	}
	if !strings.HasPrefix(d.Private, "redis ") {
		t.Errorf("private %q, want the local redis-server's version", d.Private)
	}
}
