package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/durachk/durachk/adapters"
)

// DefaultMaxConns is the pool size when Options.MaxConns is 0: every worker
// process of a run opens a pool of its own.
const DefaultMaxConns = 4

// passThrough are the driver's own URL parameters that a target URL may carry.
var passThrough = map[string]bool{"timeout": true, "readTimeout": true, "writeTimeout": true, "tls": true, "addr": true, "spread": true}

// Config is a parsed mysql:// (or mariadb://) URL: what the driver needs, and
// the password to scrub from every message.
type Config struct {
	cfg    *gomysql.Config
	secret string
	// addrs are further nodes (addr=host:port, repeated): a connection goes
	// to the first node that takes writes (read_only off and, on Galera,
	// wsrep_ready), as a client of a replicated topology does.
	addrs []string
	// spread starts each connection's search at another node, so that the
	// connections of a pool spread over every node that takes writes
	// (Galera's multi-primary clients).
	spread bool
}

// ParseURL reads mysql://user:password@host:port/database?param=value. The
// database is only where the connection starts (a run's queue lives in a
// database of its own); the port defaults to 3306. addr=host:port (repeated)
// names further nodes of a replicated topology and spread=true spreads
// connections over them (see Config). Parameters other than these and the
// driver's timeout, readTimeout, writeTimeout and tls are refused: the target
// takes its knobs out before it gets here. session, if not empty, are session
// variables set on every connection (e.g. wsrep_sync_wait).
func ParseURL(raw string, session map[string]string) (*Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("cannot parse the mysql url")
	}
	if u.Scheme != "mysql" && u.Scheme != "mariadb" {
		return nil, fmt.Errorf("scheme %q: want mysql or mariadb", u.Scheme)
	}
	c := gomysql.NewConfig()
	c.Net = "tcp"
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "3306"
	}
	c.Addr = net.JoinHostPort(host, port)
	if u.User != nil {
		c.User = u.User.Username()
		c.Passwd, _ = u.User.Password()
	}
	c.DBName = strings.TrimPrefix(u.Path, "/")
	c.ParseTime, c.Loc, c.ClientFoundRows = true, time.UTC, true
	// The text protocol, not server-side prepared statements, unless the
	// queue asks for them (Options.PreparedStatements): on MariaDB 10.11.19
	// Galera the binary protocol lost the deadlock error of a transaction
	// that a write applied from another node rolled back (its COMMIT said
	// OK): 20 double leases in 3,000 raced rounds on two nodes, 0 in 9,000
	// with the text protocol.
	c.InterpolateParams = true
	c.Timeout = 5 * time.Second
	c.Logger = quiet{} // the driver's own log lines ("closing bad idle connection") are not durachk's output
	out := &Config{cfg: c, secret: c.Passwd}
	q := u.Query()
	for k := range q {
		if !passThrough[k] {
			return nil, fmt.Errorf("unknown url parameter %q", k)
		}
		v := q.Get(k)
		switch k {
		case "addr":
			for _, a := range q[k] {
				if _, _, err := net.SplitHostPort(a); err != nil {
					return nil, fmt.Errorf("addr=%q: want host:port", a)
				}
				out.addrs = append(out.addrs, a)
			}
		case "spread":
			if v != "true" && v != "false" {
				return nil, fmt.Errorf("spread=%q: want true or false", v)
			}
			out.spread = v == "true"
		case "tls":
			if v != "true" && v != "false" && v != "skip-verify" && v != "preferred" {
				return nil, fmt.Errorf("tls=%q: want true, false, skip-verify or preferred", v)
			}
			c.TLSConfig = v
		default:
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return nil, fmt.Errorf("%s=%q: want a duration such as 5s", k, v)
			}
			switch k {
			case "timeout":
				c.Timeout = d
			case "readTimeout":
				c.ReadTimeout = d
			case "writeTimeout":
				c.WriteTimeout = d
			}
		}
	}
	if len(session) > 0 {
		c.Params = map[string]string{}
		for k, v := range session {
			c.Params[k] = v
		}
	}
	return out, nil
}

// with is a copy of c with more session variables.
func (c *Config) with(params map[string]string) *Config {
	n := &Config{cfg: c.cfg.Clone(), secret: c.secret, addrs: c.addrs, spread: c.spread}
	if n.cfg.Params == nil {
		n.cfg.Params = map[string]string{}
	}
	for k, v := range params {
		n.cfg.Params[k] = v
	}
	return n
}

type quiet struct{}

func (quiet) Print(...any) {}

// Addr is host:port.
func (c *Config) Addr() string { return c.cfg.Addr }

