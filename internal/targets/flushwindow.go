package targets

import (
	"cmp"
	"fmt"
	"strconv"
	"time"
)

// osWriteback is how long Linux leaves a dirty page in the page cache before
// it writes it back (vm.dirty_expire_centisecs, 30 s by default): what a
// broker that never syncs relies on.
const osWriteback = 30 * time.Second

// FlushWindow is how long a write that spec's private instance acknowledged
// may stay unsynced under its configuration, and the setting that says so:
// a power cut loses what the broker acknowledged less than that before it.
// 0 means no age tells: the broker syncs every write before it acknowledges
// it (a power cut proves the policy with any acknowledged write), or it never
// syncs what it acknowledged (everything since the last checkpoint is at
// risk). The settings come from spec's private-instance.* knobs (and, for
// Postgres, synchronous_commit), each with the default the private instance
// starts with when it is not given.
func FlushWindow(s Spec) (time.Duration, string) {
	opt := func(name, def string) string { return cmp.Or(s.Options["private-instance."+name], def) }
	switch s.Kind {
	case "redis":
		p := privateRedisProfile(s)
		switch {
		case p.appendonly != "yes":
			return 0, "appendonly " + p.appendonly + ": no log, only what an RDB snapshot holds survives (everything acknowledged since the last one is at risk)"
		case p.appendfsync == "always":
			return 0, "appendfsync always: the log is synced before every reply"
		case p.appendfsync == "no":
			return osWriteback, "appendfsync no: the log reaches the disk when the OS writes it back (about 30s)"
		}
		return time.Second, "appendfsync " + p.appendfsync + ": the log is synced once a second"
	case "postgres":
		if s.Volatile {
			return 0, "unlogged tables: nothing survives a crash"
		}
		if v := opt("fsync", "on"); v == "off" {
			return 0, "fsync=off: nothing is synced (everything since the last checkpoint is at risk)"
		}
		sync := cmp.Or(s.Options["private-instance.synchronous_commit"], s.Options["synchronous_commit"], "on")
		if sync != "off" {
			return 0, "synchronous_commit=" + sync + ": a commit's WAL is synced before its reply"
		}
		// The WAL writer flushes asynchronous commits within three of its
		// delays (the manual, "Asynchronous Commit").
		delay := durationOr(opt("wal_writer_delay", ""), 200*time.Millisecond)
		return 3 * delay, fmt.Sprintf("synchronous_commit=off: the WAL writer flushes within 3 × wal_writer_delay (%s)", delay)
	case "mysql":
		if s.Volatile {
			return 0, "the MEMORY engine: nothing survives a restart"
		}
		p := privateMySQLProfile(s)
		if p.trxCommit != "1" {
			// 0 and 2 write (2) or write and flush (0) the redo log about
			// once every innodb_flush_log_at_timeout seconds (1 by default).
			every := time.Second
			if n, err := strconv.Atoi(opt("innodb_flush_log_at_timeout", "")); err == nil && n > 0 {
				every = time.Duration(n) * time.Second
			}
			return every, fmt.Sprintf("innodb_flush_log_at_trx_commit=%s: the redo log is flushed every innodb_flush_log_at_timeout (%s)", p.trxCommit, every)
		}
		if p.logBin == "ON" && p.syncBinlog != "1" {
			// Crash recovery trusts the binary log: a commit the binlog
			// lost is rolled back, however well InnoDB synced it.
			if p.syncBinlog == "0" {
				return osWriteback, "log_bin=ON, sync_binlog=0: the binary log reaches the disk when the OS writes it back (about 30s)"
			}
			return 0, "log_bin=ON, sync_binlog=" + p.syncBinlog + ": the binary log is synced every " + p.syncBinlog + " commits, whatever their age"
		}
		return 0, "innodb_flush_log_at_trx_commit=1: the redo log is synced at every commit"
	case "nats":
		if s.Volatile {
			return 0, "memory storage: nothing survives a restart"
		}
		v := opt("sync_interval", "2m")
		if v == "always" {
			return 0, "sync_interval always: JetStream syncs before it acknowledges"
		}
		d := durationOr(v, 2*time.Minute)
		return d, fmt.Sprintf("sync_interval %s: JetStream syncs its files every %s", v, d)
	case "kafka":
		if s.Volatile {
			return 0, "no data directory: nothing survives a restart"
		}
		if opt("log.flush.interval.messages", kafkaNoFlush) == "1" {
			return 0, "log.flush.interval.messages=1: kfake syncs every write before it acknowledges it"
		}
		// kfake, like Kafka by default, leaves its segments to the page
		// cache and syncs them only when it rolls a segment or shuts down.
		return osWriteback, "log.flush.interval.messages=" + kafkaNoFlush + ": the log stays in the page cache until the OS writes it back (about 30s) or a segment rolls"
	case "amqp":
		// RabbitMQ confirms a persistent message on a durable queue once it
		// is on disk: a classic queue's message store fsyncs before it
		// confirms, a quorum queue's Raft log is fsynced on a majority
		// ("Consumer Acknowledgements and Publisher Confirms").
		if s.Volatile || s.Unreplicated {
			return 0, "transient messages on a non-durable queue: nothing survives a restart"
		}
		return 0, "publisher confirms: a persistent message is fsynced before it is confirmed"
	}
	return 0, ""
}

// durationOr reads a setting written as a duration ("200ms") or a number of
// milliseconds, or def.
func durationOr(v string, def time.Duration) time.Duration {
	if v == "" {
		return def
	}
	if d, err := knobDuration(v); err == nil && d > 0 {
		return d
	}
	return def
}
