// SPDX-License-Identifier: MIT
// The calls under test and their checks against the float64 oracle:
// forward, plan, backward, merge.
#include "fz_harness.h"

void oracle_forward(fz_case *c, dense *d) {
  const fa_attention *a = &c->a;
  int dv = a->head_dim_v ? a->head_dim_v : a->head_dim;
  d->no = (size_t)a->batch * a->seqlen_q * a->heads_q * dv;
  d->nl = (size_t)a->batch * a->heads_q * a->seqlen_q;
  d->o = malloc(sizeof(double) * d->no);
  d->otol = malloc(sizeof(double) * d->no);
  d->lse = malloc(sizeof(double) * d->nl);
  d->ltol = malloc(sizeof(double) * d->nl);
  if (!d->o || !d->otol || !d->lse || !d->ltol) die("harness out of memory");
  if (fa_oracle_forward(a, c->t[T_Q], c->t[T_K], c->t[T_V], d->o, d->lse))
    die("the oracle refused a problem fa_forward accepted");
  if (fz_fwd_tol(a, c->t[T_Q], c->t[T_K], c->t[T_V], d->o, d->lse, d->otol,
                 d->ltol))
    die("harness out of memory");
  // o stored in another dtype than the inputs' (the output dtype group):
  // the bounds above round to the input dtype; add o's own final rounding.
  const fa_dtype od = c->t[T_O].dtype;
  if (dtype_valid(od) && od != c->t[T_Q].dtype)
    for (size_t i = 0; i < d->no; i++)
      d->otol[i] += fz_round_rel(od) * fabs(d->o[i]) + fz_round_abs(od);
}

static void grads_free(dense *d);

void dense_free(dense *d) {
  if (d->no == (size_t)-1) {
    grads_free(d);
    return;
  }
  free(d->o);
  free(d->lse);
  free(d->otol);
  free(d->ltol);
  memset(d, 0, sizeof *d);
}

static void grads_free(dense *d) {
  double **p = (double **)d->o;
  if (p)
    for (int i = 0; i < 6; i++) free(p[i]);
  free(d->o);
  memset(d, 0, sizeof *d);
}

/* ---- forward
 * ------------------------------------------------------------------------ */

const int fwd_outs[1] = {T_O}, fwd_ins[3] = {T_Q, T_K, T_V};

fa_status call_forward(fz_run *run) {
  fz_case *c = run->c;
  all_snapshot(c);
  fa_status s = fa_forward(run->ctx, &c->a, c->t[T_Q], c->t[T_K], c->t[T_V],
                           c->t[T_O], lse_ptr(c));
  check_status(s, "fa_forward", run->backend);
  if (s != FA_OK) {
    check_nothing_written(c, "fa_forward");
    return s;
  }
  if (c->must_fail) {
    report_case(run, "fa_forward");
    die("fa_forward accepted a problem whose tensors overflow 64-bit offsets");
  }
  if (call_overlaps(c, fwd_outs, 1, fwd_ins, 3, 1)) {
    report_case(run, "fa_forward");
    die("fa_forward accepted an output overlapping an input or lse");
  }
  check_only_outputs_written(c, "fa_forward", fwd_outs, 1, 1);
  return s;
}

