#!/usr/bin/env bash
# The gate: durachk run -c $CONFIG --baseline $BASELINE --out $OUT $ARGS. Its
# exit code is durachk's: 0 every verdict the expected one, 1 a difference
# (one line each: `redis: durability.power-loss pass → violation`), 2 a run
# that could not say, 3 a configuration or infrastructure error.
#
# No baseline yet: the run writes one from what it measured
# (--update-baseline creates it once the run is complete; a partial run
# writes nothing) and passes; commit that file and later runs gate on it.
#
# durachk runs as root (sudo where the job is not): durability.power-loss
# mounts a FUSE file system under its private broker, and private clusters
# cut links with nftables. What it writes is handed back to the job's user.
set -euo pipefail
: "${CONFIG:?}" "${BASELINE:?}" "${OUT:?}"
args=(run -c "$CONFIG" --baseline "$BASELINE" --out "$OUT")
first=
if [ ! -e "$BASELINE" ]; then
  first=1
  args+=(--update-baseline)
fi
read -r -a extra <<<"${ARGS:-}"
durachk=(durachk)
if [ "$(id -u)" != 0 ]; then
  durachk=(sudo -E env "PATH=$PATH" durachk)
fi
rc=0
"${durachk[@]}" "${args[@]}" ${extra[@]+"${extra[@]}"} || rc=$?
if [ "$(id -u)" != 0 ]; then
  sudo chown -R "$(id -u):$(id -g)" "$OUT" 2>/dev/null || true
  [ ! -e "$BASELINE" ] || sudo chown "$(id -u):$(id -g)" "$BASELINE"
fi
if [ -n "$first" ] && [ -e "$BASELINE" ]; then
  msg="durachk: no baseline was committed: this run wrote $BASELINE from its verdicts; commit it (it is in the uploaded evidence) and later runs gate on it"
  echo "$msg"
  [ -z "${GITHUB_STEP_SUMMARY:-}" ] || printf '\n%s\n' "$msg" >>"$GITHUB_STEP_SUMMARY"
fi
exit "$rc"