// db is a database/sql pool on the driver plus what is needed to keep the
// password out of its errors. Safe for concurrent use.
type db struct {
	pool   *sql.DB
	target string
	secret string
}

// openDB connects a pool of at most maxConns connections and pings the server.
// A server that cannot be reached is an error wrapping adapters.ErrUnavailable.
func openDB(ctx context.Context, c *Config, maxConns int) (*db, error) {
	conn, err := c.connector()
	if err != nil {
		return nil, &Error{Op: "configure", Err: err, secret: c.secret}
	}
	d := &db{pool: sql.OpenDB(conn), target: strings.Join(append([]string{c.cfg.Addr}, c.addrs...), ","), secret: c.secret}
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	d.pool.SetMaxOpenConns(maxConns)
	d.pool.SetMaxIdleConns(maxConns)
	d.pool.SetConnMaxIdleTime(time.Minute)
	if err := d.pool.PingContext(ctx); err != nil {
		d.pool.Close()
		return nil, d.err("connect "+d.target, err, false)
	}
	return d, nil
}

func (d *db) close() { d.pool.Close() }

// connector is the driver's connector for one node, or a nodesConnector for
// several.
func (c *Config) connector() (driver.Connector, error) {
	if len(c.addrs) == 0 {
		return gomysql.NewConnector(c.cfg)
	}
	nc := &nodesConnector{spread: c.spread}
	for _, a := range append([]string{c.cfg.Addr}, c.addrs...) {
		cfg := c.cfg.Clone()
		cfg.Addr = a
		one, err := gomysql.NewConnector(cfg)
		if err != nil {
			return nil, err
		}
		nc.nodes = append(nc.nodes, one)
	}
	nc.next.Store(uint32(time.Now().UnixNano()))
	return nc, nil
}

// nodeTimeout bounds the connection to one node of several: a node cut off
// by a partition accepts and never answers.
const nodeTimeout = 2 * time.Second

// nodesConnector connects to the first node that takes writes, in order, or
// from a rotating start (spread).
type nodesConnector struct {
	nodes  []driver.Connector
	spread bool
	next   atomic.Uint32
}

func (n *nodesConnector) Driver() driver.Driver { return n.nodes[0].Driver() }

func (n *nodesConnector) Connect(ctx context.Context) (driver.Conn, error) {
	start := 0
	if n.spread {
		start = int(n.next.Add(1) % uint32(len(n.nodes)))
	}
	var errs []error
	for i := range n.nodes {
		one := n.nodes[(start+i)%len(n.nodes)]
		cctx, cancel := context.WithTimeout(ctx, nodeTimeout)
		c, err := one.Connect(cctx)
		if err == nil {
			err = takesWrites(cctx, c)
			if err != nil {
				c.Close()
			}
		}
		cancel()
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		errs = append(errs, err)
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return nil, fmt.Errorf("%w: %s", errNoNode, strings.Join(msgs, "; "))
}

// errNoNode: no node of a node list could be connected to or takes writes;
// nothing was sent.
var errNoNode = errors.New("no node takes writes")

// errNotWritable: the node is a read-only replica, or a Galera node outside
// the primary component.
var errNotWritable = errors.New("the node does not take writes")

// takesWrites asks a fresh connection whether its node takes writes:
// read_only off and, where wsrep is on (Galera), wsrep_ready.
func takesWrites(ctx context.Context, c driver.Conn) error {
	q, ok := c.(driver.QueryerContext)
	if !ok {
		return nil
	}
	one := func(stmt string) (string, error) {
		rows, err := q.QueryContext(ctx, stmt, nil)
		if err != nil {
			return "", err
		}
		defer rows.Close()
		vals := make([]driver.Value, len(rows.Columns()))
		if err := rows.Next(vals); err != nil {
			if err == io.EOF {
				return "", nil
			}
			return "", err
		}
		v := vals[len(vals)-1]
		if b, ok := v.([]byte); ok {
			return string(b), nil
		}
		return fmt.Sprint(v), nil
	}
	ro, err := one("SELECT @@global.read_only")
	if err != nil {
		return err
	}
	if ro == "1" {
		return errNotWritable
	}
	if on, err := one("SHOW GLOBAL VARIABLES LIKE 'wsrep_on'"); err != nil || on != "ON" {
		return err
	}
	if ready, err := one("SHOW GLOBAL STATUS LIKE 'wsrep_ready'"); err != nil || ready != "ON" {
		if err == nil {
			err = errNotWritable
		}
		return err
	}
	return nil
}

// Server error numbers that are not a definite answer about the statement:
// the server is going away or killed the connection (the statement may have
// committed before).
const (
	erServerShutdown   = 1053
	erConnectionKilled = 1927
	erQueryInterrupted = 1317
)

// Server error numbers of a statement that was refused or rolled back as a
// whole and may be tried again: nothing of it was applied.
var refused = map[uint16]string{
	1040: "too many connections",
	1047: "the node is not ready (wsrep: not in the primary component)",
	1205: "lock wait timeout",
	1213: "deadlock, or a Galera certification failure: rolled back",
	1290: "read-only server",
	1792: "read-only transaction",
	1836: "read-only server",
	4151: "wsrep: the node refuses the statement",
}

// err maps err of operation op onto the port's sentinels and scrubs the
// password from its text. write says whether the failed request could have
// been applied on its own (an autocommit write or a COMMIT).
//
//   - the server refused the statement or rolled it back (a deadlock, a
//     Galera certification failure, a read-only server, a node out of the
//     primary component): adapters.ErrUnavailable, definite.
//   - any other answer of the server: returned as is, wrapped; definite.
//   - no connection, or a connection failure during a read: ErrUnavailable.
//   - a connection failure, timeout or cancellation during a write:
//     adapters.ErrAmbiguous.
func (d *db) err(op string, err error, write bool) error {
	if err == nil {
		return nil
	}
	e := &Error{Op: op, Err: err, secret: d.secret}
	var me *gomysql.MySQLError
	switch {
	case errors.As(err, &me) && refused[me.Number] != "", errors.Is(err, errRolledBack):
		e.Kind = adapters.ErrUnavailable
	case !connLevel(err):
	case !write:
		e.Kind = adapters.ErrUnavailable
	default:
		e.Kind = adapters.ErrAmbiguous
	}
	return e
}

// connLevel: err is about the connection, not a definite answer of the server.
func connLevel(err error) bool {
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == erServerShutdown || me.Number == erConnectionKilled || me.Number == erQueryInterrupted
	}
	var ne net.Error
	return errors.Is(err, errNoNode) || errors.Is(err, gomysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, gomysql.ErrPktSync) ||
		errors.Is(err, gomysql.ErrPktSyncMul) || errors.Is(err, gomysql.ErrMalformPkt)
}