FZ_CHECKER void check_forward(fz_run *run, const dense *ref) {
  fz_case *c = run->c;
  const fa_attention *a = &c->a;
  int dv = a->head_dim_v ? a->head_dim_v : a->head_dim;
  int nan_in = (c->data_mode >> 3) & 3;
  double *got = malloc(sizeof(double) * ref->no);
  if (!got) die("harness out of memory");
  extract_q(c, T_O, got, "fa_forward");
  int sh[3] = {a->seqlen_q, a->heads_q, dv};
  // A NaN in V reaches rows that cannot see its key through P = 0 (0 * NaN
  // in the P.V product): a known limitation, reported, not a failure here.
  // The row-streaming path skips P == 0 exactly, so a NaN in V whose
  // weight underflowed to 0 vanishes there (finite where the oracle,
  // computing 0 * NaN, has NaN). Both accepted in the V-NaN mode.
  // An input reading another tensor's buffer may read its NaN padding:
  // then as in the V-NaN mode.
  int in_alias = 0;
  for (int i = 0; i < NT; i++) in_alias |= !t_output[i] && c->alias_of[i] >= 0;
  size_t bad =
      fz_compare("o", c->t[T_O].dtype, ref->o, got, ref->otol, ref->no,
                 nan_in || in_alias ? 1 | 4 : 0, stderr, idx_name_q, sh);
  float *l = lse_ptr(c);
  if (l) {
    double *lg = malloc(sizeof(double) * ref->nl);
    if (!lg) die("harness out of memory");
    for (int b = 0; b < a->batch; b++)
      for (int h = 0; h < a->heads_q; h++)
        for (int i = 0; i < a->seqlen_q; i++) {
          size_t x = ((size_t)b * a->heads_q + h) * a->seqlen_q + i;
          if (i >= fa_oracle_len_q(a, b)) { // varlen padding: unspecified
            lg[x] = ref->lse[x];
            continue;
          }
          uint32_t bits;
          memcpy(&bits, &l[x], 4);
          if (bits == ts_poison_bits(FA_F32))
            die("fa_forward: lse[b=%d][h=%d][row=%d] was never written", b, h,
                i);
          lg[x] = l[x];
        }
    int lsh[2] = {a->heads_q, a->seqlen_q};
    // A NaN score can be dropped by the kernels' vector max, leaving the
    // row max -inf and the LSE -inf (or, with a sink, the sink's finite
    // value) instead of NaN; O is NaN either way: a known defect, reported,
    // accepted here.
    bad +=
        fz_compare("lse", FA_F32, ref->lse, lg, ref->ltol, ref->nl,
                   nan_in || in_alias ? 2 | 4 : 0, stderr, idx_name_lse, lsh);
    free(lg);
  }
  free(got);
  if (bad) {
    report_case(run, "fa_forward");
    die("fa_forward on %s differs from the oracle beyond the bound (%zu "
        "elements)",
        run->backend, bad);
  }
}

/* ---- plan
 * ----------------------------------------------------------------------------
 */

/* fa_plan_create + fa_plan_forward: the same status and message as
   fa_forward, and the same bits. pre: the o and lse buffers as they were
   before fa_forward; post: as it left them. */

void save_buf(fz_buf *b, unsigned char **to) {
  *to = NULL;
  if (!b) return;
  *to = malloc(b->bytes + 1);
  if (!*to) die("harness out of memory");
  memcpy(*to, b->data, b->bytes);
}

void saved_free(saved *s) {
  free(s->o_pre);
  free(s->o_post);
  free(s->l_pre);
  free(s->l_post);
  memset(s, 0, sizeof *s);
}

void run_plan(fz_run *run, fa_status fwd_status, const char *fwd_msg,
              saved *sv) {
  fz_case *c = run->c;
  if (sv->ob) memcpy(sv->ob->data, sv->o_pre, sv->ob->bytes);
  if (sv->lb) memcpy(sv->lb->data, sv->l_pre, sv->lb->bytes);
  all_snapshot(c);
  fa_plan *const sentinel = (fa_plan *)(uintptr_t)0x40;
  fa_plan *plan = sentinel;
  fa_status s = fa_plan_create(run->ctx, &c->a, c->t[T_Q], c->t[T_K], c->t[T_V],
                               c->t[T_O], &plan);
  check_status(s, "fa_plan_create", run->backend);
  if (s != FA_OK) {
    if (plan != sentinel) die("a failing fa_plan_create wrote *plan");
    check_nothing_written(c, "fa_plan_create");
    if (fwd_status == FA_OK)
      die("fa_plan_create refuses (%s) a problem fa_forward ran",
          fa_last_error());
    if (s != fwd_status || strcmp(fwd_msg, fa_last_error()))
      die("fa_plan_create says %d \"%s\", fa_forward %d \"%s\"", (int)s,
          fa_last_error(), (int)fwd_status, fwd_msg);
    return;
  }
  char desc[64];
  size_t dl = fa_plan_describe(plan, desc, sizeof desc);
  if (dl == 0 || strnlen(desc, sizeof desc) == sizeof desc)
    die("fa_plan_describe: bad text");
  s = fa_plan_forward(plan, c->t[T_Q], c->t[T_K], c->t[T_V], c->t[T_O],
                      lse_ptr(c));
  check_status(s, "fa_plan_forward", run->backend);
  if (s != fwd_status || (s && strcmp(fwd_msg, fa_last_error())))
    die("fa_plan_forward says %d \"%s\", fa_forward %d \"%s\"", (int)s,
        fa_last_error(), (int)fwd_status, fwd_msg);
  if (s != FA_OK) {
    check_nothing_written(c, "fa_plan_forward");
  } else {
    if (sv->ob && memcmp(sv->o_post, sv->ob->data, sv->ob->bytes))
      die("fa_plan_forward and fa_forward differ in o's buffer");
    if (sv->lb && memcmp(sv->l_post, sv->lb->data, sv->lb->bytes))
      die("fa_plan_forward and fa_forward differ in lse");
  }
  fa_plan_destroy(plan);
}

