#!/usr/bin/env bash
# bench-power-loss: runs durability.power-loss once per broker profile and seed and prints each
# run's wall time, verdict and reason (the issue's bar: each run ≤ 15 s). Then the lazy file
# system's own write+fdatasync benchmark (its latency against the backing file system's).
#
# Needs root, /dev/fuse, the local Postgres (effect store) and the brokers' server packages
# (redis-server, postgresql, rabbitmq-server, mariadb-server; nats-server is embedded); without FUSE every run is
# skipped with the reason.
#
# Usage: tools/bench-power-loss.sh [SEED...]            (default: seed 1)
#        PROFILES="redis-no pg-sync-on" tools/bench-power-loss.sh 1 2 3 4 5
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DURACHK_BIN:-bin/durachk}
go build -o "$bin" ./cmd/durachk
export DURACHK_PG_URL=${DURACHK_PG_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
pg=${DURACHK_PG_URL%%\?*}
redis=redis://127.0.0.1:6379/0
amqp=amqp://guest:guest@127.0.0.1:5672/
nats=${DURACHK_NATS_URL:-nats://127.0.0.1:4222}
mysql=${DURACHK_MYSQL_URL:-mysql://root@127.0.0.1:3306/test}

# Each profile states the settings it is named for: a private instance takes
# every other durability setting from the server (the shared Redis here runs
# appendonly no).
declare -A url=(
  [redis-always]="$redis?private-instance.appendonly=yes&private-instance.appendfsync=always"
  [redis-everysec]="$redis?private-instance.appendonly=yes&private-instance.appendfsync=everysec"
  [redis-no]="$redis?private-instance.appendonly=yes&private-instance.appendfsync=no"
  [pg-sync-on]="$pg?synchronous_commit=on"
  [pg-sync-off]="$pg?synchronous_commit=off"
  [pg-fsync-off]="$pg?private-instance.fsync=off"
  [rabbit-classic]="$amqp?queue-arguments.x-queue-type=classic"
  [rabbit-classic-journal]="$amqp?queue-arguments.x-queue-type=classic&power-loss.metadata=journal"
  [rabbit-quorum]="$amqp?queue-arguments.x-queue-type=quorum"
  [rabbit-quorum-journal]="$amqp?queue-arguments.x-queue-type=quorum&power-loss.metadata=journal"
  [nats-default]="$nats?storage=file&retention=workqueue&private-instance.sync_interval=2m"
  [nats-default-journal]="$nats?storage=file&retention=workqueue&private-instance.sync_interval=2m&power-loss.metadata=journal"
  [nats-sync-always]="$nats?storage=file&retention=workqueue&private-instance.sync_interval=always"
  [mysql-trx1]="$mysql?private-instance.innodb_flush_log_at_trx_commit=1"
  [mysql-trx2]="$mysql?private-instance.innodb_flush_log_at_trx_commit=2"
  [mysql-trx0]="$mysql?private-instance.innodb_flush_log_at_trx_commit=0"
  [mysql-trx1-binlog-sync0]="$mysql?private-instance.log_bin=ON&private-instance.sync_binlog=0"
  [mysql-trx1-binlog-sync1]="$mysql?private-instance.log_bin=ON&private-instance.sync_binlog=1"
  [mysql-trx1-nodoublewrite]="$mysql?private-instance.innodb_doublewrite=OFF"
)
order="redis-always redis-everysec redis-no pg-sync-on pg-sync-off pg-fsync-off rabbit-classic rabbit-classic-journal rabbit-quorum rabbit-quorum-journal nats-default nats-default-journal nats-sync-always mysql-trx1 mysql-trx2 mysql-trx0 mysql-trx1-binlog-sync0 mysql-trx1-binlog-sync1 mysql-trx1-nodoublewrite"
profiles=${PROFILES:-$order}
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(1)

out=$(mktemp -d /tmp/bench-power-loss-XXXXXX)
trap 'rm -rf "$out"' EXIT
printf '%-24s %4s %9s %7s  %s\n' PROFILE SEED VERDICT WALL REASON
for p in $profiles; do
  for seed in "${seeds[@]}"; do
    dir=$out/$p-$seed
    t0=$(date +%s.%N)
    "$bin" run --target "${url[$p]}&name=$p" --contract durability.power-loss --seed "$seed" --out "$dir" >"$dir.out" 2>&1 || true
    t1=$(date +%s.%N)
    if [ -f "$dir/result.json" ]; then
      verdict=$(jq -r '.results[0].verdict' "$dir/result.json")
      reason=$(jq -r '.results[0].reason // "" | .[0:90]' "$dir/result.json")
    else
      verdict=error
      reason=$(tail -1 "$dir.out" | cut -c1-90)
    fi
    printf '%-24s %4s %9s %6.1fs  %s\n' "$p" "$seed" "$verdict" "$(echo "$t1 - $t0" | bc)" "$reason"
  done
done
echo
go test ./internal/lazyfs -run '^$' -bench WriteFsync -benchtime 2000x | grep -E '^Benchmark|skipped' || true
