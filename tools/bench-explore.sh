#!/usr/bin/env bash
# durachk explore, every property checked, for $BENCH_DURATION (default 10m)
# on each target of $BENCH_TARGETS (default: mem): prints the jobs per minute
# it sustained and its resident memory sampled every $BENCH_SAMPLE seconds
# (default 30), to show it is flat over the run.
#
#   mem       the embedded target (goal: at least 50,000 jobs/min)
#   redis     Redis on loopback, $DURACHK_REDIS_URL (default
#             redis://127.0.0.1:6379/0), with private-instance.appendonly=yes and
#             appendfsync=always (stated: the private instance takes the rest from the server)
#             (the CI gate's configuration: what it acknowledges survives a
#             power loss of the private instance its broker faults run on)
#   postgres  Postgres on loopback, $DURACHK_PG_URL (default
#             postgres://postgres@127.0.0.1:5432/test?sslmode=disable)
#
# On a real target rounds overlap: --parallel $BENCH_PARALLEL (default 8)
# rounds at a time, each in its own namespace (run id), torn down when it
# ends, each of --jobs $BENCH_JOBS (default 1600) sent at --pace $BENCH_PACE
# (default 4: four times the drawn pace). Both real configurations are
# correct ones: every violation there is a false one, counted and printed
# (goal: 0; and at least 10,000 jobs/min).
# Explore runs with --keep-going --no-shrink so that a finding (with extra
# flags such as --sabotage) does not end the measurement; its exit code 1 for
# a violation is accepted here.
#
# Needs bin/durachk (make build). Not a timed test: a measurement. On a shared
# machine run it under the heavy lock:
#   BENCH_TARGETS="redis postgres" BENCH_DURATION=2m flock /tmp/durachk-heavy.lock tools/bench-explore.sh
# Usage: tools/bench-explore.sh [extra durachk explore flags, e.g. --seed 2; given
# after the defaults, they override them]
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${DURACHK:-./bin/durachk}"
duration="${BENCH_DURATION:-10m}"
every="${BENCH_SAMPLE:-30}"
parallel="${BENCH_PARALLEL:-8}"
real_flags=(--parallel "$parallel" --jobs "${BENCH_JOBS:-1600}" --pace "${BENCH_PACE:-4}")
work="$(mktemp -d -t durachk-bench-explore-XXXX)"
trap 'rm -rf "$work"' EXIT
redis="${DURACHK_REDIS_URL:-redis://127.0.0.1:6379/0}"
pg="${DURACHK_PG_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
join() { case "$1" in *\?*) echo "$1&$2" ;; *) echo "$1?$2" ;; esac; }
status=0
summary=()

bench() { # name url goal [explore flags...]
  local name=$1 url=$2 goal=$3
  shift 3
  local out="$work/$name"
  "$bin" explore --target "$url" --duration "$duration" --keep-going --no-shrink --progress "${every}s" \
    --out "$out" "$@" >"$work/$name.stdout" 2>"$work/$name.stderr" &
  local pid=$!
  echo "bench-explore: durachk explore on $name for $duration (pid $pid, load $(cut -d' ' -f1-3 /proc/loadavg)); RSS every ${every}s"
  printf '%8s  %10s  %s\n' elapsed rss_mib progress
  local start rss line code
  start=$(date +%s)
  while kill -0 "$pid" 2>/dev/null; do
    sleep "$every"
    rss=$(awk '/^VmRSS:/ {printf "%.1f", $2/1024}' "/proc/$pid/status" 2>/dev/null || true)
    [ -n "$rss" ] || break
    line=$(grep '^explore: ' "$work/$name.stderr" | tail -1 | cut -c1-90 || true)
    printf '%7ss  %10s  %s\n' "$(( $(date +%s) - start ))" "$rss" "$line"
  done
  set +e
  wait "$pid"
  code=$?
  set -e
  if [ "$code" -ne 0 ] && [ "$code" -ne 1 ] && [ "$code" -ne 2 ]; then
    echo "bench-explore: durachk explore on $name exited $code" >&2
    cat "$work/$name.stderr" >&2
    status=1
    summary+=("$name: durachk explore exited $code")
    return
  fi
  head -1 "$work/$name.stdout"
  local rate rounds viol unknown
  rate=$(grep -o 'jobs in [^ ]* ([0-9]* jobs/min)' "$work/$name.stdout" | grep -o '[0-9]* jobs/min' | grep -o '^[0-9]*')
  # Rounds with a violation and with an unknown verdict, from result.json.
  rounds=$(grep -o '"rounds": [0-9]*' "$out/result.json" | head -1 | grep -o '[0-9]*$')
  viol=$(tr -d ' \n' <"$out/result.json" | grep -o '"verdicts":{[^}]*}' | head -1 | grep -o '"violation":[0-9]*' | grep -o '[0-9]*$' || true)
  unknown=$(tr -d ' \n' <"$out/result.json" | grep -o '"verdicts":{[^}]*}' | head -1 | grep -o '"unknown":[0-9]*' | grep -o '[0-9]*$' || true)
  local met=met
  [ "$rate" -ge "$goal" ] || met="NOT met"
  local s="$name: $rate jobs/min (goal ≥ $goal): $met; $rounds rounds, ${viol:-0} with a violation, ${unknown:-0} unknown"
  if [ "${unknown:-0}" -gt 0 ] && command -v jq >/dev/null; then
    # Why: the first unknown round's reason (result.json keeps that one).
    s="$s (the first: $(jq -r '[.. | objects | select(has("exploration")) | .exploration.unknown // empty | "round \(.round) \(.text)"] | first // "?"' "$out/result.json" | cut -c1-200))"
  fi
  if [ "$name" != mem ] && [ "${viol:-0}" -gt 0 ]; then
    s="$s — false violations on a correct configuration: $(tr -d ' \n' <"$out/result.json" | grep -o '"exploration":{.*' | grep -o '"violations":{[^}]*}' | head -1 || true)"
    grep '^violation' "$work/$name.stdout" || true
  fi
  echo "bench-explore: $s"
  summary+=("$s")
}

for t in ${BENCH_TARGETS:-mem}; do
  case "$t" in
  mem) bench mem mem 50000 "$@" ;;
  redis) bench redis "$(join "$redis" "private-instance.appendonly=yes&private-instance.appendfsync=always")" 10000 "${real_flags[@]}" "$@" ;;
  postgres) bench postgres "$pg" 10000 "${real_flags[@]}" "$@" ;;
  *) echo "bench-explore: unknown target $t (mem, redis or postgres)" >&2; exit 3 ;;
  esac
done
echo "bench-explore: per target, $duration each:"
printf '  %s\n' "${summary[@]}"
exit "$status"
