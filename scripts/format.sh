#!/usr/bin/env bash
# Formats the C++ sources with clang-format (the style is .clang-format at the top).
#   scripts/format.sh            rewrite every tracked .cpp and .h that differs
#   scripts/format.sh --check    change nothing; list the files that differ and exit 1 (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
FORMAT=${CLANG_FORMAT:-clang-format-14}
command -v "$FORMAT" >/dev/null || { echo "format: $FORMAT not found (scripts/setup.sh installs it)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.cpp' '*.h')
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    "$FORMAT" --style=file "$f" | cmp -s - "$f" || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    echo "format: ${#bad[@]} file(s) differ from .clang-format; run scripts/format.sh:" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files follow .clang-format"
else
  "$FORMAT" --style=file -i "${files[@]}"
fi