/* ---- backward
 * ----------------------------------------------------------------------- */

static const int bwd_outs[3] = {T_DQ, T_DK, T_DV},
                 bwd_ins[5] = {T_Q, T_K, T_V, T_O, T_DO};

/* dk/dv in physical slots: the oracle's logical gradients summed into the
   slots they occupy (a paged pool may share a slot between sequences). */
FZ_CHECKER static size_t compare_k(fz_case *c, int i, const double *ref,
                                   const double *tol, int leak_ok,
                                   const char *what) {
  const fa_attention *a = &c->a;
  const fa_tensor *t = &c->t[i];
  fz_buf *bb = buf_of(c, i);
  unsigned char *mk = marks_of(c, i); // (NULL data: an empty view, n = 0)
  size_t es = dsize(t->dtype), n = bb ? bb->bytes / es : 0;
  size_t stray = bb ? first_stray(mk, bb->data, bb->snap + bb->lead, n, es) : 0;
  if (stray < n)
    die("%s: %s element %zu (outside its view) was written", what, tname[i],
        stray);
  double *pr = calloc(n + 1, sizeof(double)),
         *pt = calloc(n + 1, sizeof(double));
  double *rr = malloc(sizeof(double) * (n + 1)),
         *gg = malloc(sizeof(double) * (n + 1)),
         *tt = malloc(sizeof(double) * (n + 1));
  if (!pr || !pt || !rr || !gg || !tt) die("harness out of memory");
  int dim = (int)c->ext[i][3];
  for (int b = 0; b < a->batch; b++)
    for (int j = 0; j < fa_oracle_len_k(a, b); j++)
      for (int h = 0; h < a->heads_kv; h++) {
        int64_t o = fa_oracle_k_index(a, t, b, j, h);
        size_t r = (((size_t)b * a->seqlen_k + j) * a->heads_kv + h) * dim;
        for (int e = 0; e < dim; e++) {
          pr[o + e] += ref[r + e];
          pt[o + e] += tol[r + e];
        }
      }
  size_t cnt = 0;
  for (size_t x = 0; x < n; x++) {
    if (mk[x] != 1) continue;
    if (ts_is_poison(t->data, t->dtype, (int64_t)x))
      die("%s: %s element %zu (a logical key) was never written", what,
          tname[i], x);
    rr[cnt] = pr[x];
    gg[cnt] = ts_load(t->data, t->dtype, (int64_t)x);
    tt[cnt] = pt[x];
    cnt++;
  }
  size_t bad = fz_compare(tname[i], t->dtype, rr, gg, tt, cnt, leak_ok, stderr,
                          NULL, NULL);
  free(rr);
  free(gg);
  free(tt);
  free(pr);
  free(pt);
  return bad;
}

/* The oracle's gradients and their bounds, computed once per input: in
   g->o (dq), g->lse (dk), g->otol (dv) and tolerances in tq/tk/tv. */
typedef struct grads {
  double *r[3], *t[3];
} grads;

