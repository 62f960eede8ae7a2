#!/usr/bin/env bash
# Starts the pinned SQS emulator (fauxqs, see package.json) on a free loopback
# port with this folder's own Node (node_modules/.bin/node, Node 22: fauxqs needs
# >= 22.5; the system's node may be older, which is why this is not `npx fauxqs`).
# Run `npm ci` in this folder first.
#
# It waits until GET /health answers and prints shell assignments to eval:
#   FAUXQS_ENDPOINT=http://127.0.0.1:PORT
#   FAUXQS_PID=PID        (stop it with: kill "$FAUXQS_PID")
#   FAUXQS_LOG=FILE       (the emulator's output; remove it after stopping)
# Usage: eval "$(tools/sqs-emulator/start.sh)"
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
node="$here/node_modules/.bin/node"
if [ ! -x "$node" ]; then
  echo "start.sh: $node is missing: run 'npm ci' in $here first" >&2
  exit 1
fi

free_port() {
  "$node" -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

healthy() {
  "$node" -e 'fetch(process.argv[1]+"/health").then(r=>process.exit(r.ok?0:1),()=>process.exit(1))' "$1"
}

log="$(mktemp -t sqs-emulator-XXXXXX.log)"
for try in 1 2 3; do
  port="$(free_port)"
  # Its own session: the emulator outlives this script and is stopped by pid;
  # stdout/stderr go to the log so that $(start.sh) does not wait for it.
  FAUXQS_PORT="$port" setsid "$node" "$here/server.mjs" >"$log" 2>&1 </dev/null &
  pid=$!
  endpoint="http://127.0.0.1:$port"
  for _ in $(seq 1 100); do
    if ! kill -0 "$pid" 2>/dev/null; then
      break # exited: the port was taken meanwhile, or it failed to start
    fi
    if healthy "$endpoint"; then
      echo "FAUXQS_ENDPOINT=$endpoint"
      echo "FAUXQS_PID=$pid"
      echo "FAUXQS_LOG=$log"
      exit 0
    fi
    sleep 0.1
  done
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  echo "start.sh: attempt $try on port $port failed:" >&2
  cat "$log" >&2
done
rm -f "$log"
exit 1
