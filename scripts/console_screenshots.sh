#!/usr/bin/env bash
# Makes the README's console screenshots (apps/agentd-gateway/console/screenshots/*.png) from the
# README's own scenario: `agentctl up 2` with a gateway (--console-send, and a token so that the
# login form can be shown), examples/python/console_demo.py working on the servers, and after
# WAIT_SECONDS of it (the charts need history) tests/console/screenshots.js photographs each view.
# Everything runs in a private temporary state directory ($XDG_RUNTIME_DIR and $AGENTD_STATE_DIR
# point there), so `agentctl up`/`down` never see the servers you run yourself; `agentctl down
# --remove-logs` runs however the script ends. Takes about WAIT_SECONDS + 20 s.
#   scripts/console_screenshots.sh                      build/, into the README's screenshots
#   scripts/console_screenshots.sh build-asan /tmp/shots   another build, another directory
#   WAIT_SECONDS=90 DEMO_SECONDS=120 PORT=8080 scripts/console_screenshots.sh
# Needs what the console's browser test needs (scripts/setup.sh): Node 20+, tests/console's npm
# packages, /usr/bin/chromium (or $AGENTD_CHROMIUM), and the Python module built in BUILD/python.
# The PNGs are copied to OUTDIR only once every one of them was taken.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
OUT=${2:-apps/agentd-gateway/console/screenshots}
WAIT_SECONDS=${WAIT_SECONDS:-45}
DEMO_SECONDS=${DEMO_SECONDS:-60}
PORT=${PORT:-0}  # 0: the gateway takes a free port (agentctl ps says which)

fail() {
  echo "console_screenshots: $*" >&2
  exit 1
}
[ -x "$BUILD/bin/agentctl" ] || fail "$BUILD/bin/agentctl is missing (scripts/build.sh, or name the build: $0 BUILD_DIR)"
[ -d "$BUILD/python/agentd" ] || fail "the Python module is not built in $BUILD/python (it needs pybind11-dev)"
command -v node >/dev/null || fail "node is missing (scripts/setup.sh installs it)"
[ -d tests/console/node_modules/puppeteer-core ] || fail "tests/console/node_modules is missing (scripts/setup.sh runs npm ci there)"
[ -x "${AGENTD_CHROMIUM:-/usr/bin/chromium}" ] || fail "${AGENTD_CHROMIUM:-/usr/bin/chromium} is missing (Debian's chromium)"
BUILD=$(cd "$BUILD" && pwd)

start=$SECONDS
TMP=$(mktemp -d "${TMPDIR:-/tmp}/agentd-console-shots.XXXXXX")
export XDG_RUNTIME_DIR=$TMP AGENTD_STATE_DIR=$TMP/agentd
export PATH=$BUILD/bin:$PATH  # console_demo.py asks this agentctl which servers run
unset AGENTD_HOST AGENTD_PORT AGENTD_TOKEN AGENTD_GATEWAY AGENTD_AS_SERVER
demo=
cleanup() {
  if [ -n "$demo" ] && kill -0 "$demo" 2>/dev/null; then
    kill -TERM "$demo" 2>/dev/null || true
    wait "$demo" 2>/dev/null || true
  fi
  agentctl down --remove-logs >/dev/null 2>&1 || echo "console_screenshots: agentctl down failed (state: $AGENTD_STATE_DIR)" >&2
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The gateway's token: login.png is its login form, then screenshots.js logs in with it.
(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$TMP/token")
agentctl up 2 --gateway "127.0.0.1:$PORT" --gateway-arg=--console-send --gateway-arg="--token-file=$TMP/token"
url=$(agentctl ps --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["gateways"][0]["url"])')

# A sanitized build's Python module needs its sanitizer runtimes preloaded into python3 (as the
# tests do); only python3 gets them, never node or chromium.
preload=$(ldd "$BUILD"/python/agentd/_agentd*.so | awk '/libclang_rt\.asan|libasan\.so|libubsan\.so/ { print $3 }' | paste -sd: -)
env ${preload:+LD_PRELOAD="$preload" ASAN_OPTIONS=detect_leaks=0} PYTHONPATH="$BUILD/python" PYTHONDONTWRITEBYTECODE=1 \
  python3 examples/python/console_demo.py --seconds "$DEMO_SECONDS" >"$TMP/demo.log" 2>&1 &
demo=$!
for _ in $(seq 1 300); do
  grep -q "working on" "$TMP/demo.log" && break
  kill -0 "$demo" 2>/dev/null || fail "console_demo.py stopped: $(cat "$TMP/demo.log")"
  sleep 0.1
done
grep -q "working on" "$TMP/demo.log" || fail "console_demo.py did not start in 30 s: $(cat "$TMP/demo.log")"
cat "$TMP/demo.log"
echo "console_screenshots: the console is at $url/console; screenshots in $WAIT_SECONDS s"
sleep "$WAIT_SECONDS"
kill -0 "$demo" 2>/dev/null || fail "console_demo.py stopped early (DEMO_SECONDS=$DEMO_SECONDS, WAIT_SECONDS=$WAIT_SECONDS): $(cat "$TMP/demo.log")"

CONSOLE_TOKEN=$(cat "$TMP/token") node tests/console/screenshots.js "$url" "$TMP/shots"
mkdir -p "$OUT"
cp "$TMP"/shots/{cluster,agents,agent,calls,models,login}.png "$OUT"/
echo "console_screenshots: cluster, agents, agent, calls, models, login .png in $OUT ($((SECONDS - start)) s)"
