#!/bin/sh
# SPDX-License-Identifier: MIT
# run_fuzz.sh FUZZER CORPUS WORKDIR SECONDS: fuzz for SECONDS from a copy of
# the committed corpus (the source tree is never written), with a fixed
# libFuzzer seed (FA_FUZZ_SEED, default 1) so that a CI run is repeatable.
# A crash leaves its input in WORKDIR/crash-* and fails the test; add it to
# CORPUS once fixed, as a regression case.
set -eu
fuzzer=$1 corpus=$2 work=$3 secs=$4
rm -rf "$work"
mkdir -p "$work/corpus"
cp "$corpus"/* "$work/corpus/"
cd "$work"
exec "$fuzzer" corpus -max_total_time="$secs" -timeout=30 -rss_limit_mb=4096 \
  -max_len=512 -print_final_stats=1 -seed="${FA_FUZZ_SEED:-1}" \
  -artifact_prefix="$work/"
