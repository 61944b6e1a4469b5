#!/usr/bin/env bash
# Installs every Debian 12 package agentd needs to build, test and run (chromium included: the
# console's browser tests run it headless), then the npm packages of the JavaScript tests, each
# pinned by its package-lock.json and installed into its own node_modules, never globally:
# tests/gateway/node (the official A2A and OpenAI clients), tests/console (puppeteer-core, which
# drives Debian's chromium and downloads no browser) and tests/mcp (the reference MCP servers
# server-everything and server-filesystem that the tool tests start over stdio and HTTP). Idempotent: what is installed already is
# skipped. Uses sudo when not run as root.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  capnproto libcapnp-dev libatomic1
  libboost-dev libboost-program-options-dev
  libyaml-cpp-dev libfmt-dev libspdlog-dev nlohmann-json3-dev
  libcurl4-openssl-dev libssl-dev libsqlite3-dev
  catch2 python3 systemd openssl
  python3-dev pybind11-dev python3-pytest
  clang libfuzzer-14-dev clang-format-14
  libnss-wrapper yamllint python3-yaml
  sqlite3 util-linux libjemalloc-dev
  chromium fonts-liberation
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm for the client tests: the machine's own when it has them (Node 20 or newer),
# else Debian's.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then missing+=(nodejs npm); fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
else
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm ci again only when the lock file changed since the last install.
for node_dir in tests/gateway/node tests/console tests/mcp; do
  if ! cmp -s "$node_dir/package-lock.json" "$node_dir/node_modules/.package-lock.json.installed" 2>/dev/null; then
    echo "setup: npm ci in $node_dir"
    npm ci --prefix "$node_dir" --no-audit --no-fund --loglevel=error
    cp "$node_dir/package-lock.json" "$node_dir/node_modules/.package-lock.json.installed"
  fi
done
