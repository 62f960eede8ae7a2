#!/usr/bin/env bash
# Fuzz every parser a user feeds durachk, one target after the other (go test
# allows one -fuzz per invocation): target URLs and knobs (internal/targets,
# and mem's at the CLI), durachk.yaml, plan files, baselines, result files as
# report, compare and replay read them (reports, internal/cli), histories and
# final states for durachk check (history, internal/cli).
#
# Each runs a fixed number of inputs, not a time: go1.26's duration
# -fuzztime can fail a clean run with "context deadline exceeded" at its end
# (golang/go#75804), and a count keeps the work the same however loaded the
# machine. The counts take 1 to 8 s each (1.5 s of it building and replaying
# the corpus), 31 s in all on 2 idle cores (.ci/run runs it beside the
# tests, at nice 19); FUZZ_SCALE=10 fuzzes ten times as many inputs. A
# failure leaves its input in the package's testdata/fuzz (go test
# -run=FuzzX/<name> replays it).
set -euo pipefail
cd "$(dirname "$0")/.."
scale="${FUZZ_SCALE:-1}"
log="$(mktemp -t durachk-fuzz-XXXX.log)"
trap 'rm -f "$log"' EXIT
start=$(date +%s)
while read -r name pkg execs; do
  t0=$(date +%s)
  go test -run '^$' -fuzz "^${name}\$" -fuzztime "$((execs * scale))x" -fuzzminimizetime 200x "$pkg" >"$log" 2>&1 || {
    echo "fuzz: $name ($pkg) failed:" >&2
    tail -30 "$log" >&2
    exit 1
  }
  echo "fuzz: $name $pkg: $((execs * scale)) inputs in $(($(date +%s) - t0)) s"
done <<'LIST'
FuzzParse ./internal/targets 10000
FuzzTargetSpec ./internal/cli 5000
FuzzParse ./internal/config 20000
FuzzParse ./plans 20000
FuzzParseBaseline ./reports 20000
FuzzDecodeJSON ./reports 10000
FuzzResultFile ./internal/cli 1000
FuzzRead ./history 50000
FuzzCheck ./internal/cli 1000
LIST
echo "fuzz: every target in $(($(date +%s) - start)) s"
