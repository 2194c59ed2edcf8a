// SPDX-License-Identifier: MIT
// The ring forward and backward over MPI on CPU ranks, against the float64
// oracle and against one-process fa_forward / fa_backward on the whole
// sequence, over shards (contiguous, zigzag), masks (none, causal in both
// alignments with seqlen_q != seqlen_k, sliding windows, sinks, softcap,
// ALiBi), GQA, varlen packed batches and f32 / bf16. Every rank draws the
// same global inputs from a seed rank 0 broadcasts, takes its shard through
// fa_ring_local_row(), and checks its own rows; outputs start poisoned.
//
// Tolerance (docs/context-parallel.md): the ring's error against the
// oracle is at most twice the one-process error plus 1e-5 (o, lse,
// gradients normalised by their magnitudes), and f32 results stay within
// 2e-5 of the oracle.
//
// usage: test_ring [quick]   (run under mpirun -np N)
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn_mpi.h"
#include "oracle.h"
#include "tensor.h"

typedef struct ring_case {
  const char *name;
  int shard, batch, sq, sk, hq, hkv, d, causal, wl, wr;
  float softcap;
  int alibi, sinks, varlen;
  fa_dtype dt;
  int accumulate; // the ring's backward adds to dq/dk/dv holding 0.5
  int in_place;   // fa_ring_options.dkv_in_place
  int strategy;   // fa_ring_options.strategy
} ring_case;

static int rank_, size_;

// Dense global storage index of row i of sequence b.
static int64_t grow(const fa_attention *a, int b, int i, int side) {
  const int32_t *cu = side == 'q' ? a->cu_seqlens_q : a->cu_seqlens_k;
  return cu ? cu[b] + i
            : (int64_t)b * (side == 'q' ? a->seqlen_q : a->seqlen_k) + i;
}

static fa_tensor dense(void *p, fa_dtype dt, int64_t rows_per_b, int heads,
                       int dim, int varlen) {
  fa_tensor t = {p, dt, varlen ? 0 : rows_per_b * heads * dim,
                 (int64_t)heads * dim, dim};
  return t;
}

static void fill(ts_rng *g, void *p, fa_dtype dt, size_t n, double sc) {
  for (size_t i = 0; i < n; i++)
    ts_store(p, dt, (int64_t)i, sc * ts_rng_normal(g));
}

// Copy global rows (side q or k) into this rank's local layout, or back.
static void shard_copy(const fa_ring *r, const fa_attention *a, int side,
                       int heads, int dim, fa_dtype dt, void *glob, void *loc,
                       int to_local, int64_t local_rows) {
  const size_t es = ts_dtype_size(dt);
  for (int b = 0; b < a->batch; b++) {
    const int L = side == 'q' ? fa_oracle_len_q(a, b) : fa_oracle_len_k(a, b);
    for (int i = 0; i < L; i++) {
      int64_t lr = fa_ring_local_row(r, side, b, i);
      if (lr < 0) continue;
      int64_t li = a->cu_seqlens_q ? lr : (int64_t)b * local_rows + lr;
      int64_t gi = grow(a, b, i, side);
      char *g = (char *)glob + (size_t)(gi * heads * dim) * es;
      char *l = (char *)loc + (size_t)(li * heads * dim) * es;
      memcpy(to_local ? l : g, to_local ? g : l, (size_t)heads * dim * es);
    }
  }
}

// Relative Frobenius error over the rows this rank holds; ref is an
// oracle-layout double array ([b][max len][heads][dim]), got the local
// tensor, scale (may be NULL) the gradient magnitudes.
typedef struct acc2 {
  double e2, r2, emax, rmax;
  int bad;
} acc2;

static void cmp_rows(const fa_ring *r, const fa_attention *a, int side,
                     int heads, int dim, const double *ref, const double *scale,
                     const void *loc, fa_dtype dt, int64_t local_rows,
                     acc2 *acc) {
  const int maxlen = side == 'q' ? a->seqlen_q : a->seqlen_k;
  for (int b = 0; b < a->batch; b++) {
    const int L = side == 'q' ? fa_oracle_len_q(a, b) : fa_oracle_len_k(a, b);
    for (int i = 0; i < L; i++) {
      int64_t lr = fa_ring_local_row(r, side, b, i);
      if (lr < 0) continue;
      int64_t li = a->cu_seqlens_q ? lr : (int64_t)b * local_rows + lr;
      for (int e = 0; e < heads * dim; e++) {
        double x = ref[((int64_t)b * maxlen + i) * heads * dim + e];
        double y = ts_load(loc, dt, li * heads * dim + e);
        double s =
            scale ? scale[((int64_t)b * maxlen + i) * heads * dim + e] : x;
        if (!isfinite(y)) acc->bad++;
        acc->e2 += (x - y) * (x - y);
        acc->r2 += s * s;
      }
    }
  }
}

