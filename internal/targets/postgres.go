package targets

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/adapters/pg"
	"github.com/durachk/durachk/adapters/pg/pgdb"
	"github.com/durachk/durachk/pipeline"
	"github.com/durachk/durachk/pipeline/pgstore"
)

// Postgres as a queue. Knobs (query parameters of the target URL):
// fifo (true|false, default true), delivery_limit (n), synchronous_commit
// (on|off|local|remote_write|remote_apply), transactional_ack (true: the ack
// commits in the effect store's transaction, which must then be this database —
// the default), name (the target's name in reports), and the durability
// settings of the private server that durability.ack and durability.power-loss
// start (pgDurability): private-instance.fsync (on|off),
// private-instance.wal_sync_method, private-instance.full_page_writes (on|off)
// and synchronous_commit (the server's default too), each not given the
// target server's own (SHOW), else Postgres's default.
// Every other parameter goes to the driver (sslmode, connect_timeout, ...).
var pgKnobs = map[string]bool{"synchronous_commit": true, "fifo": true, "delivery_limit": true, "name": true, "transactional_ack": true}

// pgDurability are the settings that decide what of a commit survives a
// kill or a power loss (https://www.postgresql.org/docs/current/wal-reliability.html
// and runtime-config-wal): whether the WAL is fsynced at all, whether a commit
// waits for its flush, how it is flushed, and whether a page torn by a power
// loss can be repaired from the WAL. wal_sync_method is Linux's set (no
// fsync_writethrough: the private server runs here).
var pgDurability = []DurabilitySetting{
	{Name: "fsync", Default: "on", Check: oneOfCheck("on", "off")},
	{Name: "synchronous_commit", Knob: "synchronous_commit", Default: "on", Check: oneOfCheck("on", "off", "local", "remote_write", "remote_apply")},
	{Name: "wal_sync_method", Default: "fdatasync", Check: oneOfCheck("fdatasync", "fsync", "open_sync", "open_datasync")},
	{Name: "full_page_writes", Default: "on", Check: oneOfCheck("on", "off")},
}

func init() {
	for _, d := range pgDurability {
		pgKnobs[d.knob()] = true
	}
}

// pgServerSettings reads the target server's durability settings with SHOW.
func pgServerSettings(ctx context.Context, s Spec) (ServerSettings, error) {
	db, err := pgdb.Open(ctx, s.URL, pgdb.Options{MaxConns: 1})
	if err != nil {
		return ServerSettings{}, err
	}
	defer db.Close()
	out := ServerSettings{Values: map[string]string{}, Unread: map[string]string{}}
	for _, d := range pgDurability {
		var v string
		// SHOW takes no parameter; the names are pgDurability's own.
		if err := db.Pool.QueryRow(ctx, "SHOW "+d.Name).Scan(&v); err != nil {
			out.Unread[d.Name] = db.Err("SHOW "+d.Name, err, false).Error()
			continue
		}
		out.Values[d.Name] = v
	}
	return out, nil
}

func init() {
	Register(&Kind{Name: "postgres", Schemes: []string{"postgres", "postgresql"}, Parse: parsePostgres,
		OpenQueue: func(ctx context.Context, s Spec) (adapters.Queue, error) {
			return pg.Open(ctx, s.URL, s.RunID, pgOptions(s))
		},
		StartPrivate:    startPrivatePostgres,
		CanStartPrivate: canStartPrivatePostgres,
		Durability:      pgDurability,
		ServerSettings:  pgServerSettings,
		PrivateVersion:  privatePostgresVersion,
		Cleanup:         cleanupPostgres,
		Cluster:         pgClusterKind,
	})
}

func parsePostgres(raw string, u *url.URL) (Spec, error) {
	if err := UnknownKnobs(u, pgKnobs, "sslmode", "connect_timeout", "application_name", "sslrootcert", "sslcert", "sslkey", "user", "password", "dbname", "host", "port", "target_session_attrs"); err != nil {
		return Spec{}, err
	}
	q := u.Query()
	opts := map[string]string{}
	for k := range pgKnobs {
		if q.Has(k) {
			opts[k] = q.Get(k)
			q.Del(k)
		}
	}
	if err := checkDurabilityKnobs(pgDurability, opts); err != nil {
		return Spec{}, err
	}
	for _, k := range []string{"fifo", "transactional_ack"} {
		if v := opts[k]; v != "" && v != "true" && v != "false" {
			return Spec{}, fmt.Errorf("%w: %s=%q: want true or false", ErrBadTarget, k, v)
		}
	}
	if v := opts["delivery_limit"]; v != "" {
		if n, err := strconv.Atoi(v); err != nil || n < 0 {
			return Spec{}, fmt.Errorf("%w: delivery_limit=%q: want a number ≥ 0", ErrBadTarget, v)
		}
	}
	if q.Get("sslmode") == "" && isLoopback(u.Hostname()) {
		q.Set("sslmode", "disable")
	}
	u.RawQuery = q.Encode()
	name := opts["name"]
	if name == "" {
		name = "postgres"
	}
	delete(opts, "name")
	return Spec{Name: name, URL: u.String(), Options: opts, StoreURL: u.String()}, nil
}

func pgOptions(s Spec) pg.Options {
	o := pg.Options{FIFO: s.Options["fifo"] != "false", SyncCommit: s.Options["synchronous_commit"], MaxConns: 2,
		BreakOrder: s.BreakOrder, Unlogged: s.Volatile}
	o.DeliveryLimit, _ = strconv.Atoi(s.Options["delivery_limit"])
	if s.Unreplicated {
		o.SyncCommit = "local" // commits wait for the local flush only, never for a standby
	}
	return o
}

func oneOf(v string, vs ...string) bool {
	for _, x := range vs {
		if v == x {
			return true
		}
	}
	return false
}

func isLoopback(h string) bool { return h == "127.0.0.1" || h == "localhost" || h == "::1" || h == "" }

// CommitAcker returns, for a Postgres target with transactional_ack=true, the
// worker's combined commit-and-ack: the job's row is deleted in the store's
// commit transaction, so a crash after the commit cannot leave it unacked. It
// returns nil for every other target.
func CommitAcker(s Spec, q adapters.Queue, st pipeline.Store) func(ctx context.Context, req pipeline.CommitRequest, d adapters.Delivery) (bool, error) {
	if s.Kind != "postgres" || s.Options["transactional_ack"] != "true" {
		return nil
	}
	pq, ok := q.(*pg.Queue)
	ps, ok2 := st.(*pgstore.Store)
	if !ok || !ok2 {
		return nil
	}
	return func(ctx context.Context, req pipeline.CommitRequest, d adapters.Delivery) (bool, error) {
		return ps.CommitResultWithEventTx(ctx, req, pq.AckIn(d))
	}
}