// withConn runs the single-statement write fn on a connection of the pool. A
// failure to get a connection is adapters.ErrUnavailable (nothing was sent);
// an error of fn is mapped with write = true.
func (d *db) withConn(ctx context.Context, op string, fn func(c *sql.Conn) error) error {
	c, err := d.pool.Conn(ctx)
	if err != nil {
		return d.err(op, err, false)
	}
	defer c.Close()
	return d.err(op, fn(c), true)
}

// rollback ends tx if it is still open (database/sql rolls back by itself
// when the transaction's context is cancelled), so that the connection goes
// back to the pool.
func rollback(tx *sql.Tx) { _ = tx.Rollback() }

// Error is a failed operation. Its text never contains the password.
type Error struct {
	Op     string
	Kind   error // adapters.ErrUnavailable, adapters.ErrAmbiguous or nil
	Err    error
	secret string
}

func (e *Error) Error() string {
	s := e.Op + ": "
	if e.Kind != nil {
		s += e.Kind.Error() + ": "
	}
	s += e.Err.Error()
	var me *gomysql.MySQLError
	if errors.As(e.Err, &me) {
		if why := refused[me.Number]; why != "" {
			s += " (" + why + ")"
		}
	}
	if e.secret != "" {
		s = strings.ReplaceAll(s, e.secret, "xxxxx")
	}
	return s
}

func (e *Error) Unwrap() []error {
	if e.Kind != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Err}
}

// errRolledBack: a transaction found its own write gone, rolled back by the
// server without an error (definite: nothing of it was applied).
var errRolledBack = errors.New("the transaction no longer sees its own write: the server rolled it back without reporting it")

// RolledBack says whether err is a transaction the server rolled back as a
// whole: a deadlock or a Galera certification failure (error 1213), or one
// found rolled back without an error.
func RolledBack(err error) bool {
	return ErrorNumber(err) == 1213 || errors.Is(err, errRolledBack)
}

// ErrorNumber is the server's error number err carries, or 0.
func ErrorNumber(err error) uint16 {
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

var dbRE = regexp.MustCompile(`^durachk_[a-z0-9_]{1,50}$`)

// validDatabase reports whether name may be created and dropped by durachk:
// it must match ^durachk_[a-z0-9_]{1,50}$, so that cleanup finds it and no
// user database is ever touched.
func validDatabase(name string) error {
	if !dbRE.MatchString(name) {
		return fmt.Errorf("database name %q must match %s", name, dbRE)
	}
	return nil
}

// ident quotes an identifier (names durachk makes: no backquotes in them).
func ident(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }
