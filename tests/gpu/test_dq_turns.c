// SPDX-License-Identifier: MIT
// The deterministic backward's order of the dQ adds (backends/gpu/
// bwd_turns.h), on any machine: for random problems (every mask, window,
// sq < sk and sq > sk, varlen lengths of 0), each tile of the sm80 and sm90
// backwards (q blocks of 32, 64, 128 rows; key blocks of 128), every key
// block and every q block it adds to, fa_gpu_dq_turn equals the number of
// later key blocks that add to it, counted one by one; the turns of a q
// block's key blocks are 0 .. n-1, each once (so each waits for a distinct
// count and the last count is reached: no two add at once, no one waits
// forever); and a key block waits only for later key blocks, which the
// kernels launch first. Also: a key block's q blocks are exactly those that
// hold a query seeing one of its keys (fa_visible_keys), none past the
// sequence (the sm90 backward zeroed such a block's rows at a negative
// shared-memory offset until run 46). Labels cuda, unit.
#include <stdint.h>
#include <string.h>

#include "bwd_turns.h"
#include "check.h"
#include "problem.h"
#include "tensor.h"

static ts_rng rng;

/* Does key block jb add to the q block at r0? */
static int adds(const fa_flat_problem *f, int jb, int r0, int bq, int bk,
                int sq, int sk) {
  int r_first, nrb;
  fa_gpu_bwd_q_blocks(f, jb * bk, bq, bk, sq, sk, &r_first, &nrb);
  return nrb > 0 && r_first <= r0 && r0 < r_first + nrb * bq;
}

/* Does some query of [r0, r0 + bq) see some key of block jb? */
static int sees(const fa_flat_problem *f, int jb, int r0, int bq, int bk,
                int sq, int sk) {
  for (int i = r0; i < r0 + bq && i < sq; i++) {
    int lo, hi;
    fa_flat_visible(f, i, sq, sk, &lo, &hi);
    if (lo < hi && lo < (jb + 1) * bk && hi > jb * bk) return 1;
  }
  return 0;
}

static void check_sequence(const fa_flat_problem *f, int sq, int sk, int bq,
                           const char *what) {
  const int bk = 128, nkb = (sk + bk - 1) / bk + 1; // one block past sk too
  const int nqb = (sq + bq - 1) / bq;
  for (int qb = 0; qb < nqb; qb++) {
    const int r0 = qb * bq;
    int seen[64] = {0}, n = 0;
    for (int jb = 0; jb < nkb; jb++) {
      int r_first, nrb;
      fa_gpu_bwd_q_blocks(f, jb * bk, bq, bk, sq, sk, &r_first, &nrb);
      CHECK(nrb == 0 || (r_first >= 0 && r_first + (nrb - 1) * bq < sq),
            "%s bq %d: key block %d walks q blocks %d..%d of a sequence of %d",
            what, bq, jb, r_first, r_first + (nrb - 1) * bq, sq);
    }
    for (int jb = 0; jb < nkb; jb++) {
      const int a = adds(f, jb, r0, bq, bk, sq, sk);
      // A key block adds to exactly the q blocks that see one of its keys
      // (so to none past the sequence).
      CHECK(a == sees(f, jb, r0, bq, bk, sq, sk),
            "%s bq %d: key block %d %s q block %d, which %s it", what, bq, jb,
            a ? "adds to" : "does not add to", qb, a ? "does not see" : "sees");
      if (!a) continue;
      n++;
      int later = 0;
      for (int j = jb + 1; j < nkb; j++)
        later += adds(f, j, r0, bq, bk, sq, sk);
      const int t = fa_gpu_dq_turn(f, jb, nkb, r0, bq, bk, sq, sk);
      CHECK(t == later, "%s bq %d: key block %d, q block %d: turn %d, want %d",
            what, bq, jb, qb, t, later);
      if (t >= 0 && t < 64) seen[t]++;
    }
    for (int t = 0; t < n && t < 64; t++)
      CHECK(seen[t] == 1, "%s bq %d: q block %d: turn %d taken %d times", what,
            bq, qb, t, seen[t]);
  }
}

static void check_random(int iter) {
  static const int masks[] = {0, FA_CAUSAL_BOTTOM_RIGHT, FA_CAUSAL_TOP_LEFT};
  fa_attention a;
  fa_attention_init(&a);
  const int varlen = ts_rng_int(&rng, 0, 2) == 0;
  int cu_q[4], cu_k[4];
  a.batch = 3;
  a.heads_q = 2;
  a.heads_kv = 1;
  a.head_dim = a.head_dim_v = 64;
  a.seqlen_q = ts_rng_int(&rng, 1, 700);
  a.seqlen_k = ts_rng_int(&rng, 1, 1200);
  a.causal = masks[ts_rng_int(&rng, 0, 2)];
  a.window_left = ts_rng_int(&rng, 0, 2) ? -1 : ts_rng_int(&rng, 0, 400);
  a.window_right = a.causal || ts_rng_int(&rng, 0, 1)
                       ? (a.causal ? 0 : -1)
                       : ts_rng_int(&rng, 0, 300);
  if (varlen) {
    cu_q[0] = cu_k[0] = 0;
    for (int b = 0; b < 3; b++) {
      cu_q[b + 1] = cu_q[b] + ts_rng_int(&rng, 0, a.seqlen_q);
      cu_k[b + 1] = cu_k[b] + ts_rng_int(&rng, 0, a.seqlen_k);
    }
    a.cu_seqlens_q = cu_q;
    a.cu_seqlens_k = cu_k;
  }
  fa_problem p;
  if (fa_problem_init(&p, &a, FA_BF16) || fa_problem_check_arrays(&p)) {
    FAIL("iteration %d: problem rejected: %s", iter, fa_last_error());
    return;
  }
  const fa_flat_problem f = fa_problem_flat(&p);
  char what[160];
  for (int b = 0; b < a.batch; b++) {
    const int sq = fa_seq_rows_q(&f, b), sk = fa_seq_rows_k(&f, b);
    snprintf(what, sizeof what,
             "iteration %d (sq %d sk %d causal %d window %d,%d, seq %d)", iter,
             sq, sk, a.causal, a.window_left, a.window_right, b);
    for (int bq = 32; bq <= 128; bq *= 2) check_sequence(&f, sq, sk, bq, what);
  }
}

int main(void) {
  uint64_t seed = ts_seed_base();
  ts_rng_seed(&rng, seed);
  printf("test_dq_turns: seed 0x%llx\n", (unsigned long long)seed);
  for (int i = 0; i < 300; i++) check_random(i);
  return ut_finish("gpu.dq-turns");
}
