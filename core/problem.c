// SPDX-License-Identifier: MIT
// Problem validation: the one place that decides what a valid problem is.
// Every message names the field and the value that was wrong.
#include "problem.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dtype.h"
#include "error.h"
#include "overlap.h"

#define INVALID FA_ERR_INVALID_ARGUMENT

static int position_ok(int64_t x) {
  return x > -FA_POSITION_LIMIT && x < FA_POSITION_LIMIT;
}

/* The scalar position fields; per-sequence arrays are checked with the
   other arrays (fa_problem_check_arrays). */
static fa_status check_positions(const fa_attention *a) {
  if (a->positions != FA_POSITIONS_ALIGNED &&
      a->positions != FA_POSITIONS_EXPLICIT)
    return fa_fail(INVALID,
                   "positions=%d must be FA_POSITIONS_ALIGNED (0) or "
                   "FA_POSITIONS_EXPLICIT (1)",
                   a->positions);
  if (a->positions == FA_POSITIONS_ALIGNED) {
    if (a->q_position || a->k_position || a->q_positions || a->k_positions)
      return fa_fail(INVALID,
                     "q_position/k_position/q_positions/k_positions are set "
                     "but positions is FA_POSITIONS_ALIGNED (set positions = "
                     "FA_POSITIONS_EXPLICIT to use them)");
    return FA_OK;
  }
  if (!position_ok(a->q_position))
    return fa_fail(INVALID, "q_position=%lld: |position| must be < 2^40",
                   (long long)a->q_position);
  if (!position_ok(a->k_position))
    return fa_fail(INVALID, "k_position=%lld: |position| must be < 2^40",
                   (long long)a->k_position);
  return FA_OK;
}

