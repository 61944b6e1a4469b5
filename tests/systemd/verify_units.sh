#!/usr/bin/env bash
# Checks the generated unit files (build-tree copies, whose ExecStart binary exists):
#   - systemd-analyze verify passes with no warning about them (unknown keys are only warnings);
#   - systemd-analyze security --offline rates the hardening no worse than MAX_EXPOSURE.
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

status=0
for unit in as_server.service as_server@example.service; do
  if ! out=$(systemd-analyze verify --man=no "$WORK/$unit" 2>&1); then
    echo "FAIL: systemd-analyze verify $unit:"; echo "$out"; status=1; continue
  fi
  # Warnings (unknown keys, bad values that are ignored) do not change the exit status.
  if grep -F "$unit" <<<"$out" | grep -q .; then
    echo "FAIL: systemd-analyze verify warns about $unit:"; echo "$out"; status=1; continue
  fi
  echo "ok: systemd-analyze verify $unit"

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
