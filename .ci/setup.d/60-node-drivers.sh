# Sourced by .ci/run and tools/test.sh (bash, set -euo pipefail, from the repo
# root; `log` exists). Installs the pinned packages of every Node.js driver
# (drivers/*/package-lock.json: BullMQ, pg-boss) with `npm ci`, from npm's own
# cache where it has them (--prefer-offline: a clean clone downloads nothing
# twice). A driver whose node_modules was installed from the same lock file
# (its hash in node_modules/.durachk-lock) is left as it is: a second run costs
# nothing. Without npm the drivers' tests skip, saying they need Node.js, and
# CI (DURACHK_REQUIRE_SERVICES) fails on such a skip.
if ! command -v npm >/dev/null 2>&1; then
  log "node drivers: npm is not installed; the BullMQ and pg-boss tests will skip"
else
  for node_lock in drivers/*/package-lock.json; do
    [ -e "$node_lock" ] || continue
    node_dir="$(dirname "$node_lock")"
    node_key="$(sha256sum "$node_lock" | cut -c1-16)"
    if [ "$(cat "$node_dir/node_modules/.durachk-lock" 2>/dev/null)" = "$node_key" ]; then
      continue
    fi
    node_s=$SECONDS
    if (cd "$node_dir" && npm ci --prefer-offline --no-audit --no-fund --loglevel=error >/dev/null); then
      echo "$node_key" >"$node_dir/node_modules/.durachk-lock"
      log "node drivers: npm ci in $node_dir ($((SECONDS - node_s)) s)"
    else
      log "node drivers: npm ci in $node_dir failed; its tests will skip"
    fi
  done
  unset node_lock node_dir node_key node_s
fi
