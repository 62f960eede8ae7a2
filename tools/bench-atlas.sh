#!/usr/bin/env bash
# The atlas's wall time: `durachk atlas -c atlas/profiles.yaml` from an empty
# directory with --trials 1, then with --trials 5 (a measurement, not a test:
# it prints the two wall times, their ratio, the CPUs and the load average).
# Profiles whose broker variable is unset are shown as not run and cost
# nothing: the numbers say how many ran.
#
# Needs bin/durachk (make build) and the brokers' URLs (DURACHK_PG_URL,
# DURACHK_REDIS_URL, DURACHK_AMQP_URL, DURACHK_NATS_URL, DURACHK_MYSQL_URL,
# DURACHK_SQS_URL; .ci/run sets them). CPU heavy: on a shared machine run it
# under the lock, `flock /tmp/durachk-heavy.lock tools/bench-atlas.sh`.
# Usage: tools/bench-atlas.sh [extra durachk atlas flags, e.g. --contract durability.ack --parallel 2]
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${DURACHK:-./bin/durachk}"
profiles="${BENCH_PROFILES:-atlas/profiles.yaml}"
work="$(mktemp -d -t durachk-bench-atlas-XXXX)"
trap 'rm -rf "$work"' EXIT

now() { date +%s.%N; }
# run TRIALS FLAGS...: one atlas from an empty directory; prints its line.
run() {
  local trials="$1" t0 t1 code=0
  shift
  t0="$(now)"
  "$bin" atlas -c "$profiles" --trials "$trials" --out "$work/t$trials" "$@" >"$work/t$trials.out" 2>"$work/t$trials.err" || code=$?
  t1="$(now)"
  if [ "$code" -ge 3 ]; then
    echo "bench-atlas: the atlas with --trials $trials failed (exit $code):" >&2
    tail -5 "$work/t$trials.err" >&2
    exit 3
  fi
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f\n", b - a }' >"$work/t$trials.wall"
  echo "--trials $trials: $(cat "$work/t$trials.wall") s ($(grep -o '[0-9]* profiles run' "$work/t$trials.out"), exit $code, load average $(cut -d' ' -f1 /proc/loadavg) at its end)"
}

echo "bench-atlas: $profiles on $(nproc) CPUs, load average $(cut -d' ' -f1 /proc/loadavg) at the start"
run 1 "$@"
run 5 "$@"
awk -v a="$(cat "$work/t1.wall")" -v b="$(cat "$work/t5.wall")" 'BEGIN { if (a > 0) printf "ratio --trials 5 / --trials 1: %.2f\n", b / a }'
