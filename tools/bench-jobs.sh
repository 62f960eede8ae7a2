#!/usr/bin/env bash
# The largest workload the CLI accepts on the embedded target: durachk run
# --jobs 10000 (or $BENCH_JOBS) over the whole catalogue, at the default
# --parallel and at --parallel 1, each with its wall time and peak resident
# memory (GNU time), and fails unless every contract passes (skips excepted).
# Then the plans with the most idle polling a plan may ask for (workers ×
# limit ÷ poll at its bound, plans.MaxIdlePolls), with theirs.
#
# Needs bin/durachk (make build) and /usr/bin/time. Not a timed test: a
# measurement. Usage: tools/bench-jobs.sh [extra durachk run flags]
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${DURACHK:-./bin/durachk}"
jobs="${BENCH_JOBS:-10000}"
work="$(mktemp -d -t durachk-bench-jobs-XXXX)"
trap 'rm -rf "$work"' EXIT

# measure NAME ARGS...: one durachk run; prints NAME, wall time, peak RSS and
# the verdict line; fails on any exit but 0.
measure() {
  local name="$1" code=0
  shift
  /usr/bin/time -f '%e %M' -o "$work/$name.time" "$bin" run --out "$work/$name" --format json "$@" \
    >"$work/$name.out" 2>"$work/$name.err" || code=$?
  read -r wall rss <"$work/$name.time"
  printf '  %-34s %7.1f s  %6.0f MiB  %s\n' "$name" "$wall" "$(awk -v k="$rss" 'BEGIN { print k / 1024 }')" \
    "$(grep -h 'pass, .* violation' "$work/$name.out" | sed 's/ (seed.*//' || echo '(no summary)')"
  if [ "$code" -ne 0 ]; then
    echo "bench-jobs: durachk run $* exited $code" >&2
    grep -v '^mem .* pass ' "$work/$name.out" | tail -20 >&2
    tail -3 "$work/$name.err" >&2
    exit 1
  fi
}

echo "bench-jobs: the embedded target on $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
measure "run --jobs $jobs" --jobs "$jobs" "$@"
measure "run --jobs $jobs --parallel 1" --jobs "$jobs" --parallel 1 "$@"

# Idle polling at its bound: 64 workers idle 1.7 h, 4 workers a day, one
# worker polling every 10 ms for 5.5 h, each waiting for one job at the end.
plan() {
  printf 'format: durachk.plan/v1\nseed: 1\nworkers: %s\npoll: %s\nlimit: %s\njobs:\n  - id: last\n    at: %s\n' "$@"
}
plan 64 200ms 1h44m 1h43m >"$work/idle-64.yaml"
plan 4 200ms 24h 23h59m >"$work/idle-4.yaml"
plan 1 10ms 5h33m 5h32m >"$work/idle-1.yaml"
for p in idle-64 idle-4 idle-1; do
  measure "plan $p" --plan "$work/$p.yaml"
done
