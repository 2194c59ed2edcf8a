// SPDX-License-Identifier: MIT
// Errors without hangs: a bad field on one rank fails on EVERY rank with
// the same status and the same message naming that rank and the field,
// before any data moves, and leaves every rank's outputs untouched; a
// transport failure becomes FA_ERR_BACKEND with the transport's text.
// usage: test_ring_errors   (under mpirun -np N)
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn_mpi.h"
#include "tensor.h"

static int rank_, size_, failures;

// Every rank must hold `want` and the same message, containing each word.
static void expect(const char *what, fa_status got, fa_status want,
                   const char *w1, const char *w2) {
  const char *msg = fa_ring_last_error();
  char mine[256], first[256];
  snprintf(mine, sizeof mine, "%s", got == FA_OK ? "" : msg);
  memcpy(first, mine, sizeof first);
  MPI_Bcast(first, sizeof first, MPI_CHAR, 0, MPI_COMM_WORLD);
  int ok = got == want && strcmp(mine, first) == 0 &&
           (!w1 || strstr(mine, w1)) && (!w2 || strstr(mine, w2));
  int all = ok;
  MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all) failures++;
  if (!ok)
    printf("FAIL rank %d %s: status %d (want %d), message \"%s\" (rank 0: "
           "\"%s\"; want \"%s\", \"%s\")\n",
           rank_, what, got, want, mine, first, w1 ? w1 : "", w2 ? w2 : "");
  else if (rank_ == 0)
    printf("ok   %s: \"%s\"\n", what, mine);
}

static void problem(fa_attention *a) {
  fa_attention_init(a);
  a->batch = 1;
  a->seqlen_q = a->seqlen_k = 24;
  a->heads_q = 2;
  a->heads_kv = 1;
  a->head_dim = 16;
  a->causal = FA_CAUSAL_BOTTOM_RIGHT;
}

