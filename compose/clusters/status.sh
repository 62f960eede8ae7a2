#!/bin/sh
# status.sh redis|postgres|rabbitmq — control.status of clusters.yaml: prints
# `leader <node>` as the cluster itself says, asked with the broker's own CLI
# in its containers (docker compose exec):
#
#   redis     the first Sentinel that answers SENTINEL get-master-addr-by-name
#             durachk; its port is the node's Toxiproxy port (1700N: redis-N)
#   postgres  the first node answering SELECT pg_is_in_recovery() with f
#             through its clients' link (a partitioned node does not answer)
#   rabbitmq  the leader of the run's quorum queue (durachk.<run>), from
#             rabbitmqctl list_queues name leader on the first node answering
set -u
f="$(dirname "$0")/../clusters.yml"
ex() { timeout 10 docker compose -f "$f" exec -T "$@" 2>/dev/null; }
case "${1:-}" in
redis)
	for i in 1 2 3; do
		port=$(ex "sentinel-$i" redis-cli -p "2700$i" sentinel get-master-addr-by-name durachk | sed -n 2p)
		case $port in 1700[1-3]) echo "leader redis-${port#1700}"; exit 0 ;; esac
	done
	;;
postgres)
	for i in 1 2; do
		r=$(ex -e PGCONNECT_TIMEOUT=2 pg-watcher psql -h toxiproxy -p "544$i" -U postgres -d postgres -XAtc 'select pg_is_in_recovery()')
		[ "$r" = f ] && { echo "leader pg-$i"; exit 0; }
	done
	;;
rabbitmq)
	for i in 1 2 3; do
		l=$(ex "rabbit-$i" rabbitmqctl -q list_queues name leader | awk '$1 ~ /^durachk\./ { l = $2 } END { print l }')
		l=${l#*@}
		[ -n "$l" ] && { echo "leader $l"; exit 0; }
	done
	;;
*)
	echo "usage: status.sh redis|postgres|rabbitmq" >&2
	exit 2
	;;
esac
exit 1
