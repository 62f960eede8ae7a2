package targets

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/adapters/pg"
	"github.com/durachk/durachk/pipeline"
	"github.com/durachk/durachk/pipeline/pgstore"
)

// Postgres as a queue. Knobs (query parameters of the target URL):
// fifo (true|false, default true), delivery_limit (n), synchronous_commit
// (on|off|local|remote_write|remote_apply), transactional_ack (true: the ack
// commits in the effect store's transaction, which must then be this database —
// the default), name (the target's name in reports), private-instance.fsync
// (on|off, default on: the fsync of the private server that durability.ack and
// durability.power-loss start; synchronous_commit is that server's default too).
// Every other parameter goes to the driver (sslmode, connect_timeout, ...).
var pgKnobs = map[string]bool{"synchronous_commit": true, "fifo": true, "delivery_limit": true, "name": true, "transactional_ack": true,
	"private-instance.fsync": true}

func init() {
	Register(&Kind{Name: "postgres", Schemes: []string{"postgres", "postgresql"}, Parse: parsePostgres,
		OpenQueue: func(ctx context.Context, s Spec) (adapters.Queue, error) {
			return pg.Open(ctx, s.URL, s.RunID, pgOptions(s))
		},
		StartPrivate:    startPrivatePostgres,
		CanStartPrivate: canStartPrivatePostgres,
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
	if v := opts["synchronous_commit"]; v != "" && !oneOf(v, "on", "off", "local", "remote_write", "remote_apply") {
		return Spec{}, fmt.Errorf("%w: synchronous_commit=%q: want on, off, local, remote_write or remote_apply", ErrBadTarget, v)
	}
	if v := opts["private-instance.fsync"]; v != "" && !oneOf(v, "on", "off") {
		return Spec{}, fmt.Errorf("%w: private-instance.fsync=%q: want on or off", ErrBadTarget, v)
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
