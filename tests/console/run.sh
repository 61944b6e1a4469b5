#!/bin/sh
# CTest's console_browser (tests/console/CMakeLists.txt): runs console.test.js with node --test,
# or exits 77 (skipped) saying what is missing. $1: node (empty when CMake found none).
# AGENTD_CHROMIUM overrides the browser (default /usr/bin/chromium, Debian's package).
node=$1
chromium=${AGENTD_CHROMIUM:-/usr/bin/chromium}
skip() {
  echo "console_browser: skipped: $*"
  exit 77
}
[ -n "$node" ] || skip "Node.js is missing (scripts/setup.sh installs it)"
"$node" -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)' ||
  skip "puppeteer-core needs Node.js 20 or newer, and $node is $("$node" --version) (scripts/setup.sh installs Debian's)"
[ -d node_modules/puppeteer-core ] || skip "tests/console/node_modules is missing (scripts/setup.sh runs npm ci there)"
[ -x "$chromium" ] || skip "$chromium is missing (Debian's chromium package; scripts/setup.sh installs it)"
[ -n "$AGENTD_PYTHON_DIR" ] && [ -d "$AGENTD_PYTHON_DIR/agentd" ] ||
  skip "the agentd Python module (workload.py uses it) is not built (it needs pybind11-dev)"
exec "$node" --test --test-concurrency=1 --test-reporter=spec console.test.js