fa_status fa_problem_init(fa_problem *p, const fa_attention *in,
                          fa_dtype dtype) {
  if (!in) return fa_fail(INVALID, "a (the attention problem) is NULL");
  const fa_attention *a = in;
  // First, before any other field is read: a struct from another version's
  // header has its fields elsewhere.
  if (a->struct_size != sizeof(fa_attention))
    return fa_fail(INVALID,
                   "a->struct_size=%zu, but this flashattn %s has a "
                   "%zu-byte fa_attention: initialise problems with "
                   "fa_attention_init() and build against the header of the "
                   "library you run with",
                   a->struct_size, FA_VERSION_STRING, sizeof(fa_attention));
  if (!fa_dtype_valid(dtype))
    return fa_fail(INVALID,
                   "dtype=%d is not FA_F32, FA_F16, FA_BF16, "
                   "FA_E4M3 or FA_E5M2",
                   (int)dtype);
  // 0 is valid: an empty batch or query set is a no-op, and a row with no
  // keys (an empty KV cache) gives O = 0 and LSE = -inf (or the sink).
  if (a->batch < 0) return fa_fail(INVALID, "batch=%d must be >= 0", a->batch);
  if (a->seqlen_q < 0)
    return fa_fail(INVALID, "seqlen_q=%d must be >= 0", a->seqlen_q);
  if (a->seqlen_k < 0)
    return fa_fail(INVALID, "seqlen_k=%d must be >= 0", a->seqlen_k);
  if (a->heads_q < 1)
    return fa_fail(INVALID, "heads_q=%d must be >= 1", a->heads_q);
  if (a->heads_kv < 1)
    return fa_fail(INVALID, "heads_kv=%d must be >= 1", a->heads_kv);
  if (a->heads_q % a->heads_kv)
    return fa_fail(INVALID,
                   "heads_q=%d is not a multiple of heads_kv=%d (GQA/MQA "
                   "needs heads_q %% heads_kv == 0)",
                   a->heads_q, a->heads_kv);
  if (a->head_dim < 1)
    return fa_fail(INVALID, "head_dim=%d must be >= 1", a->head_dim);
  if (a->head_dim_v < 0)
    return fa_fail(INVALID, "head_dim_v=%d must be >= 0 (0 = head_dim)",
                   a->head_dim_v);
  if (!isfinite(a->scale))
    return fa_fail(INVALID, "scale=%g must be finite (0 = 1/sqrt(head_dim))",
                   (double)a->scale);
  if (a->causal != 0 && a->causal != FA_CAUSAL_BOTTOM_RIGHT &&
      a->causal != FA_CAUSAL_TOP_LEFT)
    return fa_fail(INVALID,
                   "causal=%d must be 0, FA_CAUSAL_BOTTOM_RIGHT (1) or "
                   "FA_CAUSAL_TOP_LEFT (2)",
                   a->causal);
  if (a->window_left < -1)
    return fa_fail(INVALID, "window_left=%d must be >= -1 (-1 = unbounded)",
                   a->window_left);
  if (a->window_right < -1)
    return fa_fail(INVALID, "window_right=%d must be >= -1 (-1 = unbounded)",
                   a->window_right);
  if (a->causal && a->window_right > 0)
    return fa_fail(INVALID,
                   "window_right=%d conflicts with causal=%d (causal hides "
                   "every key right of the diagonal)",
                   a->window_right, a->causal);
  if (!isfinite(a->softcap) || a->softcap < 0.0f)
    return fa_fail(INVALID, "softcap=%g must be finite and >= 0 (0 = off)",
                   (double)a->softcap);
  if (a->block_table) {
    if (a->page_size < 1)
      return fa_fail(INVALID, "page_size=%d must be >= 1 with block_table",
                     a->page_size);
    if (a->max_blocks_per_seq < 1)
      return fa_fail(INVALID,
                     "max_blocks_per_seq=%d must be >= 1 with block_table",
                     a->max_blocks_per_seq);
    if (a->num_pages < 1)
      return fa_fail(INVALID,
                     "num_pages=%d must be >= 1 with block_table (the number "
                     "of pages in the k/v page pool)",
                     a->num_pages);
    if ((int64_t)a->max_blocks_per_seq * a->page_size < a->seqlen_k)
      return fa_fail(INVALID,
                     "max_blocks_per_seq=%d x page_size=%d holds fewer than "
                     "seqlen_k=%d keys",
                     a->max_blocks_per_seq, a->page_size, a->seqlen_k);
    if (a->cu_seqlens_k)
      return fa_fail(INVALID,
                     "cu_seqlens_k must be NULL with block_table (paged keys "
                     "are addressed through the block table; use seqused_k "
                     "for lengths)");
  } else if (a->page_size || a->max_blocks_per_seq || a->num_pages) {
    return fa_fail(INVALID,
                   "page_size=%d, max_blocks_per_seq=%d, num_pages=%d are set "
                   "but block_table is NULL",
                   a->page_size, a->max_blocks_per_seq, a->num_pages);
  }

  fa_status s = check_positions(a);
  if (s) return s;
  if (a->backward_mode != FA_BACKWARD_OVERWRITE &&
      a->backward_mode != FA_BACKWARD_ACCUMULATE)
    return fa_fail(INVALID,
                   "backward_mode=%d must be FA_BACKWARD_OVERWRITE (0) or "
                   "FA_BACKWARD_ACCUMULATE (1)",
                   a->backward_mode);
  if (a->dsinks && !a->sinks)
    return fa_fail(INVALID, "dsinks is set but sinks is NULL (there is no "
                            "sink to differentiate)");
  if (a->rows_q < 0 || (a->rows_q && !a->cu_seqlens_q))
    return fa_fail(INVALID,
                   "rows_q=%lld must be 0, or >= 0 with "
                   "cu_seqlens_q",
                   (long long)a->rows_q);
  if (a->rows_k < 0 || (a->rows_k && !a->cu_seqlens_k))
    return fa_fail(INVALID,
                   "rows_k=%lld must be 0, or >= 0 with "
                   "cu_seqlens_k",
                   (long long)a->rows_k);

  memset(p, 0, sizeof *p);
  p->a = *a;
  p->dtype = dtype;
  // Outputs are never FP8: an FP8 problem's outputs are bf16 until a
  // layout says otherwise.
  p->dtype_out = fa_dtype_is_fp8(dtype) ? FA_BF16 : dtype;
  p->explicit_positions = a->positions == FA_POSITIONS_EXPLICIT;
  if (p->a.head_dim_v == 0) p->a.head_dim_v = a->head_dim;
  if (p->a.scale == 0.0f) p->a.scale = 1.0f / sqrtf((float)a->head_dim);
  if (a->causal) p->a.window_right = 0;
  p->top_left = a->causal == FA_CAUSAL_TOP_LEFT;
  p->varlen_q = a->cu_seqlens_q != NULL;
  p->varlen_k = a->cu_seqlens_k != NULL;
  p->paged = a->block_table != NULL;
  p->group = a->heads_q / a->heads_kv;
  return FA_OK;
}

