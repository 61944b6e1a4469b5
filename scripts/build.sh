#!/usr/bin/env bash
# Configures and builds agentd into ${BUILD_DIR:-build} (RelWithDebInfo by default).
#   BUILD_TYPE=Debug scripts/build.sh        another build type
#   SANITIZE=1 BUILD_DIR=build-asan scripts/build.sh   AddressSanitizer + UBSan
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo}
JOBS=${JOBS:-$(nproc)}
# ccache: paths under the checkout are hashed relative to it and the build directory is not
# hashed, so another clone (CI's, a worktree) with the same BUILD_DIR name reuses the cache.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
cmake -S . -B "$BUILD_DIR" -G Ninja \
  -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
  -DAGENTD_SANITIZE="${SANITIZE:-OFF}" >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
