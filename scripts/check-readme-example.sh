#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The README's code examples are compiled programs, not prose: every
# fenced block that follows a line `<!-- example: examples/NAME.c -->` in
# README.md must equal that file byte for byte. Run by CTest as
# examples.readme. On a difference it prints the diff (README block first);
# fix it by copying the file into the README, never the other way round
# without building and running the example.
set -euo pipefail
cd "$(dirname "$0")/.."
readme=${1:-README.md}

mapfile -t files < <(sed -n 's/^<!-- example: \([^ ]*\) -->$/\1/p' "$readme")
if ((${#files[@]} == 0)); then
  echo "check-readme-example: no '<!-- example: FILE -->' marker in $readme" >&2
  exit 1
fi
status=0
for f in "${files[@]}"; do
  # The lines between the first fence after the marker and its closing one.
  block=$(awk -v m="<!-- example: $f -->" '
    $0 == m { found = 1; next }
    found && !open && /^```/ { open = 1; next }
    open && /^```$/ { exit }
    open { print }' "$readme")
  if [ ! -f "$f" ]; then
    echo "check-readme-example: $readme names $f, which does not exist" >&2
    status=1
  elif ! diff -u --label "$readme ($f block)" --label "$f" \
      <(printf '%s\n' "$block") "$f"; then
    echo "check-readme-example: the $readme block differs from $f" >&2
    status=1
  fi
done
((status == 0)) && echo "check-readme-example: ${files[*]} match $readme"
exit "$status"
