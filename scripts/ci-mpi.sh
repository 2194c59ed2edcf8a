#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Ring-layer leg of CI: install OpenMPI from Debian, configure a tree with
# both transports (-DFA_ENABLE_MPI=ON -DFA_ENABLE_NCCL=ON; NCCL and the
# CUDA runtime headers come with the CUDA toolkit in /usr/local/cuda), build
# only the ring's libraries, tests and benchmark, then run `ctest -L mpi`
# (mpirun -np 1..4, oversubscribed; none may skip) and the NCCL host-side
# tests (`-L nccl`; the device test skips without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
if ! command -v mpicc >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1; then
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends libopenmpi-dev openmpi-bin \
    >/dev/null
fi
build=${BUILD_DIR:-build-mpi}
nccl=OFF
if [ -f /usr/local/cuda/include/nccl.h ]; then nccl=ON; fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DFA_ENABLE_MPI=ON \
  -DFA_ENABLE_NCCL=$nccl -DFA_BUILD_TESTS=ON -DFA_BUILD_BENCH=ON \
  -DFA_WERROR="${FA_WERROR:-OFF}" >/dev/null # ON in CI (.ci/run)
targets=(test_ring test_ring_errors fa-ring-bench)
if [ "$nccl" = ON ]; then targets+=(test_ring_nccl); fi
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" \
  --target "${targets[@]}"
# -L mpi must run every test: a skip there is a failure.
ctest --test-dir "$build" --output-on-failure -L mpi --no-tests=error |
  tee "$build/ctest-mpi.log"
if grep -q "Skipped\|Not Run" "$build/ctest-mpi.log"; then
  echo "ci-mpi: a test of the mpi label did not run" >&2
  exit 1
fi
if [ "$nccl" = ON ]; then
  ctest --test-dir "$build" --output-on-failure -L nccl
else
  echo "ci-mpi: NCCL not found in /usr/local/cuda; the NCCL transport was not built"
fi
