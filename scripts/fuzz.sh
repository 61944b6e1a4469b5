#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang, AddressSanitizer and UBSan into
# ${FUZZ_BUILD_DIR:-build-fuzz} and runs each for SECONDS (default 60), then prints the
# executions per target and in total. Exits 1 when a target crashed (the input is saved under
# BUILD/fuzz-crashes/TARGET/); the normal build is not touched.
#   scripts/fuzz.sh 20                              20 s per target (what CI runs)
#   FUZZ_TARGETS="value_codec_fuzz" scripts/fuzz.sh 600   one target
# New inputs found go to BUILD/fuzz-corpus/TARGET/; the committed seeds (tests/fuzz/corpus/TARGET/)
# are read, never written.
set -euo pipefail
cd "$(dirname "$0")/.."
PER_TARGET=${1:-60}
case "$PER_TARGET" in ''|0|*[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET]" >&2; exit 2 ;; esac
BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-$(nproc)}
TARGETS=${FUZZ_TARGETS:-"session_submit_fuzz value_codec_fuzz model_config_fuzz host_port_fuzz metrics_http_fuzz"}

scripts/setup.sh
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
  -DAGENTD_FUZZ=ON -DAGENTD_BUILD_TESTS=OFF -DAGENTD_BUILD_EXAMPLES=OFF -DAGENTD_BUILD_PYTHON=OFF \
  >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target fuzzers

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
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} "$BUILD/bin/$t" -max_total_time="$PER_TARGET" \
    -max_len=4096 -timeout=20 -print_final_stats=1 -artifact_prefix="$crashes/" \
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
