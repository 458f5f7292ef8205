#!/usr/bin/env bash
# Fails when clang-format (Google style, .clang-format) would change a tracked
# C++ file.
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=$(command -v clang-format-14 || command -v clang-format)
mapfile -t files < <(git ls-files '*.cc' '*.h')
bad=()
for f in "${files[@]}"; do
  "$fmt" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -ne 0 ]; then
  echo "check-format: clang-format would change: ${bad[*]}" >&2
  echo "check-format: fix with: $fmt -i ${bad[*]}" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files clean"