void run_backward(fz_run *run, const dense *fwd, dense *cache, int checked) {
  fz_case *c = run->c;
  const fa_attention *a = &c->a;
  poison_outputs(c, bwd_outs, 3, 0);
  all_snapshot(c);
  fa_status s =
      fa_backward(run->ctx, a, c->t[T_Q], c->t[T_K], c->t[T_V], c->t[T_O],
                  c->t[T_DO], lse_ptr(c), c->t[T_DQ], c->t[T_DK], c->t[T_DV]);
  check_status(s, "fa_backward", run->backend);
  if (s != FA_OK) {
    check_nothing_written(c, "fa_backward");
    return;
  }
  if (c->must_fail) {
    report_case(run, "fa_backward");
    die("fa_backward accepted a problem whose tensors overflow 64-bit "
        "offsets");
  }
  if (call_overlaps(c, bwd_outs, 3, bwd_ins, 5, 0)) {
    report_case(run, "fa_backward");
    die("fa_backward accepted a gradient overlapping an input or lse");
  }
  check_only_outputs_written(c, "fa_backward", bwd_outs, 3, 0);
  if (!checked) return;
  int dv = a->head_dim_v ? a->head_dim_v : a->head_dim, d = a->head_dim;
  size_t nq = (size_t)a->batch * a->seqlen_q * a->heads_q * d;
  size_t nk = (size_t)a->batch * a->seqlen_k * a->heads_kv * d;
  size_t nv = (size_t)a->batch * a->seqlen_k * a->heads_kv * dv;
  grads *gr = (grads *)cache->o;
  if (!gr) {
    // The oracle's gradients: once per input (the inputs do not change).
    gr = calloc(1, sizeof *gr);
    if (!gr) die("harness out of memory");
    size_t cnt[3] = {nq, nk, nv};
    for (int i = 0; i < 3; i++) {
      gr->r[i] = malloc(8 * cnt[i]);
      gr->t[i] = malloc(8 * cnt[i]);
      if (!gr->r[i] || !gr->t[i]) die("harness out of memory");
    }
    if (fa_oracle_backward(a, c->t[T_Q], c->t[T_K], c->t[T_V], c->t[T_DO],
                           gr->r[0], gr->r[1], gr->r[2]))
      die("the oracle refused a problem fa_backward accepted");
    if (fz_bwd_tol(a, c->t[T_Q], c->t[T_K], c->t[T_V], c->t[T_DO], fwd->o,
                   fwd->lse, fwd->otol, fwd->ltol, gr->r[0], gr->r[1], gr->r[2],
                   gr->t[0], gr->t[1], gr->t[2]))
      die("harness out of memory");
    cache->o = (double *)gr;
    cache->no = (size_t)-1; // marks the cache as grads for dense_free
  }
  double **r = gr->r, **t = gr->t;
  double *g = malloc(8 * nq);
  if (!g) die("harness out of memory");
  // Any NaN input reaches gradients through masked entries (0 * NaN): the
  // known limitation (reported), accepted here.
  // (And a NaN the forward dropped, see check_forward, leaves gradients
  // finite where the oracle's are NaN.)
  int leak = ((c->data_mode >> 3) & 3) != 0 ? 1 | 4 : 0;
  for (int i = 0; i < NT; i++)
    if (!t_output[i] && c->alias_of[i] >= 0) leak = 1 | 4;
  // lse written by the forward into an input (do) puts -inf and large
  // values into it: inf arithmetic, whose NaN-or-inf outcome is order
  // dependent.
  if (c->lse_alias >= 0 && !t_output[c->lse_alias]) leak = 1 | 4;
  extract_q(c, T_DQ, g, "fa_backward");
  int sh[3] = {a->seqlen_q, a->heads_q, d};
  size_t bad = fz_compare("dq", c->dtype, r[0], g, t[0], nq, leak, stderr,
                          idx_name_q, sh);
  bad += compare_k(c, T_DK, r[1], t[1], leak, "fa_backward");
  bad += compare_k(c, T_DV, r[2], t[2], leak, "fa_backward");
  free(g);
  if (bad) {
    report_case(run, "fa_backward");
    die("fa_backward on %s differs from the oracle beyond the bound (%zu "
        "elements)",
        run->backend, bad);
  }
}

/* ---- merge
 * ---------------------------------------------------------------------------
 */

/* fa_merge_states' result against the float64 oracle, from the snapshots
   (an in-place merge overwrote a part). */
