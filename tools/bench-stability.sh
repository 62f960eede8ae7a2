#!/usr/bin/env bash
# bench-stability.sh N: runs the CI gates N times in a row, exactly as .ci/run
# runs them (.ci/gates.sh: .ci/durachk.yaml against .ci/baseline.json, then
# .ci/clusters.yaml against .ci/clusters-baseline.json), and prints every
# target × contract whose verdict changed: not the same in all N runs, or other
# than its baseline in any run, with what each run gave. A gate is only worth
# gating on when this prints "0 changed verdicts".
#
# Exit 0 when no verdict changed, 1 when one did, 3 on a bad argument. The
# gates' output goes to a log per run; the logs and reports of every run are
# kept when a verdict changed (the path is printed).
#
# Needs what .ci/run needs: the shared services (brought up and their URLs
# exported the same way, .ci/services.sh) and the SQS emulator (started as
# .ci/setup.d/20-sqs-emulator.sh does when DURACHK_SQS_URL is unset), jq. It
# builds bin/durachk. Heavy: on a shared machine run it under the lock, e.g.
#   flock /tmp/durachk-heavy.lock tools/bench-stability.sh 5
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-}"
if ! [[ "$n" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: tools/bench-stability.sh N (N ≥ 1 runs of the CI gates)" >&2
  exit 3
fi
command -v jq >/dev/null || { echo "bench-stability: jq is not installed" >&2; exit 3; }

log() { echo "bench-stability: $*" >&2; }
# shellcheck source=.ci/services.sh
source .ci/services.sh
ci_cleanup=()
work="$(mktemp -d -t durachk-stability-XXXX)"
keep=""
on_exit() {
  for c in "${ci_cleanup[@]}"; do eval "$c" || true; done
  [ -n "$keep" ] || rm -rf "$work"
}
trap on_exit EXIT
if [ -z "${DURACHK_SQS_URL:-}" ]; then
  # shellcheck source=.ci/setup.d/20-sqs-emulator.sh
  source .ci/setup.d/20-sqs-emulator.sh
fi
make -s build
# shellcheck source=.ci/gates.sh
source .ci/gates.sh

# verdicts FILE: "target<TAB>contract<TAB>verdict" per result of a result.json.
verdicts() { jq -r '.results[] | select((.sabotage // "") == "") | [.target, .contract, .verdict] | @tsv' "$1"; }

# all.tsv: "run<TAB>target<TAB>contract<TAB>verdict", run 0 the baselines.
jq -r 'to_entries[] | .key as $t | .value | to_entries[] | ["0", $t, .key, .value] | @tsv' \
  .ci/baseline.json .ci/clusters-baseline.json >"$work/all.tsv"
for i in $(seq 1 "$n"); do
  s=$SECONDS
  rc=0
  ci_gates "$work/run-$i" >"$work/run-$i.log" 2>&1 || rc=$?
  log "run $i of $n: gates exit $rc in $((SECONDS - s)) s (load $(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo '?')); $(grep -h '^bench-stability: .*gate: exit' "$work/run-$i.log" | sed 's/^bench-stability: //' | paste -sd ';' | sed 's/;/; /g')"
  for g in gate clusters; do
    if [ -f "$work/run-$i/$g/result.json" ]; then
      verdicts "$work/run-$i/$g/result.json" | sed "s/^/$i\t/" >>"$work/all.tsv"
    fi
  done
done

# Every target × contract of the baselines or of any run whose verdict is not
# the baseline's in every run ("-": none, e.g. a run stopped before it), or,
# where no baseline names it, not the same in every run.
awk -F'\t' -v n="$n" '
  { k = $2 "\t" $3; if (!(k in seen)) { seen[k] = 1; keys[++nk] = k }; got[k, $1] = $4 }
  END {
    changed = 0
    for (j = 1; j <= nk; j++) {
      k = keys[j]; b = ((k, 0) in got) ? got[k, 0] : "-"; line = ""; diff = 0
      # Not in a baseline (a cluster contract skipped on a single broker):
      # the same in every run as in the first.
      ref = (b != "-") ? b : (((k, 1) in got) ? got[k, 1] : "-")
      for (i = 1; i <= n; i++) {
        v = ((k, i) in got) ? got[k, i] : "-"
        line = line " " v
        if (v != ref) diff = 1
      }
      if (diff) {
        split(k, kc, "\t")
        printf "changed: %s × %s: baseline %s; runs:%s\n", kc[1], kc[2], b, line
        changed++
      }
    }
    printf "%d changed verdicts in %d runs of both gates (%d target × contract verdicts each)\n", changed, n, nk
    exit changed > 0
  }' "$work/all.tsv" || {
  keep=1
  echo "the reports of every run: $work"
  exit 1
}
