#!/bin/sh
# CTest's console_browser (tests/console/CMakeLists.txt): runs console.test.js with node --test,
# or exits 77 (skipped) saying what is missing. $1: node (empty when CMake found none).
# AGENTD_CHROMIUM overrides the browser (default /usr/bin/chromium, Debian's package).
node=$1
chromium=${AGENTD_CHROMIUM:-/usr/bin/chromium}
skip() {
  echo "console_browser: skipped: $* (scripts/setup.sh installs it)"
  exit 77
}
[ -n "$node" ] || skip "Node.js is missing"
"$node" -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)' ||
  skip "puppeteer-core needs Node.js 20 or newer, and $node is $("$node" --version)"
[ -d node_modules/puppeteer-core ] || skip "tests/console/node_modules (npm ci there) is missing"
[ -x "$chromium" ] || skip "$chromium (Debian's chromium package) is missing"
[ -n "$AGENTD_PYTHON_DIR" ] && [ -d "$AGENTD_PYTHON_DIR/agentd" ] ||
  skip "the agentd Python module (it runs the workload) is not built"
exec "$node" --test --test-concurrency=1 --test-reporter=spec console.test.js
