#!/usr/bin/env bash
# Configures and builds agentd into ${BUILD_DIR:-build} (RelWithDebInfo by default).
#   BUILD_TYPE=Debug scripts/build.sh        another build type
#   SANITIZE=1 BUILD_DIR=build-asan scripts/build.sh   AddressSanitizer + UBSan
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja \
  -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
  -DAGENTD_SANITIZE="${SANITIZE:-OFF}" >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