static fa_status check_cu_seqlens(const int32_t *cu, int batch, int max_len,
                                  const char *name, const char *max_name) {
  if (cu[0] < 0) return fa_fail(INVALID, "%s[0]=%d must be >= 0", name, cu[0]);
  for (int b = 0; b < batch; b++) {
    int64_t len = (int64_t)cu[b + 1] - cu[b];
    if (len < 0)
      return fa_fail(INVALID, "%s is not monotonic: %s[%d]=%d < %s[%d]=%d",
                     name, name, b + 1, cu[b + 1], name, b, cu[b]);
    if (len > max_len)
      return fa_fail(INVALID, "%s: sequence %d has length %lld > %s=%d", name,
                     b, (long long)len, max_name, max_len);
  }
  return FA_OK;
}

static fa_status check_position_array(const int64_t *x, int64_t base, int batch,
                                      const char *name, const char *base_name) {
  for (int b = 0; x && b < batch; b++)
    if (!position_ok(x[b]) || !position_ok(base + x[b]))
      return fa_fail(INVALID, "%s[%d]=%lld: |%s + %s[%d]| must be < 2^40", name,
                     b, (long long)x[b], base_name, name, b);
  return FA_OK;
}

fa_status fa_problem_check_arrays(const fa_problem *p) {
  const fa_attention *a = &p->a;
  fa_status s;
  if ((s = check_position_array(a->q_positions, a->q_position, a->batch,
                                "q_positions", "q_position")) ||
      (s = check_position_array(a->k_positions, a->k_position, a->batch,
                                "k_positions", "k_position")))
    return s;
  if (a->rows_q && p->varlen_q && a->rows_q != a->cu_seqlens_q[a->batch])
    return fa_fail(INVALID, "rows_q=%lld differs from cu_seqlens_q[%d]=%d",
                   (long long)a->rows_q, a->batch, a->cu_seqlens_q[a->batch]);
  if (a->rows_k && p->varlen_k && a->rows_k != a->cu_seqlens_k[a->batch])
    return fa_fail(INVALID, "rows_k=%lld differs from cu_seqlens_k[%d]=%d",
                   (long long)a->rows_k, a->batch, a->cu_seqlens_k[a->batch]);
  if (p->varlen_q &&
      (s = check_cu_seqlens(a->cu_seqlens_q, a->batch, a->seqlen_q,
                            "cu_seqlens_q", "seqlen_q")))
    return s;
  if (p->varlen_k &&
      (s = check_cu_seqlens(a->cu_seqlens_k, a->batch, a->seqlen_k,
                            "cu_seqlens_k", "seqlen_k")))
    return s;
  if (!a->seqused_k && !p->paged) return FA_OK; // nothing per sequence
  for (int b = 0; b < a->batch; b++) {
    int sk = a->seqlen_k;
    if (p->varlen_k) sk = a->cu_seqlens_k[b + 1] - a->cu_seqlens_k[b];
    if (a->seqused_k && (a->seqused_k[b] < 0 || a->seqused_k[b] > sk))
      return fa_fail(INVALID, "seqused_k[%d]=%d is outside [0, %d]", b,
                     a->seqused_k[b], sk);
    if (p->paged) {
      int len = fa_seq_len_k(p, b);
      // (64-bit: seqlen_k may be INT_MAX with a page_size of 2^20.)
      int64_t blocks = ((int64_t)len + a->page_size - 1) / a->page_size;
      const int32_t *row = a->block_table + (int64_t)b * a->max_blocks_per_seq;
      for (int i = 0; i < blocks; i++)
        if (row[i] < 0 || row[i] >= a->num_pages)
          return fa_fail(INVALID,
                         "block_table[%d][%d]=%d is outside [0, num_pages=%d)",
                         b, i, row[i], a->num_pages);
    }
  }
  return FA_OK;
}

