#!/bin/sh
# status.sh redis|postgres|rabbitmq — control.status of the plain-host
# recipes: prints `leader <node>` as the cluster itself says (nodes.conf):
#
#   redis     the first Sentinel that answers: SENTINEL get-master-addr-by-name
#             durachk, its address mapped to the node of that address
#   postgres  the first node of the group answering SELECT pg_is_in_recovery()
#             with f (Patroni's own `patronictl list` says the same)
#   rabbitmq  the leader of the run's quorum queue (durachk.<run>): rabbitmqctl
#             list_queues name leader on the first node that answers; nodes
#             are named after their host (rabbit@rabbit-1)
set -u
here=$(dirname "$0")
conf=${NODES_CONF:-$here/nodes.conf}
sudo=${SUDO:-}
on() { d=$1; shift; ssh -o BatchMode=yes -o ConnectTimeout=5 "$d" "$@" 2>/dev/null; }
by_addr() { awk -v a="$1" '$1 == "node" && $5 == a { print $3; exit }' "$conf"; }
case "${1:-}" in
redis)
	awk '$1 == "sentinel" { print $2, $3 }' "$conf" | while read -r d p; do
		a=$(on "$d" "redis-cli -p $p sentinel get-master-addr-by-name durachk" </dev/null | head -n 1)
		n=$(by_addr "$a")
		[ -n "$n" ] && { echo "leader $n"; exit 10; }
	done
	[ $? = 10 ] && exit 0
	;;
postgres)
	as="runuser -u postgres --"
	[ -n "$sudo" ] && as="$sudo -u postgres"
	awk '$1 == "node" && $2 == "postgres" { print $3, $4 }' "$conf" | while read -r n d; do
		r=$(on "$d" "$as psql -XAtc 'select pg_is_in_recovery()'" </dev/null)
		[ "$r" = f ] && { echo "leader $n"; exit 10; }
	done
	[ $? = 10 ] && exit 0
	;;
rabbitmq)
	awk '$1 == "node" && $2 == "rabbitmq" { print $4 }' "$conf" | while read -r d; do
		l=$(on "$d" "$sudo rabbitmqctl -q list_queues name leader" </dev/null | awk '$1 ~ /^durachk\./ { l = $2 } END { print l }')
		l=${l#*@}
		[ -n "$l" ] && { echo "leader ${l%%.*}"; exit 10; }
	done
	[ $? = 10 ] && exit 0
	;;
*)
	echo "usage: status.sh redis|postgres|rabbitmq" >&2
	exit 2
	;;
esac
exit 1
