#!/usr/bin/env bash
# The README's test command (`make test`): every package's tests, against this
# machine's services. Where they were not set up by the caller (.ci/run sets
# them up once for the tests and the gates, and says so with
# DURACHK_SERVICES_READY=1), it finds or starts them as .ci/run does
# (.ci/services.sh: the shared Postgres, Redis, RabbitMQ, NATS and MariaDB)
# and installs and starts what the tests need besides (.ci/setup.d: the SQS
# emulator, Chromium, nftables, the Node.js drivers' packages, ...), stopping
# what it started at the end.
#
# The go test output is read back by tools/testreport, which prints it as go
# test does and then counts the skipped tests by reason: a run that skipped
# the real-broker tests says so. DURACHK_REQUIRE_SERVICES=1 (.ci/run) makes a
# test skipped for an unset service URL a failure.
#
# Usage: tools/test.sh [PACKAGES AT A TIME] [PACKAGE ...]   (default 4, ./...)
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "test: $*" >&2; }
p="${1:-4}"
shift || true
[ "$#" -gt 0 ] || set -- ./...
ci_cleanup=()
trap 'for c in "${ci_cleanup[@]}"; do eval "$c" || true; done' EXIT
if [ -z "${DURACHK_SERVICES_READY:-}" ]; then
  # shellcheck source=.ci/services.sh
  source .ci/services.sh
  for f in .ci/setup.d/*.sh; do
    [ -e "$f" ] || continue
    # shellcheck source=/dev/null
    source "$f"
  done
fi
report="$(mktemp -t durachk-testreport-XXXX)"
ci_cleanup+=("rm -f '$report'")
go build -o "$report" ./tools/testreport
go test -json -count=1 -p "$p" "$@" | "$report" ${DURACHK_REQUIRE_SERVICES:+-require-services}