/* The index space a tensor describes: four (extent, stride) pairs. */
typedef struct view {
  const char *name;
  const fa_tensor *t;
  int64_t n[4], s[4]; // batch, seq, heads, dim
} view;

static view q_view(const fa_problem *p, const char *name, const fa_tensor *t,
                   int dim) {
  view v = {name,
            t,
            {p->a.batch, p->a.seqlen_q, p->a.heads_q, dim},
            {t->stride_batch, t->stride_seq, t->stride_head, 1}};
  if (p->varlen_q) {
    v.n[0] = 1;
    v.n[1] = p->rows_q; // storage rows, known before the tensors are checked
  }
  return v;
}

static view k_view(const fa_problem *p, const char *name, const fa_tensor *t,
                   int dim) {
  view v = {name,
            t,
            {p->a.batch, p->a.seqlen_k, p->a.heads_kv, dim},
            {t->stride_batch, t->stride_seq, t->stride_head, 1}};
  if (p->paged) {
    v.n[0] = p->a.num_pages;
    v.n[1] = p->a.page_size;
  } else if (p->varlen_k) {
    v.n[0] = 1;
    v.n[1] = p->rows_k;
  }
  return v;
}

/* Largest element offset the view can touch; -1 on int64 overflow. */
static int64_t view_span(const view *v) {
  int64_t span = 0;
  for (int i = 0; i < 4; i++) {
    if (v->n[i] <= 1) continue;
    if (v->s[i] > (INT64_MAX - span) / (v->n[i] - 1)) return -1;
    span += (v->n[i] - 1) * v->s[i];
  }
  return span;
}

static fa_status check_strides(const view *v) {
  static const char *axis[3] = {"stride_batch", "stride_seq", "stride_head"};
  int empty = 0; // no element: nothing is read or written, NULL is fine
  for (int i = 0; i < 4; i++) empty |= v->n[i] == 0;
  if (!v->t->data && !empty)
    return fa_fail(INVALID, "%s.data is NULL", v->name);
  // Kernels load whole elements: a pointer between elements (an f32 view 2
  // bytes into a 16-bit buffer, found by the fuzzer) would be a misaligned
  // access on every backend.
  const size_t es = fa_dtype_size(v->t->dtype);
  if ((uintptr_t)v->t->data % es)
    return fa_fail(INVALID,
                   "%s.data=%p is not aligned to its %zu-byte "
                   "elements",
                   v->name, v->t->data, es);
  for (int i = 0; i < 3; i++)
    if (v->s[i] < 0)
      return fa_fail(INVALID, "%s.%s=%lld must be >= 0", v->name, axis[i],
                     (long long)v->s[i]);
  for (int i = 0; i < 4; i++)
    if (v->n[i] < 0)
      return fa_fail(INVALID, "%s: extent %lld of axis %d is negative", v->name,
                     (long long)v->n[i], i);
  int64_t span = view_span(v);
  if (span < 0 || (uint64_t)span >= (uint64_t)INT64_MAX / 8)
    return fa_fail(INVALID, "%s: strides overflow a 64-bit offset", v->name);
  return FA_OK;
}

