#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The whole GPU check from a build made on another machine and copied here
# (bench/gpu/NOTES-sm90.md, "Carried build"): BUILD_DIR (default build-h200)
# is build-cuda without object files; RT_DIR (default .rt) holds the
# runtime libraries the GPU machine lacks (libsleef, libgomp) and optional
# sm90 objects for a SASS check. Logs go to OUT_DIR (default $BUILD_DIR/run).
#
#   bench/gpu/run_carried.sh [--no-large] [--no-bench]
set -uo pipefail
cd "$(dirname "$0")/../.."
large=1 bench=1
for a in "$@"; do
  case $a in
  --no-large) large=0 ;;
  --no-bench) bench=0 ;;
  *) echo "usage: $0 [--no-large] [--no-bench]" >&2; exit 2 ;;
  esac
done
. bench/gpu/carried_env.sh
summary=()
run() { # name, command...: log to $out/name.log, keep the verdict
  local name=$1; shift
  echo "=== $name"
  "$@" >"$out/$name.log" 2>&1
  local rc=$?
  summary+=("$name: rc $rc; $(grep -hE 'tests passed|passed, [0-9]+ failed' "$out/$name.log" | tail -1)")
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
run ctest-cuda ctest --test-dir "$build" -L cuda -j 4 --output-on-failure
run sanitizer ctest --test-dir "$build" -L gpu-sanitizer --output-on-failure
run generic-xval ctest --test-dir "$build" \
  -R 'xval\.cuda\.generic\.(fwd|bwd)' -j 6 --output-on-failure
[ $large = 1 ] && run large ctest --test-dir "$build" -L gpu-large -V
for o in "$rt"/sm90_*.o; do
  [ -f "$o" ] || continue
  cuobjdump --dump-sass "$o" >"$out/sass.txt" 2>&1
  summary+=("SASS $(basename "$o"): $(grep -c HGMMA "$out/sass.txt") HGMMA, $(grep -cE '\b(LDL|STL)\b' "$out/sass.txt") LDL/STL")
done
if [ $bench = 1 ]; then
  export PYTHONUNBUFFERED=1
  b=(python3 bench/gpu/bench_sdpa.py --lib "$build/libflashattn.so")
  run bench-bf16 "${b[@]}" --dims 64,128,256 --sm80 --matmul \
    --json "$out/bench-bf16.json"
  run bench-f16 "${b[@]}" --dims 64,128,256 --dtype f16 --quick \
    --json "$out/bench-f16.json"
  run bench-bwd-decode "${b[@]}" --no-forward --bwd --decode \
    --json "$out/bench-bwd-decode.json"
fi
echo
for line in "${summary[@]}"; do echo "$line"; done
grep -hE "cycles:|lost|SKIP" "$out"/ctest-cuda.log | head -5
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$out"/sanitizer.log | sort | uniq -c
[ -f "$out/large.log" ] && grep -E "^(  )?(case|dense|packed|causal|fill|upload|PASS|FAIL|SKIP)" "$out/large.log" | head -20
