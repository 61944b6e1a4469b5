#!/usr/bin/env bash
# Runs each libFuzzer target (tests/fuzz) for SECONDS (default 60) and prints the executions per
# target and in total. The targets are built in the sanitized tree (SANITIZE=ON scripts/build.sh:
# clang, ASan, UBSan, libFuzzer's coverage; build-asan/), the one the sanitized suite uses. Exits 1
# when a target crashed (the input is saved under BUILD/fuzz-crashes/TARGET/).
#   scripts/fuzz.sh 20                              20 s per target (what scripts/test.sh runs)
#   FUZZ_TARGETS="value_codec_fuzz" scripts/fuzz.sh 600   one target
#   FUZZ_SEED=1 scripts/fuzz.sh 20                  libFuzzer's random seed fixed (default: a new one
#                                                   each run); scripts/test.sh fixes it so CI runs
#                                                   the same mutations each time
# New inputs found go to BUILD/fuzz-corpus/TARGET/; the committed seeds (tests/fuzz/corpus/TARGET/)
# are read, never written.
set -euo pipefail
cd "$(dirname "$0")/.."
PER_TARGET=${1:-60}
case "$PER_TARGET" in ''|0|*[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET]" >&2; exit 2 ;; esac
BUILD=${FUZZ_BUILD_DIR:-build-asan}
TARGETS=${FUZZ_TARGETS:-"session_submit_fuzz value_codec_fuzz model_config_fuzz host_port_fuzz metrics_http_fuzz gateway_request_fuzz gateway_config_fuzz"}

scripts/setup.sh >/dev/null
SANITIZE=ON BUILD_DIR="$BUILD" TARGETS=fuzzers scripts/build.sh

# The tree links clang's shared ASan runtime; libFuzzer's link puts it after other libraries, so
# it is preloaded to come first.
RUNTIME=$(clang++ -print-file-name=libclang_rt.asan-x86_64.so)
total=0
failed=()
printf '%-22s %14s %10s  %s\n' target executions exec/s result
for t in $TARGETS; do
  seeds=tests/fuzz/corpus/$t
  work=$BUILD/fuzz-corpus/$t
  crashes=$BUILD/fuzz-crashes/$t
  log=$BUILD/fuzz-logs/$t.log
  mkdir -p "$work" "$crashes" "$(dirname "$log")"
  rc=0
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} LD_PRELOAD="$RUNTIME" "$BUILD/bin/$t" -max_total_time="$PER_TARGET" \
    -max_len=4096 -timeout=20 -seed="${FUZZ_SEED:-0}" -print_final_stats=1 -artifact_prefix="$crashes/" \
    "$work" "$seeds" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  execs=${execs:-0}
  total=$((total + execs))
  if [ "$rc" -eq 0 ]; then
    result=ok
  else
    result="CRASH (exit $rc; log $log; inputs in $crashes/)"
    failed+=("$t")
  fi
  printf '%-22s %14s %10s  %s\n' "$t" "$execs" "${rate:-0}" "$result"
done
printf '%-22s %14s\n' total "$total"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${#failed[@]} target(s) crashed: ${failed[*]}" >&2
  for t in "${failed[@]}"; do tail -40 "$BUILD/fuzz-logs/$t.log" >&2; done
  exit 1
fi
