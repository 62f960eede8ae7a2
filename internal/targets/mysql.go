package targets

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"

	"github.com/durachk/durachk/adapters"
	myq "github.com/durachk/durachk/adapters/mysql"
)

// MySQL or MariaDB as a queue (mysql://user:password@host:3306/db, or
// mariadb://…). Knobs (query parameters of the target URL):
//
//	fifo=true|false                                   FIFO per group (default true)
//	delivery_limit=N                                  the queue dead-letters a job at its (N+1)-th delivery
//	wsrep_sync_wait=0..15                             Galera's causal reads, every session's
//	private-instance.innodb_flush_log_at_trx_commit=0|1|2   \
//	private-instance.sync_binlog=N                          > the private server of durability.ack
//	private-instance.innodb_doublewrite=ON|OFF              >  and durability.power-loss (MariaDB's
//	private-instance.log_bin=ON|OFF                         /  defaults: 1, 0, ON, OFF)
//	name=NAME                                         the target's name in reports
//
// timeout, readTimeout, writeTimeout and tls go to the driver. The queue lives
// in a database of its own per run, durachk_<run id>: the URL's user needs
// CREATE and DROP on durachk_%. The effect store stays on Postgres.
var mysqlKnobs = map[string]bool{
	"fifo": true, "delivery_limit": true, "wsrep_sync_wait": true, "name": true,
	"private-instance.innodb_flush_log_at_trx_commit": true, "private-instance.sync_binlog": true,
	"private-instance.innodb_doublewrite": true, "private-instance.log_bin": true,
}

func init() {
	readyKinds["mysql"] = func(ctx context.Context, s Spec) error { return myq.Ready(ctx, s.URL) }
	volatileByAdapter["mysql"] = true // the MEMORY engine, on any server
	Register(&Kind{Name: "mysql", Schemes: []string{"mysql", "mariadb"}, Parse: parseMySQL,
		OpenQueue: func(ctx context.Context, s Spec) (adapters.Queue, error) {
			return myq.Open(ctx, s.URL, s.RunID, mysqlOptions(s))
		},
		Version: func(ctx context.Context, s Spec) (string, error) {
			return myq.ServerVersion(ctx, s.URL)
		},
		StartPrivate:    startPrivateMySQL,
		Cluster:         mysqlClusterKind,
		CanStartPrivate: canStartPrivateMySQL,
		Cleanup: func(ctx context.Context, s Spec, c Scope) ([]string, error) {
			removed, err := myq.DropRunDatabases(ctx, s.URL, c.Live)
			if err != nil {
				return removed, fmt.Errorf("cleanup %s: %w", Redact(s.URL), err)
			}
			return removed, nil
		},
	})
}

func parseMySQL(raw string, u *url.URL) (Spec, error) {
	if err := UnknownKnobs(u, mysqlKnobs, "timeout", "readTimeout", "writeTimeout", "tls", "addr", "spread"); err != nil {
		return Spec{}, err
	}
	q := u.Query()
	opts := map[string]string{}
	for k := range mysqlKnobs {
		if q.Has(k) {
			opts[k] = q.Get(k)
			q.Del(k)
		}
	}
	bad := func(k, want string) error {
		return fmt.Errorf("%w: %s=%q: want %s", ErrBadTarget, k, opts[k], want)
	}
	if v, ok := opts["fifo"]; ok && v != "true" && v != "false" {
		return Spec{}, bad("fifo", "true or false")
	}
	if v, ok := opts["delivery_limit"]; ok {
		if n, err := strconv.Atoi(v); err != nil || n < 0 {
			return Spec{}, bad("delivery_limit", "a number ≥ 0")
		}
	}
	if v, ok := opts["wsrep_sync_wait"]; ok {
		if n, err := strconv.Atoi(v); err != nil || n < 0 || n > 15 {
			return Spec{}, bad("wsrep_sync_wait", "a number from 0 to 15 (a bitmask of the statements that wait for causality)")
		}
	}
	if v, ok := opts["private-instance.innodb_flush_log_at_trx_commit"]; ok && !oneOf(v, "0", "1", "2") {
		return Spec{}, bad("private-instance.innodb_flush_log_at_trx_commit", "0, 1 or 2")
	}
	if v, ok := opts["private-instance.sync_binlog"]; ok {
		if n, err := strconv.ParseUint(v, 10, 32); err != nil || n > 4294967295 {
			return Spec{}, bad("private-instance.sync_binlog", "a number ≥ 0 (0: the OS flushes the binary log; N: every N commit groups)")
		}
	}
	for _, k := range []string{"private-instance.innodb_doublewrite", "private-instance.log_bin"} {
		if v, ok := opts[k]; ok {
			switch v {
			case "ON", "on", "1":
				opts[k] = "ON"
			case "OFF", "off", "0":
				opts[k] = "OFF"
			default:
				return Spec{}, bad(k, "ON or OFF")
			}
		}
	}
	// The port is explicit, so that every run of this server names the same
	// endpoint (cleanup matches it).
	if u.Port() == "" {
		host := u.Hostname()
		if host == "" {
			host = "127.0.0.1"
		}
		u.Host = net.JoinHostPort(host, "3306")
	}
	u.Scheme = "mysql"
	u.RawQuery = q.Encode()
	if _, err := myq.ParseURL(u.String(), nil); err != nil {
		return Spec{}, fmt.Errorf("%w: %s: %v", ErrBadTarget, Redact(u.Redacted()), err)
	}
	name := opts["name"]
	if name == "" {
		name = "mysql"
	}
	delete(opts, "name")
	return Spec{Name: name, URL: u.String(), Options: opts}, nil
}

// mysqlOptions are the queue's options for a run of s.
func mysqlOptions(s Spec) myq.Options {
	o := myq.Options{FIFO: s.Options["fifo"] != "false", MaxConns: 2, BreakOrder: s.BreakOrder, Volatile: s.Volatile,
		Unreplicated: s.Unreplicated}
	o.DeliveryLimit, _ = strconv.Atoi(s.Options["delivery_limit"])
	if v := s.Options["wsrep_sync_wait"]; v != "" {
		o.Session = map[string]string{"wsrep_sync_wait": v}
	}
	if s.ControlKills() {
		o.Notes = []string{"durability.ack kills and restarts this server with its control commands (its own durability settings apply)"}
	} else if !HasPrivateCluster(s) {
		o.Notes = []string{"durability.ack and durability.power-loss run on a private mariadbd started by durachk with " +
			privateMySQLProfile(s).String() + " (the private-instance.* knobs; MariaDB's defaults otherwise), never on this server"}
	}
	return o
}
