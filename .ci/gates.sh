# Sourced by .ci/run and tools/bench-stability.sh (bash, from the repo root;
# `log` exists, bin/durachk is built). ci_gates DIR runs the CI gates, the
# verdicts of every real target against .ci/baseline.json and of one private
# cluster per broker kind against .ci/clusters-baseline.json, writing each
# run's reports into DIR/gate and DIR/clusters. A gate runs only where all of
# its targets are set up (else it says so). It returns 0 when every gate that
# ran matched its baseline, else the first failing gate's exit code. The
# array ci_gate_flags, if set, is passed to both runs (e.g. --parallel 4).

# ci_show_unknown DIR: for every unknown verdict of the run in DIR, the end
# of its history, so that a red CI run's log (its directory is removed) says
# what the run was doing when it gave up.
ci_show_unknown() {
  command -v jq >/dev/null || return 0
  [ -f "$1/result.json" ] || return 0
  local name f
  jq -r '.results[]? | select(.verdict == "unknown") | .target + "_" + .contract' "$1/result.json" 2>/dev/null | while read -r name; do
    for f in "$1"/histories/*-"$name".jsonl; do
      [ -f "$f" ] || continue
      echo "ci: $name unknown: the last 80 of its $(wc -l <"$f") history lines ($(basename "$f")):"
      tail -n 80 "$f"
    done
  done
  return 0
}

# ci_left_behind CONFIG DIR: what the runs of the gate in DIR left on its
# targets and on this machine — `durachk cleanup` narrowed to the run id of
# every execution of the gate (result.json's wall.results[].run_ids) prints
# one line per thing it removes — and 1 when it removed anything. (The tests
# that ran the whole catalogue on one broker checked this for theirs; the
# gate runs it on every target.)
ci_left_behind() {
  local cfg="$1" dir="$2" ids=() out removed
  command -v jq >/dev/null || { log "$dir: jq missing, what the gate left is not checked"; return 0; }
  [ -f "$dir/result.json" ] || return 0
  mapfile -t ids < <(jq -r '.wall.run_id // empty, (.wall.results[]?.run_ids[]? // empty)' "$dir/result.json" | sort -u)
  [ "${#ids[@]}" -gt 0 ] || { log "$dir: no run ids in result.json"; return 1; }
  out="$(./bin/durachk cleanup -c "$cfg" $(printf -- '--run %s ' "${ids[@]}") 2>&1)" || { echo "$out" >&2; return 1; }
  removed="$(echo "$out" | grep -v -E ': (nothing left behind|the runs of |run [a-z0-9]+ is live)|^mem: nothing' || true)"
  if [ -n "$removed" ]; then
    log "the gate's runs ($cfg) left what cleanup removed:"
    echo "$removed" >&2
    return 1
  fi
  log "the gate's runs ($cfg, ${#ids[@]} run ids) left nothing behind"
}

ci_gates() {
  local dir="$1" rc=0 s
  mkdir -p "$dir"
  if [ -n "${DURACHK_PG_URL:-}" ] && [ -n "${DURACHK_REDIS_URL:-}" ] && [ -n "${DURACHK_SQS_URL:-}" ] && [ -n "${DURACHK_AMQP_URL:-}" ] && [ -n "${DURACHK_NATS_URL:-}" ] && [ -n "${DURACHK_MYSQL_URL:-}" ]; then
    s=$SECONDS
    ./bin/durachk run -c .ci/durachk.yaml --baseline .ci/baseline.json --out "$dir/gate" ${ci_gate_flags[@]+"${ci_gate_flags[@]}"} || rc=$?
    log "gate: exit $rc in $((SECONDS - s)) s"
    [ "$rc" = 0 ] || ci_show_unknown "$dir/gate"
    ci_left_behind .ci/durachk.yaml "$dir/gate" || { [ "$rc" != 0 ] || rc=1; }
  else
    log "gate skipped: not every real target is set up on this machine"
  fi
  # One private cluster per broker kind, each node a child of durachk on its
  # own loopback address.
  if [ -n "${DURACHK_PG_URL:-}" ] && [ -n "${DURACHK_REDIS_URL:-}" ] && [ -n "${DURACHK_AMQP_URL:-}" ] && [ -n "${DURACHK_MYSQL_URL:-}" ]; then
    local crc=0
    s=$SECONDS
    ./bin/durachk run -c .ci/clusters.yaml --contract durability.failover --baseline .ci/clusters-baseline.json --out "$dir/clusters" ${ci_gate_flags[@]+"${ci_gate_flags[@]}"} || crc=$?
    log "cluster gate: exit $crc in $((SECONDS - s)) s"
    [ "$crc" = 0 ] || ci_show_unknown "$dir/clusters"
    ci_left_behind .ci/clusters.yaml "$dir/clusters" || { [ "$crc" != 0 ] || crc=1; }
    [ "$rc" != 0 ] || rc=$crc
  else
    log "cluster gate skipped: not every real target is set up on this machine"
  fi
  return "$rc"
}