// The same for a one-process library result in the dense global layout.
static void cmp_rows_glob(const fa_attention *a, int side, int heads, int dim,
                          const double *ref, const double *scale,
                          const void *glob, fa_dtype dt, const fa_ring *r,
                          acc2 *acc) {
  const int maxlen = side == 'q' ? a->seqlen_q : a->seqlen_k;
  for (int b = 0; b < a->batch; b++) {
    const int L = side == 'q' ? fa_oracle_len_q(a, b) : fa_oracle_len_k(a, b);
    for (int i = 0; i < L; i++) {
      if (fa_ring_local_row(r, side, b, i) < 0) continue;
      int64_t gi = grow(a, b, i, side);
      for (int e = 0; e < heads * dim; e++) {
        double x = ref[((int64_t)b * maxlen + i) * heads * dim + e];
        double y = ts_load(glob, dt, gi * heads * dim + e);
        double s =
            scale ? scale[((int64_t)b * maxlen + i) * heads * dim + e] : x;
        acc->e2 += (x - y) * (x - y);
        acc->r2 += s * s;
      }
    }
  }
}

// Reduce an error over ranks: sqrt(sum e2 / sum r2).
static double global_err(acc2 *a) {
  double v[3] = {a->e2, a->r2, (double)a->bad};
  MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  if (v[2] > 0) return INFINITY;
  return v[1] > 0 ? sqrt(v[0] / v[1]) : sqrt(v[0]);
}

static int failures;

static void verdict(const ring_case *c, const char *what, double ring,
                    double one) {
  const double lim = 2 * one + 1e-5;
  const int ok = ring <= lim && (c->dt != FA_F32 || ring < 2e-5);
  if (!ok) failures++;
  if (rank_ == 0 && (!ok || getenv("FA_TEST_VERBOSE")))
    printf("%s %-28s %-4s ring %.3g one-process %.3g (limit %.3g)\n",
           ok ? "ok  " : "FAIL", c->name, what, ring, one, lim);
}

