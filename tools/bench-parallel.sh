#!/usr/bin/env bash
# The CI gate's four brokers (PostgreSQL, Redis, RabbitMQ quorum, SQS FIFO: the
# entries of .ci/durachk.yaml copied below) run twice, side by side: one
# contract at a time (--parallel 1), then at durachk's default parallelism (or
# --parallel $BENCH_PARALLEL). Prints both wall times and their ratio, and
# fails if any verdict differs: the second run takes the first one's
# result.json as its baseline.
#
# Needs bin/durachk (make build) and DURACHK_PG_URL, DURACHK_REDIS_URL,
# DURACHK_AMQP_URL, DURACHK_SQS_URL (.ci/run sets them; the README says how).
# Usage: tools/bench-parallel.sh [extra durachk run flags, e.g. --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${DURACHK:-./bin/durachk}"
for v in DURACHK_PG_URL DURACHK_REDIS_URL DURACHK_AMQP_URL DURACHK_SQS_URL; do
  if [ -z "${!v:-}" ]; then
    echo "bench-parallel: $v is not set" >&2
    exit 3
  fi
done
work="$(mktemp -d -t durachk-bench-XXXX)"
trap 'rm -rf "$work"' EXIT
cat >"$work/gate.yaml" <<'YAML'
seed: 1
targets:
  - name: postgres
    url: ${DURACHK_PG_URL}
  - name: redis
    url: ${DURACHK_REDIS_URL}
    private-instance: {appendonly: "yes", appendfsync: always}
  - name: sqs-fifo
    url: ${DURACHK_SQS_URL}
    fifo: true
  - name: rabbit-quorum
    url: ${DURACHK_AMQP_URL}
    queue-arguments: {x-queue-type: quorum, x-delivery-limit: 5, x-dead-letter-exchange: dlx}
YAML

now() { date +%s.%N; }
# run NAME FLAGS...: one gate run; its wall time goes to $work/NAME.wall.
run() {
  local name="$1"
  shift
  local t0 t1 code=0
  t0="$(now)"
  "$bin" run -c "$work/gate.yaml" --out "$work/$name" --format json "$@" >"$work/$name.out" 2>"$work/$name.err" || code=$?
  t1="$(now)"
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f\n", b - a }' >"$work/$name.wall"
  return "$code"
}

code=0
run sequential --parallel 1 "$@" || code=$?
if [ "$code" -ge 3 ]; then
  echo "bench-parallel: the sequential run failed (exit $code):" >&2
  tail -5 "$work/sequential.err" >&2
  exit 3
fi
par_flags=()
if [ -n "${BENCH_PARALLEL:-}" ]; then
  par_flags=(--parallel "$BENCH_PARALLEL")
fi
code=0
run parallel "${par_flags[@]}" --baseline "$work/sequential/result.json" "$@" || code=$?

seq_wall="$(cat "$work/sequential.wall")"
par_wall="$(cat "$work/parallel.wall")"
echo "gate over postgres, redis, rabbit-quorum, sqs-fifo on $(nproc) cores:"
echo "  --parallel 1: ${seq_wall} s"
echo "  --parallel ${BENCH_PARALLEL:-default}: ${par_wall} s"
awk -v a="$seq_wall" -v b="$par_wall" 'BEGIN { printf "  ratio: %.2fx faster\n", a / b }'
grep -h "pass, .* violation" "$work/sequential.out" "$work/parallel.out" | sed 's/^/  verdicts: /' || true
case "$code" in
  0) echo "  verdicts identical" ;;
  1)
    echo "bench-parallel: verdicts differ between the two runs:" >&2
    grep -A100 "^baseline:" "$work/parallel.out" >&2 || true
    # Kept for a look: real brokers are not deterministic (see --trials).
    keep="$(mktemp -d -t durachk-bench-kept-XXXX)"
    cp -r "$work/sequential" "$work/parallel" "$keep/"
    echo "bench-parallel: both runs kept in $keep (durachk report $keep/parallel/result.json --format text)" >&2
    exit 1
    ;;
  *)
    echo "bench-parallel: the parallel run failed (exit $code):" >&2
    tail -5 "$work/parallel.err" >&2
    exit "$code"
    ;;
esac
