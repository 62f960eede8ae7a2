#!/usr/bin/env bash
# durachk explore on the embedded target, every property checked, for
# $BENCH_DURATION (default 10m): prints the jobs per minute it sustained
# (goal: at least 50,000) and its resident memory sampled every
# $BENCH_SAMPLE seconds (default 30), to show it is flat over the run.
# Explore runs with --keep-going --no-shrink so that a finding (with extra
# flags such as --sabotage) does not end the measurement; its exit code 1 for
# a violation is accepted here.
#
# Needs bin/durachk (make build). Not a timed test: a measurement.
# Usage: tools/bench-explore.sh [extra durachk explore flags, e.g. --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${DURACHK:-./bin/durachk}"
duration="${BENCH_DURATION:-10m}"
every="${BENCH_SAMPLE:-30}"
work="$(mktemp -d -t durachk-bench-explore-XXXX)"
trap 'rm -rf "$work"' EXIT
"$bin" explore --target mem --duration "$duration" --keep-going --no-shrink --progress "${every}s" \
  --out "$work/out" "$@" >"$work/stdout" 2>"$work/stderr" &
pid=$!
echo "bench-explore: durachk explore on mem for $duration (pid $pid); RSS every ${every}s"
printf '%8s  %10s  %s\n' elapsed rss_mib progress
start=$(date +%s)
while kill -0 "$pid" 2>/dev/null; do
  sleep "$every"
  rss=$(awk '/^VmRSS:/ {printf "%.1f", $2/1024}' "/proc/$pid/status" 2>/dev/null || true)
  [ -n "$rss" ] || break
  line=$(grep '^explore: ' "$work/stderr" | tail -1 | cut -c1-90 || true)
  printf '%7ss  %10s  %s\n' "$(( $(date +%s) - start ))" "$rss" "$line"
done
set +e
wait "$pid"
code=$?
set -e
if [ "$code" -ne 0 ] && [ "$code" -ne 1 ]; then
  echo "bench-explore: durachk explore exited $code" >&2
  cat "$work/stderr" >&2
  exit "$code"
fi
cat "$work/stdout" | head -1
peak=$(grep -o 'jobs in [^ ]* ([0-9]* jobs/min)' "$work/stdout" | grep -o '[0-9]* jobs/min' | grep -o '^[0-9]*')
echo "bench-explore: $peak jobs/min (goal ≥ 50000): $([ "$peak" -ge 50000 ] && echo met || echo NOT met)"
