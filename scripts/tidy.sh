#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# clang-tidy (the checks in .clang-tidy) over the library's C sources:
# core/, backends/cpu/ (every ISA translation unit, with that ISA's flags)
# and the host .c files of backends/cuda/ and backends/hip/ with the
# headers they include. Any finding fails (WarningsAsErrors in .clang-tidy).
#
# It configures a tree of its own (TIDY_DIR, default build-tidy; configure
# only, nothing is built) for compile_commands.json, with the CUDA module
# when nvcc is found and the HIP module when the HIP headers and clang-19
# are (scripts/ci-cuda.sh and scripts/ci-hip.sh install those in CI); a
# module whose toolkit is absent is not checked, and the script says so.
# Device code (.cu, .cuh, .hip) is not checked: clang-tidy would need the
# CUDA/ROCm device toolchains configured for clang, and the kernels are
# C++ templates the C checks here were not chosen for.
#
#   scripts/tidy.sh            # everything that can be configured here
#   scripts/tidy.sh core/plan.c  # some files (paths from the repository)
set -euo pipefail
cd "$(dirname "$0")/.."
tree=${TIDY_DIR:-build-tidy}
jobs=$(nproc 2>/dev/null || echo 2)
export PATH="$PATH:/usr/local/cuda/bin"

tidy=""
for t in clang-tidy-14 clang-tidy; do
  if command -v "$t" >/dev/null 2>&1; then tidy=$t; break; fi
done
[ -n "$tidy" ] || { echo "tidy: clang-tidy not found (apt-get install clang-tidy-14)" >&2; exit 1; }

opts=(-DCMAKE_BUILD_TYPE=Release -DFA_BUILD_TESTS=OFF -DFA_BUILD_BENCH=OFF
      -DFA_BUILD_EXAMPLES=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)
if command -v nvcc >/dev/null 2>&1; then
  opts+=(-DFA_ENABLE_CUDA=ON)
else
  echo "tidy: nvcc not found: backends/cuda host code is not checked" >&2
fi
if command -v clang++-19 >/dev/null 2>&1 && [ -f /usr/include/hip/hip_runtime_api.h ]; then
  opts+=(-DFA_ENABLE_HIP=ON)
else
  echo "tidy: no HIP headers or clang++-19: backends/hip host code is not checked" >&2
fi
mkdir -p "$tree"
cmake -S . -B "$tree" "${opts[@]}" >"$tree/configure.log" 2>&1 ||
  { cat "$tree/configure.log" >&2; exit 1; }

if (($#)); then
  files=("$@")
else
  # Library translation units only: tests, bench and examples are not
  # library code (and are not in this tree's database).
  mapfile -t files < <(python3 - "$tree/compile_commands.json" <<'PY'
import json, os, sys
root = os.getcwd() + "/"
for e in json.load(open(sys.argv[1])):
    f = os.path.relpath(os.path.join(e["directory"], e["file"]), root)
    if f.endswith(".c") and f.startswith(("core/", "backends/")):
        print(f)
PY
  )
fi
echo "tidy: $tidy over ${#files[@]} files"
printf '%s\n' "${files[@]}" | sort -u |
  xargs -r -P "$jobs" -n 1 "$tidy" -p "$tree" --quiet 2> >(grep -v \
    -e '^[0-9]* warnings\? generated' -e '^Suppressed [0-9]* warnings' \
    -e 'Use -header-filter=' -e 'NOLINT' >&2)
echo "tidy: no findings"
