#!/usr/bin/env bash
# Sets everything up, builds, and runs every test: the whole suite (unit, integration, the
# programs, Python, the install) under AddressSanitizer and UBSan, with the servers the tests
# start sanitized too, then each libFuzzer target for FUZZ_SECONDS (default 20) and the format
# check. One clang build in build-asan/ serves all of it. Prints each stage's time.
#   SANITIZE=OFF scripts/test.sh      the suite on the normal build (build/) only: faster to build
#   SANITIZE=thread scripts/test.sh   the suite under ThreadSanitizer (build-tsan/; no Python
#                                     module, no fuzzing); not part of CI, which it would double
#   FUZZ_SECONDS=0 scripts/test.sh    no fuzzing
#   scripts/test.sh -R flow           arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
SANITIZE=${SANITIZE:-ON}
case "$SANITIZE" in
  ON | on | 1 | yes | true)
    SANITIZE=ON
    BUILD_DIR=${BUILD_DIR:-build-asan}
    ;;
  thread)
    BUILD_DIR=${BUILD_DIR:-build-tsan}
    # A report fails the test that caused it; the servers and programs a test starts inherit it.
    export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/support/tsan.supp}
    ;;
  *)
    SANITIZE=OFF
    BUILD_DIR=${BUILD_DIR:-build}
    ;;
esac
export SANITIZE BUILD_DIR

stage() {
  local name=$1 start=$SECONDS
  shift
  echo "== $name"
  "$@"
  echo "== $name took $((SECONDS - start)) s"
}
run_ctest() { (cd "$BUILD_DIR" && ctest --output-on-failure -j "${TEST_JOBS:-2}" "$@"); }

stage "setup" scripts/setup.sh
stage "build ($BUILD_DIR)" scripts/build.sh
stage "suite" run_ctest "$@"
if [ "$SANITIZE" = ON ] && [ "${FUZZ_SECONDS:-20}" != 0 ]; then
  stage "fuzz" env FUZZ_SEED="${FUZZ_SEED:-1}" scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
fi
stage "format" scripts/format.sh --check
