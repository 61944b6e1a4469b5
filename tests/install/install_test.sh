#!/usr/bin/env bash
# Installs the build into a temporary prefix (cmake --install --prefix) and uses it as a new user
# would, with nothing of the build tree on the way:
#   - nothing lands outside the prefix (the install manifest);
#   - an out-of-tree plugin and programs built with the CMake package (agentd_add_plugin), and a
#     plugin and program built with plain `pkg-config --cflags --libs agentd` (no other flags);
#   - the client library alone: programs linked with agentd::client or `pkg-config agentd-client`
#     need libagentd-client.so and not libagentd.so, and work;
#   - child mode finds the installed as_server by itself, from C++ and from Python;
#   - the installed unit files name the prefix's paths and pass systemd-analyze verify.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR [CONSUMER_CXX_FLAGS [CONSUMER_CXX]]
# (a sanitized build passes its -fsanitize flags: the consumer must load the same runtime)
set -euo pipefail
BUILD_DIR=$1
SOURCE_DIR=$2
CONSUMER_FLAGS=${3:-}
CONSUMER_CXX=${4:-c++}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
ROOT=$WORK/root
# Child mode must find as_server through the installed tree, not the environment or the build.
unset AGENTD_AS_SERVER LD_LIBRARY_PATH
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

cmake --install "$BUILD_DIR" --prefix "$ROOT" >"$WORK/install.log"
outside=$(grep -v "^$ROOT/" "$BUILD_DIR/install_manifest.txt" || true)
[ -z "$outside" ] || { echo "FAIL: cmake --install --prefix $ROOT wrote outside it:"; echo "$outside"; exit 1; }
[ -e "$ROOT/etc/agentd/server.yaml" ] || { echo "FAIL: no $ROOT/etc/agentd/server.yaml"; exit 1; }
for f in include/agentd/agentd.h include/agentd/client.h bin/as_server bin/agentctl; do
  [ -e "$ROOT/$f" ] || { echo "FAIL: $f was not installed"; exit 1; }
done
LIBDIR=$(dirname "$(find "$ROOT" -name 'libagentd.so' -print -quit)")
[ -n "$LIBDIR" ] || { echo "FAIL: libagentd.so was not installed"; exit 1; }
for f in cmake/agentd/agentdConfig.cmake cmake/agentd/agentdTargets.cmake pkgconfig/agentd.pc \
         pkgconfig/agentd-client.pc libagentd-client.so; do
  [ -e "$LIBDIR/$f" ] || { echo "FAIL: $LIBDIR/$f was not installed"; exit 1; }
done
find "$ROOT" -name 'as_server.service' | grep -q . || { echo "FAIL: unit files not installed"; exit 1; }
echo "ok: installed into $ROOT"

ECHO_PLUGIN=$(find "$ROOT" -name 'libecho_agent.so' -print -quit)

# The units name the prefix's binary, plugins and configs, and systemd-analyze accepts them.
UNIT_DIR=$(dirname "$(find "$ROOT" -name 'as_server.service' -print -quit)")
for unit in as_server.service as_server@.service; do
  grep -q "^ExecStart=$ROOT/bin/as_server --config $ROOT/etc/agentd/" "$UNIT_DIR/$unit" ||
    { echo "FAIL: $unit does not run $ROOT/bin/as_server on $ROOT/etc/agentd:"; grep '^ExecStart' "$UNIT_DIR/$unit"; exit 1; }
  ! grep -n "/usr/local" "$UNIT_DIR/$unit" || { echo "FAIL: $unit names /usr/local"; exit 1; }
done
set +e
"$SOURCE_DIR/tests/systemd/verify_units.sh" "$UNIT_DIR" >"$WORK/verify.log" 2>&1
status=$?
set -e
case $status in
  0) echo "ok: systemd-analyze verify of the installed units" ;;
  77) echo "note: $(cat "$WORK/verify.log")" ;;
  *) cat "$WORK/verify.log"; echo "FAIL: the installed units do not verify"; exit 1 ;;
esac