FZ_CHECKER static void merge_check(const fz_run *run, int n, int np, int B,
                                   int S, int H, int D, const fa_tensor *parts,
                                   const fz_buf *pb, const fz_buf *lb,
                                   fa_tensor o, const float *lse, int64_t elems,
                                   int64_t nl) {
  // The oracle, from the snapshots (an in-place merge overwrote a part).
  double *ref = malloc(sizeof(double) * (size_t)elems),
         *tol = malloc(sizeof(double) * (size_t)elems),
         *got = malloc(sizeof(double) * (size_t)elems);
  double *lref = malloc(sizeof(double) * (size_t)nl),
         *ltol = malloc(sizeof(double) * (size_t)nl),
         *lgot = malloc(sizeof(double) * (size_t)nl);
  double w[FZ_MAX_PARTS];
  if (!ref || !tol || !got || !lref || !ltol || !lgot)
    die("harness out of memory");
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < S; i++) {
        size_t li = ((size_t)b * H + h) * S + i;
        double m = -INFINITY, lmax = 0.0;
        for (int p = 0; p < np; p++) {
          float lp;
          memcpy(&lp, lb[p].snap + lb[p].lead + li * 4, 4);
          w[p] = lp;
          if (lp > m) m = lp;
          if (isfinite(lp) && fabs(lp) > lmax) lmax = fabs(lp);
        }
        double sum = 0.0;
        for (int p = 0; p < np; p++) {
          w[p] = m == -INFINITY ? 0.0 : exp(w[p] - m);
          sum += w[p];
        }
        const double e = 8 * 0x1p-24 * (np + 8 + 2 * lmax);
        lref[li] = m == -INFINITY ? -INFINITY : m + log(sum);
        ltol[li] = m == -INFINITY ? 0.0 : e;
        lgot[li] = lse ? lse[li] : lref[li];
        for (int d = 0; d < D; d++) {
          size_t x = (((size_t)b * S + i) * H + h) * D + d;
          double acc = 0.0, amax = 0.0;
          for (int p = 0; p < np; p++) {
            if (w[p] == 0.0) continue;
            const fa_tensor *t = &parts[p];
            int64_t off = b * t->stride_batch + i * t->stride_seq +
                          h * t->stride_head + d;
            double v = ts_load(pb[p].snap + pb[p].lead, t->dtype, off);
            acc += w[p] / sum * v;
            if (fabs(v) > amax) amax = fabs(v);
          }
          ref[x] = acc;
          tol[x] = m == -INFINITY
                       ? 0.0
                       : e * amax + fz_round_rel(o.dtype) * fabs(acc) +
                             fz_round_abs(o.dtype);
          int64_t off =
              b * o.stride_batch + i * o.stride_seq + h * o.stride_head + d;
          got[x] = ts_load(o.data, o.dtype, off);
        }
      }
  int sh[3] = {S, H, D}, lsh[2] = {H, S};
  size_t bad = fz_compare("merged o", o.dtype, ref, got, tol, (size_t)elems, 0,
                          stderr, idx_name_q, sh);
  bad += fz_compare("merged lse", FA_F32, lref, lgot, ltol, (size_t)nl, 0,
                    stderr, idx_name_lse, lsh);
  free(ref);
  free(tol);
  free(got);
  free(lref);
  free(ltol);
  free(lgot);
  if (bad)
    die("fa_merge_states on %s differs from the oracle (%zu), n=%d dims "
        "%d %d %d %d",
        run->backend, bad, n, B, S, H, D);
}

