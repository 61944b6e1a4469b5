#!/usr/bin/env bash
# Checks the generated unit files (build-tree copies, whose ExecStart binary exists):
#   - systemd-analyze verify passes with no warning about them (unknown keys are only warnings);
#   - systemd-analyze security --offline rates the hardening no worse than MAX_EXPOSURE;
#   - the service is restarted when it fails (Restart=on-failure, RestartSec 1..30 s), except for
#     the exit codes restarting cannot fix (RestartPreventExitStatus=2 3 4), and a unit that keeps
#     failing stops being restarted (a start limit).
# Usage: verify_units.sh UNIT_DIR [MAX_EXPOSURE]. Exits 77 (CTest: skipped) without systemd-analyze.
set -euo pipefail
UNIT_DIR=$1
MAX_EXPOSURE=${2:-2.5}

if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "SKIP: systemd-analyze not found (apt-get install systemd); unit files not verified"
  exit 77
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cp "$UNIT_DIR/as_server.service" "$WORK/"
# A template is verified through an instance of it.
cp "$UNIT_DIR/as_server@.service" "$WORK/as_server@example.service"
cp "$UNIT_DIR/agentd-gateway.service" "$WORK/"

status=0
for unit in as_server.service as_server@example.service agentd-gateway.service; do
  if ! out=$(systemd-analyze verify --man=no "$WORK/$unit" 2>&1); then
    echo "FAIL: systemd-analyze verify $unit:"; echo "$out"; status=1; continue
  fi
  # Warnings (unknown keys, bad values that are ignored) do not change the exit status.
  if grep -F "$unit" <<<"$out" | grep -q .; then
    echo "FAIL: systemd-analyze verify warns about $unit:"; echo "$out"; status=1; continue
  fi
  echo "ok: systemd-analyze verify $unit"

  # The restart settings as written (verify above has checked that systemd accepts them).
  props=$(grep -E '^(Restart|RestartSec|RestartPreventExitStatus|StartLimitIntervalSec|StartLimitBurst)=' \
            "$WORK/$unit" || true)
  restart=$(sed -n 's/^Restart=//p' <<<"$props" | tail -1)
  restart_sec=$(sed -n 's/^RestartSec=\([0-9]*\)s\{0,1\}$/\1/p' <<<"$props" | tail -1)
  prevent=$(sed -n 's/^RestartPreventExitStatus=//p' <<<"$props" | tail -1)
  burst=$(sed -n 's/^StartLimitBurst=//p' <<<"$props" | tail -1)
  interval=$(sed -n 's/^StartLimitIntervalSec=\([0-9]*\)s\{0,1\}$/\1/p' <<<"$props" | tail -1)
  if [ "$restart" != on-failure ]; then
    echo "FAIL: $unit: Restart=${restart:-(unset)}, expected on-failure"; status=1
  elif [ -z "$restart_sec" ] || [ "$restart_sec" -lt 1 ] || [ "$restart_sec" -gt 30 ]; then
    echo "FAIL: $unit: RestartSec=${restart_sec:-(unset)}, expected 1..30 s (whole seconds)"; status=1
  elif [ "$prevent" != "2 3 4" ]; then
    echo "FAIL: $unit: RestartPreventExitStatus=${prevent:-(unset)}, expected 2 3 4"; status=1
  elif [ -z "$burst" ] || [ -z "$interval" ]; then
    echo "FAIL: $unit: no StartLimitBurst / StartLimitIntervalSec: a crash loop would never stop"; status=1
  elif [ $((burst * restart_sec)) -ge "$interval" ]; then
    echo "FAIL: $unit: StartLimitBurst=${burst:-(unset)} in StartLimitIntervalSec=${interval:-(unset)}" \
         "can never be reached with RestartSec=$restart_sec: a crash loop would never stop"; status=1
  else
    echo "ok: $unit restarts on failure after ${restart_sec} s, at most $burst times in ${interval} s"
  fi

  if systemd-analyze security --help 2>/dev/null | grep -q -- '--offline'; then
    sec=$(systemd-analyze security --offline=yes "$WORK/$unit" 2>&1 || true)
    level=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' <<<"$sec")
    if [ -z "$level" ]; then
      echo "FAIL: no exposure level from systemd-analyze security for $unit:"; echo "$sec"; status=1
    elif awk -v l="$level" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(l > m) }'; then
      echo "FAIL: $unit exposure level $level is above $MAX_EXPOSURE:"; echo "$sec"; status=1
    else
      echo "ok: $unit exposure level $level (at most $MAX_EXPOSURE)"
    fi
  fi
done
exit $status