/* Outputs must not write one element twice: sort the axes by stride and
   require each stride to clear the span of all smaller axes. */
static fa_status check_no_self_overlap(const view *v) {
  static const char *axis[4] = {"stride_batch", "stride_seq", "stride_head",
                                "dim"};
  for (int i = 0; i < 4; i++)
    if (v->n[i] == 0) return FA_OK; // empty: writes nothing
  int idx[4] = {0, 1, 2, 3};
  for (int i = 1; i < 4; i++)
    for (int j = i; j > 0 && v->s[idx[j]] < v->s[idx[j - 1]]; j--) {
      int t = idx[j];
      idx[j] = idx[j - 1];
      idx[j - 1] = t;
    }
  int64_t span = 0;
  for (int i = 0; i < 4; i++) {
    int a = idx[i];
    if (v->n[a] <= 1) continue;
    if (v->s[a] <= span)
      return fa_fail(INVALID,
                     "%s.%s=%lld makes the output overlap itself (it must "
                     "exceed %lld, the span of the smaller axes)",
                     v->name, axis[a], (long long)v->s[a], (long long)span);
    span += (v->n[a] - 1) * v->s[a];
  }
  return FA_OK;
}

fa_status fa_tensor_check(const char *name, const fa_tensor *t,
                          const int64_t n[4], int is_output) {
  if (!t) return fa_fail(INVALID, "%s is NULL", name);
  if (!fa_dtype_valid(t->dtype))
    return fa_fail(INVALID, "%s.dtype=%d is not a valid fa_dtype", name,
                   (int)t->dtype);
  // Every caller's tensors are attention outputs (merge parts included).
  if (fa_dtype_is_fp8(t->dtype))
    return fa_fail(INVALID,
                   "%s.dtype=%s: outputs are not FP8 (use f32, f16 "
                   "or bf16)",
                   name, fa_dtype_name(t->dtype));
  view v = {name,
            t,
            {n[0], n[1], n[2], n[3]},
            {t->stride_batch, t->stride_seq, t->stride_head, 1}};
  fa_status s = check_strides(&v);
  if (!s && is_output) s = check_no_self_overlap(&v);
  return s;
}

/* Which dtype group a view belongs to and whether it may carry a descale:
   q, k, v are inputs (input dtype, descale allowed); o, do and the
   gradients have the output dtype and no descale. */
enum { VIEW_INPUT = 0, VIEW_OUTPUT_GROUP = 1 };

static fa_status check_view(const fa_problem *p, const view *v, int varlen,
                            int group) {
  const fa_dtype want = group == VIEW_INPUT ? p->dtype : p->dtype_out;
  // First: the output dtype is the o tensor's own, so nothing else would
  // catch a number that is no fa_dtype (found by the fuzzer: a 2-byte store
  // per element into a buffer laid out for none).
  if (!fa_dtype_valid(v->t->dtype))
    return fa_fail(INVALID, "%s.dtype=%d is not a valid fa_dtype", v->name,
                   (int)v->t->dtype);
  if (group != VIEW_INPUT && fa_dtype_is_fp8(v->t->dtype))
    return fa_fail(INVALID,
                   "%s.dtype=%s: outputs are not FP8 (FP8 is an "
                   "input dtype of q, k, v; o, do, dq, dk and dv are f32, "
                   "f16 or bf16)",
                   v->name, fa_dtype_name(v->t->dtype));
  if (v->t->data && v->t->dtype != want)
    return fa_fail(INVALID,
                   "%s.dtype=%s does not match the problem's %s "
                   "dtype %s",
                   v->name, fa_dtype_name(v->t->dtype),
                   group == VIEW_INPUT ? "input" : "output",
                   fa_dtype_name(want));
  if (group != VIEW_INPUT && v->t->descale)
    return fa_fail(INVALID,
                   "%s.descale is set: only the inputs q, k, v "
                   "take descales",
                   v->name);
  fa_status s = fa_tensor_check_descale_flags(v->name, v->t);
  if (s) return s;
  s = check_strides(v);
  if (s) return s;
  if (varlen && v->t->stride_batch != 0)
    return fa_fail(INVALID,
                   "%s.stride_batch=%lld must be 0 with cu_seqlens (rows are "
                   "addressed by offset)",
                   v->name, (long long)v->t->stride_batch);
  return FA_OK;
}