// A transport that completes every operation but reports a failure from
// wait() on one rank, so that the ring must turn it into a status on every
// rank without leaving anyone waiting.
static fa_comm *inner;
static int fail_rank = -1;
static int w_send(void *s, int slot, const void *b, size_t n, int p, int t) {
  return inner->post_send(inner->self, slot, b, n, p, t);
}
static int w_recv(void *s, int slot, void *b, size_t n, int p, int t) {
  return inner->post_recv(inner->self, slot, b, n, p, t);
}
static int w_wait(void *s, int slot) {
  int rc = inner->wait(inner->self, slot);
  return rc ? rc : rank_ == fail_rank;
}
static int w_allreduce(void *s, int64_t *v, int n) {
  return inner->allreduce_max(inner->self, v, n);
}
static const char *w_error(void *s) { return "injected link failure"; }

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  fa_context *ctx = NULL;
  fa_comm *comm = NULL;
  if (fa_context_create(&ctx, FA_BACKEND_CPU, 0) ||
      fa_comm_create_mpi(MPI_COMM_WORLD, &comm)) {
    fprintf(stderr, "setup failed\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const int last = size_ - 1;
  char rank_word[32];
  snprintf(rank_word, sizeof rank_word, "rank %d", last);
  fa_attention a;
  fa_ring *r = NULL;

  // 1. A field that differs on the last rank (lower there than elsewhere).
  problem(&a);
  if (rank_ == last && size_ > 1) a.head_dim = 8;
  fa_status s = fa_ring_create(&r, ctx, comm, &a, NULL);
  if (size_ > 1) {
    expect("head_dim differs", s, FA_ERR_INVALID_ARGUMENT, rank_word,
           "head_dim");
    fa_ring_destroy(r);
    r = NULL;
  } else {
    fa_ring_destroy(r);
  }
  // 2. A locally invalid field (shard layout) on the last rank.
  problem(&a);
  fa_ring_options o;
  fa_ring_options_init(&o);
  if (rank_ == last) o.shard = 7;
  s = fa_ring_create(&r, ctx, comm, &a, &o);
  expect("bad shard", s, FA_ERR_INVALID_ARGUMENT, rank_word, "shard");
  // 2b. A NULL context on the last rank.
  problem(&a);
  s = fa_ring_create(&r, rank_ == last ? NULL : ctx, comm, &a, NULL);
  expect("NULL ctx", s, FA_ERR_INVALID_ARGUMENT, rank_word, "ctx");
  fa_ring_destroy(r);
  r = NULL;
  // 3. Tensors: a bad stride of o on the last rank; nobody writes o.
  problem(&a);
  if ((s = fa_ring_create(&r, ctx, comm, &a, NULL))) {
    expect("create", s, FA_OK, NULL, NULL);
    goto done;
  }
  {
    const int64_t lq = fa_ring_local_rows(r, 'q'),
                  lk = fa_ring_local_rows(r, 'k');
    const size_t nq = (size_t)(lq * 2 * 16) + 1, nk = (size_t)(lk * 16) + 1;
    float *q = calloc(nq, 4), *k = calloc(nk, 4), *v = calloc(nk, 4),
          *out = malloc(nq * 4), *lse = malloc((fa_ring_lse_size(r) + 1) * 4);
    ts_poison(out, FA_F32, nq);
    fa_tensor Q = {q, FA_F32, lq * 32, 32, 16},
              K = {k, FA_F32, lk * 16, 16, 16},
              V = {v, FA_F32, lk * 16, 16, 16},
              O = {out, FA_F32, lq * 32, 32, 16};
    fa_tensor badO = O;
    if (rank_ == last) badO.stride_seq = -32;
    s = fa_ring_forward(r, Q, K, V, badO, lse);
    expect("o stride", s, FA_ERR_INVALID_ARGUMENT, rank_word, "stride");
    int untouched = 1;
    for (size_t i = 0; i < nq; i++)
      untouched &= ts_is_poison(out, FA_F32, (int64_t)i);
    if (!untouched) {
      failures++;
      printf("FAIL rank %d: o written after a failed forward\n", rank_);
    }
    // 4. dtype differs across ranks.
    fa_tensor Qb = Q, Kb = K, Vb = V;
    if (rank_ != last) Qb.dtype = Kb.dtype = Vb.dtype = FA_BF16;
    s = fa_ring_forward(r, Qb, Kb, Vb, O, lse);
    if (size_ > 1)
      expect("dtype differs", s, FA_ERR_INVALID_ARGUMENT, rank_word, "dtype");
    // 5. The backward without lse on the last rank.
    s = fa_ring_forward(r, Q, K, V, O, lse);
    expect("forward", s, FA_OK, NULL, NULL);
    float *g = calloc(nq + 2 * nk, 4);
    fa_tensor DQ = Q, DK = K, DV = V;
    DQ.data = g;
    DK.data = g + nq;
    DV.data = g + nq + nk;
    s = fa_ring_backward(r, Q, K, V, O, O, rank_ == last ? NULL : lse, DQ, DK,
                         DV);
    free(g);
    expect("lse NULL", s, FA_ERR_INVALID_ARGUMENT, rank_word, "lse");
    // 6. A transport failure on rank 0: a status everywhere, no hang.
    fa_ring_destroy(r);
    r = NULL;
    inner = comm;
    fa_comm w = *comm;
    w.post_send = w_send;
    w.post_recv = w_recv;
    w.wait = w_wait;
    w.allreduce_max = w_allreduce;
    w.error = w_error;
    w.destroy = NULL;
    if ((s = fa_ring_create(&r, ctx, &w, &a, NULL)) == FA_OK) {
      fail_rank = size_ > 1 ? 0 : -1;
      ts_poison(out, FA_F32, nq);
      s = fa_ring_forward(r, Q, K, V, O, lse);
      if (size_ > 1) {
        expect("transport", s, FA_ERR_BACKEND, "rank 0",
               "injected link failure");
        untouched = 1;
        for (size_t i = 0; i < nq; i++)
          untouched &= ts_is_poison(out, FA_F32, (int64_t)i);
        if (!untouched) {
          failures++;
          printf("FAIL rank %d: o written after a transport failure\n", rank_);
        }
      }
      fail_rank = -1;
    }
    free(q), free(k), free(v), free(out), free(lse);
  }
done:
  fa_ring_destroy(r);
  MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank_ == 0) printf("%d failures\n", failures);
  fa_comm_destroy(comm);
  fa_context_destroy(ctx);
  MPI_Finalize();
  return failures ? 1 : 0;
}
