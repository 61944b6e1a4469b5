#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds an out-of-tree plugin and program
# against it (CMake package, and the pkg-config file for the program) and runs them.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR [CONSUMER_CXX_FLAGS]
# (a sanitized build passes its -fsanitize flags: the consumer must load the same runtime)
set -euo pipefail
BUILD_DIR=$1
SOURCE_DIR=$2
CONSUMER_FLAGS=${3:-}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
ROOT=$WORK/root

cmake --install "$BUILD_DIR" --prefix "$ROOT" >"$WORK/install.log"
for f in include/agentd/agentd.h include/agentd/client.h bin/as_server bin/agentctl; do
  [ -e "$ROOT/$f" ] || { echo "FAIL: $f was not installed"; exit 1; }
done
LIBDIR=$(dirname "$(find "$ROOT" -name 'libagentd.so' -print -quit)")
[ -n "$LIBDIR" ] || { echo "FAIL: libagentd.so was not installed"; exit 1; }
for f in cmake/agentd/agentdConfig.cmake cmake/agentd/agentdTargets.cmake pkgconfig/agentd.pc; do
  [ -e "$LIBDIR/$f" ] || { echo "FAIL: $LIBDIR/$f was not installed"; exit 1; }
done
find "$ROOT" -name 'as_server.service' | grep -q . || { echo "FAIL: unit files not installed"; exit 1; }
echo "ok: installed into $ROOT"

# The Python package, when built: importable from the installed tree (it finds the installed
# libagentd relative to itself), and it drives an installed plugin in local mode.
PYPKG=$(find "$ROOT" -path '*-packages/agentd/__init__.py' -print -quit)
if [ -n "$PYPKG" ]; then
  for f in __init__.pyi py.typed; do
    [ -e "$(dirname "$PYPKG")/$f" ] || { echo "FAIL: the Python package has no $f"; exit 1; }
  done
  ECHO_PLUGIN=$(find "$ROOT" -name 'libecho_agent.so' -print -quit)
  # AGENTD_PYTHON_PRELOAD: the sanitizer runtimes, when the package was built sanitized.
  out=$(cd "$WORK" && PYTHONPATH=$(dirname "$(dirname "$PYPKG")") \
        LD_PRELOAD="${AGENTD_PYTHON_PRELOAD:-}" ASAN_OPTIONS=detect_leaks=0 python3 -c "
import agentd, sys
with agentd.Client.local(plugins=[sys.argv[1]]) as c:
    print(c.create_agent('EchoAgent', 'E')(agentd.Msg('user', 'py ok')).content)
" "$ECHO_PLUGIN") || { echo "FAIL: the installed Python package did not work"; exit 1; }
  [ "$out" = "py ok" ] || { echo "FAIL: the installed Python package printed '$out'"; exit 1; }
  echo "ok: installed Python package: $PYPKG"
fi

# The installed binaries' RUNPATH names the configured prefix, not this temporary one.
export LD_LIBRARY_PATH=$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
cmake -S "$SOURCE_DIR/tests/install/consumer" -B "$WORK/consumer" "${GEN[@]}" \
  -DCMAKE_PREFIX_PATH="$ROOT" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS="$CONSUMER_FLAGS" -DCMAKE_EXE_LINKER_FLAGS="$CONSUMER_FLAGS" \
  -DCMAKE_SHARED_LINKER_FLAGS="$CONSUMER_FLAGS" -DCMAKE_MODULE_LINKER_FLAGS="$CONSUMER_FLAGS" \
  >"$WORK/configure.log" ||
  { cat "$WORK/configure.log"; echo "FAIL: find_package(agentd) project did not configure"; exit 1; }
cmake --build "$WORK/consumer" >"$WORK/build.log" 2>&1 ||
  { cat "$WORK/build.log"; echo "FAIL: the out-of-tree plugin and program did not build"; exit 1; }
out=$("$WORK/consumer/greet")
[ "$out" = "hello, world" ] || { echo "FAIL: the program printed '$out', not 'hello, world'"; exit 1; }
echo "ok: find_package(agentd) plugin + program: $out"

if command -v pkg-config >/dev/null; then
  export PKG_CONFIG_PATH=$LIBDIR/pkgconfig
  flags=$(pkg-config --define-prefix --cflags --libs agentd)
  [[ "$flags" == *"-I$ROOT/include"* ]] || { echo "FAIL: pkg-config --cflags gave '$flags'"; exit 1; }
  plugindir=$(pkg-config --define-prefix --variable=plugindir agentd)
  echo "ok: pkg-config agentd: $flags (plugins in $plugindir)"
fi