fa_status fa_tensor_check_descale_flags(const char *name, const fa_tensor *t) {
  if (t->descale_per_head != 0 && t->descale_per_head != 1)
    return fa_fail(INVALID, "%s.descale_per_head=%d must be 0 or 1", name,
                   t->descale_per_head);
  if (t->descale_per_head && !t->descale)
    return fa_fail(INVALID, "%s.descale_per_head=1 but %s.descale is NULL",
                   name, name);
  return FA_OK;
}

fa_status fa_problem_check_descales(const fa_problem *p, const fa_tensor *q,
                                    const fa_tensor *k, const fa_tensor *v) {
  const fa_tensor *ts[3] = {q, k, v};
  static const char *names[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; i++) {
    if (!ts[i] || !ts[i]->descale) continue;
    int64_t n =
        ts[i]->descale_per_head ? (int64_t)p->a.batch * p->a.heads_kv : 1;
    for (int64_t j = 0; j < n; j++) {
      float x = ts[i]->descale[j];
      if (!(x > 0.0f) || !isfinite(x))
        return fa_fail(INVALID, "%s.descale[%lld]=%g must be finite and > 0",
                       names[i], (long long)j, (double)x);
    }
  }
  return FA_OK;
}

/* The parties of a call: the tensors it was handed, then the problem's
   own arrays and the inputs' descales. Each array is one line; a NULL
   pointer is absent. */
static fa_party tensor_party(const view *v, int output) {
  fa_party x = {v->name,
                -1,
                {(uintptr_t)v->t->data,
                 (int64_t)fa_dtype_size(v->t->dtype),
                 4,
                 {v->n[0], v->n[1], v->n[2], v->n[3]},
                 {v->s[0], v->s[1], v->s[2], v->s[3]}},
                output,
                0};
  return x;
}

static fa_party array_party(const char *name, const void *ptr, int64_t count,
                            int64_t elem_bytes, int output) {
  fa_party x = {name, -1, fa_view_array(ptr, count, elem_bytes), output, 0};
  return x;
}

static int64_t descale_count(const fa_problem *p, const fa_tensor *t) {
  return t->descale_per_head ? (int64_t)p->a.batch * p->a.heads_kv : 1;
}

/* in[0..2] are q, k, v. dsinks is written by the backward only. */
static int problem_arrays(const fa_problem *p, const view *in, int backward,
                          fa_party *out) {
  const fa_attention *a = &p->a;
  const int64_t nb = a->batch;
  int n = 0;
  out[n++] = array_party("alibi_slopes", a->alibi_slopes, a->heads_q, 4, 0);
  out[n++] = array_party("sinks", a->sinks, a->heads_q, 4, 0);
  out[n++] = array_party("cu_seqlens_q", a->cu_seqlens_q, nb + 1, 4, 0);
  out[n++] = array_party("cu_seqlens_k", a->cu_seqlens_k, nb + 1, 4, 0);
  out[n++] = array_party("seqused_k", a->seqused_k, nb, 4, 0);
  out[n++] = array_party("block_table", a->block_table,
                         nb * a->max_blocks_per_seq, 4, 0);
  out[n++] = array_party("q_positions", a->q_positions, nb, 8, 0);
  out[n++] = array_party("k_positions", a->k_positions, nb, 8, 0);
  out[n++] = array_party("q.descale", in[0].t->descale,
                         descale_count(p, in[0].t), 4, 0);
  out[n++] = array_party("k.descale", in[1].t->descale,
                         descale_count(p, in[1].t), 4, 0);
  out[n++] = array_party("v.descale", in[2].t->descale,
                         descale_count(p, in[2].t), 4, 0);
  if (backward && a->sinks)
    out[n++] = array_party("dsinks", a->dsinks, a->heads_q, 4, 1);
  return n;
}

