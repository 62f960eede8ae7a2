# Sourced by .ci/run (bash, set -euo pipefail, from the repo root; `log` and the
# array `ci_cleanup` exist). Installs the pinned SQS emulator (fauxqs 2.4.1 on
# the npm package node 22.23.3, tools/sqs-emulator/package-lock.json) with
# `npm ci`, starts it on a free loopback port, hands its endpoint to the tests
# as DURACHK_SQS_URL and registers its stop in ci_cleanup.
#
# The installation is kept outside the clone, keyed by the lock file's hash
# ($DURACHK_CI_CACHE, default ~/.cache/durachk-ci): a clean clone links its
# node_modules to it instead of running npm ci again (10 s and 228 MB each
# time). It is built in a directory of its own and renamed into place, so a
# run killed half-way or another clone installing at the same time never
# leaves a half-installed one behind.
if ! command -v npm >/dev/null 2>&1; then
  log "sqs emulator: npm is not installed; the SQS tests will skip"
else
  sqs_dir=tools/sqs-emulator
  sqs_key="$(sha256sum "$sqs_dir/package-lock.json" | cut -c1-16)"
  sqs_cache="${DURACHK_CI_CACHE:-${HOME:-/tmp}/.cache/durachk-ci}/sqs-emulator-$sqs_key"
  if [ ! -x "$sqs_cache/node_modules/.bin/node" ]; then
    log "sqs emulator: npm ci into $sqs_cache"
    mkdir -p "$(dirname "$sqs_cache")"
    sqs_tmp="$(mktemp -d "$sqs_cache.tmp-XXXX")"
    cp "$sqs_dir/package.json" "$sqs_dir/package-lock.json" "$sqs_tmp/"
    (cd "$sqs_tmp" && npm ci --no-audit --no-fund --loglevel=error >&2)
    [ -x "$sqs_cache/node_modules/.bin/node" ] || rm -rf "$sqs_cache" # a broken one
    mv -T "$sqs_tmp" "$sqs_cache" 2>/dev/null || rm -rf "$sqs_tmp" # another clone was first
  else
    log "sqs emulator: installed at $sqs_cache"
  fi
  if [ ! -e "$sqs_dir/node_modules" ]; then
    ln -s "$sqs_cache/node_modules" "$sqs_dir/node_modules"
  fi
  unset sqs_dir sqs_key sqs_cache sqs_tmp
  sqs_emulator_env="$(tools/sqs-emulator/start.sh)"
  eval "$sqs_emulator_env"
  unset sqs_emulator_env
  # Stop by pid, then remove its log.
  ci_cleanup+=("kill $FAUXQS_PID 2>/dev/null; rm -f '$FAUXQS_LOG'")
  export DURACHK_SQS_URL="sqs://${FAUXQS_ENDPOINT#http://}?region=us-east-1&endpoint-kind=fauxqs"
  log "sqs emulator: fauxqs (pid $FAUXQS_PID) at $FAUXQS_ENDPOINT; DURACHK_SQS_URL=$DURACHK_SQS_URL"
fi
