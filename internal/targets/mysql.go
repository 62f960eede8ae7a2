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
//	interpolateParams=true|false                      the driver's protocol: true, statements
//	                                                  sent as text with their parameters in them;
//	                                                  false (the Go driver's default), server-side
//	                                                  prepared statements (the binary protocol)
//	private-instance.innodb_flush_log_at_trx_commit=0|1|2   \  the private server of durability.ack
//	private-instance.sync_binlog=N                           | and durability.power-loss; each not
//	private-instance.innodb_doublewrite=ON|OFF               | given is the target server's own,
//	private-instance.log_bin=ON|OFF                         /  else MariaDB's default: 1, 0, ON, OFF
//	name=NAME                                         the target's name in reports
//
// timeout, readTimeout, writeTimeout and tls go to the driver. The queue lives
// in a database of its own per run, durachk_<run id>: the URL's user needs
// CREATE and DROP on durachk_%. The effect store stays on Postgres.
var mysqlKnobs = map[string]bool{
	"fifo": true, "delivery_limit": true, "wsrep_sync_wait": true, "name": true, "interpolateParams": true,
}

// mysqlDurability are the settings that decide what of a commit survives a
// kill or a power loss: when InnoDB writes and flushes its redo log
// (innodb_flush_log_at_trx_commit: 1 at every commit, 2 written at commit and
// flushed once a second, 0 both once a second), whether the binary log is on
// and how often it is fsynced (with it on, crash recovery rolls back what the
// binary log lost), and whether the doublewrite buffer repairs a page torn by
// a power loss.
var mysqlDurability = []DurabilitySetting{
	{Name: "innodb_flush_log_at_trx_commit", Default: "1", Check: oneOfCheck("0", "1", "2")},
	{Name: "sync_binlog", Default: "0", Check: func(v string) string {
		if _, err := strconv.ParseUint(v, 10, 32); err != nil {
			return "want a number ≥ 0 (0: the OS flushes the binary log; N: every N commit groups)"
		}
		return ""
	}},
	{Name: "innodb_doublewrite", Default: "ON", Check: oneOfCheck("ON", "OFF")},
	{Name: "log_bin", Default: "OFF", Check: oneOfCheck("ON", "OFF")},
}

func init() {
	for _, d := range mysqlDurability {
		mysqlKnobs[d.knob()] = true
	}
}

// mysqlServerSettings reads the target server's durability settings (SHOW
// GLOBAL VARIABLES). MySQL and MariaDB name booleans ON and OFF there.
func mysqlServerSettings(ctx context.Context, s Spec) (ServerSettings, error) {
	names := make([]string, len(mysqlDurability))
	for i, d := range mysqlDurability {
		names[i] = d.Name
	}
	values, err := myq.Status(ctx, s.URL, names...)
	if err != nil {
		return ServerSettings{}, err
	}
	out := ServerSettings{Values: values, Unread: map[string]string{}}
	for _, n := range names {
		if _, ok := values[n]; !ok {
			out.Unread[n] = "the server has no such variable"
		}
	}
	return out, nil
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
		Durability:      mysqlDurability,
		ServerSettings:  mysqlServerSettings,
		PrivateVersion:  privateMariaDBVersion,
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
	if v, ok := opts["interpolateParams"]; ok && v != "true" && v != "false" {
		return Spec{}, bad("interpolateParams", "true or false")
	}
	for _, k := range []string{"private-instance.innodb_doublewrite", "private-instance.log_bin"} {
		switch opts[k] {
		case "on", "1":
			opts[k] = "ON"
		case "off", "0":
			opts[k] = "OFF"
		}
	}
	if err := checkDurabilityKnobs(mysqlDurability, opts); err != nil {
		return Spec{}, err
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
		Unreplicated: s.Unreplicated, PreparedStatements: s.Options["interpolateParams"] == "false"}
	o.DeliveryLimit, _ = strconv.Atoi(s.Options["delivery_limit"])
	if v := s.Options["wsrep_sync_wait"]; v != "" {
		o.Session = map[string]string{"wsrep_sync_wait": v}
	}
	if s.ControlKills() {
		o.Notes = []string{"durability.ack kills and restarts this server with its control commands (its own durability settings apply)"}
	} else if !HasPrivateCluster(s) {
		o.Notes = []string{"durability.ack and durability.power-loss run on a private mariadbd started by durachk with " +
			privateMySQLProfile(s).String() + " (each the private-instance.* knob, else this server's own setting, else MariaDB's default: the target's durability settings say which), never on this server"}
	}
	return o
}
