#!/usr/bin/env bash
# Sets everything up, builds, and runs the whole test suite (unit + integration) with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
cd "$BUILD_DIR"
ctest --output-on-failure -j "${TEST_JOBS:-2}" "$@"