static void run_case(fa_context *ctx, fa_comm *comm, const ring_case *c,
                     uint64_t seed) {
  ts_rng g;
  ts_rng_seed(&g, seed);
  fa_attention a;
  fa_attention_init(&a);
  a.batch = c->batch;
  a.heads_q = c->hq;
  a.heads_kv = c->hkv;
  a.head_dim = a.head_dim_v = c->d;
  a.causal = c->causal;
  a.window_left = c->wl;
  a.window_right = c->wr;
  a.softcap = c->softcap;
  int32_t cuq[5] = {0}, cuk[5] = {0};
  int64_t rows_q = (int64_t)c->batch * c->sq,
          rows_k = (int64_t)c->batch * c->sk;
  a.seqlen_q = c->sq;
  a.seqlen_k = c->sk;
  if (c->varlen) {
    for (int b = 0; b < c->batch; b++) {
      int lq = b == 0 ? c->sq : ts_rng_int(&g, 1, c->sq);
      int lk =
          c->sq == c->sk ? lq : (b == 0 ? c->sk : ts_rng_int(&g, lq, c->sk));
      cuq[b + 1] = cuq[b] + lq;
      cuk[b + 1] = cuk[b] + lk;
    }
    a.cu_seqlens_q = cuq;
    a.cu_seqlens_k = cuk;
    rows_q = cuq[c->batch];
    rows_k = cuk[c->batch];
  }
  float slopes[16], sinks[16], dsinks[16], dsinks1[16];
  for (int h = 0; h < c->hq; h++) {
    slopes[h] = (float)(0.1 * (h + 1) / c->hq);
    sinks[h] = (float)ts_rng_normal(&g);
  }
  if (c->alibi) a.alibi_slopes = slopes;
  if (c->sinks) a.sinks = sinks;
  const fa_dtype dt = c->dt;
  const size_t es = ts_dtype_size(dt);
  const size_t nq = (size_t)rows_q * c->hq * c->d,
               nk = (size_t)rows_k * c->hkv * c->d;
  void *q = malloc(nq * es), *k = malloc(nk * es), *v = malloc(nk * es),
       *dO = malloc(nq * es), *o1 = malloc(nq * es), *dq1 = malloc(nq * es),
       *dk1 = malloc(nk * es), *dv1 = malloc(nk * es);
  float *lse1 = malloc(sizeof(float) * (size_t)c->batch * c->hq * c->sq);
  fill(&g, q, dt, nq, 1.0);
  fill(&g, k, dt, nk, 1.0);
  fill(&g, v, dt, nk, 1.0);
  fill(&g, dO, dt, nq, 1.0);
  const int vl = c->varlen;
  fa_tensor Q = dense(q, dt, c->sq, c->hq, c->d, vl),
            K = dense(k, dt, c->sk, c->hkv, c->d, vl),
            V = dense(v, dt, c->sk, c->hkv, c->d, vl),
            DO = dense(dO, dt, c->sq, c->hq, c->d, vl),
            O1 = dense(o1, dt, c->sq, c->hq, c->d, vl),
            DQ1 = dense(dq1, dt, c->sq, c->hq, c->d, vl),
            DK1 = dense(dk1, dt, c->sk, c->hkv, c->d, vl),
            DV1 = dense(dv1, dt, c->sk, c->hkv, c->d, vl);
  // References: the oracle and one process on the whole sequence.
  const size_t oq = (size_t)c->batch * c->sq * c->hq * c->d,
               ok_ = (size_t)c->batch * c->sk * c->hkv * c->d;
  double *ro = calloc(oq, 8),
         *rlse = calloc((size_t)c->batch * c->hq * c->sq, 8),
         *rdq = calloc(oq, 8), *rdk = calloc(ok_, 8), *rdv = calloc(ok_, 8),
         *mdq = calloc(oq, 8), *mdk = calloc(ok_, 8), *mdv = calloc(ok_, 8);
  fa_oracle_forward(&a, Q, K, V, ro, rlse);
  fa_oracle_backward(&a, Q, K, V, DO, rdq, rdk, rdv);
  fa_oracle_backward_magnitude(&a, Q, K, V, DO, mdq, mdk, mdv);
  fa_status s1 = fa_forward(ctx, &a, Q, K, V, O1, lse1);
  if (c->sinks) a.dsinks = dsinks1;
  if (!s1) s1 = fa_backward(ctx, &a, Q, K, V, O1, DO, lse1, DQ1, DK1, DV1);
  if (s1) {
    failures++;
    if (rank_ == 0)
      printf("FAIL %s one-process: %s\n", c->name, fa_last_error());
  }
  if (c->sinks) a.dsinks = dsinks;

  // The ring.
  fa_ring_options opt;
  fa_ring_options_init(&opt);
  opt.shard = c->shard;
  opt.dkv_in_place = c->in_place;
  opt.strategy = c->strategy;
  fa_ring *r = NULL;
  if (c->accumulate) a.backward_mode = FA_BACKWARD_ACCUMULATE;
  fa_status s = fa_ring_create(&r, ctx, comm, &a, &opt);
  if (s) {
    failures++;
    if (rank_ == 0)
      printf("FAIL %s create: %s\n", c->name, fa_ring_last_error());
    goto out;
  }
  {
    const int64_t lq = fa_ring_local_rows(r, 'q'),
                  lk = fa_ring_local_rows(r, 'k');
    const int64_t nbq = vl ? lq : c->batch * lq, nbk = vl ? lk : c->batch * lk;
    const size_t mq = (size_t)(nbq * c->hq * c->d) + 1,
                 mk = (size_t)(nbk * c->hkv * c->d) + 1;
    void *lqb = calloc(mq, es), *lkb = calloc(mk, es), *lvb = calloc(mk, es),
         *ldo = calloc(mq, es), *lo = malloc(mq * es), *ldq = malloc(mq * es),
         *ldk = malloc(mk * es), *ldv = malloc(mk * es);
    const size_t nl = fa_ring_lse_size(r) + 1;
    float *llse = malloc(sizeof(float) * nl);
    ts_poison(lo, dt, mq);
    ts_poison(ldq, dt, mq);
    ts_poison(ldk, dt, mk);
    ts_poison(ldv, dt, mk);
    ts_poison_f32(llse, nl);
    shard_copy(r, &a, 'q', c->hq, c->d, dt, q, lqb, 1, lq);
    shard_copy(r, &a, 'q', c->hq, c->d, dt, dO, ldo, 1, lq);
    shard_copy(r, &a, 'k', c->hkv, c->d, dt, k, lkb, 1, lk);
    shard_copy(r, &a, 'k', c->hkv, c->d, dt, v, lvb, 1, lk);
    fa_tensor LQ = dense(lqb, dt, lq, c->hq, c->d, vl),
              LK = dense(lkb, dt, lk, c->hkv, c->d, vl),
              LV = dense(lvb, dt, lk, c->hkv, c->d, vl),
              LDO = dense(ldo, dt, lq, c->hq, c->d, vl),
              LO = dense(lo, dt, lq, c->hq, c->d, vl),
              LDQ = dense(ldq, dt, lq, c->hq, c->d, vl),
              LDK = dense(ldk, dt, lk, c->hkv, c->d, vl),
              LDV = dense(ldv, dt, lk, c->hkv, c->d, vl);
    if (c->accumulate)
      for (int w = 0; w < 3; w++) {
        void *p = w == 0 ? ldq : w == 1 ? ldk : ldv;
        for (size_t i = 0; i < (w ? mk : mq); i++)
          ts_store(p, dt, (int64_t)i, 0.5);
      }
    s = fa_ring_forward(r, LQ, LK, LV, LO, llse);
    if (!s) s = fa_ring_backward(r, LQ, LK, LV, LO, LDO, llse, LDQ, LDK, LDV);
    if (!s && !c->accumulate) {
      // A second run reuses every plan and must be bit-identical.
      void *o2 = malloc(mq * es), *dq2 = malloc(mq * es),
           *dk2 = malloc(mk * es);
      memcpy(o2, lo, mq * es), memcpy(dq2, ldq, mq * es),
          memcpy(dk2, ldk, mk * es);
      ts_poison(lo, dt, mq), ts_poison(ldq, dt, mq), ts_poison(ldk, dt, mk);
      s = fa_ring_forward(r, LQ, LK, LV, LO, llse);
      if (!s) s = fa_ring_backward(r, LQ, LK, LV, LO, LDO, llse, LDQ, LDK, LDV);
      int same = !s && !memcmp(o2, lo, mq * es) && !memcmp(dq2, ldq, mq * es) &&
                 !memcmp(dk2, ldk, mk * es);
      MPI_Allreduce(MPI_IN_PLACE, &same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      if (!same) {
        failures++;
        if (rank_ == 0) printf("FAIL %s: a second run differs\n", c->name);
      }
      free(o2), free(dq2), free(dk2);
    }
    // Causal contiguous shards: the blocks of every later rank are hidden
    // wholly, and must be skipped, not computed and masked.
    fa_ring_stats st;
    if (!s && c->shard == FA_SHARD_CONTIGUOUS && c->causal && c->sq == c->sk &&
        c->wl < 0 && !c->varlen && !fa_ring_get_stats(r, &st) &&
        st.skipped != size_ - 1 - rank_) {
      failures++;
      printf("FAIL %s: rank %d skipped %d blocks, expected %d\n", c->name,
             rank_, st.skipped, size_ - 1 - rank_);
    }
    if (!s && c->accumulate)
      for (int w = 0; w < 3; w++) {
        void *p = w == 0 ? ldq : w == 1 ? ldk : ldv;
        for (size_t i = 0; i < (w ? mk : mq); i++)
          ts_store(p, dt, (int64_t)i, ts_load(p, dt, (int64_t)i) - 0.5);
      }
    if (s) {
      failures++;
      if (rank_ == 0)
        printf("FAIL %s ring: %s\n", c->name, fa_ring_last_error());
    } else {
      acc2 e[2][5];
      memset(e, 0, sizeof e);
      cmp_rows(r, &a, 'q', c->hq, c->d, ro, NULL, lo, dt, lq, &e[0][0]);
      cmp_rows_glob(&a, 'q', c->hq, c->d, ro, NULL, o1, dt, r, &e[1][0]);
      cmp_rows(r, &a, 'q', c->hq, c->d, rdq, mdq, ldq, dt, lq, &e[0][1]);
      cmp_rows_glob(&a, 'q', c->hq, c->d, rdq, mdq, dq1, dt, r, &e[1][1]);
      cmp_rows(r, &a, 'k', c->hkv, c->d, rdk, mdk, ldk, dt, lk, &e[0][2]);
      cmp_rows_glob(&a, 'k', c->hkv, c->d, rdk, mdk, dk1, dt, r, &e[1][2]);
      cmp_rows(r, &a, 'k', c->hkv, c->d, rdv, mdv, ldv, dt, lk, &e[0][3]);
      cmp_rows_glob(&a, 'k', c->hkv, c->d, rdv, mdv, dv1, dt, r, &e[1][3]);
      // LSE: every local row, through the ring's index.
      for (int b = 0; b < c->batch; b++)
        for (int i = 0; i < fa_oracle_len_q(&a, b); i++) {
          int64_t lr = fa_ring_local_row(r, 'q', b, i);
          if (lr < 0) continue;
          for (int h = 0; h < c->hq; h++) {
            double x = rlse[((int64_t)b * c->hq + h) * c->sq + i];
            double y = llse[fa_ring_lse_index(r, b, h, lr)];
            double y1 = lse1[((int64_t)b * c->hq + h) * c->sq + i];
            if (isinf(x) && x == y) continue;
            if (!isfinite(y)) e[0][4].bad++;
            e[0][4].e2 += (x - y) * (x - y);
            e[0][4].r2 += 1 + x * x;
            e[1][4].e2 += (x - y1) * (x - y1);
            e[1][4].r2 += 1 + x * x;
          }
        }
      static const char *what[5] = {"o", "dq", "dk", "dv", "lse"};
      for (int i = 0; i < 5; i++)
        verdict(c, what[i], global_err(&e[0][i]), global_err(&e[1][i]));
      if (c->sinks) { // the ranks' shares of dsinks sum to the whole's
        MPI_Allreduce(MPI_IN_PLACE, dsinks, c->hq, MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
        double e2 = 0, r2 = 0;
        for (int h = 0; h < c->hq; h++) {
          e2 += (dsinks[h] - dsinks1[h]) * (dsinks[h] - dsinks1[h]);
          r2 += dsinks1[h] * dsinks1[h];
        }
        // bf16: each side's D = dO.O uses its own rounded o.
        verdict(c, "dsinks", sqrt(e2 / (r2 + 1e-30)),
                c->dt == FA_F32 ? 0.0 : 1e-2);
      }
    }
    free(lqb), free(lkb), free(lvb), free(ldo), free(lo), free(ldq), free(ldk);
    free(ldv), free(llse);
  }
out:
  fa_ring_destroy(r);
  free(q), free(k), free(v), free(dO), free(o1), free(dq1), free(dk1),
      free(dv1);
  free(lse1), free(ro), free(rlse), free(rdq), free(rdk), free(rdv), free(mdq);
  free(mdk), free(mdv);
}

#define CASE(n, sh, b, sq, sk, hq, hkv, d, cz, wl, wr, cap, al, si, vl, dt)    \
  { n, sh, b, sq, sk, hq, hkv, d, cz, wl, wr, cap, al, si, vl, dt }
#define Z FA_SHARD_ZIGZAG
#define C FA_SHARD_CONTIGUOUS
#define BR FA_CAUSAL_BOTTOM_RIGHT
#define TL FA_CAUSAL_TOP_LEFT
static const ring_case cases[] = {
    CASE("full.contig.f32", C, 2, 40, 40, 4, 2, 32, 0, -1, -1, 0, 0, 0, 0,
         FA_F32),
    CASE("causal.zigzag.f32", Z, 2, 53, 53, 4, 2, 32, BR, -1, -1, 0, 0, 0, 0,
         FA_F32),
    CASE("causal.contig.f32", C, 1, 61, 61, 2, 1, 16, BR, -1, -1, 0, 0, 0, 0,
         FA_F32),
    CASE("causal-br.sq<sk.zigzag", Z, 2, 29, 47, 4, 2, 32, BR, -1, -1, 0, 0, 0,
         0, FA_F32),
    CASE("causal-tl.sq<sk.contig", C, 2, 29, 47, 4, 4, 16, TL, -1, -1, 0, 0, 0,
         0, FA_F32),
    CASE("window.causal.zigzag", Z, 1, 96, 96, 2, 1, 32, BR, 9, 0, 0, 0, 0, 0,
         FA_F32),
    CASE("window.both.contig", C, 1, 80, 80, 2, 2, 16, 0, 7, 5, 0, 0, 0, 0,
         FA_F32),
    CASE("sinks.softcap.zigzag", Z, 2, 44, 44, 4, 2, 32, BR, -1, -1, 5.0f, 0, 1,
         0, FA_F32),
    CASE("alibi.gqa.contig", C, 2, 37, 37, 8, 2, 16, 0, -1, -1, 0, 1, 0, 0,
         FA_F32),
    CASE("alibi.causal.zigzag", Z, 1, 50, 50, 4, 1, 32, BR, -1, -1, 0, 1, 0, 0,
         FA_F32),
    CASE("varlen.causal.zigzag", Z, 3, 45, 45, 4, 2, 32, BR, -1, -1, 0, 0, 0, 1,
         FA_F32),
    CASE("varlen.sq<sk.contig", C, 3, 30, 52, 2, 1, 16, BR, 11, 0, 0, 1, 1, 1,
         FA_F32),
    CASE("causal.zigzag.bf16", Z, 2, 48, 48, 4, 2, 32, BR, -1, -1, 0, 0, 0, 0,
         FA_BF16),
    CASE("sinks.window.contig.bf16", C, 2, 40, 40, 4, 2, 32, BR, 12, 0, 3.0f, 1,
         1, 0, FA_BF16),
    CASE("varlen.zigzag.bf16", Z, 2, 41, 41, 4, 2, 32, BR, -1, -1, 0, 0, 1, 1,
         FA_BF16),
    // Shorter than 2 * ranks: some ranks hold no rows at all.
    CASE("tiny.causal.zigzag", Z, 2, 3, 3, 2, 1, 16, BR, -1, -1, 0, 0, 1, 0,
         FA_F32),
    CASE("tiny.varlen.contig", C, 2, 2, 5, 2, 2, 16, BR, -1, -1, 0, 1, 0, 1,
         FA_F32),
    {"accumulate.zigzag.f32", Z, 2, 36, 36, 4, 2, 16, BR, -1, -1, 0, 0, 0, 0,
     FA_F32, 1, 0},
    {"in-place.causal.zigzag", Z, 2, 44, 44, 4, 2, 32, BR, -1, -1, 0, 0, 1, 0,
     FA_F32, 0, 1},
    {"in-place.varlen.accumulate", C, 3, 30, 30, 2, 1, 16, BR, 7, 0, 0, 1, 0, 1,
     FA_F32, 1, 1},
    {"allgather.causal.sinks.zigzag", Z, 2, 50, 50, 8, 1, 32, BR, -1, -1, 0, 0,
     1, 0, FA_F32, 0, 0, FA_RING_STRATEGY_ALLGATHER},
    {"allgather.varlen.window.alibi", C, 3, 33, 47, 4, 1, 16, BR, 10, 0, 2.0f,
     1, 0, 1, FA_F32, 0, 0, FA_RING_STRATEGY_ALLGATHER},
    {"allgather.varlen.zigzag.bf16", Z, 2, 40, 40, 4, 2, 32, BR, -1, -1, 0, 0,
     1, 1, FA_BF16, 0, 0, FA_RING_STRATEGY_ALLGATHER},
};

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  fa_context *ctx = NULL;
  fa_comm *comm = NULL;
  if (fa_context_create(&ctx, FA_BACKEND_CPU, 0) ||
      fa_context_set_threads(ctx, 1)) {
    fprintf(stderr, "no CPU context: %s\n", fa_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (fa_comm_create_mpi(MPI_COMM_WORLD, &comm)) {
    fprintf(stderr, "comm: %s\n", fa_ring_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  uint64_t base = ts_seed_base();
  MPI_Bcast(&base, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  if (rank_ == 0)
    printf("ring tests: %d ranks, seed FA_TEST_SEED=0x%llx\n", size_,
           (unsigned long long)base);
  const int n = (int)(sizeof cases / sizeof cases[0]);
  for (int i = 0; i < n; i++)
    run_case(ctx, comm, &cases[i], ts_case_seed(base, (uint64_t)i));
  MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank_ == 0) printf("%d cases, %d failures\n", n, failures);
  fa_comm_destroy(comm);
  fa_context_destroy(ctx);
  MPI_Finalize();
  return failures ? 1 : 0;
}
