// SPDX-License-Identifier: MIT
// fa-ring-bench: the ring forward (and backward) under mpirun, on CPU ranks.
// Prints, per call, the time per ring step split into compute (attention
// and merges), exposed wait (time blocked after the step's compute) and the
// transfer time of one K/V block measured alone (the same ring exchange
// with no compute), for the slowest rank and the mean over ranks.
//
//   mpirun -np 2 fa-ring-bench -s 8192 -h 2 --hkv 1 -d 64 [--causal]
//          [--zigzag] [--bwd] [--bf16] [--allgather] [--iters 3]
//          [--threads 1]
//   -s is the number of tokens PER RANK; the global sequence is s * ranks.
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn_mpi.h"

static double now(void) { return MPI_Wtime(); }

static void fill(void *p, fa_dtype dt, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    float x = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    if (dt == FA_F32) {
      ((float *)p)[i] = x;
    } else {
      uint32_t b;
      memcpy(&b, &x, 4);
      ((uint16_t *)p)[i] = (uint16_t)(b >> 16);
    }
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int s = 4096, h = 2, hkv = 1, d = 64, causal = 0, zigzag = 0, bwd = 0,
      iters = 3, threads = 1, allgather = 0;
  fa_dtype dt = FA_F32;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *nx = i + 1 < argc ? argv[i + 1] : "0";
    if (!strcmp(a, "-s"))
      s = atoi(nx), i++;
    else if (!strcmp(a, "-h"))
      h = atoi(nx), i++;
    else if (!strcmp(a, "--hkv"))
      hkv = atoi(nx), i++;
    else if (!strcmp(a, "-d"))
      d = atoi(nx), i++;
    else if (!strcmp(a, "--iters"))
      iters = atoi(nx), i++;
    else if (!strcmp(a, "--threads"))
      threads = atoi(nx), i++;
    else if (!strcmp(a, "--causal"))
      causal = 1;
    else if (!strcmp(a, "--zigzag"))
      zigzag = 1;
    else if (!strcmp(a, "--bwd"))
      bwd = 1;
    else if (!strcmp(a, "--allgather"))
      allgather = 1;
    else if (!strcmp(a, "--bf16"))
      dt = FA_BF16;
    else {
      if (rank == 0) fprintf(stderr, "fa-ring-bench: unknown option %s\n", a);
      MPI_Finalize();
      return 2;
    }
  }
  fa_context *ctx = NULL;
  fa_comm *comm = NULL;
  if (fa_context_create(&ctx, FA_BACKEND_CPU, 0) ||
      fa_context_set_threads(ctx, threads) ||
      fa_comm_create_mpi(MPI_COMM_WORLD, &comm)) {
    fprintf(stderr, "setup: %s %s\n", fa_last_error(), fa_ring_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  fa_attention a;
  fa_attention_init(&a);
  a.batch = 1;
  a.seqlen_q = a.seqlen_k = s * size;
  a.heads_q = h;
  a.heads_kv = hkv;
  a.head_dim = d;
  a.causal = causal ? FA_CAUSAL_BOTTOM_RIGHT : 0;
  fa_ring_options opt;
  fa_ring_options_init(&opt);
  opt.shard = zigzag ? FA_SHARD_ZIGZAG : FA_SHARD_CONTIGUOUS;
  opt.strategy = allgather ? FA_RING_STRATEGY_ALLGATHER : FA_RING_STRATEGY_RING;
  fa_ring *r = NULL;
  if (fa_ring_create(&r, ctx, comm, &a, &opt)) {
    fprintf(stderr, "ring: %s\n", fa_ring_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const int64_t lq = fa_ring_local_rows(r, 'q'),
                lk = fa_ring_local_rows(r, 'k');
  const size_t es = dt == FA_F32 ? 4 : 2, nq = (size_t)lq * h * d,
               nk = (size_t)lk * hkv * d;
  void *q = malloc(nq * es), *k = malloc(nk * es), *v = malloc(nk * es),
       *o = malloc(nq * es), *dO = malloc(nq * es), *dq = malloc(nq * es),
       *dk = malloc(nk * es), *dv = malloc(nk * es);
  float *lse = malloc(sizeof(float) * (fa_ring_lse_size(r) + 1));
  fill(q, dt, nq, 1u + rank), fill(k, dt, nk, 7u + rank);
  fill(v, dt, nk, 13u + rank), fill(dO, dt, nq, 17u + rank);
  fa_tensor Q = {q, dt, lq * h * d, (int64_t)h * d, d},
            K = {k, dt, lk * hkv * d, (int64_t)hkv * d, d},
            V = {v, dt, lk * hkv * d, (int64_t)hkv * d, d},
            O = {o, dt, lq * h * d, (int64_t)h * d, d}, DO = O, DQ = O, DK = K,
            DV = V;
  DO.data = dO, DQ.data = dq, DK.data = dk, DV.data = dv;

  // The transfer alone: one K/V block (input dtype) around the ring.
  const size_t block = 2 * nk * es;
  char *sb = malloc(block + 1), *rb = malloc(block + 1);
  MPI_Barrier(MPI_COMM_WORLD);
  double tx = now();
  const int reps = 5;
  for (int i = 0; i < reps; i++) {
    MPI_Request rq[2];
    MPI_Irecv(rb, (int)block, MPI_BYTE, (rank - 1 + size) % size, 9,
              MPI_COMM_WORLD, &rq[0]);
    MPI_Isend(sb, (int)block, MPI_BYTE, (rank + 1) % size, 9, MPI_COMM_WORLD,
              &rq[1]);
    MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
  }
  tx = size > 1 ? (now() - tx) / reps : 0.0;

  if (rank == 0) {
    char desc[2048];
    fa_ring_describe(r, desc, sizeof desc);
    printf("%s", desc);
    printf("ranks %d, %d tokens per rank (global %d), heads %d/%d, d %d, %s, "
           "%s, %s, %d thread(s) per rank, K/V block %.2f MB\n",
           size, s, s * size, h, hkv, d, causal ? "causal" : "full",
           zigzag ? "zigzag" : "contiguous", dt == FA_F32 ? "f32" : "bf16",
           threads, block / 1e6);
    printf("%-8s %4s %10s %10s %10s %10s %8s\n", "pass", "iter", "step ms",
           "compute", "wait", "transfer", "wait %");
  }
  for (int it = 0; it < iters + 1; it++) {
    for (int pass = 0; pass <= bwd; pass++) {
      MPI_Barrier(MPI_COMM_WORLD);
      fa_status st = pass ? fa_ring_backward(r, Q, K, V, O, DO, lse, DQ, DK, DV)
                          : fa_ring_forward(r, Q, K, V, O, lse);
      if (st) {
        if (rank == 0) fprintf(stderr, "ring: %s\n", fa_ring_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      fa_ring_stats x;
      fa_ring_get_stats(r, &x);
      double v3[3] = {x.total / x.steps, x.compute / x.steps, x.wait / x.steps};
      double mx[3];
      MPI_Reduce(v3, mx, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      if (rank == 0 && it > 0) // iteration 0 makes the plans: warm-up
        printf("%-8s %4d %10.2f %10.2f %10.2f %10.3f %7.1f%%\n",
               pass ? "backward" : "forward", it, 1e3 * mx[0], 1e3 * mx[1],
               1e3 * mx[2], 1e3 * tx, 100.0 * mx[2] / mx[0]);
    }
  }
  fa_ring_destroy(r);
  fa_comm_destroy(comm);
  fa_context_destroy(ctx);
  free(q), free(k), free(v), free(o), free(dO), free(dq), free(dk), free(dv);
  free(lse), free(sb), free(rb);
  MPI_Finalize();
  return 0;
}