# The Python package, when built: importable from the installed tree (it finds the installed
# libagentd relative to itself); it drives an installed plugin in local mode and in child mode
# (the installed as_server, found by itself).
PYPKG=$(find "$ROOT" -path '*-packages/agentd/__init__.py' -print -quit)
if [ -n "$PYPKG" ]; then
  for f in __init__.pyi py.typed; do
    [ -e "$(dirname "$PYPKG")/$f" ] || { echo "FAIL: the Python package has no $f"; exit 1; }
  done
  # AGENTD_PYTHON_PRELOAD: the sanitizer runtimes, when the package was built sanitized.
  out=$(cd "$WORK" && PYTHONPATH=$(dirname "$(dirname "$PYPKG")") \
        LD_PRELOAD="${AGENTD_PYTHON_PRELOAD:-}" ASAN_OPTIONS=detect_leaks=0 python3 -c "
import agentd, sys
with agentd.Client.local(plugins=[sys.argv[1]]) as c:
    print(c.create_agent('EchoAgent', 'E')(agentd.Msg('user', 'py ok')).content)
with agentd.Client.spawn_child(plugins=[sys.argv[1]]) as c:
    print(c.create_agent('EchoAgent', 'E')(agentd.Msg('user', 'child ok')).content)
" "$ECHO_PLUGIN") || { echo "FAIL: the installed Python package did not work"; exit 1; }
  [ "$out" = $'py ok\nchild ok' ] || { echo "FAIL: the installed Python package printed '$out'"; exit 1; }
  echo "ok: installed Python package, local and child mode: $PYPKG"
  # Agents written in Python: the installed as_server loads the installed Python host
  # (<libdir>/agentd/libagentd_python.so), which finds the installed package relative to itself
  # (no PYTHONPATH: the prefix is not on Python's path).
  mkdir "$WORK/py_agents"
  printf 'import agentd\n\nclass Hello(agentd.Agent):\n    def reply(self, x):\n        return agentd.Msg(self.name, "py agent ok")\n' \
    >"$WORK/py_agents/hello.py"
  (cd "$WORK" && exec env -u PYTHONPATH "$ROOT/bin/as_server" --port 0 --agent-dir "$WORK/py_agents" \
     --log-level warn >"$WORK/py_server.out" 2>"$WORK/py_server.err") &
  py_server=$!
  for _ in $(seq 300); do grep -q 'as_server ready' "$WORK/py_server.out" && break; sleep 0.1; done
  port=$(sed -n 's/^as_server ready: listening on 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$WORK/py_server.out")
  [ -n "$port" ] || { cat "$WORK/py_server.err"; echo "FAIL: the installed as_server --agent-dir did not start"; exit 1; }
  out=$(cd "$WORK" && PYTHONPATH=$(dirname "$(dirname "$PYPKG")") \
        LD_PRELOAD="${AGENTD_PYTHON_PRELOAD:-}" ASAN_OPTIONS=detect_leaks=0 python3 -c "
import agentd, sys
c = agentd.Client.connect('127.0.0.1', int(sys.argv[1]))
print(c.create_agent('Hello', 'H')(agentd.Msg('user', 'hi')).content)
" "$port") || { kill "$py_server"; echo "FAIL: the installed as_server did not host a Python agent"; exit 1; }
  kill "$py_server"
  wait "$py_server" || true
  [ "$out" = "py agent ok" ] || { echo "FAIL: the installed Python agent answered '$out'"; exit 1; }
  echo "ok: the installed as_server hosts agents written in Python (--agent-dir)"
fi

GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
cmake -S "$SOURCE_DIR/tests/install/consumer" -B "$WORK/consumer" "${GEN[@]}" \
  -DCMAKE_PREFIX_PATH="$ROOT" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$CONSUMER_CXX" \
  -DCMAKE_CXX_FLAGS="$CONSUMER_FLAGS" -DCMAKE_EXE_LINKER_FLAGS="$CONSUMER_FLAGS" \
  -DCMAKE_SHARED_LINKER_FLAGS="$CONSUMER_FLAGS" -DCMAKE_MODULE_LINKER_FLAGS="$CONSUMER_FLAGS" \
  >"$WORK/configure.log" ||
  { cat "$WORK/configure.log"; echo "FAIL: find_package(agentd) project did not configure"; exit 1; }
cmake --build "$WORK/consumer" >"$WORK/build.log" 2>&1 ||
  { cat "$WORK/build.log"; echo "FAIL: the out-of-tree plugin and programs did not build"; exit 1; }
for prog in greet greet_found; do
  out=$(cd "$WORK" && "$WORK/consumer/$prog") || { echo "FAIL: $prog (child mode) failed"; exit 1; }
  [ "$out" = "hello, world" ] || { echo "FAIL: $prog printed '$out', not 'hello, world'"; exit 1; }
done
echo "ok: find_package(agentd) plugin + programs (as_server named, and found): $out"
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
for prog in greet greet_found; do
  needed "$WORK/consumer/$prog" | grep -q '^libagentd-client\.so' && ! needed "$WORK/consumer/$prog" | grep -q '^libagentd\.so' ||
    { echo "FAIL: $prog (agentd::client) needs: $(needed "$WORK/consumer/$prog" | tr '\n' ' ')"; exit 1; }
done
echo "ok: agentd::client programs need libagentd-client.so only"

if command -v pkg-config >/dev/null; then
  # Exactly what a user types: no --define-prefix, no -std flag of their own.
  export PKG_CONFIG_PATH=$LIBDIR/pkgconfig
  read -r -a pc <<<"$(pkg-config --cflags --libs agentd)"
  libdir=$(pkg-config --variable=libdir agentd)
  mkdir "$WORK/pc"
  # shellcheck disable=SC2086
  "$CONSUMER_CXX" $CONSUMER_FLAGS -shared -fPIC -o "$WORK/pc/libgreet_agent.so" \
      "$SOURCE_DIR/tests/install/consumer/greet_agent.cpp" "${pc[@]}" >"$WORK/pc.log" 2>&1 &&
  "$CONSUMER_CXX" $CONSUMER_FLAGS -o "$WORK/pc/greet" "$SOURCE_DIR/tests/install/consumer/main.cpp" \
      -DGREET_PLUGIN="\"$WORK/pc/libgreet_agent.so\"" "${pc[@]}" "-Wl,-rpath,$libdir" \
      >>"$WORK/pc.log" 2>&1 ||
    { cat "$WORK/pc.log"; echo "FAIL: a build with pkg-config --cflags --libs agentd (${pc[*]}) failed"; exit 1; }
  out=$(cd "$WORK" && "$WORK/pc/greet") || { echo "FAIL: the pkg-config program failed"; exit 1; }
  [ "$out" = "hello, world" ] || { echo "FAIL: the pkg-config program printed '$out'"; exit 1; }
  # A program on the client library alone.
  read -r -a pcc <<<"$(pkg-config --cflags --libs agentd-client)"
  # shellcheck disable=SC2086
  "$CONSUMER_CXX" $CONSUMER_FLAGS -o "$WORK/pc/greet_client" "$SOURCE_DIR/tests/install/consumer/main.cpp" \
      -DGREET_PLUGIN="\"$WORK/pc/libgreet_agent.so\"" "${pcc[@]}" "-Wl,-rpath,$libdir" \
      >>"$WORK/pc.log" 2>&1 ||
    { cat "$WORK/pc.log"; echo "FAIL: a build with pkg-config --cflags --libs agentd-client (${pcc[*]}) failed"; exit 1; }
  ! needed "$WORK/pc/greet_client" | grep -q '^libagentd\.so' ||
    { echo "FAIL: the agentd-client program needs libagentd.so"; exit 1; }
  out=$(cd "$WORK" && "$WORK/pc/greet_client") || { echo "FAIL: the agentd-client program failed"; exit 1; }
  [ "$out" = "hello, world" ] || { echo "FAIL: the agentd-client program printed '$out'"; exit 1; }
  echo "ok: pkg-config agentd-client: ${pcc[*]}: program"
  plugindir=$(pkg-config --variable=plugindir agentd)
  [ -e "$plugindir/libecho_agent.so" ] || { echo "FAIL: pkg-config plugindir $plugindir has no plugins"; exit 1; }
  echo "ok: pkg-config agentd: ${pc[*]}: plugin + program (plugins in $plugindir)"
fi
