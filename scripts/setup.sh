#!/usr/bin/env bash
# Installs every Debian 12 package agentd needs to build, test and run. Idempotent: packages
# already installed are skipped. Uses sudo when not run as root.
set -euo pipefail

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
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
