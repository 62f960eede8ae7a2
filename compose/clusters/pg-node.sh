#!/bin/sh
# A node of the Postgres pair (run as the postgres user). ROLE is its role at
# the first start (primary or standby), PEER the other node's host name,
# PEER_PORT its port (5432 if unset; clusters.yml names the Toxiproxy link to
# the peer, so that a partition or a lag of a node cuts or delays replication).
#
#   first start, primary:  initdb (trust, as docker-compose.yml's postgres)
#   first start, standby:  wait for the peer to be primary, then
#                          pg_basebackup -R -X stream -c fast from it
#   any later start:       if the peer is a primary and this node is not a
#                          standby, it was deposed (pg-watcher promoted the
#                          peer while it was down): it rejoins as a standby
#                          from a fresh base backup. What it had written and
#                          the new primary never received is thrown away, as
#                          pg_rewind would; durability.failover counts it.
set -eu
D=/var/lib/postgresql/data
export PGCONNECT_TIMEOUT=2

peer_is_primary() {
	[ "$(psql -h "$PEER" -p "${PEER_PORT:-5432}" -U postgres -d postgres -XAtc 'select pg_is_in_recovery()' 2>/dev/null)" = f ]
}

basebackup() {
	find "$D" -mindepth 1 -delete
	pg_basebackup -h "$PEER" -p "${PEER_PORT:-5432}" -U postgres -D "$D" -R -X stream -c fast
}

if [ ! -s "$D/PG_VERSION" ]; then
	if [ "$ROLE" = primary ]; then
		initdb -D "$D" -U postgres --auth=trust
		# The standby and pg-watcher connect from the compose network.
		printf 'host all all all trust\nhost replication all all trust\n' >>"$D/pg_hba.conf"
	else
		until peer_is_primary; do sleep 0.5; done
		basebackup
	fi
elif [ ! -f "$D/standby.signal" ] && peer_is_primary; then
	echo "pg-node: $PEER is the primary now: rejoining it as a standby from a fresh base backup"
	basebackup
fi

exec postgres -D "$D" -c listen_addresses='*' -c fsync=on -c synchronous_commit=on -c full_page_writes=on \
	-c wal_log_hints=on -c hot_standby=on -c wal_sender_timeout=5s -c wal_receiver_timeout=5s \
	-c max_connections=200 -c synchronous_standby_names="${SYNC_NAMES:-}"
