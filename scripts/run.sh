#!/usr/bin/env bash
# Sets everything up, builds, starts as_server on the default config (config/server.yaml), and
# runs the distributed demo against it: 5 web agents whose replies take 5 s each, run
# sequentially in-process (~25 s) and then distributed in child mode and on that server (~5 s).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
PORT=${PORT:-12310}

"$BUILD_DIR/bin/as_server" --config config/server.yaml --port "$PORT" \
  --plugin-dir "$BUILD_DIR/plugins" --model-config-path config/models.yaml >"$BUILD_DIR/as_server.out" &
SERVER_PID=$!
trap 'kill -TERM $SERVER_PID 2>/dev/null; wait $SERVER_PID 2>/dev/null || true' EXIT
# Wait for the ready line (the server prints it once it listens).
for _ in $(seq 1 100); do
  grep -q "as_server ready" "$BUILD_DIR/as_server.out" 2>/dev/null && break
  kill -0 $SERVER_PID 2>/dev/null || { echo "run: as_server failed to start" >&2; exit 1; }
  sleep 0.1
done
cat "$BUILD_DIR/as_server.out"
"$BUILD_DIR/bin/distributed_demo" --connect "127.0.0.1:$PORT" --plugin-dir "$BUILD_DIR/plugins" "$@"
