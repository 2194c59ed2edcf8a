# SPDX-License-Identifier: MIT
# Sourced by run_carried.sh and run_some.sh (from the repository root):
# makes a build tree carried from another machine usable here. Sets build,
# rt, out, root from BUILD_DIR (default build-h200), RT_DIR (default .rt:
# runtime libraries the GPU machine lacks) and OUT_DIR (default
# $build/run), and points the tree's CTest files (and the xval test lists
# they include), which name the paths of the machine that built them, at
# this checkout.
build=${BUILD_DIR:-build-h200}
rt=${RT_DIR:-.rt}
out=${OUT_DIR:-$build/run}
root=$PWD
mkdir -p "$out"
export LD_LIBRARY_PATH="$root/$build:$root/$rt:${LD_LIBRARY_PATH:-}"
src=$(sed -n 's/^# Source directory: //p' "$build/CTestTestfile.cmake")
bin=$(sed -n 's/^# Build directory: //p' "$build/CTestTestfile.cmake")
find "$build" \( -name CTestTestfile.cmake -o -name 'xval_*.cmake' \) -exec sed -i \
  "s#$bin#$root/$build#g; s#$src#$root#g" {} +
