#!/usr/bin/env bash
# A replicated cluster that durachk does not start: this script starts it, the
# way a team's own deployment runs, and gives durachk the control commands of
# an existing cluster (internal/targets/control.go) that kill, start, cut off
# and lag its nodes with kill(1) and nft(8). The tests of
# internal/runner/clusters/extcluster_test.go run the cluster contracts on it.
#
#   cluster.sh up KIND DIR     KIND: redis (a primary, two replicas, three
#                              Sentinels), postgres (a primary and a hot standby,
#                              with a failover watchdog standing in for Patroni)
#                              or rabbitmq (three nodes). Starts every node as a
#                              child of this process, under DIR (which must
#                              exist), prints the target URL with its control.*
#                              parameters as one line once the cluster serves,
#                              and runs until SIGTERM, SIGINT or SIGHUP; then it
#                              kills its nodes, removes its nftables table and
#                              everything it wrote under DIR.
#   cluster.sh ctl DIR ACTION [NODE]
#                              kill, start, partition, heal, lag, unlag (of
#                              NODE) and status (prints "leader <node>"): what
#                              the control.* parameters run.
#
# Traffic stays on 127.0.0.0/8: each node listens on its own address
# 127.0.B.(11+i), each Sentinel on 127.0.B.(21+j), in a /24 block claimed with
# the lock file durachk's private clusters use (/run/lock/durachk-loopback-
# 127.0.B.lock), so no concurrent run cuts the same addresses. Every node
# connects to the others from its own address (Redis bind-source-addr,
# Erlang's inet_dist_connect_options), so nft rules on addresses separate
# them; the clients (durachk's processes) connect from 127.0.0.1 and no rule
# names it: a client the topology itself moves (a Sentinel client, a
# multi-host URL) finds the new primary, and durachk's pinned producer stays
# with the node it is pinned to, as on the minority side.
#
# partition NODE drops every packet between NODE's address and the other
# nodes' and Sentinels'. lag NODE drops 30% of the packets NODE sends to the
# other data nodes: nftables cannot delay a packet, and TCP resends a dropped
# one only after its retransmission timeout (200 ms at least), so the node's
# replication runs hundreds of milliseconds behind, in bursts, while clients
# are served at once. (tc netem would delay by an amount, but its queueing
# discipline is the whole loopback device's, shared with every other process
# on the machine.) The rules live in the table inet durachk_x<id>, named like
# the tables of durachk's private clusters, so `durachk cleanup` removes one
# that a killed test left.
set -euo pipefail

die() { echo "extcluster: $*" >&2; exit 1; }

# free_port IP: a port nothing listens on at IP or at the wildcard address.
free_port() {
  local ip=$1 p
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 40000))
    if [ -z "$(ss -Hltn "( sport = :$p )" 2>/dev/null)" ]; then
      echo "$p"
      return
    fi
  done
  die "no free port on $ip"
}

# wait_tcp ADDR PORT [SECONDS]: until something accepts there.
wait_tcp() {
  local i
  for i in $(seq 1 $((${3:-30} * 10))); do
    if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

# ---------------------------------------------------------------- control ---

ctl() {
  local D=$1 action=$2 node=${3:-}
  # shellcheck source=/dev/null
  source "$D/cluster.env"
  case "$action" in
    kill)
      local pid
      pid=$(cat "$D/$node.pid")
      kill -KILL "$pid" 2>/dev/null || true
      ;;
    start)
      # The supervisor starts the node, as its child; it answers through a file.
      local nonce=$RANDOM$RANDOM
      echo "start $node $nonce" >"$D/ctl.fifo"
      for _ in $(seq 1 300); do
        [ -e "$D/ack.$nonce" ] && { rm -f "$D/ack.$nonce"; return 0; }
        sleep 0.05
      done
      die "the supervisor did not start $node"
      ;;
    partition)
      local me others
      me=$(node_ip "$node")
      others=$(others_of "$me" "$ALL_IPS")
      nft add rule inet "$TABLE" out ip saddr "$me" ip daddr "{ $others }" drop comment "\"part-$node\""
      nft add rule inet "$TABLE" out ip saddr "{ $others }" ip daddr "$me" drop comment "\"part-$node\""
      ;;
    heal) del_rules "part-$node" ;;
    lag)
      local me others
      me=$(node_ip "$node")
      others=$(others_of "$me" "$NODE_IPS")
      nft add rule inet "$TABLE" out ip saddr "$me" ip daddr "{ $others }" numgen random mod 100 '<' 30 drop comment "\"lag-$node\""
      ;;
    unlag) del_rules "lag-$node" ;;
    status) status ;;
    *) die "unknown action $action" ;;
  esac
}

node_ip() { eval "echo \$IP_$1"; }

# others_of IP "IP1 IP2 ...": the others, comma-separated.
others_of() {
  local out=() x
  for x in $2; do [ "$x" = "$1" ] || out+=("$x"); done
  local IFS=,
  echo "${out[*]}"
}