#define FA_MAX_PARTIES 32

/* Validate inputs, then outputs (each non-self-overlapping), then that no
   output shares a byte with any other party: tensors, the lse (lse_output:
   written or read; NULL while a plan is made, each run brings its own),
   and the problem's arrays. */
static fa_status check_views(const fa_problem *p, const view *in, int n_in,
                             const int *in_varlen, const view *out, int n_out,
                             const int *out_varlen, const float *lse,
                             int lse_output) {
  fa_status s;
  // The first three inputs are q, k, v; o and do follow in the backward.
  for (int i = 0; i < n_in; i++)
    if ((s = check_view(p, &in[i], in_varlen[i],
                        i < 3 ? VIEW_INPUT : VIEW_OUTPUT_GROUP)))
      return s;
  for (int i = 0; i < n_out; i++) {
    if ((s = check_view(p, &out[i], out_varlen[i], VIEW_OUTPUT_GROUP)))
      return s;
    if ((s = check_no_self_overlap(&out[i]))) return s;
  }
  fa_party parties[FA_MAX_PARTIES];
  int n = 0;
  for (int i = 0; i < n_out; i++) parties[n++] = tensor_party(&out[i], 1);
  for (int i = 0; i < n_in; i++) parties[n++] = tensor_party(&in[i], 0);
  parties[n++] = array_party("lse", lse,
                             (int64_t)p->a.batch * p->a.heads_q * p->a.seqlen_q,
                             4, lse_output);
  n += problem_arrays(p, in, !lse_output, parties + n);
  return fa_parties_check(parties, n);
}

fa_status fa_problem_check_forward(const fa_problem *p, const fa_tensor *q,
                                   const fa_tensor *k, const fa_tensor *v,
                                   const fa_tensor *o, const float *lse) {
  const fa_attention *a = &p->a;
  view in[3] = {q_view(p, "q", q, a->head_dim), k_view(p, "k", k, a->head_dim),
                k_view(p, "v", v, a->head_dim_v)};
  view out[1] = {q_view(p, "o", o, a->head_dim_v)};
  int vk = p->varlen_k, vq = p->varlen_q;
  int in_varlen[3] = {vq, vk, vk}, out_varlen[1] = {vq};
  return check_views(p, in, 3, in_varlen, out, 1, out_varlen, lse, 1);
}

fa_status fa_problem_check_backward(const fa_problem *p, const fa_tensor *q,
                                    const fa_tensor *k, const fa_tensor *v,
                                    const fa_tensor *o, const fa_tensor *d_o,
                                    const float *lse, const fa_tensor *dq,
                                    const fa_tensor *dk, const fa_tensor *dv) {
  const fa_attention *a = &p->a;
  int dh = a->head_dim, dvd = a->head_dim_v, vq = p->varlen_q, vk = p->varlen_k;
  view in[5] = {q_view(p, "q", q, dh), k_view(p, "k", k, dh),
                k_view(p, "v", v, dvd), q_view(p, "o", o, dvd),
                q_view(p, "do", d_o, dvd)};
  view out[3] = {q_view(p, "dq", dq, dh), k_view(p, "dk", dk, dh),
                 k_view(p, "dv", dv, dvd)};
  int in_varlen[5] = {vq, vk, vk, vq, vq}, out_varlen[3] = {vq, vk, vk};
  return check_views(p, in, 5, in_varlen, out, 3, out_varlen, lse, 0);
}
