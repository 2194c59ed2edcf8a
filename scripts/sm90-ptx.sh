#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The PTX and the ptxas resource lines of every sm90 forward translation
# unit of a configured CUDA build, for a before/after comparison of a
# refactoring (bench/gpu/NOTES-cuda.md). Usage:
#   scripts/sm90-ptx.sh BUILD_DIR SOURCE_ROOT OUT_DIR
# SOURCE_ROOT: the tree whose backends/ and core/ are compiled (this
# checkout, or an exported older commit); BUILD_DIR gives the generated
# headers and instantiation files. Writes OUT_DIR/<tu>.ptx and
# OUT_DIR/<tu>.ptxas (registers, spills, shared memory per kernel). The
# build's flags less -lineinfo, whose .loc lines name source lines and so
# change whenever code moves.
set -euo pipefail
build=$1 src=$(cd "$2" && pwd) out=$3
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
gen="$build/backends/cuda/generated"
inc=(-I"$build/include" -I"$src/backends/cuda" -I"$gen"
  -I"$src/backends/gpu" -I"$src/core" -I"$src/include")
for f in "$gen"/sm90_fwd_*.cu "$gen"/sm90_fp8_fwd_*.cu; do
  tu=$(basename "$f" .cu)
  # The generated file includes "sm90/..." relative to backends/cuda of
  # SOURCE_ROOT through -I; compile a copy so no path points at $build's.
  nvcc "${inc[@]}" -O3 -DNDEBUG -arch=sm_90a -std=c++17 -x cu -ptx \
    "$f" -o "$out/$tu.ptx"
  ptxas -arch=sm_90a -O3 -v "$out/$tu.ptx" -o /dev/null 2>&1 |
    grep -E "Compiling entry|registers|spill" >"$out/$tu.ptxas"
  echo "$tu: $(grep -c '^.visible .entry\|^.entry' "$out/$tu.ptx") entries"
done
