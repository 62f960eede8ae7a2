package targets

import (
	"strings"
	"testing"
	"time"
)

// FlushWindow reads a configuration's flush interval from its knobs, each
// with the private instance's default: how long an acknowledged write may
// stay unsynced, 0 where no age tells (synced before the acknowledgement, or
// never), and the setting that says so.
func TestFlushWindow(t *testing.T) {
	for _, tt := range []struct {
		kind     string
		opts     map[string]string
		volatile bool
		want     time.Duration
		why      string
	}{
		{"redis", nil, false, time.Second, "appendfsync everysec"},
		{"redis", map[string]string{"private-instance.appendfsync": "always"}, false, 0, "appendfsync always"},
		{"redis", map[string]string{"private-instance.appendfsync": "no"}, false, 30 * time.Second, "appendfsync no"},
		{"redis", map[string]string{"private-instance.appendonly": "no"}, false, 0, "appendonly no"},
		{"redis", nil, true, 0, "appendonly no"},
		{"postgres", nil, false, 0, "synchronous_commit=on"},
		{"postgres", map[string]string{"synchronous_commit": "off"}, false, 600 * time.Millisecond, "3 × wal_writer_delay (200ms)"},
		{"postgres", map[string]string{"synchronous_commit": "off", "private-instance.wal_writer_delay": "50ms"}, false, 150 * time.Millisecond, "(50ms)"},
		{"postgres", map[string]string{"private-instance.fsync": "off"}, false, 0, "fsync=off"},
		{"postgres", nil, true, 0, "unlogged"},
		{"mysql", nil, false, 0, "innodb_flush_log_at_trx_commit=1"},
		{"mysql", map[string]string{"private-instance.innodb_flush_log_at_trx_commit": "2"}, false, time.Second, "innodb_flush_log_at_trx_commit=2"},
		{"mysql", map[string]string{"private-instance.innodb_flush_log_at_trx_commit": "0"}, false, time.Second, "innodb_flush_log_at_trx_commit=0"},
		{"mysql", map[string]string{"private-instance.log_bin": "ON"}, false, 30 * time.Second, "sync_binlog=0"},
		{"mysql", map[string]string{"private-instance.log_bin": "ON", "private-instance.sync_binlog": "1"}, false, 0, "innodb_flush_log_at_trx_commit=1"},
		{"nats", nil, false, 2 * time.Minute, "sync_interval 2m"},
		{"nats", map[string]string{"private-instance.sync_interval": "always"}, false, 0, "sync_interval always"},
		{"nats", map[string]string{"private-instance.sync_interval": "5s"}, false, 5 * time.Second, "sync_interval 5s"},
		{"kafka", nil, false, 30 * time.Second, "page cache"},
		{"kafka", map[string]string{"private-instance.log.flush.interval.messages": "1"}, false, 0, "syncs every write"},
		{"kafka", nil, true, 0, "no data directory"},
		{"amqp", nil, false, 0, "publisher confirms"},
		{"sqs", nil, false, 0, ""},
	} {
		d, why := FlushWindow(Spec{Kind: tt.kind, Options: tt.opts, Volatile: tt.volatile})
		if d != tt.want || !strings.Contains(why, tt.why) {
			t.Errorf("%s %v (volatile %v): %v (%s), want %v (%s)", tt.kind, tt.opts, tt.volatile, d, why, tt.want, tt.why)
		}
	}
}
