package targets

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	myq "github.com/durachk/durachk/adapters/mysql"
)

func TestParseMySQL(t *testing.T) {
	tests := []struct {
		raw     string
		wantURL string
		opts    map[string]string
		name    string
		err     string
	}{
		{raw: "mysql://root@127.0.0.1/test", wantURL: "mysql://root@127.0.0.1:3306/test", name: "mysql", opts: map[string]string{}},
		{raw: "mariadb://u:pw@localhost:3307/db?fifo=false&delivery_limit=3&name=maria&timeout=2s",
			wantURL: "mysql://u:pw@localhost:3307/db?timeout=2s", name: "maria", opts: map[string]string{"fifo": "false", "delivery_limit": "3"}},
		{raw: "mysql://root@127.0.0.1:3306/test?private-instance.innodb_flush_log_at_trx_commit=2&private-instance.sync_binlog=1&private-instance.innodb_doublewrite=off&private-instance.log_bin=1",
			wantURL: "mysql://root@127.0.0.1:3306/test", name: "mysql", opts: map[string]string{"private-instance.innodb_flush_log_at_trx_commit": "2",
				"private-instance.sync_binlog": "1", "private-instance.innodb_doublewrite": "OFF", "private-instance.log_bin": "ON"}},
		{raw: "mysql://root@127.0.0.1:3306/test?wsrep_sync_wait=3", wantURL: "mysql://root@127.0.0.1:3306/test", name: "mysql", opts: map[string]string{"wsrep_sync_wait": "3"}},
		{raw: "mysql://root@127.0.0.1:3306/test?private-instance.innodb_flush_log_at_trx_commit=3", err: "want 0, 1 or 2"},
		{raw: "mysql://root@127.0.0.1:3306/test?private-instance.sync_binlog=-1", err: "want a number"},
		{raw: "mysql://root@127.0.0.1:3306/test?private-instance.innodb_doublewrite=maybe", err: "want ON or OFF"},
		{raw: "mysql://root@127.0.0.1:3306/test?wsrep_sync_wait=16", err: "0 to 15"},
		{raw: "mysql://root@127.0.0.1:3306/test?interpolateParams=false", wantURL: "mysql://root@127.0.0.1:3306/test", name: "mysql", opts: map[string]string{"interpolateParams": "false"}},
		{raw: "mysql://root@127.0.0.1:3306/test?interpolateParams=1", err: "interpolateParams=\"1\": want true or false"},
		{raw: "mysql://root@127.0.0.1:3306/test?fifo=yes", err: "true or false"},
		{raw: "mysql://root@127.0.0.1:3306/test?delivery_limit=-2", err: "a number ≥ 0"},
		{raw: "mysql://root@127.0.0.1:3306/test?multiStatements=true", err: `unknown setting "multiStatements"`},
		{raw: "mysql://root:s3cretpw@127.0.0.1:3306/test?timeout=soon", err: "timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			s, err := Parse(tt.raw)
			if tt.err != "" {
				if err == nil || !errors.Is(err, ErrBadTarget) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Parse = %v, want a bad target naming %q", err, tt.err)
				}
				if strings.Contains(err.Error(), "s3cretpw") {
					t.Errorf("the error shows the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Kind != "mysql" || s.URL != tt.wantURL || s.Name != tt.name {
				t.Errorf("spec %s %s %s, want mysql %s %s", s.Kind, s.URL, s.Name, tt.wantURL, tt.name)
			}
			for k, v := range tt.opts {
				if s.Options[k] != v {
					t.Errorf("option %s = %q, want %q (all %v)", k, s.Options[k], v, s.Options)
				}
			}
			if len(s.Options) != len(tt.opts) {
				t.Errorf("options %v, want %v", s.Options, tt.opts)
			}
		})
	}
}

func TestPrivateMySQLProfile(t *testing.T) {
	s, err := Parse("mysql://root@127.0.0.1:3306/test?private-instance.innodb_flush_log_at_trx_commit=0&private-instance.log_bin=ON&private-instance.sync_binlog=1")
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Join(privateMySQLProfile(s).args(), " ")
	for _, want := range []string{"--innodb-flush-log-at-trx-commit=0", "--sync-binlog=1", "--innodb-doublewrite=1", "--log-bin=mariadb-bin"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	def := privateMySQLProfile(Spec{}).String()
	if def != "innodb_flush_log_at_trx_commit=1 sync_binlog=0 innodb_doublewrite=ON log_bin=OFF" {
		t.Errorf("default profile %s, want MariaDB's defaults", def)
	}
	n := &mariadbNode{dir: "/x", ip: "127.0.0.1", extra: privateMySQLProfile(Spec{}).args()}
	if cmd := strings.Join(n.command().Args, " "); !strings.Contains(cmd, "--skip-log-bin") || !strings.Contains(cmd, "--no-defaults") || !strings.Contains(cmd, "--bind-address=127.0.0.1") {
		t.Errorf("command %s", cmd)
	}
	n.extra = privateMySQLProfile(s).args()
	if cmd := strings.Join(n.command().Args, " "); strings.Contains(cmd, "--skip-log-bin") {
		t.Errorf("command %s turns off the binary log it was asked for", cmd)
	}
}

// Cleanup drops the databases of dead runs and keeps those of live runs and
// every database that is not a run's.
func TestCleanupMySQL(t *testing.T) {
	raw := os.Getenv("DURACHK_MYSQL_URL")
	if raw == "" {
		t.Skip("DURACHK_MYSQL_URL is not set: e.g. DURACHK_MYSQL_URL=mysql://root@127.0.0.1:3306/test")
	}
	s, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dead, live := "tdead"+randSuffix(), "tlive"+randSuffix()
	for _, id := range []string{dead, live} {
		q, err := myq.Open(ctx, s.URL, id, myq.Options{MaxConns: 1})
		if err != nil {
			t.Fatal(err)
		}
		q.Close()
		t.Cleanup(func() { _ = myq.DropDatabase(context.Background(), s.URL, myq.Database(id)) })
	}
	k, _ := Lookup("mysql")
	mine := func(id string) bool { return id == dead || id == live }
	removed, err := k.Cleanup(ctx, s, Scope{Live: func(id string) bool { return !mine(id) || id == live }})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{"mysql database durachk_" + dead}) {
		t.Errorf("removed %v, want the dead run's database only", removed)
	}
	again, err := k.Cleanup(ctx, s, Scope{Live: func(id string) bool { return !mine(id) || id == live }})
	if err != nil || len(again) != 0 {
		t.Errorf("a second cleanup removed %v, %v", again, err)
	}
}

