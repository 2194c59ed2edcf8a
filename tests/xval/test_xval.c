// SPDX-License-Identifier: MIT
// Cross-validation driver: runs every case of a group on one backend (or on
// every usable backend) and checks the library against the float64 oracle.
//
//   test_xval --backend NAME|all --group GROUP|all [--case N] [--list]
//             [--verbose] [--seed S]
//   test_xval --selftest      (the oracle against closed forms, finite
//                              differences and itself; see xval_selftest.c)
//
// Per case, all of these must hold:
//   - the call returns FA_OK (FA_ERR_UNSUPPORTED makes the case a SKIP, and
//     then every output must still hold its poison: failing calls write
//     nothing);
//   - guard bands around every buffer are intact bit for bit, inputs (and
//     the problem's arrays) are unchanged, and elements of an output buffer
//     that are not part of the view (stride padding, pages the block table
//     does not name for real keys) still hold their poison; every logical
//     output element was written;
//   - no NaN/Inf where the oracle has none; a row with no visible key is
//     exactly 0 with lse -inf (or the sink logit);
//   - two error metrics against the oracle within their bounds (see
//     fwd_bound(), lse_bound(), bwd_bound() for the numbers and why):
//     relative Frobenius ||got - ref|| / ||ref|| and max-abs
//     max|got - ref| / max|ref| (the latter catches localised errors that
//     a norm over a large tensor dilutes); gradients are normalised by
//     their magnitudes (fa_oracle_backward_magnitude) instead of |ref|;
//       f32:       fixed bounds (forward 1e-5, backward 2e-5);
//       f16/bf16:  2 x the error of the naive same-precision attention
//                  (oracle.h) + 1e-3: the FlashAttention rule;
//   - fwd.plan cases: fa_plan_forward is bit-identical to fa_forward, and
//     fa_forward is bit-identical run to run.
// Inputs are N(0,1) (q scaled by qamp), drawn fresh per case from the run's
// seed (FA_TEST_SEED to reproduce), or from an edge generator (xcase.gen:
// logits of +-1e4, f16 near 65504, equal scores; group fwd.edge), whose
// cases are checked element by element within tests/fuzz/fz_tol.h's forward
// error bounds instead of the norms above (XV_EXPECT_ELEMENTWISE). Shapes,
// lengths and page shuffles depend only on the case, so "--case N" with the
// printed seed replays a failure.
// Exit status: 0 all passed, 1 a case failed, 77 (SKIP) when the backend is
// not usable here or it supports none of the group's cases.
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn.h"
#include "fz_tol.h"
#include "oracle.h"
#include "tensor.h"
#include "xval.h"

enum { R_PASS = 0, R_FAIL = 1, R_SKIP = 2 };

/* ---- error bounds ----------------------------------------------------------
 */

/* Forward bound on the relative Frobenius error of O.
   f32: 1e-5. The library accumulates in fp32: every output element is a
   convex combination of v rows computed with fp32 sums of at most ~2k terms,
   whose relative error grows like sqrt(n) * 2^-24 ~ 3e-6 for n = 2048 in the
   worst case we run (measured: 1e-7..6e-7 on this grid); an indexing or
   masking bug gives errors of 1e-2 and up.
   f16/bf16: 2 x err(naive same-precision attention) + 1e-3. The naive
   attention rounds P and O to the storage type, so its error (measured
   ~0.6 unit roundoff: f16 ~3e-4, bf16 ~2.4e-3) is the unavoidable cost of
   that type; the library may be at most twice as bad. The floor covers
   cases where the naive result happens to be exact or nearly so (e.g. most
   rows see one key, so O = v bit for bit) while a library legitimately
   differs by its own final rounding of O: 1e-3 is ~2 f16 unit roundoffs
   (2^-11 ~ 4.9e-4) and below the rms error of one bf16 rounding (~1.6e-3),
   so no real bug (errors of 1e-2 and up) fits under it. The same bounds
   apply to the max-abs metric (measured worst: 0.25 of the bound for f32,
   0.45 for f16/bf16 over 25 seeds x 3 backends). */
static double fwd_bound(fa_dtype t, double naive_err) {
  if (t == FA_F32) return 1e-5;
  return 2.0 * naive_err + 1e-3;
}

/* LSE is fp32 for every dtype and depends only on the scores, which are
   exact products of storage values summed in fp32: 1e-5 (relative to
   max(|lse|, 1), see ts_lse_err; measured ~5e-8). For f16/bf16 the naive
   rule is added in case a backend computes scores from rounded
   intermediates. */
static double lse_bound(fa_dtype t, double naive_err) {
  if (t == FA_F32) return 1e-5;
  return 2.0 * naive_err + 1e-5;
}

/* Backward bound on the errors of dq, dk, dv, which are normalised by the
   gradient magnitudes of fa_oracle_backward_magnitude() (the sums with every
   term replaced by its absolute value, before D = rowsum(dO * O) cancels
   against dP), not by |ref|: ||got - ref|| / ||mag|| and
   max|got - ref| / max(mag). A floating-point sum is accurate to ~n u
   relative to the sum of its terms' magnitudes, whatever the cancellation;
   relative to |ref| it is not, and |ref| is exactly 0 when every row sees
   one key (dS = P (dP - D) = 0) while a correct kernel returns rounding
   noise that grows with the rows summed (measured 1.4e-5 absolute for dk
   over 300 rows on a GPU kernel).
   f32: 2e-5 (measured worst 0.065 of it over 10 seeds x 3 CPU backends;
   a wrong term is off by O(1)).
   f16/bf16: 2 x err(naive same-precision backward, which rounds P, dS, O
   and the gradients to the storage type; measured ~0.3 unit roundoff)
   + the forward's floor of 1e-3, for the same reason (measured worst 0.63
   of the bound, bf16 max metric, over 10 seeds x 3 backends). */
static double bwd_bound(fa_dtype t, double naive_err) {
  if (t == FA_F32) return 2e-5;
  return 2.0 * naive_err + 1e-3;
}

/* The naive same-precision result must itself agree with the oracle to a
   few unit roundoffs (it does, at ~0.6 u): if it does not, the two
   references disagree on semantics and the 2x rule would be vacuous. 16 u
   (f16 7.8e-3, bf16 6.3e-2) is far above any rounding effect and far below
   any semantic difference (1e-1 and up). */
static int naive_sane(fa_dtype t, double naive_err) {
  return t == FA_F32 || naive_err <= 16.0 * ts_unit_roundoff(t);
}

/* The dtype whose rules bound a case whose inputs are in and outputs out:
   f32 when both are, else the less precise one (a kernel may round P and
   dS, operands of its products, to a 16-bit input dtype, as tensor cores
   and vdpbf16ps do, and its results to a 16-bit output dtype). */
static fa_dtype bound_dtype(fa_dtype in, fa_dtype out) {
  // FP8 inputs are decoded exactly (and their products formed in fp32
  // from the decoded values): only the output rounds.
  if (in == FA_F32 || in == FA_E4M3 || in == FA_E5M2) return out;
  if (out == FA_F32) return in;
  return ts_unit_roundoff(in) >= ts_unit_roundoff(out) ? in : out;
}

/* ---- messages -------------------------------------------------------------
 */

typedef struct msgbuf {
  char text[4096];
  size_t len;
  int count;
} msgbuf;

