#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fails on any clang-format difference (.clang-format) over the tracked C,
# CUDA and HIP sources (.c .h .cu .cuh .hip), except the files .gitattributes
# marks linguist-generated (their generator's output is kept as written).
# Prints each file that differs and the number of places.
#
#   scripts/check-format.sh          # check (CI)
#   scripts/check-format.sh --fix    # rewrite the files in place
#
# clang-format 14 (Debian 12's) is the reference: other versions break some
# lines differently, so CI and the tree-wide format pass both use it.
set -euo pipefail
cd "$(dirname "$0")/.."
fix=0
case "${1:-}" in
  --fix) fix=1 ;;
  "") ;;
  *) echo "usage: $0 [--fix]" >&2; exit 2 ;;
esac

fmt=""
for f in clang-format-14 clang-format; do
  if command -v "$f" >/dev/null 2>&1; then fmt=$f; break; fi
done
[ -n "$fmt" ] || { echo "check-format: clang-format not found (apt-get install clang-format-14)" >&2; exit 1; }
"$fmt" --version | grep -q "version 14\." ||
  echo "check-format: warning: $("$fmt" --version) is not clang-format 14" >&2

mapfile -t files < <(git ls-files -- '*.c' '*.h' '*.cu' '*.cuh' '*.hip' |
  git check-attr --stdin linguist-generated |
  awk -F': ' '$3 != "true" { print $1 }')
if ((fix)); then
  printf '%s\n' "${files[@]}" | xargs -r "$fmt" -i
  echo "check-format: formatted ${#files[@]} files"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  n=$("$fmt" --dry-run "$f" 2>&1 | grep -c 'Wclang-format-violations' || true)
  if ((n)); then
    echo "check-format: $f: $n places differ"
    bad=$((bad + 1))
  fi
done
if ((bad)); then
  echo "check-format: $bad of ${#files[@]} files differ from .clang-format;" \
    "run scripts/check-format.sh --fix" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files match .clang-format"
