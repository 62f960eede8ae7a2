# Sourced by .ci/run (bash, set -euo pipefail, from the repo root; `log` and the
# array `ci_cleanup` exist). Installs the pinned SQS emulator (fauxqs 2.4.1 on
# the npm package node 22.23.3, tools/sqs-emulator/package-lock.json) with
# `npm ci`, starts it on a free loopback port, hands its endpoint to the tests
# as DURACHK_SQS_URL and registers its stop in ci_cleanup.
if ! command -v npm >/dev/null 2>&1; then
  log "sqs emulator: npm is not installed; the SQS tests will skip"
else
  log "sqs emulator: npm ci in tools/sqs-emulator"
  (cd tools/sqs-emulator && npm ci --no-audit --no-fund --loglevel=error >&2)
  sqs_emulator_env="$(tools/sqs-emulator/start.sh)"
  eval "$sqs_emulator_env"
  unset sqs_emulator_env
  # Stop by pid, then remove its log.
  ci_cleanup+=("kill $FAUXQS_PID 2>/dev/null; rm -f '$FAUXQS_LOG'")
  export DURACHK_SQS_URL="sqs://${FAUXQS_ENDPOINT#http://}?region=us-east-1&endpoint-kind=fauxqs"
  log "sqs emulator: fauxqs (pid $FAUXQS_PID) at $FAUXQS_ENDPOINT; DURACHK_SQS_URL=$DURACHK_SQS_URL"
fi
