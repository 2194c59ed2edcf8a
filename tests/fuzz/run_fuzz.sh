#!/bin/sh
# SPDX-License-Identifier: MIT
# run_fuzz.sh FUZZER CORPUS WORKDIR SECONDS: fuzz for SECONDS from a copy of
# the committed corpus (the source tree is never written), with a fixed
# libFuzzer seed (FA_FUZZ_SEED, default 1) so that a CI run is repeatable
# on one CPU. (Coverage steers the mutations, and which kernels run depends
# on the CPU's ISA, so another CPU explores other inputs from the same seed.)
#
# A crash leaves its input in WORKDIR/crash-* (a hang in timeout-*) and
# fails the test; add it to CORPUS once fixed, as a regression case. So that
# a failure on a CI machine can be followed up from its log alone, the
# script first prints the CPU and the contexts the harness fuzzes, and after
# a failure prints each artifact's bytes and decoded case, and for a hang
# every thread's stack (gdb, where installed).
set -eu
fuzzer=$1 corpus=$2 work=$3 secs=$4
rm -rf "$work"
mkdir -p "$work/corpus"
cp "$corpus"/* "$work/corpus/"
cd "$work"

cpu=$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //' || :)
isa=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | tr ' ' '\n' |
  grep -E '^(avx2|avx512[a-z_0-9]*|amx[a-z_0-9]*)$' | tr '\n' ' ' || :)
echo "run_fuzz: CPU ${cpu:-unknown} ($(nproc 2>/dev/null || echo '?') threads): $isa"
# An empty input runs no call; FZ_LIST makes the harness name its contexts.
: >"$work/empty"
FZ_LIST=1 "$fuzzer" -runs=1 "$work/empty" 2>&1 | grep '^fuzz_api:' || :
rm -f "$work/empty"

rc=0
"$fuzzer" corpus -max_total_time="$secs" -timeout="${FA_FUZZ_TIMEOUT:-30}" \
  -rss_limit_mb=4096 -max_len=512 -print_final_stats=1 \
  -seed="${FA_FUZZ_SEED:-1}" -artifact_prefix="$work/" || rc=$?
[ "$rc" -eq 0 ] && exit 0

for f in "$work"/crash-* "$work"/timeout-* "$work"/oom-* "$work"/leak-*; do
  [ -f "$f" ] || continue
  echo "run_fuzz: artifact $(basename "$f"), $(wc -c <"$f") bytes:"
  od -An -tx1 -v "$f" | head -40
  # The decoded case (printed before any call, so a hang shows it too).
  FZ_CASE=1 timeout 15 "$fuzzer" -timeout=10 "$f" 2>&1 |
    grep -A12 'fuzz_api: case' | head -14 || :
  case $(basename "$f") in
  timeout-*)
    if command -v gdb >/dev/null 2>&1; then
      # Every thread's stack 20 s into the replay.
      timeout 90 gdb -batch -nx -ex 'set pagination off' \
        -ex 'set startup-with-shell off' -ex 'handle SIGALRM nostop noprint' \
        -ex 'run' -ex 'thread apply all bt 16' \
        --args "$fuzzer" -timeout=0 "$f" </dev/null 2>&1 &
      gdb_pid=$!
      sleep "${FZ_HANG_WAIT:-20}"
      # (the fuzzer's own command line, not gdb's, which holds it too)
      pkill -INT -f "^$fuzzer -timeout=0 " 2>/dev/null || :
      wait "$gdb_pid" || :
    fi
    ;;
  esac
done
exit "$rc"
