#!/bin/sh
# fault.sh ACTION NODE — the control commands of the plain-host recipes, run
# on the host durachk runs on; each acts on NODE over ssh (nodes.conf, or the
# file $NODES_CONF names):
#
#   kill | start        systemctl kill -s KILL UNIT | systemctl start UNIT
#   pause | resume      systemctl kill -s STOP UNIT | systemctl kill -s CONT UNIT
#   partition           an nftables table of its own (inet durachk_partition)
#                       on NODE dropping every packet to and from the other
#                       nodes of its group and the clients, both ways; ssh
#                       (port 22) stays open, so that heal can get in
#   heal                deletes that table
#   lag                 tc on NODE: every packet it sends to the other nodes
#                       of its group waits LAG (default 200ms) in a netem band
#                       (prio qdisc, one u32 filter per peer)
#   unlag               deletes that root qdisc (the interface's default again)
#
# A fault on a node is undone on that node alone: a run that dies leaves at
# most one table and one qdisc per node, which heal and unlag remove (they
# succeed when there is nothing to remove).
set -eu
here=$(dirname "$0")
conf=${NODES_CONF:-$here/nodes.conf}
lag=${LAG:-200ms}
sudo=${SUDO:-}
action=${1:?usage: fault.sh ACTION NODE}
node=${2:?usage: fault.sh ACTION NODE}

line=$(awk -v n="$node" '$1 == "node" && $3 == n' "$conf")
[ -n "$line" ] || { echo "fault.sh: no node $node in $conf" >&2; exit 2; }
set -- $line
group=$2 dest=$4 unit=$7
peers=$(awk -v g="$group" -v n="$node" '$1 == "node" && $2 == g && $3 != n { print $5 }' "$conf")
clients=$(awk '$1 == "client" { print $2 }' "$conf")
on() { ssh -o BatchMode=yes -o ConnectTimeout=5 "$dest" "$@"; }
set_of() { echo "$*" | tr -s ' \n' ',' | sed 's/^,//; s/,$//'; }

case $action in
kill) on "$sudo systemctl kill -s KILL $unit" ;;
start) on "$sudo systemctl start $unit" ;;
pause) on "$sudo systemctl kill -s STOP $unit" ;;
resume) on "$sudo systemctl kill -s CONT $unit" ;;
partition)
	cut=$(set_of $peers $clients)
	on "$sudo nft -f -" <<NFT
table inet durachk_partition {
	chain input {
		type filter hook input priority -10; policy accept;
		tcp dport 22 accept
		ip saddr { $cut } drop
	}
	chain output {
		type filter hook output priority -10; policy accept;
		tcp sport 22 accept
		ip daddr { $cut } drop
	}
}
NFT
	;;
heal) on "$sudo nft delete table inet durachk_partition 2>/dev/null || true" ;;
lag)
	first=$(echo $peers | cut -d' ' -f1)
	filters=
	for p in $peers; do
		filters="$filters; $sudo tc filter add dev \$dev parent 1: protocol ip prio 1 u32 match ip dst $p/32 flowid 1:4"
	done
	on "set -e; dev=\$(ip -o route get $first | sed -n 's/.* dev \([^ ]*\).*/\1/p'); $sudo tc qdisc replace dev \$dev root handle 1: prio bands 4; $sudo tc qdisc add dev \$dev parent 1:4 handle 40: netem delay $lag$filters"
	;;
unlag)
	first=$(echo $peers | cut -d' ' -f1)
	on "dev=\$(ip -o route get $first | sed -n 's/.* dev \([^ ]*\).*/\1/p'); $sudo tc qdisc del dev \$dev root 2>/dev/null || true"
	;;
*)
	echo "fault.sh: unknown action $action (kill start pause resume partition heal lag unlag)" >&2
	exit 2
	;;
esac
