#!/bin/sh
# status.sh redis|postgres|rabbitmq — control.status of the Kubernetes
# recipes: prints `leader <node>`, the node that leads as the cluster itself
# says, asked through the broker's own CLI in its pods (kubectl exec):
#
#   redis     the Sentinels' primary (SENTINEL get-master-addr-by-name durachk),
#             the first Sentinel that answers
#   postgres  the node that answers SELECT pg_is_in_recovery() with f; when
#             two do (a deposed primary cut off by a partition) the one the
#             watcher can reach is not known here: the first is printed
#   rabbitmq  the leader of the run's quorum queue (durachk.<run>), from
#             rabbitmqctl list_queues name leader on the first node that answers
#
# Prints nothing and fails when no node answers.
set -u
ns=durachk
ex() { timeout 10 kubectl -n "$ns" exec "$@" 2>/dev/null; }
case "${1:-}" in
redis)
	for s in redis-sentinel-0 redis-sentinel-1 redis-sentinel-2; do
		host=$(ex "$s" -- redis-cli -p 26379 sentinel get-master-addr-by-name durachk | head -n 1)
		[ -n "$host" ] && { echo "leader ${host%%.*}"; exit 0; }
	done
	;;
postgres)
	for n in pg-0 pg-1; do
		[ "$(ex "$n" -c postgres -- psql -U postgres -d postgres -XAtc 'select pg_is_in_recovery()')" = f ] && { echo "leader $n"; exit 0; }
	done
	;;
rabbitmq)
	for n in rabbit-0 rabbit-1 rabbit-2; do
		leader=$(ex "$n" -c rabbitmq -- rabbitmqctl -q list_queues name leader | awk '$1 ~ /^durachk\./ { l = $2 } END { print l }')
		# rabbit@rabbit-1.rabbit.durachk.svc.cluster.local -> rabbit-1
		leader=${leader#*@}
		[ -n "$leader" ] && { echo "leader ${leader%%.*}"; exit 0; }
	done
	;;
*)
	echo "usage: status.sh redis|postgres|rabbitmq" >&2
	exit 2
	;;
esac
exit 1