# del_rules COMMENT: deletes the rules of the run's table with that comment.
del_rules() {
  local h
  for h in $(nft -a list chain inet "$TABLE" out | sed -n "s/.*comment \"$1\" # handle \([0-9]*\)$/\1/p"); do
    nft delete rule inet "$TABLE" out handle "$h"
  done
}

# status prints "leader <node>": for RabbitMQ the leader of the run's queue
# ($DURACHK_QUEUE), from the management API of any node that answers.
status() {
  case "$KIND" in
    rabbitmq)
      local ip leader n
      for n in $NODES; do
        ip=$(node_ip "$n")
        leader=$(curl -s -m 2 -u "$RMQ_USER:$RMQ_PASS" "http://$ip:$(eval "echo \$MGMT_$n")/api/queues/%2F/${DURACHK_QUEUE:-none}" |
          jq -r '.leader // .node // empty' 2>/dev/null) || continue
        [ -n "$leader" ] || continue
        for m in $NODES; do
          if [ "$leader" = "rabbit@$(node_ip "$m")" ]; then
            echo "leader $m"
            return 0
          fi
        done
      done
      echo "leader -"
      ;;
    postgres)
      local n
      for n in $NODES; do
        if [ "$(psql_at "$n" -tAc 'SELECT pg_is_in_recovery()' 2>/dev/null)" = f ]; then
          echo "leader $n"
          return 0
        fi
      done
      echo "leader -"
      ;;
    redis)
      local n
      for n in $NODES; do
        if redis-cli -h "$(node_ip "$n")" -p "$(eval "echo \$PORT_$n")" info replication 2>/dev/null | grep -q '^role:master'; then
          echo "leader $n"
          return 0
        fi
      done
      echo "leader -"
      ;;
  esac
}

psql_at() {
  local n=$1
  shift
  psql -h "$(node_ip "$n")" -p "$(eval "echo \$PORT_$n")" -U postgres -d postgres "$@"
}

# -------------------------------------------------------------- supervisor ---

declare -A PIDS=()

start_node() { # start_node NODE: the node's command, as this process's child
  local n=$1
  case "$KIND" in
    redis) redis-server "$D/$n.conf" >/dev/null 2>&1 & ;;
    postgres) start_pg "$n" ;;
    rabbitmq) start_rabbit "$n" ;;
  esac
  PIDS[$n]=$!
  echo "${PIDS[$n]}" >"$D/$n.pid"
}

cleanup() {
  trap - EXIT INT TERM HUP
  exec 2>/dev/null # no "Killed" line per node
  local p
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  [ -n "${WATCHDOG:-}" ] && kill -KILL "$WATCHDOG" 2>/dev/null || true
  [ -n "${EPMD_PID:-}" ] && kill -KILL "$EPMD_PID" 2>/dev/null || true
  wait 2>/dev/null || true
  [ -n "${TABLE:-}" ] && nft delete table inet "$TABLE" 2>/dev/null || true
  [ -n "${D:-}" ] && rm -rf "$D"
  if [ -n "${LOCKFILE:-}" ]; then rm -f "$LOCKFILE"; fi
  exit 0
}

# claim_block: a /24 of 127/8 no live run holds, locked on fd 9 until exit.
claim_block() {
  local lockdir=/run/lock b first
  [ -d "$lockdir" ] || lockdir=${TMPDIR:-/tmp}
  first=$((2 + RANDOM % 250))
  for i in $(seq 0 249); do
    b=$((2 + (first - 2 + i) % 250))
    LOCKFILE="$lockdir/durachk-loopback-127.0.$b.lock"
    exec 9<>"$LOCKFILE"
    if flock -n 9; then
      BLOCK=127.0.$b
      return
    fi
    exec 9>&-
  done
  LOCKFILE=
  die "no free loopback block"
}