void run_merge(fz_run *run, fz_in *in) {
  fz_case *c = run->c;
  const int n = c->m_n, B = c->m_batch, S = c->m_seqlen, H = c->m_heads,
            D = c->m_dim;
  // Parts the harness holds: n of them when 1 <= n <= FZ_MAX_PARTS; for
  // n outside [1, 4096] one (the call must be refused before reading
  // o_parts); other n are not run.
  if (n > FZ_MAX_PARTS && n <= 4096) return;
  const int np = n >= 1 && n <= FZ_MAX_PARTS ? n : 1;
  const int valid_ext = B >= 1 && S >= 1 && H >= 1 && D >= 1;
  // batch 0 or seqlen 0: a valid no-op
  const int empty_ext =
      B >= 0 && S >= 0 && (B == 0 || S == 0) && H >= 1 && D >= 1;
  if (valid_ext && (double)B * S * H * D > 8192) return;
  const int64_t elems = valid_ext ? (int64_t)B * S * H * D : 1;
  const int64_t nl = valid_ext ? (int64_t)B * H * S : 1;
  if (elems > 8192 || nl > 8192) return; // (merges are elementwise)
  const int must_fail_n = n != np;
  fa_tensor parts[FZ_MAX_PARTS];
  fz_buf pb[FZ_MAX_PARTS], lb[FZ_MAX_PARTS], ob, olb;
  const float *lses[FZ_MAX_PARTS];
  ts_rng r;
  ts_rng_seed(&r, c->seed ^ 0x3e79ull);
  const int64_t ext[4] = {B, S, H, D};
  const int64_t e1[4] = {valid_ext ? B : 1, valid_ext ? S : 1,
                         valid_ext ? H : 1, valid_ext ? D : 1};
  const fa_dtype base = dtype_valid(c->dtype) ? c->dtype : FA_F32;
  const int cached = c->m_data[0] != NULL;
  for (int p = 0; p < np; p++) {
    fa_tensor *t = &parts[p];
    t->dtype = c->m_layout & 1 ? (fa_dtype)((p + (int)base) % 3) : base;
    make_strides((int)((c->m_layout >> 1) % 3), e1[0], e1[1], e1[2], e1[3],
                 p % 2, t);
    int64_t cl = valid_ext ? view_claim(ext, t) : 1;
    buf_make(&pb[p], (size_t)cl * dsize(t->dtype), 0);
    t->data = pb[p].data;
    buf_make(&lb[p], (size_t)nl * 4, 0);
    lses[p] = (const float *)lb[p].data;
    float *l = (float *)lb[p].data;
    if (c->m_data[2 * p]) { // made for an earlier context
      memcpy(t->data, c->m_data[2 * p], pb[p].bytes);
      memcpy(l, c->m_data[2 * p + 1], lb[p].bytes);
      continue;
    }
    ts_poison(t->data, t->dtype, (size_t)cl);
    ts_poison_f32(l, (size_t)nl);
    if (!valid_ext) continue;
    for (int b = 0; b < B; b++)
      for (int h = 0; h < H; h++)
        for (int i = 0; i < S; i++) {
          size_t li = ((size_t)b * H + h) * S + i;
          int k = ts_rng_int(&r, 0, 7);
          // -inf: a part with no keys, whose o may hold anything (here the
          // poison NaN, which must never be read); else a log-sum-exp of
          // either sign, sometimes large.
          l[li] = k == 0   ? -INFINITY
                  : k == 1 ? (float)(1e4 * ts_rng_normal(&r))
                           : (float)(3.0 * ts_rng_normal(&r));
          if ((c->seed >> 20) % 7 == 0 && i == 0) l[li] = -INFINITY;
          if (l[li] == -INFINITY) continue;
          int64_t off =
              b * t->stride_batch + i * t->stride_seq + h * t->stride_head;
          for (int d = 0; d < D; d++)
            ts_store(t->data, t->dtype, off + d, ts_rng_normal(&r));
        }
  }
  for (int p = 0; p < np && !cached; p++) {
    for (int x = 0; x < 2; x++) {
      const fz_buf *src = x ? &lb[p] : &pb[p];
      unsigned char *m = malloc(src->bytes + 1);
      if (!m) die("harness out of memory");
      memcpy(m, src->data, src->bytes);
      c->m_data[2 * p + x] = m;
    }
  }
  fa_tensor o = parts[0];
  o.dtype = dtype_valid(c->t[T_O].dtype) ? c->t[T_O].dtype : base;
  make_strides((int)((c->m_layout >> 2) % 3), e1[0], e1[1], e1[2], e1[3], 0,
               &o);
  int64_t ocl = valid_ext ? view_claim(ext, &o) : 1;
  buf_make(&ob, (size_t)ocl * dsize(o.dtype), 0);
  o.data = ob.data;
  ts_poison(o.data, o.dtype, (size_t)ocl);
  buf_make(&olb, (size_t)nl * 4, 0);
  ts_poison_f32((float *)olb.data, (size_t)nl);
  float *lse = (float *)olb.data;
  const int ip = (int)(u8(in) % (unsigned)np);
  int o_part = -1, l_part = -1, legal = 1;
  if (c->m_inplace) { // exactly a part: allowed
    o = parts[ip];
    o_part = ip;
  }
  if (c->m_lse_inplace) {
    lse = (float *)lses[ip];
    l_part = ip;
  }
  if (c->m_overlap == 1 && valid_ext) {
    // o one element into a part, same layout: overlaps, must be refused
    // (when it fits the part's buffer, else not tried).
    fa_tensor sh = parts[ip];
    sh.data = (unsigned char *)sh.data + dsize(sh.dtype);
    if ((size_t)(view_claim(ext, &sh) + 1) * dsize(sh.dtype) <= pb[ip].bytes) {
      o = sh;
      o_part = ip;
      // (padded rows of one element: the shifted elements fall in the
      // padding, disjoint, and the exact rule accepts them)
      legal = !tensors_meet(&parts[ip], &sh, ext, (uintptr_t)pb[ip].data,
                            (uintptr_t)pb[ip].data + pb[ip].bytes);
    }
  } else if (c->m_overlap == 2 && nl > 1) {
    lse = (float *)lses[ip] + 1; // overlaps lse_parts[ip] at another offset
    l_part = ip;
    legal = 0;
  } else if (c->m_overlap == 3) {
    lse = NULL;
    l_part = -1;
  }
  for (int p = 0; p < np; p++) {
    buf_snapshot(&pb[p]);
    buf_snapshot(&lb[p]);
  }
  buf_snapshot(&ob);
  buf_snapshot(&olb);
  fa_status s = fa_merge_states(run->ctx, n, parts, lses, B, S, H, D, o, lse);
  check_status(s, "fa_merge_states", run->backend);
  if (s != FA_OK) {
    for (int p = 0; p < np; p++)
      if (buf_changed(&pb[p]) != LONG_MIN || buf_changed(&lb[p]) != LONG_MIN)
        die("fa_merge_states failed but changed part %d", p);
    if (buf_changed(&ob) != LONG_MIN || buf_changed(&olb) != LONG_MIN)
      die("fa_merge_states failed but changed o or lse");
    goto done;
  }
  if (!legal)
    die("fa_merge_states accepted o or lse overlapping a part at another "
        "offset");
  if (!must_fail_n && empty_ext) { // a no-op: nothing written
    for (int p = 0; p < np; p++)
      if (buf_changed(&pb[p]) != LONG_MIN || buf_changed(&lb[p]) != LONG_MIN)
        die("fa_merge_states of an empty batch changed part %d", p);
    if (buf_changed(&ob) != LONG_MIN || buf_changed(&olb) != LONG_MIN)
      die("fa_merge_states of an empty batch changed o or lse");
    goto done;
  }
  if (must_fail_n || !valid_ext)
    die("fa_merge_states accepted n=%d, extents %d %d %d %d", n, B, S, H, D);
  for (int p = 0; p < np; p++) {
    if (!guards_ok(&pb[p]) || !guards_ok(&lb[p]))
      die("fa_merge_states wrote a guard band of part %d", p);
    if (p != o_part && buf_changed(&pb[p]) != LONG_MIN)
      die("fa_merge_states changed o_parts[%d]", p);
    if (p != l_part && buf_changed(&lb[p]) != LONG_MIN)
      die("fa_merge_states changed lse_parts[%d]", p);
  }
  if (!guards_ok(&ob) || !guards_ok(&olb)) die("fa_merge_states wrote a guard");
  if (lse == NULL && buf_changed(&olb) != LONG_MIN)
    die("fa_merge_states with lse = NULL wrote an lse");
  merge_check(run, n, np, B, S, H, D, parts, pb, lb, o, lse, elems, nl);
done:
  for (int p = 0; p < np; p++) {
    buf_free(&pb[p]);
    buf_free(&lb[p]);
  }
  buf_free(&ob);
  buf_free(&olb);
}
