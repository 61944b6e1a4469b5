#!/usr/bin/env bash
# Checks the example Kubernetes manifests (packaging/kubernetes):
#   - yamllint --strict with yamllint.yaml beside this script, on every file;
#   - check_manifests.py: the objects hang together (StatefulSet, headless Service, ports,
#     selectors, volumes and the objects they name, hardening, grace period), the as_server
#     command line uses only options AS_SERVER --help prints, AS_SERVER loads the ConfigMap's
#     models.yaml, and cluster.yaml names the headless Service.
# There is no Kubernetes schema validator in Debian 12: the manifests are not checked against
# the API schema.
# Usage: verify_manifests.sh AS_SERVER [MANIFEST_DIR]. Exits 77 (CTest: skipped) without
# yamllint or python3-yaml (scripts/setup.sh installs both).
set -euo pipefail
AS_SERVER=$1

if ! command -v yamllint >/dev/null 2>&1; then
  echo "SKIP: yamllint not found (apt-get install yamllint); manifests not verified"
  exit 77
fi
PYTHON=
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import yaml' 2>/dev/null; then
    PYTHON=$py; break
  fi
done
if [ -z "$PYTHON" ]; then
  echo "SKIP: no python3 with the yaml module (apt-get install python3-yaml);" \
       "manifests not verified"
  exit 77
fi
HERE=$(cd "$(dirname "$0")" && pwd)
MANIFEST_DIR=$(cd "${2:-$HERE/../../packaging/kubernetes}" && pwd)
if [ ! -x "$AS_SERVER" ]; then
  echo "FAIL: $AS_SERVER is not an executable as_server"; exit 1
fi

status=0
shopt -s nullglob
files=("$MANIFEST_DIR"/*.yaml "$MANIFEST_DIR"/*.yml)
if [ ${#files[@]} -eq 0 ]; then
  echo "FAIL: no YAML file in $MANIFEST_DIR"; exit 1
fi
if out=$(yamllint --strict -f parsable -c "$HERE/yamllint.yaml" "${files[@]}" 2>&1); then
  echo "ok: yamllint, ${#files[@]} files"
else
  echo "FAIL: yamllint:"; echo "$out"; status=1
fi
"$PYTHON" "$HERE/check_manifests.py" "$MANIFEST_DIR" "$AS_SERVER" || status=1
exit $status