up_redis() {
  local i n ip p
  NODES="n1 n2 n3"
  for i in 1 2 3; do
    n=n$i ip=$BLOCK.$((10 + i)) p=$(free_port "$ip")
    eval "IP_$n=$ip PORT_$n=$p"
    NODE_IPS="${NODE_IPS:-} $ip"
  done
  for i in 1 2 3; do
    n=n$i ip=$(node_ip $n) p=$(eval "echo \$PORT_$n")
    mkdir -p "$D/$n"
    {
      echo "bind $ip"
      echo "bind-source-addr $ip"
      echo "port $p"
      echo "protected-mode no"
      echo "daemonize no"
      echo "dir $D/$n"
      echo "logfile $D/$n/redis.log"
      echo "appendonly yes"
      echo "appendfsync everysec"
      echo 'save ""'
      echo "repl-diskless-sync yes"
      echo "repl-diskless-sync-delay 0"
      echo "replica-announce-ip $ip"
      [ "$i" = 1 ] || echo "replicaof $IP_n1 $PORT_n1"
    } >"$D/$n.conf"
  done
  SENTINELS=()
  for j in 1 2 3; do
    ip=$BLOCK.$((20 + j)) p=$(free_port "$ip")
    SENTINEL_IPS="${SENTINEL_IPS:-} $ip"
    SENTINELS+=("$ip:$p")
    mkdir -p "$D/s$j"
    {
      echo "bind $ip"
      echo "port $p"
      echo "protected-mode no"
      echo "daemonize no"
      echo "dir $D/s$j"
      echo "logfile $D/s$j/sentinel.log"
      echo "sentinel announce-ip $ip"
      echo "sentinel monitor mymaster $IP_n1 $PORT_n1 2"
      echo "sentinel down-after-milliseconds mymaster 500"
      echo "sentinel failover-timeout mymaster 60000"
      echo "sentinel parallel-syncs mymaster 4"
    } >"$D/s$j.conf"
  done
  ALL_IPS="$NODE_IPS $SENTINEL_IPS"
  write_env
  for n in $NODES; do start_node "$n"; done
  for n in $NODES; do wait_tcp "$(node_ip $n)" "$(eval "echo \$PORT_$n")" || die "redis $n did not start"; done
  for j in 1 2 3; do
    redis-server "$D/s$j.conf" --sentinel >/dev/null 2>&1 &
    PIDS[s$j]=$!
  done
  for s in "${SENTINELS[@]}"; do wait_tcp "${s%:*}" "${s#*:}" || die "sentinel $s did not start"; done
  # Every replica in sync, and every Sentinel knowing the two others (they
  # find each other through the primary's hello channel, every 2 s).
  for _ in $(seq 1 150); do
    local ok=1
    for n in n2 n3; do
      redis-cli -h "$(node_ip $n)" -p "$(eval "echo \$PORT_$n")" info replication 2>/dev/null | grep -q 'master_link_status:up' || ok=0
    done
    for s in "${SENTINELS[@]}"; do
      [ "$(redis-cli -h "${s%:*}" -p "${s#*:}" sentinel master mymaster 2>/dev/null | sed -n '/^num-other-sentinels$/{n;p}')" = 2 ] || ok=0
    done
    [ $ok = 1 ] && break
    sleep 0.2
  done
  [ $ok = 1 ] || die "the redis cluster did not settle"
  local q="master_name=mymaster&addr=${SENTINELS[1]}&addr=${SENTINELS[2]}"
  URL="redis://${SENTINELS[0]}/0?$q"
}

write_env() {
  {
    echo "KIND=$KIND"
    echo "TABLE=$TABLE"
    echo "NODES='$NODES'"
    echo "NODE_IPS='${NODE_IPS# }'"
    echo "ALL_IPS='${ALL_IPS# }'"
    for n in $NODES; do
      echo "IP_$n=$(node_ip "$n")"
      echo "PORT_$n=$(eval "echo \$PORT_$n")"
      [ "$KIND" != rabbitmq ] || echo "MGMT_$n=$(eval "echo \$MGMT_$n")"
    done
    [ "$KIND" != rabbitmq ] || echo "RMQ_USER=$RMQ_USER RMQ_PASS=$RMQ_PASS"
  } >"$D/cluster.env"
}

# control_params: the control.* parameters for every node.
control_params() {
  local self n enc
  self=$(readlink -f "$0")
  enc() { jq -rn --arg v "$1" '$v|@uri'; }
  for n in $NODES; do
    for a in kill start partition heal lag unlag; do
      printf '&control.%s.%s=%s' "$n" "$a" "$(enc "$self ctl $D $a $n")"
    done
    printf '&control.%s.addr=%s' "$n" "$(node_ip "$n"):$(eval "echo \$PORT_$n")"
  done
  [ "$KIND" = redis ] || printf '&control.status=%s' "$(enc "$self ctl $D status")"
  printf '&control.timeout=30s'
}

up() {
  KIND=$1 D=$2
  [ -d "$D" ] || die "$D is not a directory"
  command -v nft >/dev/null || die "nft not found (apt-get install -y nftables)"
  D=$(mktemp -d "$D/extcluster-XXXXXX")
  trap cleanup EXIT INT TERM HUP
  claim_block
  TABLE=durachk_x$(od -An -N5 -tx1 /dev/urandom | tr -d ' \n')
  nft add table inet "$TABLE"
  nft add chain inet "$TABLE" out '{ type filter hook output priority 0 ; policy accept ; }'
  mkfifo "$D/ctl.fifo"
  exec 3<>"$D/ctl.fifo"
  case "$KIND" in
    redis) up_redis ;;
    postgres) up_postgres ;;
    rabbitmq) up_rabbitmq ;;
    *) die "unknown kind $KIND (redis, postgres, rabbitmq)" ;;
  esac
  echo "$URL$(control_params)"
  local cmd node nonce
  while :; do
    if read -r -t 1 cmd node nonce <&3; then
      [ "$cmd" = start ] && start_node "$node" && : >"$D/ack.$nonce"
    fi
  done
}

case "${1:-}" in
  up) up "${2:?kind}" "${3:?dir}" ;;
  ctl) ctl "${2:?dir}" "${3:?action}" "${4:-}" ;;
  *) die "usage: cluster.sh up KIND DIR | cluster.sh ctl DIR ACTION [NODE]" ;;
esac
