#!/usr/bin/env bash
# Configures and builds agentd with CMake and Ninja.
#   scripts/build.sh                  the normal build: gcc, RelWithDebInfo, into build/
#   SANITIZE=ON scripts/build.sh      clang with AddressSanitizer, UBSan and libFuzzer's coverage,
#                                     into build-asan/: the whole suite and the fuzz targets
#   SANITIZE=thread scripts/build.sh  clang with ThreadSanitizer into build-tsan/: the suite
#                                     without the Python module (python3 cannot load it)
#   BUILD_TYPE=Debug BUILD_DIR=build-debug scripts/build.sh    another type or directory
#   TARGETS="unit_tests as_server" scripts/build.sh             only these targets
#   UNITY=OFF SANITIZE=ON scripts/build.sh   a sanitized tree that compiles each source alone
#                                     instead of in batches of eight (unity build, the default for
#                                     sanitized trees): a longer full build, a shorter rebuild after
#                                     editing one file. The normal build is one source at a time
#                                     unless UNITY=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${SANITIZE:-OFF}" in
  ON|on|1|yes|true) SANITIZE=ON ;;
  thread) SANITIZE=thread ;;
  *) SANITIZE=OFF ;;
esac
if [ "$SANITIZE" = thread ]; then
  BUILD_DIR=${BUILD_DIR:-build-tsan}
  COMPILERS=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DAGENTD_TSAN=ON -DAGENTD_BUILD_PYTHON=OFF)
elif [ "$SANITIZE" = ON ]; then
  BUILD_DIR=${BUILD_DIR:-build-asan}
  # clang builds the sanitized tree several times faster than gcc (whose UBSan at -O2 is slow),
  # and libFuzzer needs it: one build serves the sanitized suite and the fuzz targets.
  COMPILERS=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DAGENTD_FUZZ=ON)
else
  BUILD_DIR=${BUILD_DIR:-build}
  COMPILERS=()
fi
# A unity build for sanitized trees (CMakeLists.txt, AGENTD_UNITY); the normal build compiles each
# source alone, as the binaries users run have always been compiled.
if [ "$SANITIZE" = OFF ]; then UNITY=${UNITY:-OFF}; else UNITY=${UNITY:-ON}; fi
BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo}
JOBS=${JOBS:-$(nproc)}
# ccache: paths under the checkout are hashed relative to it and the build directory is not
# hashed; the precompiled header's path, passed after -Xclang, is hashed as given, so a rebuild or
# a clean clone at the same path reuses the cache, a clone elsewhere does not. The sloppiness lets
# it cache the compiles that use a precompiled header.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
# A full disk makes the compiler fail without a word (ninja shows only "FAILED"): say so first.
# A new build tree takes about 3 GiB (sanitized) to 7 GiB (RelWithDebInfo), ccache up to 5 GiB
# more; a tree already built grows little when it is built again (CI's fuzz stage builds the
# fuzz targets in the tree its suite ran in), so it needs 1 GiB.
if [ -f "$BUILD_DIR/build.ninja" ]; then need_gib=1 what="a build in the existing $BUILD_DIR/"
else need_gib=4 what="a new build tree ($BUILD_DIR/)"; fi
free_kib=$(df -Pk . | awk 'NR == 2 { print $4 }')
if [ "${free_kib:-0}" -lt $((need_gib * 1024 * 1024)) ]; then
  echo "build: only $((free_kib / 1024)) MiB free on $(df -P . | awk 'NR == 2 { print $6 }');" \
    "$what needs about $need_gib GiB. Free some space (old build trees, ccache -C) and run it again." >&2
  exit 1
fi
cmake -S . -B "$BUILD_DIR" -G Ninja \
  -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
  -DAGENTD_UNITY="$UNITY" \
  "${COMPILERS[@]}" >/dev/null
# shellcheck disable=SC2086  # TARGETS is a list
cmake --build "$BUILD_DIR" -j "$JOBS" ${TARGETS:+--target $TARGETS}
