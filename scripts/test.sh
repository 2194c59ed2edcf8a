#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The whole test suite: install missing packages (Debian/Ubuntu), configure
# build/ if it is not configured yet (BUILD_DIR overrides), build it, then
#   ctest --test-dir build --output-on-failure -j2
# Extra arguments go to ctest (./scripts/test.sh -L unit).
#
# When a test fails, a digest follows ctest's summary: for each failed
# test, its output without the lines of passed and skipped cases (from
# Testing/Temporary/LastTest.log), so the failing case, its messages and
# its reproduce line are at the end of the log, where a truncated CI log
# still shows them.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
jobs=$(nproc 2>/dev/null || echo 2)

./scripts/install-deps.sh
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build" -j "$jobs"
rc=0
ctest --test-dir "$build" --output-on-failure -j2 "$@" || rc=$?
log="$build/Testing/Temporary/LastTest.log"
if ((rc)) && [ -f "$log" ]; then
  echo "=== failure digest: each failed test's output, passed and skipped cases left out"
  awk '
    / Testing: / { name = $0; sub(/^.* Testing: /, "", name); n = 0; inout = 0; ok = 0 }
    /^Output:/ { inout = 1; next }
    /^<end of output>/ { inout = 0; next }
    inout && $0 !~ /: (PASS|SKIP) / && $0 !~ /^-+$/ { buf[n++] = $0 }
    !inout && (/^Test Passed/ || /[Ss]kipped/) { ok = 1 }
    / end time: / && name != "" && !ok {
      print "--- " name
      for (i = 0; i < n && i < 80; i++) print buf[i]
      if (n > 80) print "... " n - 80 " more lines in " FILENAME
      name = ""
    }' "$log"
fi
exit "$rc"
