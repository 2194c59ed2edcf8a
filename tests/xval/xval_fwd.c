// SPDX-License-Identifier: MIT
// The forward checks of a case: the call (or the shard-and-merge of
// fwd.shard), its outputs against the oracle under the case's expectation
// mode, and for plan cases plan == forward == rerun, bit for bit.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xval_run.h"

/* 1 if the kernel that runs s's forward rounds P to FP8 for its P V
   product (the FP8 tensor-core kernels, e4m3 or e5m2 inputs: P e4m3 times
   2^8): the naive yardstick then rounds P the same way
   (fa_naive_forward_p8). */
static int p8_kernel(xs *s) {
  static const char *const p8[] = {"kernel=cuda.sm90.e4m3.",
                                   "kernel=cuda.sm90.e5m2."};
  return xv_fwd_kernel_is(s, p8, 2);
}

/* 1 if that kernel decodes FP8 inputs to f16 tiles and so rounds P to f16
   for its P V product (cuda.sm80.e4m3.*, cuda.sm80.e5m2.*: their mma.sync
   takes f16 operands): the naive yardstick then rounds P to f16, and the
   bound is the less precise of f16 and the output dtype. */
static int p16_kernel(xs *s) {
  static const char *const p16[] = {"kernel=cuda.sm80.e4m3.",
                                    "kernel=cuda.sm80.e5m2."};
  return xv_fwd_kernel_is(s, p16, 2);
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
    xv_msg(m, "harness: a shard case must be dense, sinkless, with >= %d rows",
           n);
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

int xv_run_forward(xrun *r, xs *s, char *res, size_t rn, msgbuf *m) {
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
    xv_msg(m, "out of memory");
    goto done;
  }
  if (fa_oracle_forward(a, s->q.t, s->k.t, s->v.t, oref, lref)) {
    xv_msg(m, "oracle failed");
    goto done;
  }
  // The naive yardstick rounds the matmul operand P to the input dtype and
  // O to the output dtype; the f32 bounds hold when both are f32, the 2x
  // naive rule (with bt, the less precise of the two) otherwise.
  // A kernel with FP8 P: P rounded to e4m3 in the yardstick, whose error
  // (~2^-5 relative per P) is then judged as bf16's, 16 u = 6e-2.
  const int p8 = p8_kernel(s), p16 = !p8 && p16_kernel(s);
  const fa_dtype dto = s->dto, bt = p8    ? FA_BF16
                                    : p16 ? xv_bound_dtype(FA_F16, dto)
                                          : xv_bound_dtype(c->dt, dto);
  double nerr = 0.0, nmerr = 0.0, nlerr = 0.0;
  const int elementwise = c->expect != XV_EXPECT_RULE;
  if (p8 && !elementwise) {
    fa_naive_forward_p8(a, s->q.t, s->k.t, s->v.t, dto, onv, lnv);
    nerr = ts_rel_err_f(oref, onv, no);
    nmerr = ts_max_err_f(oref, onv, no);
    nlerr = ts_lse_err_f(lref, lnv, nl);
  } else if (bt != FA_F32 && !elementwise) {
    if (p16)
      fa_naive_forward_pt(a, s->q.t, s->k.t, s->v.t, FA_F16, dto, onv, lnv);
    else
      fa_naive_forward_to(a, s->q.t, s->k.t, s->v.t, dto, onv, lnv);
    nerr = ts_rel_err_f(oref, onv, no);
    nmerr = ts_max_err_f(oref, onv, no);
    nlerr = ts_lse_err_f(lref, lnv, nl);
    if (!xv_naive_sane(bt, nerr))
      xv_msg(m,
             "harness: the naive same-precision attention disagrees with the "
             "oracle (err %.3e): the references do not agree on semantics",
             nerr);
  }
  int outs[2] = {B_O, B_LSE};
  if (xv_poison_upload(s, outs, 2)) {
    xv_msg(m, "upload failed");
    goto done;
  }
  float *lse_dev = c->no_lse ? NULL : ts_buf_dev(&s->buf[B_LSE]);
  fa_status st = c->shard ? shard_forward(r, s, m)
                          : fa_forward(r->ctx, &s->ad, s->q.d, s->k.d, s->v.d,
                                       s->o.d, lse_dev);
  if (!st) st = fa_synchronize(r->ctx); // GPU calls are asynchronous
  if (st) {
    char why[400];
    rc = xv_fail_status(st, "fa_forward", m, why, sizeof why);
    xv_check_untouched(s, outs, 2, m);
    if (rc == R_SKIP && m->count) rc = R_FAIL;
    if (rc == R_SKIP) snprintf(res, rn, "unsupported: %s", why);
    goto done;
  }
  xv_check_memory(s, m);
  xv_extract(s, &s->o, "o", ogot, m);
  if (xv_nan_role(c->gen) < 0) // (fz_compare checks NaN placement exactly)
    xv_check_finite(oref, ogot, no, "o", m);
  if (elementwise) {
    rc = xv_check_elementwise(s, oref, lref, ogot, lgot, res, rn, m);
    goto done;
  }
  double max_lse = 0.0; // the logit scale of the f32 bound
  for (size_t i = 0; i < nl; i++)
    if (isfinite(lref[i]) && fabs(lref[i]) > max_lse) max_lse = fabs(lref[i]);
  double err = ts_rel_err(oref, ogot, no),
         bound = xv_fwd_bound(bt, nerr, max_lse);
  double merr = ts_max_err(oref, ogot, no),
         mbound = xv_fwd_max_bound(bt, nmerr, max_lse);
  xv_check_err("o (relative Frobenius)", err, bound, m);
  xv_check_err("o (max abs / max |ref|)", merr, mbound, m);
  // FP8 products: the tensor cores keep ~14 bits of the accumulated sum
  // (reported for Hopper's FP8 GEMMs), so the scores, and the LSE, carry
  // ~2^-14 of sum |scale q_c k_c|: up to ~1e-3 on this grid's data.
  double lerr = 0.0, lbound = xv_lse_bound(bt, nlerr) + (p8 ? 1e-3 : 0.0);
  if (!c->no_lse) {
    xv_extract_lse(s, lgot);
    xv_check_finite(lref, lgot, nl, "lse", m);
    lerr = ts_lse_err(lref, lgot, nl);
    xv_check_err("lse", lerr, lbound, m);
  } else {
    // lse = NULL: the library must not have written the lse buffer.
    int lo[1] = {B_LSE};
    xv_check_untouched(s, lo, 1, m);
  }
  xv_check_empty_rows(s, ogot, c->no_lse ? NULL : lgot, m);

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
      xv_msg(m, "out of memory");
      goto done;
    }
    memcpy(bits, s->buf[B_O].host, ob);
    memcpy(lbits, s->buf[B_LSE].host, lb);
    int before = m->count;
    for (int pass = 0; pass < 2; pass++) {
      if (xv_poison_upload(s, outs, 2)) {
        xv_msg(m, "upload failed");
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
        xv_msg(m, "%s returned %s: %s", what, fa_status_string(st), why);
        continue;
      }
      if (xv_download(s, outs, 2)) {
        xv_msg(m, "download failed");
        continue;
      }
      if (memcmp(bits, s->buf[B_O].host, ob))
        xv_msg(m, "%s: o differs bitwise from the first fa_forward", what);
      if (!c->no_lse && memcmp(lbits, s->buf[B_LSE].host, lb))
        xv_msg(m, "%s: lse differs bitwise from the first fa_forward", what);
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
