#!/bin/sh
# SPDX-License-Identifier: MIT
# long_run.sh WORKDIR [TOTAL [PER_RUN]]: the long fuzz run (README.md).
#
# Builds the throughput configuration of fuzz_api (FA_FUZZ_THROUGHPUT: no
# ASan, guard pages, size caps) in WORKDIR/build, or uses FA_FUZZ_BUILD,
# seeds WORKDIR/corpus with the committed corpus, then fuzzes with one
# worker under nice -n 19 (one thread: OMP_THREAD_LIMIT=1) in runs of
# PER_RUN executions (default 2,500,000), each with its own seed, until
# TOTAL executions (default 10,000,000) by libFuzzer's final stats. Each
# run's log is WORKDIR/logs/runN.log, a line per run in logs/summary.txt;
# a crash leaves WORKDIR/artifacts/runN-crash-* and the next run goes on.
# With FA_FUZZ_ASAN set to an ASan build's fuzz_api, the grown corpus is
# replayed through it at the end (logs/asan-replay.log).
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$1"
work=$(cd "$1" && pwd)
want=${2:-10000000} per=${3:-2500000}
build=${FA_FUZZ_BUILD:-$work/build}
if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=${CC:-clang-14} nice -n 19 cmake -S "$src" -B "$build" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFA_BUILD_BENCH=OFF -DFA_BUILD_FUZZ=ON \
    -DFA_FUZZ_THROUGHPUT=ON -DFA_SANITIZE="undefined;fuzzer-no-link" >/dev/null
fi
nice -n 19 cmake --build "$build" -j2 --target fuzz_api >/dev/null
fuzzer=$build/tests/fuzz/fuzz_api
cd "$work"
mkdir -p corpus logs artifacts
cp "$src"/tests/fuzz/corpus/* corpus/
export KMP_BLOCKTIME=0 OMP_WAIT_POLICY=passive OMP_THREAD_LIMIT=1
total=0 n=$(ls logs | grep -c '^run[0-9]*\.log$' || true)
while [ "$total" -lt "$want" ]; do
  n=$((n + 1))
  left=$((want - total))
  [ "$left" -gt "$per" ] && left=$per
  rc=0
  nice -n 19 "$fuzzer" corpus -runs="$left" -seed="$n" -timeout=30 \
    -rss_limit_mb=2048 -max_len=512 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/run$n-" >"logs/run$n.log" 2>&1 || rc=$?
  got=$(sed -n 's/^stat::number_of_executed_units: *//p' "logs/run$n.log" |
    tail -n 1)
  total=$((total + ${got:-0}))
  echo "run $n rc $rc executions ${got:-0} total $total $(date +%T)" |
    tee -a logs/summary.txt
  [ -n "$got" ] || { echo "run $n printed no stats: stopping" >&2; exit 1; }
  grep -q INITED "logs/run$n.log" || {
    echo "run $n failed on the corpus itself: stopping" >&2
    exit 1
  }
done
if [ -n "${FA_FUZZ_ASAN:-}" ]; then
  echo "ASan replay of $(ls corpus | wc -l) inputs"
  ASAN_OPTIONS=detect_leaks=1 \
    LSAN_OPTIONS=suppressions="$src/tests/fuzz/lsan.supp" \
    nice -n 19 "$FA_FUZZ_ASAN" -runs=0 -timeout=60 -rss_limit_mb=4096 \
    -max_len=512 -print_final_stats=1 corpus >logs/asan-replay.log 2>&1
  tail -n 7 logs/asan-replay.log
fi
