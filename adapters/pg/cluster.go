package pg

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durachk/durachk/adapters/pg/pgdb"
	"github.com/durachk/durachk/internal/loadavg"
)

// The administrative calls of a streaming-replication topology (a primary
// and its standbys), for the harness that starts and faults it: pgx is
// imported by this package only. Each call opens one connection and closes it.

// NodeState is a server's own account of its place in streaming replication.
type NodeState struct {
	InRecovery bool
	// LSN is how far its WAL goes: written on a primary, replayed on a standby.
	LSN uint64
	// Streaming: a standby's WAL receiver is streaming; Upstream is the
	// host:port it streams from.
	Streaming bool
	Upstream  string
	// Sync names the standbys a primary waits for (sync_state sync or quorum).
	Sync []string
}

func adminConn(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	// A second on an idle machine; a loaded one answers a connection's
	// start-up later (a promote gave up on it beside two busy loops).
	cfg.ConnectTimeout = loadavg.Patience(time.Second, 8)
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, (&pgdb.DB{}).Err("connect", err, false)
	}
	return c, nil
}

// State reads the replication state of the server at url.
func State(ctx context.Context, url string) (NodeState, error) {
	var s NodeState
	c, err := adminConn(ctx, url)
	if err != nil {
		return s, err
	}
	defer c.Close(context.Background())
	var lsn string
	err = c.QueryRow(ctx, `SELECT pg_is_in_recovery(),
		CASE WHEN pg_is_in_recovery() THEN coalesce(pg_last_wal_replay_lsn(), '0/0') ELSE pg_current_wal_lsn() END::text`).Scan(&s.InRecovery, &lsn)
	if err != nil {
		return s, err
	}
	s.LSN = ParseLSN(lsn)
	if s.InRecovery {
		var status, host string
		var port int
		err := c.QueryRow(ctx, `SELECT status, coalesce(sender_host, ''), coalesce(sender_port, 0) FROM pg_stat_wal_receiver`).Scan(&status, &host, &port)
		if err == nil {
			s.Streaming = status == "streaming"
			s.Upstream = host + ":" + strconv.Itoa(port)
		} else if err != pgx.ErrNoRows {
			return s, err
		}
		return s, nil
	}
	rows, err := c.Query(ctx, `SELECT application_name FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum') ORDER BY 1`)
	if err != nil {
		return s, err
	}
	s.Sync, err = pgx.CollectRows(rows, pgx.RowTo[string])
	return s, err
}

// Promote ends recovery on the standby at url and waits until it takes
// writes (pg_promote, up to 10 s).
func Promote(ctx context.Context, url string) error {
	c, err := adminConn(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	var ok bool
	if err := c.QueryRow(ctx, `SELECT pg_promote(true, 10)`).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("pg_promote did not finish within 10 s")
	}
	return nil
}

// ParseLSN reads a pg_lsn ("16/B374D848"); 0 if it is not one.
func ParseLSN(s string) uint64 {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil {
		return 0
	}
	return h<<32 | l
}
