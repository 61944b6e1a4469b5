#!/usr/bin/env bash
# The client library stands alone: libagentd-client.so needs neither libagentd.so nor SQLite,
# curl or Boost, and a program linked with agentd::client alone loads none of them and works.
# Usage: check_client_only.sh PROGRAM CLIENT_LIBRARY ECHO_PLUGIN
set -euo pipefail
PROGRAM=$1
CLIENT_LIB=$2
PLUGIN=$3
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
fail() { echo "FAIL: $*"; exit 1; }

needed "$PROGRAM" | grep -q '^libagentd-client\.so' || fail "$PROGRAM does not need libagentd-client.so: $(needed "$PROGRAM" | tr '\n' ' ')"
! needed "$PROGRAM" | grep -q '^libagentd\.so' || fail "$PROGRAM needs libagentd.so"
bad='^(libagentd\.so|libsqlite|libcurl|libboost)'
! needed "$CLIENT_LIB" | grep -Eq "$bad" || fail "$CLIENT_LIB needs $(needed "$CLIENT_LIB" | grep -E "$bad" | tr '\n' ' ')"
loaded=$(ldd "$PROGRAM")
! grep -Eq 'libagentd\.so|libsqlite|libcurl|libboost' <<<"$loaded" || fail "$PROGRAM loads the server's libraries:
$loaded"
echo "ok: $(basename "$CLIENT_LIB") needs: $(needed "$CLIENT_LIB" | tr '\n' ' ')"

out=$("$PROGRAM" "$PLUGIN") || fail "$PROGRAM failed"
[ "$out" = "client only" ] || fail "$PROGRAM printed '$out'"
echo "ok: a client-only program ran: $out"
