#!/usr/bin/env bash
# durachk for the job: built from the checkout this script is in (the
# action's files, at the ref the workflow's `uses:` names) into
# $RUNNER_TEMP/durachk/bin, which the job's later steps find on their PATH.
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${RUNNER_TEMP:?}/durachk/bin"
mkdir -p "$bin"
(cd "$src" && go build -o "$bin/durachk" ./cmd/durachk)
echo "$bin" >>"${GITHUB_PATH:?}"
"$bin/durachk" version