func TestMySQLClusterKnobs(t *testing.T) {
	const base = "mysql://root@127.0.0.1:3306/test?"
	tests := []struct {
		knobs, describe, err string
	}{
		{knobs: "private-cluster.replicas=1", describe: "mariadb primary + 1 replica (asynchronous)"},
		{knobs: "private-cluster.replicas=2&private-cluster.rpl_semi_sync_master_enabled=ON&private-cluster.rpl_semi_sync_master_wait_point=AFTER_SYNC",
			describe: "mariadb primary + 2 replicas (semi-synchronous AFTER_SYNC, timeout 10000 ms)"},
		{knobs: "private-cluster.replicas=1&private-cluster.rpl_semi_sync_master_enabled=ON&private-cluster.rpl_semi_sync_master_timeout=500",
			describe: "mariadb primary + 1 replica (semi-synchronous AFTER_COMMIT, timeout 500 ms)"},
		{knobs: "private-cluster.galera_nodes=3&wsrep_sync_wait=1", describe: "mariadb galera cluster of 3 nodes, wsrep_sync_wait 1, innodb_flush_log_at_trx_commit 1"},
		{knobs: "private-cluster.galera_nodes=3&private-cluster.crash=power-loss&private-instance.innodb_flush_log_at_trx_commit=2",
			describe: "mariadb galera cluster of 3 nodes, innodb_flush_log_at_trx_commit 2, a node crash is a power loss of its machine"},
		{knobs: "private-cluster.replicas=3", err: "want 1 or 2"},
		{knobs: "private-cluster.galera_nodes=4", err: "want 3 or 5"},
		{knobs: "private-cluster.galera_nodes=3&private-cluster.replicas=1", err: "exclude each other"},
		{knobs: "private-cluster.replicas=1&private-cluster.rpl_semi_sync_master_wait_point=LATER", err: "AFTER_SYNC or AFTER_COMMIT"},
		{knobs: "private-cluster.replicas=1&private-cluster.rpl_semi_sync_master_timeout=0", err: "milliseconds"},
		{knobs: "private-cluster.replicas=1&private-cluster.crash=power-loss", err: "needs private-cluster.galera_nodes"},
		{knobs: "private-cluster.galera_nodes=3&private-cluster.crash=fire", err: "kill or power-loss"},
	}
	for _, tt := range tests {
		t.Run(tt.knobs, func(t *testing.T) {
			s, err := Parse(base + tt.knobs)
			if tt.err != "" {
				if err == nil || !errors.Is(err, ErrBadTarget) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Parse = %v, want a bad target naming %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := DescribeCluster(s); got != tt.describe {
				t.Errorf("describe %q, want %q", got, tt.describe)
			}
		})
	}
}

func TestGTIDSeq(t *testing.T) {
	for pos, want := range map[string]uint64{"": 0, "0-1-42": 42, "0-1-42,1-2-7": 42, "0-2-7, 1-1-99": 99, "junk": 0} {
		if got := gtidSeq(pos); got != want {
			t.Errorf("gtidSeq(%q) = %d, want %d", pos, got, want)
		}
	}
}

// TestMySQLDriverProtocolKnob: interpolateParams, as the Go driver names it,
// picks the queue's protocol; without it the statements go as text.
func TestMySQLDriverProtocolKnob(t *testing.T) {
	for _, tt := range []struct {
		knob     string
		prepared bool
	}{{"", false}, {"&interpolateParams=true", false}, {"&interpolateParams=false", true}} {
		s, err := Parse("mysql://root@127.0.0.1:3306/test?fifo=true" + tt.knob)
		if err != nil {
			t.Fatal(err)
		}
		if got := mysqlOptions(s).PreparedStatements; got != tt.prepared {
			t.Errorf("%q: prepared statements %v, want %v", tt.knob, got, tt.prepared)
		}
	}
}