static void msg(msgbuf *m, const char *fmt, ...) {
  m->count++;
  if (m->count > 12 || m->len >= sizeof m->text - 1) return;
  m->len +=
      (size_t)snprintf(m->text + m->len, sizeof m->text - m->len, "    - ");
  if (m->len >= sizeof m->text - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(m->text + m->len, sizeof m->text - m->len, fmt, ap);
  va_end(ap);
  if (n > 0) m->len += (size_t)n;
  while (m->len > 0 && m->text[m->len - 1] == '\n') m->len--;
  if (m->len > sizeof m->text - 2) m->len = sizeof m->text - 2;
  m->text[m->len++] = '\n';
  m->text[m->len] = 0;
}

/* ---- a case's buffers ------------------------------------------------------
 */

typedef struct xt {
  ts_buf *buf;
  size_t off;  /* element offset of the view's first element in buf */
  fa_tensor t; /* host view */
  fa_tensor d; /* view in the context's memory space */
  int klike;   /* rows are keys (paged / cu_seqlens_k) rather than queries */
  int heads, dim;
} xt;

enum {
  B_Q,
  B_K,
  B_V,
  B_DO,
  B_O,
  B_DQ,
  B_DK,
  B_DV,
  B_LSE,
  B_DSINKS, /* output: the sinks' gradient (fp32, [heads_q]) */
  B_CUQ,
  B_CUK,
  B_USED,
  B_TABLE,
  B_SLOPES,
  B_SINKS,
  B_QPOS, /* explicit positions: per-sequence arrays */
  B_KPOS,
  B_DSQ, /* descales of q, k, v */
  B_DSK,
  B_DSV,
  NBUF
};

typedef struct xs {
  const xcase *c;
  fa_context *ctx;
  fa_attention a;  /* arrays on the host: for the oracle and for indexing */
  fa_attention ad; /* arrays in the context's memory: for the library */
  int *lq, *lk, *store_k;
  int32_t *cuq, *cuk, *used, *table;
  float *slopes, *sinks;
  int64_t *qpos, *kpos;
  float *dsc[3]; /* descales of q, k, v (host) */
  fa_dtype dto;  /* the output dtype */
  int num_pages, mbps;
  ts_buf buf[NBUF];
#define XV_MAX_SHARD 4
  ts_buf shard_o[XV_MAX_SHARD], shard_l[XV_MAX_SHARD], shard_lse;
  uint64_t seed;             /* the case's data seed */
  unsigned char *snap[NBUF]; /* host copies of inputs, guards included */
  xt q, k, v, o, d_o, dq, dk, dv;
} xs;

static size_t alloc_bytes(const ts_buf *b) {
  return b->bytes + 2 * (size_t)TS_GUARD_BYTES;
}

static int rows_of(const xs *s, int klike, int b) {
  return klike ? s->lk[b] : s->lq[b];
}

static int64_t elem_index(const xs *s, const xt *x, int b, int r, int h) {
  return x->klike ? fa_oracle_k_index(&s->a, &x->t, b, r, h)
                  : fa_oracle_q_index(&s->a, &x->t, b, r, h);
}

static int xt_init(xt *x, ts_buf *buf, fa_dtype dt, int layout, int nb, int ns,
                   int nh, int nd, int pad, int varlen, int klike) {
  memset(x, 0, sizeof *x);
  x->t.dtype = dt;
  size_t n = ts_make_strides(layout, nb, ns, nh, nd, pad, &x->t);
  if (varlen) x->t.stride_batch = 0;
  if (ts_buf_alloc(buf, n * ts_dtype_size(dt))) return -1;
  ts_poison(buf->host, dt, n);
  x->buf = buf;
  x->t.data = buf->host;
  x->klike = klike;
  x->heads = nh;
  x->dim = nd;
  return 0;
}

static void xt_dev(xt *x) {
  x->d = x->t;
  x->d.data =
      (unsigned char *)ts_buf_dev(x->buf) + x->off * ts_dtype_size(x->t.dtype);
}

/* Random N(0, amp^2) values (rounded to the dtype) in every logical
   element. */
static void fill(xs *s, xt *x, ts_rng *r, double amp) {
  for (int b = 0; b < s->a.batch; b++)
    for (int i = 0; i < rows_of(s, x->klike, b); i++)
      for (int h = 0; h < x->heads; h++) {
        int64_t o = elem_index(s, x, b, i, h);
        for (int c = 0; c < x->dim; c++)
          ts_store(x->t.data, x->t.dtype, o + c,
                   (float)(amp * ts_rng_normal(r)));
      }
}

/* An input element of generator gen (XV_GEN_*) for tensor role 0 (q),
   1 (k) or 2 (v), before rounding to the dtype. */
static double edge_value(ts_rng *r, int gen, int role, int d) {
  switch (gen) {
  case XV_GEN_LOGITS_POS:
  case XV_GEN_LOGITS_NEG: {
    if (role == 2) return ts_rng_normal(r);
    // Small integers, exact in every dtype: q.k sums d products of about
    // 1e4 / d each, exactly, in fp32.
    double base = floor(sqrt(1e4 / d) + 0.5);
    if (role == 1 && gen == XV_GEN_LOGITS_NEG) base = -base;
    return base + ts_rng_int(r, -1, 1);
  }
  case XV_GEN_F16MAX:
    return (ts_rng_uniform(r) < 0.5 ? -1 : 1) * 65504.0 *
           (1.0 - 0.02 * ts_rng_uniform(r));
  case XV_GEN_EQUAL:
    return role == 0 ? 0.0 : ts_rng_normal(r);
  default:
    return ts_rng_normal(r);
  }
}

/* The NaN generators: which tensor (role) holds the NaN. */
static int nan_role(int gen) {
  return gen == XV_GEN_NAN_Q   ? 0
         : gen == XV_GEN_NAN_K ? 1
         : gen == XV_GEN_NAN_V ? 2
                               : -1;
}

/* fill() for the edge generators: every logical element of q, k or v. */
static void fill_edge(xs *s, xt *x, ts_rng *r, int gen, int role) {
  if (nan_role(gen) >= 0) {
    fill(s, x, r, 1.0);
    if (role != nan_role(gen)) return;
    // One NaN, in sequence 0 and the last head, where masks and tiles make
    // some rows see it and some not.
    int row = role == 0 ? rows_of(s, 0, 0) / 2 : rows_of(s, 1, 0) / 3;
    int64_t o = elem_index(s, x, 0, row, x->heads - 1);
    ts_store(x->t.data, x->t.dtype, o + 3 % x->dim, NAN);
    return;
  }
  for (int b = 0; b < s->a.batch; b++)
    for (int i = 0; i < rows_of(s, x->klike, b); i++)
      for (int h = 0; h < x->heads; h++) {
        int64_t o = elem_index(s, x, b, i, h);
        for (int c = 0; c < x->dim; c++)
          ts_store(x->t.data, x->t.dtype, o + c,
                   edge_value(r, gen, role, s->c->d));
      }
}

static void xs_free(xs *s) {
  for (int i = 0; i < NBUF; i++) {
    if (s->buf[i].alloc) ts_buf_free(s->ctx, &s->buf[i]);
    free(s->snap[i]);
  }
  for (int i = 0; i < XV_MAX_SHARD; i++) {
    if (s->shard_o[i].alloc) ts_buf_free(s->ctx, &s->shard_o[i]);
    if (s->shard_l[i].alloc) ts_buf_free(s->ctx, &s->shard_l[i]);
  }
  if (s->shard_lse.alloc) ts_buf_free(s->ctx, &s->shard_lse);
  free(s->lq);
  free(s->lk);
  free(s->store_k);
  free(s->cuq);
  free(s->cuk);
  free(s->used);
  free(s->table);
  free(s->slopes);
  free(s->sinks);
  free(s->qpos);
  free(s->kpos);
  for (int i = 0; i < 3; i++) free(s->dsc[i]);
}

/* An int/float array of the problem as a guarded buffer; the device pointer
   is patched in after the upload. */
static int arr_buf(xs *s, int id, const void *src, size_t bytes) {
  if (ts_buf_alloc(&s->buf[id], bytes)) return -1;
  memcpy(s->buf[id].host, src, bytes);
  return 0;
}

static uint64_t str_hash(const char *str) {
  uint64_t h = 1469598103934665603ull;
  for (; *str; str++) h = (h ^ (unsigned char)*str) * 1099511628211ull;
  return h;
}

/* Build the problem and every buffer of case c. Structure (lengths, page
   shuffles) comes from the case's identity; data from the run's seed. */
static int xs_setup(xs *s, fa_context *ctx, const xcase *c,
                    uint64_t struct_seed, uint64_t data_seed) {
  memset(s, 0, sizeof *s);
  s->c = c;
  s->ctx = ctx;
  s->seed = data_seed;
  ts_rng sr, dr;
  ts_rng_seed(&sr, struct_seed);
  ts_rng_seed(&dr, data_seed);
  int B = c->b;
  s->lq = calloc((size_t)B, sizeof(int));
  s->lk = calloc((size_t)B, sizeof(int));
  s->store_k = calloc((size_t)B, sizeof(int));
  if (!s->lq || !s->lk || !s->store_k) return -1;

  // Lengths: sequence 0 has the maxima; with 3+ sequences one has no
  // queries, one no keys (storage or seqused), the rest are random.
  // With slack, sequence 0 falls short of the maxima too (so no sequence
  // reaches seqlen_q / seqlen_k).
  int mq = c->sq - (c->varlen ? c->slack : 0);
  int mk = c->sk - (c->varlen == 1 ? c->slack : 0);
  for (int b = 0; b < B; b++) {
    s->lq[b] = c->varlen ? mq : c->sq;
    if (c->varlen && b > 0)
      s->lq[b] = (B >= 3 && b == 1) ? 0 : ts_rng_int(&sr, 0, mq);
    s->store_k[b] = c->varlen == 1 ? mk : c->sk;
    if (c->varlen == 1 && b > 0)
      s->store_k[b] = (B >= 3 && b == 2) ? 0 : ts_rng_int(&sr, 0, mk);
    s->lk[b] = s->store_k[b];
    if (c->seqused) {
      int top = s->store_k[b] - (c->varlen == 1 ? 0 : c->slack);
      s->lk[b] = b == 0                   ? top
                 : (B >= 3 && b == B - 1) ? 0
                                          : ts_rng_int(&sr, 0, top);
    }
  }

  fa_attention *a = &s->a;
  fa_attention_init(a);
  a->batch = B;
  a->seqlen_q = c->sq;
  a->seqlen_k = c->sk;
  a->heads_q = c->hq;
  a->heads_kv = c->hkv;
  a->head_dim = c->d;
  a->head_dim_v = c->hdv0 ? 0 : c->dv;
  a->scale = c->scale;
  a->causal = c->causal;
  a->window_left = c->wl;
  a->window_right = c->wr;
  a->softcap = c->cap;

  if (c->varlen) {
    s->cuq = malloc(sizeof(int32_t) * (B + 1));
    if (!s->cuq) return -1;
    s->cuq[0] = 0;
    for (int b = 0; b < B; b++) s->cuq[b + 1] = s->cuq[b] + s->lq[b];
    a->cu_seqlens_q = s->cuq;
    if (arr_buf(s, B_CUQ, s->cuq, sizeof(int32_t) * (B + 1))) return -1;
  }
  if (c->varlen == 1) {
    s->cuk = malloc(sizeof(int32_t) * (B + 1));
    if (!s->cuk) return -1;
    s->cuk[0] = 0;
    for (int b = 0; b < B; b++) s->cuk[b + 1] = s->cuk[b] + s->store_k[b];
    a->cu_seqlens_k = s->cuk;
    if (arr_buf(s, B_CUK, s->cuk, sizeof(int32_t) * (B + 1))) return -1;
  }
  if (c->seqused) {
    s->used = malloc(sizeof(int32_t) * B);
    if (!s->used) return -1;
    for (int b = 0; b < B; b++) s->used[b] = s->lk[b];
    a->seqused_k = s->used;
    if (arr_buf(s, B_USED, s->used, sizeof(int32_t) * B)) return -1;
  }
  if (c->page) {
    // Pages for each sequence's real keys in shuffled order, plus two decoy
    // pages (all NaN) that the block table names past the real length.
    int ps = c->page, needed = 0;
    s->mbps = (c->sk + ps - 1) / ps + (int)(struct_seed & 1);
    for (int b = 0; b < B; b++) needed += (s->lk[b] + ps - 1) / ps;
    s->num_pages = needed + 2;
    int *perm = malloc(sizeof(int) * s->num_pages);
    s->table = malloc(sizeof(int32_t) * B * s->mbps);
    if (!perm || !s->table) {
      free(perm);
      return -1;
    }
    for (int p = 0; p < s->num_pages; p++) perm[p] = p;
    ts_rng_shuffle(&sr, perm, s->num_pages);
    int next = 0;
    for (int b = 0; b < B; b++) {
      int nb = (s->lk[b] + ps - 1) / ps;
      for (int blk = 0; blk < s->mbps; blk++)
        s->table[b * s->mbps + blk] =
            blk < nb ? perm[next++] : perm[needed + (b + blk) % 2];
    }
    free(perm);
    a->block_table = s->table;
    a->max_blocks_per_seq = s->mbps;
    a->page_size = ps;
    a->num_pages = s->num_pages;
    if (arr_buf(s, B_TABLE, s->table, sizeof(int32_t) * B * s->mbps)) return -1;
  }
  if (c->alibi) {
    s->slopes = malloc(sizeof(float) * c->hq);
    if (!s->slopes) return -1;
    for (int h = 0; h < c->hq; h++)
      s->slopes[h] = (float)pow(2.0, -8.0 * (h + 1) / c->hq);
    a->alibi_slopes = s->slopes;
    if (arr_buf(s, B_SLOPES, s->slopes, sizeof(float) * c->hq)) return -1;
  }
  if (c->sinks) {
    s->sinks = malloc(sizeof(float) * c->hq);
    if (!s->sinks) return -1;
    for (int h = 0; h < c->hq; h++)
      s->sinks[h] = (float)(1.5 * ts_rng_normal(&dr) + (h == 0 ? 3.0 : 0.0));
    a->sinks = s->sinks;
    if (arr_buf(s, B_SINKS, s->sinks, sizeof(float) * c->hq)) return -1;
    if (c->dsinks) {
      if (ts_buf_alloc(&s->buf[B_DSINKS], sizeof(float) * c->hq)) return -1;
      ts_poison_f32((float *)s->buf[B_DSINKS].host, (size_t)c->hq);
    }
  }
  if (c->pos) {
    a->positions = FA_POSITIONS_EXPLICIT;
    a->q_position = c->qoff;
    a->k_position = c->koff;
    if (c->pos == 2) {
      // Per sequence: where each shard's queries and keys sit, negative
      // offsets and offsets that leave some rows with no key included.
      s->qpos = malloc(sizeof(int64_t) * B);
      s->kpos = malloc(sizeof(int64_t) * B);
      if (!s->qpos || !s->kpos) return -1;
      for (int b = 0; b < B; b++) {
        s->qpos[b] = ts_rng_int(&sr, -40, 60);
        s->kpos[b] = ts_rng_int(&sr, -40, 40);
      }
      a->q_positions = s->qpos;
      a->k_positions = s->kpos;
      if (arr_buf(s, B_QPOS, s->qpos, sizeof(int64_t) * B) ||
          arr_buf(s, B_KPOS, s->kpos, sizeof(int64_t) * B))
        return -1;
    }
  }
  if (c->descale) {
    // 2^u, u uniform in [-1.5, 1.5): far from 1, decoded values stay O(1).
    const int per[3] = {c->descale == 2, c->descale >= 2, c->descale == 2};
    const int on[3] = {1, 1, c->descale != 3};
    for (int i = 0; i < 3; i++) {
      if (!on[i]) continue;
      size_t n = per[i] ? (size_t)B * c->hkv : 1;
      s->dsc[i] = malloc(sizeof(float) * n);
      if (!s->dsc[i]) return -1;
      for (size_t j = 0; j < n; j++)
        s->dsc[i][j] = (float)pow(2.0, 3.0 * ts_rng_uniform(&dr) - 1.5);
      if (arr_buf(s, B_DSQ + i, s->dsc[i], sizeof(float) * n)) return -1;
    }
  }

  // Tensors.
  fa_dtype dt = c->dt, dto = xv_out_dtype(c);
  s->dto = dto;
  int vq = c->varlen != 0, vk = c->varlen == 1;
  int tq = 0, tk = 0;
  for (int b = 0; b < B; b++) {
    tq += s->lq[b];
    tk += s->store_k[b];
  }
  int qnb = vq ? 1 : B, qns = vq ? tq : c->sq;
  int knb = c->page ? s->num_pages : vk ? 1 : B;
  int kns = c->page ? c->page : vk ? tk : c->sk;
  int ql = c->layout == XV_LAYOUT_PACKED ? TS_BSHD : c->layout;
  int kl = c->mixed ? (ql + 1) % 3 : ql;
  int ol = c->mixed ? (ql + 2) % 3 : ql; // o, do, dq

  if (c->layout == XV_LAYOUT_PACKED) {
    // [b][s][hq + 2 hkv][d]: q, k and v are head ranges of one buffer.
    int H = c->hq + 2 * c->hkv;
    if (xt_init(&s->q, &s->buf[B_Q], dt, TS_BSHD, B, c->sq, H, c->d, c->pad, 0,
                0))
      return -1;
    s->k = s->q;
    s->v = s->q;
    s->k.klike = s->v.klike = 1;
    s->q.heads = c->hq;
    s->k.heads = s->v.heads = c->hkv;
    size_t sz = ts_dtype_size(dt), sh = (size_t)s->q.t.stride_head;
    s->k.off = c->hq * sh;
    s->v.off = (size_t)(c->hq + c->hkv) * sh;
    s->k.t.data = s->buf[B_Q].host + s->k.off * sz;
    s->v.t.data = s->buf[B_Q].host + s->v.off * sz;
  } else {
    if (xt_init(&s->q, &s->buf[B_Q], dt, ql, qnb, qns, c->hq, c->d, c->pad, vq,
                0) ||
        xt_init(&s->k, &s->buf[B_K], dt, kl, knb, kns, c->hkv, c->d, c->pad, vk,
                1) ||
        xt_init(&s->v, &s->buf[B_V], dt, kl, knb, kns, c->hkv, c->dv, c->pad,
                vk, 1))
      return -1;
  }
  if (xt_init(&s->o, &s->buf[B_O], dto, ol, qnb, qns, c->hq, c->dv, c->pad, vq,
              0))
    return -1;
  if (c->gen) {
    fill_edge(s, &s->q, &dr, c->gen, 0);
    fill_edge(s, &s->k, &dr, c->gen, 1);
    fill_edge(s, &s->v, &dr, c->gen, 2);
  } else {
    fill(s, &s->q, &dr, c->qamp > 0.0f ? (double)c->qamp : 1.0);
    fill(s, &s->k, &dr, 1.0);
    fill(s, &s->v, &dr, 1.0);
  }
  if (c->bwd) {
    if (xt_init(&s->d_o, &s->buf[B_DO], dto, ol, qnb, qns, c->hq, c->dv, c->pad,
                vq, 0) ||
        xt_init(&s->dq, &s->buf[B_DQ], dto, ol, qnb, qns, c->hq, c->d, c->pad,
                vq, 0) ||
        xt_init(&s->dk, &s->buf[B_DK], dto, kl, knb, kns, c->hkv, c->d, c->pad,
                vk, 1) ||
        xt_init(&s->dv, &s->buf[B_DV], dto, kl, knb, kns, c->hkv, c->dv, c->pad,
                vk, 1))
      return -1;
    fill(s, &s->d_o, &dr, 1.0);
  }
  if (ts_buf_alloc(&s->buf[B_LSE], sizeof(float) * B * c->hq * c->sq))
    return -1;
  ts_poison_f32((float *)s->buf[B_LSE].host, (size_t)B * c->hq * c->sq);

  // Upload every buffer; the library's problem points at the mirrors.
  for (int i = 0; i < NBUF; i++) {
    if (!s->buf[i].alloc) continue;
    if (ts_buf_upload(ctx, &s->buf[i])) return -1;
    if (i == B_Q || i == B_K || i == B_V || i == B_DO || i >= B_CUQ) {
      s->snap[i] = malloc(alloc_bytes(&s->buf[i]));
      if (!s->snap[i]) return -1;
      memcpy(s->snap[i], s->buf[i].alloc, alloc_bytes(&s->buf[i]));
    }
  }
  // Storage rows of varlen tensors: what a GPU context needs (it reads no
  // device array); a CPU context checks them against cu_seqlens.
  if (c->varlen) s->a.rows_q = s->cuq[B];
  if (c->varlen == 1) s->a.rows_k = s->cuk[B];
  s->ad = s->a;
  if (c->varlen) s->ad.cu_seqlens_q = ts_buf_dev(&s->buf[B_CUQ]);
  if (c->varlen == 1) s->ad.cu_seqlens_k = ts_buf_dev(&s->buf[B_CUK]);
  if (c->seqused) s->ad.seqused_k = ts_buf_dev(&s->buf[B_USED]);
  if (c->page) s->ad.block_table = ts_buf_dev(&s->buf[B_TABLE]);
  if (c->alibi) s->ad.alibi_slopes = ts_buf_dev(&s->buf[B_SLOPES]);
  if (c->sinks) s->ad.sinks = ts_buf_dev(&s->buf[B_SINKS]);
  if (c->dsinks && c->sinks) s->ad.dsinks = ts_buf_dev(&s->buf[B_DSINKS]);
  if (s->qpos) s->ad.q_positions = ts_buf_dev(&s->buf[B_QPOS]);
  if (s->kpos) s->ad.k_positions = ts_buf_dev(&s->buf[B_KPOS]);
  xt *all[] = {&s->q, &s->k, &s->v, &s->o, &s->d_o, &s->dq, &s->dk, &s->dv};
  for (int i = 0; i < 8; i++)
    if (all[i]->buf) xt_dev(all[i]);
  // Descales (after xt_dev: the host views get host arrays, the library's
  // views the mirrors); per head = per (batch, kv head).
  xt *in[3] = {&s->q, &s->k, &s->v};
  const int per[3] = {c->descale == 2, c->descale >= 2, c->descale == 2};
  for (int i = 0; i < 3; i++) {
    if (!s->dsc[i]) continue;
    in[i]->t.descale = s->dsc[i];
    in[i]->d.descale = ts_buf_dev(&s->buf[B_DSQ + i]);
    in[i]->t.descale_per_head = in[i]->d.descale_per_head = per[i];
  }
  return 0;
}

/* ---- checks
 * ------------------------------------------------------------------ */

static const char *buf_name(int id) {
  static const char *n[NBUF] = {"q",
                                "k",
                                "v",
                                "do",
                                "o",
                                "dq",
                                "dk",
                                "dv",
                                "lse",
                                "dsinks",
                                "cu_seqlens_q",
                                "cu_seqlens_k",
                                "seqused_k",
                                "block_table",
                                "alibi_slopes",
                                "sinks",
                                "q_positions",
                                "k_positions",
                                "q.descale",
                                "k.descale",
                                "v.descale"};
  return n[id];
}

/* The element type of an output buffer (poison pattern). */
static fa_dtype buf_dtype(const xs *s, int id) {
  if (id == B_LSE || id == B_DSINKS) return FA_F32;
  if (id == B_Q || id == B_K || id == B_V) return s->c->dt;
  return s->dto;
}

/* Re-poison output buffers and upload them. */
static int poison_upload(xs *s, const int *ids, int n) {
  for (int i = 0; i < n; i++) {
    ts_buf *b = &s->buf[ids[i]];
    if (!b->alloc) continue;
    fa_dtype t = buf_dtype(s, ids[i]);
    ts_poison(b->host, t, b->bytes / ts_dtype_size(t));
    if (ts_buf_upload(s->ctx, b)) return -1;
  }
  return 0;
}

static int download(xs *s, const int *ids, int n) {
  for (int i = 0; i < n; i++)
    if (ts_buf_download(s->ctx, &s->buf[ids[i]])) return -1;
  return 0;
}

/* Guards of every buffer, inputs and arrays unchanged. */
static void check_memory(xs *s, msgbuf *m) {
  for (int i = 0; i < NBUF; i++) {
    ts_buf *b = &s->buf[i];
    if (!b->alloc) continue;
    if (ts_buf_download(s->ctx, b)) {
      msg(m, "download of %s failed", buf_name(i));
      continue;
    }
    char line[256] = "guard band damaged";
    FILE *f = fmemopen(line, sizeof line, "w");
    if (!ts_buf_guards_ok(b, buf_name(i), f)) {
      if (f) fclose(f), f = NULL;
      msg(m, "%s", line);
    }
    if (f) fclose(f);
    if (s->snap[i] && memcmp(s->snap[i], b->alloc, alloc_bytes(b))) {
      size_t at = 0;
      while (s->snap[i][at] == b->alloc[at]) at++;
      msg(m, "input %s was modified (first at byte %td of the payload)",
          buf_name(i), (ptrdiff_t)at - TS_GUARD_BYTES);
    }
  }
}

/* 1 marks a logical element, 2 one the library may or may not write (key
   rows past seqused_k within a sequence's storage), 0 the rest: stride
   padding, pages the block table does not name for the real keys. */
static unsigned char *view_marks(const xs *s, const xt *x) {
  size_t n = x->buf->bytes / ts_dtype_size(x->t.dtype);
  unsigned char *mk = calloc(n + 1, 1);
  if (!mk) return NULL;
  const fa_attention *a = &s->a;
  for (int b = 0; b < a->batch; b++) {
    int rows = rows_of(s, x->klike, b), extra = rows;
    if (x->klike) {
      if (a->block_table) {
        int ps = a->page_size;
        extra = (rows + ps - 1) / ps * ps; // rest of the last named page
      } else {
        extra = s->store_k[b];
      }
    }
    for (int r = 0; r < extra; r++)
      for (int h = 0; h < x->heads; h++) {
        int64_t o = elem_index(s, x, b, r, h) + (int64_t)x->off;
        for (int c = 0; c < x->dim; c++) mk[o + c] = r < rows ? 1 : 2;
      }
  }
  return mk;
}

/* Check the view of output x (poison outside it, written inside) and widen
   its logical elements into dense [b][rows][heads][dim] (rows = max). */
static void extract(xs *s, const xt *x, const char *name, double *dense,
                    msgbuf *m) {
  const fa_attention *a = &s->a;
  int R = x->klike ? a->seqlen_k : a->seqlen_q;
  memset(dense, 0, sizeof(double) * a->batch * R * x->heads * x->dim);
  unsigned char *mk = view_marks(s, x);
  if (!mk) {
    msg(m, "out of memory");
    return;
  }
  size_t n = x->buf->bytes / ts_dtype_size(x->t.dtype), outside = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (mk[i] == 0 && !ts_is_poison(x->buf->host, x->t.dtype, (int64_t)i))
      if (outside++ == 0) first = i;
  if (outside)
    msg(m,
        "%s: %zu elements outside the view were written (first at "
        "element %zu of the buffer)",
        name, outside, first);
  size_t unwritten = 0;
  for (int b = 0; b < a->batch; b++)
    for (int r = 0; r < rows_of(s, x->klike, b); r++)
      for (int h = 0; h < x->heads; h++) {
        int64_t o = elem_index(s, x, b, r, h);
        double *d = dense + (((size_t)b * R + r) * x->heads + h) * x->dim;
        for (int c = 0; c < x->dim; c++) {
          if (ts_is_poison(x->t.data, x->t.dtype, o + c)) {
            if (unwritten++ == 0)
              msg(m, "%s[b=%d][%s=%d][h=%d][%d] was never written", name, b,
                  x->klike ? "key" : "row", r, h, c);
          }
          d[c] = ts_load(x->t.data, x->t.dtype, o + c);
        }
      }
  if (unwritten > 1) msg(m, "%s: %zu elements never written", name, unwritten);
  free(mk);
}

static void check_finite(const double *ref, const double *got, size_t n,
                         const char *name, msgbuf *m) {
  size_t first = 0, bad = ts_nonfinite_parity(ref, got, n, &first);
  if (bad)
    msg(m,
        "%s: %zu values whose NaN/Inf status differs from the oracle "
        "(first flat index %zu: got %g, expected %g)",
        name, bad, first, got[first], ref[first]);
}

static void check_err(const char *name, double err, double bound, msgbuf *m) {
  if (!(err <= bound))
    msg(m, "%s: error %.3e exceeds bound %.3e", name, err, bound);
}

/* Rows with no visible key: O exactly 0, lse -inf (or the sink). */
static void check_empty_rows(xs *s, const double *o, const double *lse,
                             msgbuf *m) {
  const fa_attention *a = &s->a;
  int DV = s->c->dv, bad = 0;
  for (int b = 0; b < a->batch; b++)
    for (int i = 0; i < s->lq[b]; i++) {
      if (fa_oracle_visible_count(a, b, i)) continue;
      for (int h = 0; h < a->heads_q; h++) {
        const double *r =
            o + (((size_t)b * a->seqlen_q + i) * a->heads_q + h) * DV;
        for (int c = 0; c < DV; c++)
          if (r[c] != 0.0 && bad++ < 3)
            msg(m,
                "o[b=%d][row=%d][h=%d][%d] = %g in a row with no visible "
                "key (must be exactly 0)",
                b, i, h, c, r[c]);
        if (lse) {
          double want = a->sinks ? (double)a->sinks[h] : -INFINITY;
          double got = lse[((size_t)b * a->heads_q + h) * a->seqlen_q + i];
          if (got != want && bad++ < 3)
            msg(m,
                "lse[b=%d][h=%d][row=%d] = %g in a row with no visible key "
                "(must be %g)",
                b, h, i, got, want);
        }
      }
    }
}

/* The library's lse as dense double; padding rows (varlen) set to -inf like
   the oracle's. */
static void extract_lse(xs *s, double *dense) {
  const fa_attention *a = &s->a;
  const float *l = (const float *)s->buf[B_LSE].host;
  for (int b = 0; b < a->batch; b++)
    for (int h = 0; h < a->heads_q; h++)
      for (int i = 0; i < a->seqlen_q; i++) {
        size_t x = ((size_t)b * a->heads_q + h) * a->seqlen_q + i;
        dense[x] = i < s->lq[b] ? (double)l[x] : -INFINITY;
      }
}

/* Every output buffer in ids still holds its poison (a failing call wrote
   nothing). */
static void check_untouched(xs *s, const int *ids, int n, msgbuf *m) {
  for (int k = 0; k < n; k++) {
    ts_buf *b = &s->buf[ids[k]];
    if (!b->alloc || ts_buf_download(s->ctx, b)) continue;
    fa_dtype t = buf_dtype(s, ids[k]);
    size_t cnt = b->bytes / ts_dtype_size(t);
    for (size_t i = 0; i < cnt; i++)
      if (!ts_is_poison(b->host, t, (int64_t)i)) {
        msg(m, "%s was written by a call that failed", buf_name(ids[k]));
        break;
      }
  }
}

/* ---- running a case
 * ------------------------------------------------------------ */

typedef struct xrun {
  fa_context *ctx;
  const char *backend;
  const char *group;
  uint64_t seed;
  int verbose;
} xrun;

static void case_name(const xrun *r, const xcase *c, char *buf, size_t n) {
  static const char *cz[3] = {"0", "br", "tl"};
  char lay[32], thr[256] = "";
  int tn = 0;
  if (c->threads)
    tn += snprintf(thr + tn, sizeof thr - tn, " threads=%d", c->threads);
  if (c->slack)
    tn += snprintf(thr + tn, sizeof thr - tn, " slack=%d", c->slack);
  if (c->qamp > 0.0f)
    tn += snprintf(thr + tn, sizeof thr - tn, " qamp=%g", (double)c->qamp);
  if (c->gen) {
    static const char *gz[] = {"normal", "logits+1e4", "logits-1e4", "f16max",
                               "equal",  "nan-q",      "nan-k",      "nan-v"};
    tn += snprintf(thr + tn, sizeof thr - tn, " gen=%s%s", gz[c->gen],
                   c->expect == XV_EXPECT_ELEMENTWISE ? " elementwise" : "");
  }
  if (c->out)
    tn += snprintf(thr + tn, sizeof thr - tn, " out=%s",
                   ts_dtype_name(xv_out_dtype(c)));
  if (c->pos)
    tn += snprintf(thr + tn, sizeof thr - tn, " pos=%lld,%lld%s", c->qoff,
                   c->koff, c->pos == 2 ? "+per-seq" : "");
  if (c->descale)
    tn += snprintf(thr + tn, sizeof thr - tn, " descale=%s",
                   c->descale == 1   ? "scalar"
                   : c->descale == 2 ? "per-head"
                                     : "q1,kh,v0");
  if (c->dsinks) tn += snprintf(thr + tn, sizeof thr - tn, " dsinks");
  if (c->accum) tn += snprintf(thr + tn, sizeof thr - tn, " accumulate");
  if (c->shard)
    tn +=
        snprintf(thr + tn, sizeof thr - tn, " shard=%dx%d", c->shard, c->shard);
  if (c->plan && c->bwd) tn += snprintf(thr + tn, sizeof thr - tn, " plan");
  if (c->layout == XV_LAYOUT_PACKED)
    snprintf(lay, sizeof lay, "qkvpacked");
  else if (c->mixed)
    snprintf(lay, sizeof lay, "%s/%s/%s", ts_layout_name(c->layout),
             ts_layout_name((c->layout + 1) % 3),
             ts_layout_name((c->layout + 2) % 3));
  else
    snprintf(lay, sizeof lay, "%s", ts_layout_name(c->layout));
  snprintf(buf, n,
           "%s %s %s b%d sq%d sk%d hq%d hkv%d d%d dv%d%s causal=%s win=%d,%d "
           "cap=%g alibi=%d sink=%d scale=%g varlen=%s seqused=%d paged=%d "
           "layout=%s pad=%d lse=%d%s",
           r->backend, c->bwd ? "bwd" : "fwd", ts_dtype_name(c->dt), c->b,
           c->sq, c->sk, c->hq, c->hkv, c->d, c->dv, c->hdv0 ? "(0)" : "",
           cz[c->causal], c->wl, c->wr, (double)c->cap, c->alibi, c->sinks,
           (double)c->scale,
           c->varlen == 2 ? "q"
           : c->varlen    ? "1"
                          : "0",
           c->seqused, c->page, lay, c->pad, !c->no_lse, thr);
}

static void print_structure(const xs *s) {
  const fa_attention *a = &s->a;
  printf("    lengths q:");
  for (int b = 0; b < a->batch; b++) printf(" %d", s->lq[b]);
  printf("  k:");
  for (int b = 0; b < a->batch; b++) printf(" %d", s->lk[b]);
  if (a->cu_seqlens_k || a->block_table) {
    printf("  k storage:");
    for (int b = 0; b < a->batch; b++) printf(" %d", s->store_k[b]);
  }
  printf("\n    strides q (%" PRId64 ",%" PRId64 ",%" PRId64 ") k (%" PRId64
         ",%" PRId64 ",%" PRId64 ")",
         s->q.t.stride_batch, s->q.t.stride_seq, s->q.t.stride_head,
         s->k.t.stride_batch, s->k.t.stride_seq, s->k.t.stride_head);
  if (a->block_table)
    printf("  pages %d max_blocks_per_seq %d", a->num_pages,
           a->max_blocks_per_seq);
  printf("\n");
}

/* Classify a failed call; call it right after the call (before any other
   flashattn call clears fa_last_error()). The reason goes to why. */
static int fail_status(fa_status st, const char *what, msgbuf *m, char *why,
                       size_t wn) {
  snprintf(why, wn, "%s", fa_last_error());
  if (st == FA_ERR_UNSUPPORTED) return R_SKIP;
  msg(m, "%s returned %s: %s", what, fa_status_string(st), why);
  return R_FAIL;
}

/* 1 if the kernel that runs s's forward multiplies whole tiles of P by V
   (flashattn.h: a NaN or inf in a V row may then reach the rows of its
   tile that cannot see that key): the GPU tensor-core kernels. */
static int tile_kernel(xs *s) {
  fa_plan *plan = NULL;
  char text[512] = "";
  if (fa_plan_create(s->ctx, &s->ad, s->q.d, s->k.d, s->v.d, s->o.d, &plan))
    return 0;
  fa_plan_describe(plan, text, sizeof text);
  fa_plan_destroy(plan);
  return strstr(text, "kernel=cuda.sm80.") ||
         strstr(text, "kernel=cuda.sm90.") || strstr(text, "kernel=hip.cdna.");
}

/* XV_EXPECT_ELEMENTWISE: o (already extracted to ogot) and lse element by
   element within fz_fwd_tol's bounds; empty rows exact. */
static int check_elementwise(xs *s, const double *oref, const double *lref,
                             const double *ogot, double *lgot, char *res,
                             size_t rn, msgbuf *m) {
  const xcase *c = s->c;
  const fa_attention *a = &s->a;
  size_t no = (size_t)a->batch * a->seqlen_q * a->heads_q * c->dv;
  size_t nl = (size_t)a->batch * a->heads_q * a->seqlen_q;
  double *otol = malloc(sizeof(double) * no);
  double *ltol = malloc(sizeof(double) * nl);
  if (!otol || !ltol ||
      fz_fwd_tol(a, s->q.t, s->k.t, s->v.t, oref, lref, otol, ltol)) {
    msg(m, "out of memory");
  } else {
    // fz_compare's leak_ok bit 1: a NaN where the oracle's O is finite.
    const int leak = c->gen == XV_GEN_NAN_V && tile_kernel(s) ? 1 : 0;
    size_t bad =
        fz_compare("o", s->dto, oref, ogot, otol, no, leak, stdout, NULL, NULL);
    if (bad) msg(m, "o: %zu elements outside the fz_tol.h bounds", bad);
    if (!c->no_lse) {
      extract_lse(s, lgot);
      if (nan_role(c->gen) < 0) check_finite(lref, lgot, nl, "lse", m);
      bad = fz_compare("lse", FA_F32, lref, lgot, ltol, nl, 0, stdout, NULL,
                       NULL);
      if (bad) msg(m, "lse: %zu elements outside the fz_tol.h bounds", bad);
    }
    check_empty_rows(s, ogot, c->no_lse ? NULL : lgot, m);
    snprintf(res, rn, "every element within the fz_tol.h bounds");
  }
  free(otol);
  free(ltol);
  return m->count ? R_FAIL : R_PASS;
}

/* Chunk boundaries of n uneven chunks of len rows (cut[0] = 0, cut[n] =
   len, every chunk non-empty when len >= n). */
static void shard_cuts(int len, int n, int *cut) {
  for (int i = 0; i <= n; i++) {
    cut[i] = (int)((int64_t)len * i * (i + 1) / (n * (n + 1)));
    if (i > 0 && cut[i] <= cut[i - 1] && cut[i - 1] < len)
      cut[i] = cut[i - 1] + 1;
  }
  cut[n] = len;
}

/* The shard check, what ring attention and chunked prefill rely on: q rows
   and k rows cut into c->shard chunks each; every (q chunk, k chunk) pair
   runs as a problem of its own whose explicit positions place its rows in
   the whole, into f32 parts (o and lse); fa_merge_states combines each q
   chunk's parts into that chunk of o, and the merged lse goes into the
   whole's lse. The result must equal the whole's (checked against the
   oracle by the caller). Dense problems (the grid gives no varlen, paged,
   seqused or sinks to shard cases: a sink belongs to a whole row). On
   failure returns the status with fa_last_error() intact. */
static fa_status shard_forward(xrun *r, xs *s, msgbuf *m) {
  const xcase *c = s->c;
  const fa_attention *a = &s->ad;
  const int n = c->shard, B = a->batch, HQ = a->heads_q, DV = c->dv;
  const int SQ = a->seqlen_q, SK = a->seqlen_k;
  if (n < 1 || n > XV_MAX_SHARD || SQ < n || SK < n || a->cu_seqlens_q ||
      a->block_table || a->seqused_k || a->sinks) {
    msg(m, "harness: a shard case must be dense, sinkless, with >= %d rows", n);
    return FA_OK;
  }
  const int expl = a->positions == FA_POSITIONS_EXPLICIT;
  const int64_t qpos = expl                              ? a->q_position
                       : a->causal == FA_CAUSAL_TOP_LEFT ? 0
                                                         : (int64_t)SK - SQ;
  const int64_t kpos = expl ? a->k_position : 0;
  int qc[XV_MAX_SHARD + 1], kc[XV_MAX_SHARD + 1];
  shard_cuts(SQ, n, qc);
  shard_cuts(SK, n, kc);
  int maxq = 0;
  for (int i = 0; i < n; i++)
    if (qc[i + 1] - qc[i] > maxq) maxq = qc[i + 1] - qc[i];
  const size_t po = (size_t)B * maxq * HQ * DV, pl = (size_t)B * HQ * maxq;
  for (int j = 0; j < n; j++)
    if (ts_buf_alloc(&s->shard_o[j], po * 4) ||
        ts_buf_alloc(&s->shard_l[j], pl * 4) ||
        ts_buf_upload(s->ctx, &s->shard_o[j]) ||
        ts_buf_upload(s->ctx, &s->shard_l[j]))
      return FA_ERR_OUT_OF_MEMORY;
  if (ts_buf_alloc(&s->shard_lse, pl * 4) ||
      ts_buf_upload(s->ctx, &s->shard_lse))
    return FA_ERR_OUT_OF_MEMORY;
  const size_t ei = ts_dtype_size(c->dt), eo = ts_dtype_size(s->dto);
  float *lse_host = (float *)s->buf[B_LSE].host;
  for (int qi = 0; qi < n; qi++) {
    const int q0 = qc[qi], nq = qc[qi + 1] - qc[qi];
    fa_tensor parts[XV_MAX_SHARD];
    const float *lses[XV_MAX_SHARD];
    for (int kj = 0; kj < n; kj++) {
      const int k0 = kc[kj], nk = kc[kj + 1] - kc[kj];
      fa_attention sub = *a;
      sub.seqlen_q = nq;
      sub.seqlen_k = nk;
      sub.positions = FA_POSITIONS_EXPLICIT;
      sub.q_position = qpos + q0;
      sub.k_position = kpos + k0;
      fa_tensor tq = s->q.d, tk = s->k.d, tv = s->v.d;
      tq.data = (unsigned char *)tq.data + (size_t)q0 * tq.stride_seq * ei;
      tk.data = (unsigned char *)tk.data + (size_t)k0 * tk.stride_seq * ei;
      tv.data = (unsigned char *)tv.data + (size_t)k0 * tv.stride_seq * ei;
      fa_tensor to;
      memset(&to, 0, sizeof to);
      to.data = ts_buf_dev(&s->shard_o[kj]);
      to.dtype = FA_F32; // parts in f32, whatever the output dtype
      to.stride_head = DV;
      to.stride_seq = (int64_t)HQ * DV;
      to.stride_batch = (int64_t)nq * HQ * DV;
      parts[kj] = to;
      lses[kj] = ts_buf_dev(&s->shard_l[kj]);
      fa_status st =
          fa_forward(r->ctx, &sub, tq, tk, tv, to, (float *)lses[kj]);
      if (st) return st;
    }
    fa_tensor ov = s->o.d;
    ov.data = (unsigned char *)ov.data + (size_t)q0 * ov.stride_seq * eo;
    float *ml = ts_buf_dev(&s->shard_lse);
    fa_status st =
        fa_merge_states(r->ctx, n, parts, lses, B, nq, HQ, DV, ov, ml);
    if (!st) st = fa_synchronize(r->ctx);
    if (st) return st;
    if (c->no_lse) continue;
    if (ts_buf_download(s->ctx, &s->shard_lse)) return FA_ERR_BACKEND;
    const float *l = (const float *)s->shard_lse.host;
    for (int b = 0; b < B; b++)
      for (int h = 0; h < HQ; h++)
        for (int i = 0; i < nq; i++)
          lse_host[((size_t)b * HQ + h) * SQ + q0 + i] =
              l[((size_t)b * HQ + h) * nq + i];
  }
  if (!c->no_lse && ts_buf_upload(s->ctx, &s->buf[B_LSE]))
    return FA_ERR_BACKEND;
  return FA_OK;
}

static int run_forward(xrun *r, xs *s, char *res, size_t rn, msgbuf *m) {
  const xcase *c = s->c;
  const fa_attention *a = &s->a;
  size_t no = (size_t)a->batch * a->seqlen_q * a->heads_q * c->dv;
  size_t nl = (size_t)a->batch * a->heads_q * a->seqlen_q;
  double *oref = malloc(sizeof(double) * no),
         *ogot = malloc(sizeof(double) * no);
  double *lref = malloc(sizeof(double) * nl),
         *lgot = malloc(sizeof(double) * nl);
  float *onv = malloc(sizeof(float) * no), *lnv = malloc(sizeof(float) * nl);
  unsigned char *bits = NULL, *lbits = NULL;
  int rc = R_FAIL;
  if (!oref || !ogot || !lref || !lgot || !onv || !lnv) {
    msg(m, "out of memory");
    goto done;
  }
  if (fa_oracle_forward(a, s->q.t, s->k.t, s->v.t, oref, lref)) {
    msg(m, "oracle failed");
    goto done;
  }
  // The naive yardstick rounds the matmul operand P to the input dtype and
  // O to the output dtype; the f32 bounds hold when both are f32, the 2x
  // naive rule (with bt, the less precise of the two) otherwise.
  const fa_dtype dto = s->dto, bt = bound_dtype(c->dt, dto);
  double nerr = 0.0, nmerr = 0.0, nlerr = 0.0;
  const int elementwise = c->expect == XV_EXPECT_ELEMENTWISE;
  if (bt != FA_F32 && !elementwise) {
    fa_naive_forward_to(a, s->q.t, s->k.t, s->v.t, dto, onv, lnv);
    nerr = ts_rel_err_f(oref, onv, no);
    nmerr = ts_max_err_f(oref, onv, no);
    nlerr = ts_lse_err_f(lref, lnv, nl);
    if (!naive_sane(bt, nerr))
      msg(m,
          "harness: the naive same-precision attention disagrees with the "
          "oracle (err %.3e): the references do not agree on semantics",
          nerr);
  }
  int outs[2] = {B_O, B_LSE};
  if (poison_upload(s, outs, 2)) {
    msg(m, "upload failed");
    goto done;
  }
  float *lse_dev = c->no_lse ? NULL : ts_buf_dev(&s->buf[B_LSE]);
  fa_status st = c->shard ? shard_forward(r, s, m)
                          : fa_forward(r->ctx, &s->ad, s->q.d, s->k.d, s->v.d,
                                       s->o.d, lse_dev);
  if (!st) st = fa_synchronize(r->ctx); // GPU calls are asynchronous
  if (st) {
    char why[400];
    rc = fail_status(st, "fa_forward", m, why, sizeof why);
    check_untouched(s, outs, 2, m);
    if (rc == R_SKIP && m->count) rc = R_FAIL;
    if (rc == R_SKIP) snprintf(res, rn, "unsupported: %s", why);
    goto done;
  }
  check_memory(s, m);
  extract(s, &s->o, "o", ogot, m);
  if (nan_role(c->gen) < 0) // (fz_compare checks NaN placement exactly)
    check_finite(oref, ogot, no, "o", m);
  if (elementwise) {
    rc = check_elementwise(s, oref, lref, ogot, lgot, res, rn, m);
    goto done;
  }
  double err = ts_rel_err(oref, ogot, no), bound = fwd_bound(bt, nerr);
  double merr = ts_max_err(oref, ogot, no), mbound = fwd_bound(bt, nmerr);
  check_err("o (relative Frobenius)", err, bound, m);
  check_err("o (max abs / max |ref|)", merr, mbound, m);
  double lerr = 0.0, lbound = lse_bound(bt, nlerr);
  if (!c->no_lse) {
    extract_lse(s, lgot);
    check_finite(lref, lgot, nl, "lse", m);
    lerr = ts_lse_err(lref, lgot, nl);
    check_err("lse", lerr, lbound, m);
  } else {
    // lse = NULL: the library must not have written the lse buffer.
    int lo[1] = {B_LSE};
    check_untouched(s, lo, 1, m);
  }
  check_empty_rows(s, ogot, c->no_lse ? NULL : lgot, m);

  int n = snprintf(res, rn, "err=%.2e max=%.2e bound=%.2e/%.2e", err, merr,
                   bound, mbound);
  if (bt != FA_F32 && n > 0 && (size_t)n < rn)
    n += snprintf(res + n, rn - (size_t)n, " (naive %.2e/%.2e)", nerr, nmerr);
  if (!c->no_lse && n > 0 && (size_t)n < rn)
    n += snprintf(res + n, rn - (size_t)n, " lse_err=%.2e", lerr);

  if (c->plan) {
    // Determinism and plan == forward, bit for bit.
    size_t ob = s->buf[B_O].bytes, lb = s->buf[B_LSE].bytes;
    bits = malloc(ob + 1);
    lbits = malloc(lb + 1);
    if (!bits || !lbits) {
      msg(m, "out of memory");
      goto done;
    }
    memcpy(bits, s->buf[B_O].host, ob);
    memcpy(lbits, s->buf[B_LSE].host, lb);
    int before = m->count;
    for (int pass = 0; pass < 2; pass++) {
      if (poison_upload(s, outs, 2)) {
        msg(m, "upload failed");
        goto done;
      }
      fa_plan *plan = NULL;
      char why[400] = "";
      const char *what = pass ? "fa_plan_forward" : "fa_forward (2nd run)";
      if (pass == 0) {
        st =
            fa_forward(r->ctx, &s->ad, s->q.d, s->k.d, s->v.d, s->o.d, lse_dev);
      } else {
        st = fa_plan_create(r->ctx, &s->ad, s->q.d, s->k.d, s->v.d, s->o.d,
                            &plan);
        if (!st)
          st = fa_plan_forward(plan, s->q.d, s->k.d, s->v.d, s->o.d, lse_dev);
        if (!st) st = fa_synchronize(r->ctx); // before the plan goes
        if (st) snprintf(why, sizeof why, "%s", fa_last_error());
        fa_plan_destroy(plan);
      }
      if (!st) st = fa_synchronize(r->ctx);
      if (st && !why[0]) snprintf(why, sizeof why, "%s", fa_last_error());
      if (st) {
        msg(m, "%s returned %s: %s", what, fa_status_string(st), why);
        continue;
      }
      if (download(s, outs, 2)) {
        msg(m, "download failed");
        continue;
      }
      if (memcmp(bits, s->buf[B_O].host, ob))
        msg(m, "%s: o differs bitwise from the first fa_forward", what);
      if (!c->no_lse && memcmp(lbits, s->buf[B_LSE].host, lb))
        msg(m, "%s: lse differs bitwise from the first fa_forward", what);
    }
    if (n > 0 && (size_t)n < rn && m->count == before)
      snprintf(res + n, rn - (size_t)n, " plan=bitwise rerun=bitwise");
  }
  rc = m->count ? R_FAIL : R_PASS;
done:
  free(oref);
  free(ogot);
  free(lref);
  free(lgot);
  free(onv);
  free(lnv);
  free(bits);
  free(lbits);
  return rc;
}

/* XV_EXPECT_ELEMENTWISE for the backward: every gradient element (got,
   extracted) within fz_bwd_tol's bounds around the oracle's (ref), which
   carry the forward's own bounds into dP, D and dS. */
static int check_bwd_elementwise(xs *s, double *const ref[3],
                                 double *const got[3], const size_t cnt[3],
                                 char *res, size_t rn, msgbuf *m) {
  static const char *names[3] = {"dq", "dk", "dv"};
  const xcase *c = s->c;
  const fa_attention *a = &s->a;
  size_t no = (size_t)a->batch * a->seqlen_q * a->heads_q * c->dv;
  size_t nl = (size_t)a->batch * a->heads_q * a->seqlen_q;
  double *oref = malloc(sizeof(double) * no),
         *otol = malloc(sizeof(double) * no);
  double *lref = malloc(sizeof(double) * nl),
         *ltol = malloc(sizeof(double) * nl);
  double *tol[3] = {malloc(sizeof(double) * cnt[0]),
                    malloc(sizeof(double) * cnt[1]),
                    malloc(sizeof(double) * cnt[2])};
  if (!oref || !otol || !lref || !ltol || !tol[0] || !tol[1] || !tol[2] ||
      fa_oracle_forward(a, s->q.t, s->k.t, s->v.t, oref, lref) ||
      fz_fwd_tol(a, s->q.t, s->k.t, s->v.t, oref, lref, otol, ltol) ||
      fz_bwd_tol(a, s->q.t, s->k.t, s->v.t, s->d_o.t, oref, lref, otol, ltol,
                 ref[0], ref[1], ref[2], tol[0], tol[1], tol[2])) {
    msg(m, "out of memory");
  } else {
    for (int i = 0; i < 3; i++) {
      check_finite(ref[i], got[i], cnt[i], names[i], m);
      size_t bad = fz_compare(names[i], s->dto, ref[i], got[i], tol[i], cnt[i],
                              0, stdout, NULL, NULL);
      if (bad)
        msg(m, "%s: %zu elements outside the fz_tol.h bounds", names[i], bad);
    }
    snprintf(res, rn, "every gradient element within the fz_tol.h bounds");
  }
  free(oref);
  free(otol);
  free(lref);
  free(ltol);
  for (int i = 0; i < 3; i++) free(tol[i]);
  return m->count ? R_FAIL : R_PASS;
}

/* dsinks against the float64 oracle: |got - ref| relative to the sum of
   its terms' magnitudes (fa_oracle_dsinks), which a correct fp32 sum meets
   to ~n u; the library's D = dO . O uses its own O, rounded to the output
   dtype, which costs up to a few of that dtype's unit roundoffs: f32 2e-5,
   16-bit 4 u + 1e-3 (a wrong sign or a missing row is off by O(1)). */
static double dsinks_bound(fa_dtype t) {
  return t == FA_F32 ? 2e-5 : 4.0 * ts_unit_roundoff(t) + 1e-3;
}

static void check_dsinks(xs *s, msgbuf *m, double *worst) {
  const fa_attention *a = &s->a;
  const int HQ = a->heads_q;
  double *ref = malloc(sizeof(double) * HQ), *mag = malloc(sizeof(double) * HQ);
  *worst = 0.0;
  if (!ref || !mag ||
      fa_oracle_dsinks(a, s->q.t, s->k.t, s->v.t, s->d_o.t, ref, mag)) {
    msg(m, "oracle dsinks failed");
    free(ref);
    free(mag);
    return;
  }
  const float *got = (const float *)s->buf[B_DSINKS].host;
  const double bound = dsinks_bound(bound_dtype(s->c->dt, s->dto));
  for (int h = 0; h < HQ; h++) {
    double e = fabs((double)got[h] - ref[h]) / (mag[h] > 1e-30 ? mag[h] : 1.0);
    if (!(e <= bound)) // NaN fails too
      msg(m,
          "dsinks[%d] = %.9g, oracle %.9g (magnitude %.3g): error %.3e "
          "exceeds %.3e",
          h, (double)got[h], ref[h], mag[h], e, bound);
    if (e > *worst) *worst = e;
  }
  free(ref);
  free(mag);
}

/* Host copies of the payloads of the gradient buffers (and dsinks). */
static int grads_copy(const xs *s, const int *ids, int n, unsigned char **out) {
  for (int i = 0; i < n; i++) {
    const ts_buf *b = &s->buf[ids[i]];
    out[i] = malloc(b->bytes + 1);
    if (!out[i]) return -1;
    memcpy(out[i], b->host, b->bytes);
  }
  return 0;
}

static int backward_call(xrun *r, xs *s, const fa_attention *a, float *lse,
                         fa_plan *plan) {
  fa_status st =
      plan ? fa_plan_backward(plan, s->q.d, s->k.d, s->v.d, s->o.d, s->d_o.d,
                              lse, s->dq.d, s->dk.d, s->dv.d)
           : fa_backward(r->ctx, a, s->q.d, s->k.d, s->v.d, s->o.d, s->d_o.d,
                         lse, s->dq.d, s->dk.d, s->dv.d);
  if (!st) st = fa_synchronize(r->ctx);
  return st;
}

/* Backward plans: fa_plan_create_backward + fa_plan_backward (run twice)
   bit-identical to the fa_backward results in the host buffers. */
static void check_backward_plan(xrun *r, xs *s, float *lse, msgbuf *m) {
  int ids[4] = {B_DQ, B_DK, B_DV, B_DSINKS};
  const int n = s->buf[B_DSINKS].alloc ? 4 : 3;
  unsigned char *want[4] = {NULL, NULL, NULL, NULL};
  fa_plan *plan = NULL;
  if (grads_copy(s, ids, n, want)) {
    msg(m, "out of memory");
    goto done;
  }
  fa_status st =
      fa_plan_create_backward(r->ctx, &s->ad, s->q.d, s->k.d, s->v.d, s->o.d,
                              s->d_o.d, s->dq.d, s->dk.d, s->dv.d, &plan);
  if (st) {
    msg(m, "fa_plan_create_backward returned %s: %s", fa_status_string(st),
        fa_last_error());
    goto done;
  }
  for (int pass = 0; pass < 2; pass++) {
    if (poison_upload(s, ids, n)) {
      msg(m, "upload failed");
      goto done;
    }
    st = backward_call(r, s, NULL, lse, plan);
    if (st) {
      msg(m, "fa_plan_backward returned %s: %s", fa_status_string(st),
          fa_last_error());
      goto done;
    }
    if (download(s, ids, n)) {
      msg(m, "download failed");
      goto done;
    }
    for (int i = 0; i < n; i++)
      if (memcmp(want[i], s->buf[ids[i]].host, s->buf[ids[i]].bytes))
        msg(m,
            "fa_plan_backward (run %d): %s differs bitwise from "
            "fa_backward",
            pass + 1, buf_name(ids[i]));
  }
done:
  fa_plan_destroy(plan);
  for (int i = 0; i < 4; i++) free(want[i]);
}

/* FA_BACKWARD_ACCUMULATE: the gradient buffers' logical elements (and
   dsinks) start random, the rest poisoned; afterwards each logical element
   must be round(old + g): for f32 bit-equal to old + the overwrite result
   (held in the host buffers now), for 16-bit within one rounding of
   old + the (rounded) overwrite result: |got - e| <= u (|e| + 2 |ovw|),
   e = old + ovw. Elements outside the views keep their poison. */
/* Returns 1 when the kernel declines accumulating (FA_ERR_UNSUPPORTED, its
   reason in why): a skip, not a failure; 0 otherwise. */
static int check_accumulate(xrun *r, xs *s, float *lse, msgbuf *m, char *why,
                            size_t why_len) {
  int declined = 0;
  int ids[4] = {B_DQ, B_DK, B_DV, B_DSINKS};
  xt *x[3] = {&s->dq, &s->dk, &s->dv};
  const int n = s->buf[B_DSINKS].alloc ? 4 : 3;
  unsigned char *ovw[4] = {NULL, NULL, NULL, NULL},
                *old[4] = {NULL, NULL, NULL, NULL}, *mk[3] = {NULL, NULL, NULL};
  const fa_dtype t = s->dto;
  const double u = ts_unit_roundoff(t);
  ts_rng rng;
  ts_rng_seed(&rng, s->seed ^ 0xacc0acc0ull);
  if (grads_copy(s, ids, n, ovw)) {
    msg(m, "out of memory");
    goto done;
  }
  for (int i = 0; i < 3; i++) {
    ts_buf *b = x[i]->buf;
    size_t cnt = b->bytes / ts_dtype_size(t);
    mk[i] = view_marks(s, x[i]);
    if (!mk[i]) {
      msg(m, "out of memory");
      goto done;
    }
    ts_poison(b->host, t, cnt);
    for (size_t e = 0; e < cnt; e++)
      if (mk[i][e] == 1) ts_store(b->host, t, (int64_t)e, ts_rng_normal(&rng));
  }
  if (n == 4) {
    float *d = (float *)s->buf[B_DSINKS].host;
    for (int h = 0; h < s->a.heads_q; h++) d[h] = (float)ts_rng_normal(&rng);
  }
  if (grads_copy(s, ids, n, old)) {
    msg(m, "out of memory");
    goto done;
  }
  for (int i = 0; i < n; i++)
    if (ts_buf_upload(s->ctx, &s->buf[ids[i]])) {
      msg(m, "upload failed");
      goto done;
    }
  fa_attention acc = s->ad;
  acc.backward_mode = FA_BACKWARD_ACCUMULATE;
  fa_status st = backward_call(r, s, &acc, lse, NULL);
  if (st == FA_ERR_UNSUPPORTED) {
    (void)snprintf(why, why_len, "accumulate unsupported: %s", fa_last_error());
    declined = 1;
    goto done;
  }
  if (st) {
    msg(m, "fa_backward (FA_BACKWARD_ACCUMULATE) returned %s: %s",
        fa_status_string(st), fa_last_error());
    goto done;
  }
  if (download(s, ids, n)) {
    msg(m, "download failed");
    goto done;
  }
  for (int i = 0; i < 3; i++) {
    const ts_buf *b = x[i]->buf;
    size_t cnt = b->bytes / ts_dtype_size(t), bad = 0, outside = 0;
    for (size_t e = 0; e < cnt; e++) {
      if (mk[i][e] == 0) {
        outside += !ts_is_poison(b->host, t, (int64_t)e);
        continue;
      }
      if (mk[i][e] != 1) continue;
      double o = ts_load(old[i], t, (int64_t)e),
             w = ts_load(ovw[i], t, (int64_t)e),
             g = ts_load(b->host, t, (int64_t)e);
      int ok;
      if (t == FA_F32) {
        float want = (float)o + (float)w;
        ok = memcmp(&want, (const float *)b->host + e, 4) == 0;
      } else {
        double ex = o + w;
        ok = fabs(g - ex) <= u * (fabs(ex) + 2.0 * fabs(w)) + 1e-7;
      }
      if (!ok && bad++ < 2)
        msg(m,
            "accumulate: %s element %zu = %.9g, old %.9g + overwrite "
            "result %.9g = %.9g",
            buf_name(ids[i]), e, g, o, w, o + w);
    }
    if (bad > 2)
      msg(m, "accumulate: %s: %zu elements wrong", buf_name(ids[i]), bad);
    if (outside)
      msg(m, "accumulate: %s: %zu elements outside the view were written",
          buf_name(ids[i]), outside);
  }
  if (n == 4)
    for (int h = 0; h < s->a.heads_q; h++) {
      float o = ((const float *)old[3])[h], w = ((const float *)ovw[3])[h];
      float want = o + w, got = ((const float *)s->buf[B_DSINKS].host)[h];
      if (memcmp(&want, &got, 4))
        msg(m, "accumulate: dsinks[%d] = %.9g, want old %.9g + %.9g = %.9g", h,
            (double)got, (double)o, (double)w, (double)want);
    }
done:
  for (int i = 0; i < 4; i++) {
    free(ovw[i]);
    free(old[i]);
  }
  for (int i = 0; i < 3; i++) free(mk[i]);
  return declined;
}

static int run_backward(xrun *r, xs *s, char *res, size_t rn, msgbuf *m) {
  const xcase *c = s->c;
  const fa_attention *a = &s->a;
  size_t nq = (size_t)a->batch * a->seqlen_q * a->heads_q * c->d;
  size_t nk = (size_t)a->batch * a->seqlen_k * a->heads_kv * c->d;
  size_t nv = (size_t)a->batch * a->seqlen_k * a->heads_kv * c->dv;
  double *ref[3] = {malloc(sizeof(double) * nq), malloc(sizeof(double) * nk),
                    malloc(sizeof(double) * nv)};
  double *got[3] = {malloc(sizeof(double) * nq), malloc(sizeof(double) * nk),
                    malloc(sizeof(double) * nv)};
  float *nv_[3] = {malloc(sizeof(float) * nq), malloc(sizeof(float) * nk),
                   malloc(sizeof(float) * nv)};
  double *mag[3] = {malloc(sizeof(double) * nq), malloc(sizeof(double) * nk),
                    malloc(sizeof(double) * nv)};
  size_t cnt[3] = {nq, nk, nv};
  static const char *names[3] = {"dq", "dk", "dv"};
  int rc = R_FAIL;
  for (int i = 0; i < 3; i++)
    if (!ref[i] || !got[i] || !nv_[i] || !mag[i]) {
      msg(m, "out of memory");
      goto done;
    }
  if (fa_oracle_backward(a, s->q.t, s->k.t, s->v.t, s->d_o.t, ref[0], ref[1],
                         ref[2]) ||
      fa_oracle_backward_magnitude(a, s->q.t, s->k.t, s->v.t, s->d_o.t, mag[0],
                                   mag[1], mag[2])) {
    msg(m, "oracle failed");
    goto done;
  }
  const int elementwise = c->expect == XV_EXPECT_ELEMENTWISE;
  if (!elementwise) // (the naive 16-bit attention overflows on edge inputs)
    fa_naive_backward(a, s->q.t, s->k.t, s->v.t, s->d_o.t, nv_[0], nv_[1],
                      nv_[2]);
  int fo[2] = {B_O, B_LSE};
  if (poison_upload(s, fo, 2)) {
    msg(m, "upload failed");
    goto done;
  }
  float *lse_dev = ts_buf_dev(&s->buf[B_LSE]);
  fa_status st =
      fa_forward(r->ctx, &s->ad, s->q.d, s->k.d, s->v.d, s->o.d, lse_dev);
  if (!st) st = fa_synchronize(r->ctx);
  if (st) {
    char why[400];
    rc = fail_status(st, "fa_forward (before backward)", m, why, sizeof why);
    if (rc == R_SKIP) snprintf(res, rn, "forward unsupported: %s", why);
    goto done;
  }
  // o and lse are inputs of the backward: snapshot them.
  if (download(s, fo, 2)) {
    msg(m, "download failed");
    goto done;
  }
  for (int i = 0; i < 2; i++) {
    s->snap[fo[i]] = malloc(alloc_bytes(&s->buf[fo[i]]));
    if (!s->snap[fo[i]]) {
      msg(m, "out of memory");
      goto done;
    }
    memcpy(s->snap[fo[i]], s->buf[fo[i]].alloc, alloc_bytes(&s->buf[fo[i]]));
  }
  int outs[4] = {B_DQ, B_DK, B_DV, B_DSINKS};
  const int nouts = s->buf[B_DSINKS].alloc ? 4 : 3;
  if (poison_upload(s, outs, nouts)) {
    msg(m, "upload failed");
    goto done;
  }
  st = fa_backward(r->ctx, &s->ad, s->q.d, s->k.d, s->v.d, s->o.d, s->d_o.d,
                   lse_dev, s->dq.d, s->dk.d, s->dv.d);
  if (!st) st = fa_synchronize(r->ctx);
  if (st) {
    char why[400];
    rc = fail_status(st, "fa_backward", m, why, sizeof why);
    check_untouched(s, outs, nouts, m);
    if (rc == R_SKIP && m->count) rc = R_FAIL;
    if (rc == R_SKIP) snprintf(res, rn, "unsupported: %s", why);
    goto done;
  }
  check_memory(s, m);
  extract(s, &s->dq, "dq", got[0], m);
  extract(s, &s->dk, "dk", got[1], m);
  extract(s, &s->dv, "dv", got[2], m);
  if (elementwise) {
    rc = check_bwd_elementwise(s, ref, got, cnt, res, rn, m);
    goto done;
  }
  double err[3], bound[3], merr[3], mbound[3];
  for (int i = 0; i < 3; i++) {
    check_finite(ref[i], got[i], cnt[i], names[i], m);
    // Normalised by the gradient magnitudes (see bwd_bound()).
    err[i] = ts_scaled_err(ref[i], got[i], mag[i], cnt[i]);
    merr[i] = ts_scaled_max_err(ref[i], got[i], mag[i], cnt[i]);
    const fa_dtype bt = bound_dtype(c->dt, s->dto);
    mbound[i] =
        bwd_bound(bt, ts_scaled_max_err_f(ref[i], nv_[i], mag[i], cnt[i]));
    double ne = ts_scaled_err_f(ref[i], nv_[i], mag[i], cnt[i]);
    if (!naive_sane(bt, ne))
      msg(m,
          "harness: naive same-precision %s disagrees with the oracle "
          "(err %.3e): the references do not agree on semantics",
          names[i], ne);
    bound[i] = bwd_bound(bt, ne);
    char what[64];
    snprintf(what, sizeof what, "%s (||err|| / ||magnitude||)", names[i]);
    check_err(what, err[i], bound[i], m);
    snprintf(what, sizeof what, "%s (max |err| / max magnitude)", names[i]);
    check_err(what, merr[i], mbound[i], m);
  }
  int rl = snprintf(res, rn,
                    "dq=%.1e/%.1e dk=%.1e/%.1e dv=%.1e/%.1e bound=%.1e/%.1e "
                    "%.1e/%.1e %.1e/%.1e",
                    err[0], merr[0], err[1], merr[1], err[2], merr[2], bound[0],
                    mbound[0], bound[1], mbound[1], bound[2], mbound[2]);
  if (nouts == 4) {
    double w;
    check_dsinks(s, m, &w);
    if (rl > 0 && (size_t)rl < rn)
      rl += snprintf(res + rl, rn - (size_t)rl, " dsinks=%.1e/%.1e", w,
                     dsinks_bound(bound_dtype(c->dt, s->dto)));
  }
  int before = m->count;
  if (c->plan) check_backward_plan(r, s, lse_dev, m);
  char declined[512] = "";
  if (c->accum &&
      check_accumulate(r, s, lse_dev, m, declined, sizeof declined)) {
    // The kernel runs the overwriting backward (checked above) but declines
    // accumulating, with its reason: reported as a skip (GPU kernels today).
    if (!m->count) {
      snprintf(res, rn, "%s", declined);
      rc = R_SKIP;
      goto done;
    }
  }
  if (m->count == before && rl > 0 && (size_t)rl < rn)
    snprintf(res + rl, rn - (size_t)rl, "%s%s", c->plan ? " plan=bitwise" : "",
             c->accum ? " accumulate=ok" : "");
  rc = m->count ? R_FAIL : R_PASS;
done:
  for (int i = 0; i < 3; i++) {
    free(ref[i]);
    free(got[i]);
    free(nv_[i]);
    free(mag[i]);
  }
  return rc;
}

static int run_case(xrun *r, const xcase *c, int idx, int *counts) {
  char name[512], res[512] = "";
  case_name(r, c, name, sizeof name);
  printf("[%3d] %s: ", idx, name);
  fflush(stdout);
  uint64_t struct_seed = str_hash(r->group) * 31 + (uint64_t)idx;
  uint64_t data_seed = ts_case_seed(r->seed, struct_seed);
  msgbuf m;
  memset(&m, 0, sizeof m);
  xs s;
  int rc;
  double t0 = ts_now();
  // Threads only shape the plan (number of workers, kv splits); a GPU
  // context refuses them, which is fine.
  if (c->threads) fa_context_set_threads(r->ctx, c->threads);
  if (xs_setup(&s, r->ctx, c, struct_seed, data_seed)) {
    msg(&m, "setup failed (out of memory or upload error)");
    rc = R_FAIL;
  } else {
    rc = c->bwd ? run_backward(r, &s, res, sizeof res, &m)
                : run_forward(r, &s, res, sizeof res, &m);
  }
  double dt = ts_now() - t0;
  static const char *word[3] = {"PASS", "FAIL", "SKIP"};
  printf("%s %s (%.2fs)\n", word[rc], res, dt);
  if ((r->verbose || rc == R_FAIL) && s.lq) {
    // What the library planned for this problem (tiles, kv splits).
    fa_plan *plan = NULL;
    char d[512];
    if (fa_plan_create(r->ctx, &s.ad, s.q.d, s.k.d, s.v.d, s.o.d, &plan) ==
        FA_OK) {
      fa_plan_describe(plan, d, sizeof d);
      printf("    plan: %s\n", d);
    }
    fa_plan_destroy(plan);
  }
  if (rc == R_FAIL) {
    fputs(m.text, stdout);
    if (m.count > 12) printf("    ... %d more problems\n", m.count - 12);
    if (s.lq) print_structure(&s);
    printf("    reproduce: FA_TEST_SEED=0x%" PRIx64
           " test_xval --backend %s --group %s --case %d\n",
           r->seed, r->backend, r->group, idx);
  } else if (r->verbose && s.lq) {
    print_structure(&s);
  }
  if (c->threads) fa_context_set_threads(r->ctx, 0);
  xs_free(&s);
  counts[rc]++;
  fflush(stdout);
  return rc;
}

/* ---- main
 * -------------------------------------------------------------------- */

static void usage(void) {
  fprintf(stderr,
          "usage: test_xval --backend NAME|all --group GROUP|all [--case N] "
          "[--list] [--verbose] [--seed S]\n       test_xval --selftest   "
          "(checks the oracle itself; no backend)\ngroups:");
  for (int i = 0; xv_groups[i]; i++) fprintf(stderr, " %s", xv_groups[i]);
  fprintf(stderr, "\nFA_TEST_SEED=S fixes the data seed.\n");
}

#define MAX_CASES 1024

static int run_group(xrun *r, const char *group, int only, int list,
                     int *counts) {
  static xcase cases[MAX_CASES];
  int n = xv_group_cases(group, cases, MAX_CASES);
  if (n < 0 || n > MAX_CASES) {
    fprintf(stderr, "test_xval: unknown group \"%s\"\n", group);
    usage();
    return -1;
  }
  r->group = group;
  for (int i = 0; i < n; i++) {
    if (only >= 0 && i != only) continue;
    if (list) {
      char name[512];
      case_name(r, &cases[i], name, sizeof name);
      printf("[%3d] %s\n", i, name);
      continue;
    }
    run_case(r, &cases[i], i, counts);
  }
  return 0;
}

static int run_backend(xrun *r, const char *group, int only, int list,
                       int *counts) {
  fa_status st = fa_context_create_by_name(&r->ctx, r->backend);
  if (st) {
    printf("SKIP: backend %s is not usable here: %s (%s)\n", r->backend,
           fa_status_string(st), fa_last_error());
    return 1;
  }
  int rc = 0;
  if (strcmp(group, "all") == 0) {
    for (int g = 0; xv_groups[g] && rc == 0; g++)
      rc = run_group(r, xv_groups[g], only, list, counts);
  } else {
    rc = run_group(r, group, only, list, counts);
  }
  fa_context_destroy(r->ctx);
  r->ctx = NULL;
  return rc < 0 ? -1 : 0;
}

int main(int argc, char **argv) {
  const char *backend = NULL, *group = NULL;
  int only = -1, list = 0, verbose = 0;
  uint64_t seed = ts_seed_base();
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--backend") && i + 1 < argc)
      backend = argv[++i];
    else if (!strcmp(argv[i], "--group") && i + 1 < argc)
      group = argv[++i];
    else if (!strcmp(argv[i], "--case") && i + 1 < argc)
      only = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
      seed = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--list"))
      list = 1;
    else if (!strcmp(argv[i], "--selftest"))
      return xv_selftest() ? 1 : 0;
    else if (!strcmp(argv[i], "--verbose") || !strcmp(argv[i], "-v"))
      verbose = 1;
    else {
      usage();
      return 2;
    }
  }
  if (!backend || !group) {
    usage();
    return 2;
  }
  printf("test_xval %s: backend %s, group %s, seed 0x%" PRIx64 "%s\n",
         fa_version(), backend, group, seed,
         ts_seed_from_env() ? " (FA_TEST_SEED)" : "");
  int counts[3] = {0, 0, 0}, unusable = 0;
  double t0 = ts_now();
  xrun r = {NULL, backend, NULL, seed, verbose};
  if (strcmp(backend, "all") == 0) {
    int nb = fa_backend_count();
    for (int i = 0; i < nb; i++) {
      r.backend = fa_backend_name(i);
      int rc = run_backend(&r, group, only, list, counts);
      if (rc < 0) return 2;
      if (rc > 0) { // listed as usable, yet no context: a library bug
        printf("FAIL: fa_backend_name(%d) = %s is listed as usable but "
               "fa_context_create_by_name failed\n",
               i, r.backend);
        unusable++;
      }
    }
    if (nb == 0) printf("SKIP: no usable backend\n");
  } else {
    int rc = run_backend(&r, group, only, list, counts);
    if (rc < 0) return 2;
  }
  if (list) return 0;
  printf("%s %s: %d passed, %d failed, %d skipped (unsupported) in %.1fs; "
         "seed 0x%" PRIx64 "\n",
         backend, group, counts[R_PASS], counts[R_FAIL], counts[R_SKIP],
         ts_now() - t0, seed);
  if (counts[R_FAIL] || unusable) {
    printf("FAILED: rerun with FA_TEST_SEED=0x%" PRIx64 " to reproduce\n",
           seed);
    return 1;
  }
  if (counts[R_PASS] == 0) {
    printf("SKIP: nothing ran (backend unusable or every case unsupported)\n");
    return TS_SKIP;
  }
  return 0;
}
