// SPDX-License-Identifier: MIT
// Bytes to a case: the problem, views, dtypes and defects an input
// describes, the extents the problem claims, and the input data modes.
#include "fz_harness.h"

const char *const tname[NT] = {"q", "k", "v", "o", "do", "dq", "dk", "dv"};
const int t_klike[NT] = {0, 1, 1, 0, 0, 0, 1, 1};
const int t_vdim[NT] = {0, 0, 1, 1, 1, 0, 0, 1};
const int t_output[NT] = {0, 0, 0, 1, 0, 1, 1, 1};

unsigned u8(fz_in *in) { return in->at < in->n ? in->p[in->at++] : 0; }

static uint32_t u32(fz_in *in) {
  uint32_t x = 0;
  for (int i = 0; i < 4; i++) x |= (uint32_t)u8(in) << (8 * i);
  return x;
}

/* A small integer in [lo, hi]; bytes >= 0xf8 pick edge values instead. */
static int small_int(fz_in *in, int lo, int hi) {
  static const int edge[8] = {0, -1, INT_MAX, INT_MIN, -2, 1 << 20, 513, 600};
  unsigned b = u8(in);
  if (b >= 0xf8) return edge[b - 0xf8];
  return lo + (int)(b % (unsigned)(hi - lo + 1));
}

static float edge_float(unsigned b) {
  static const float f[8] = {NAN,    INFINITY, -INFINITY, 1e30f,
                             1e-30f, -0.0f,    FLT_MAX,   FLT_MIN};
  return f[b & 7];
}

/* ---- claims: what the problem says each view spans --------------------------
 */

/* Elements from the first to the last one of a view, or -1 if that does not
   fit 63 bits, or -2 if it is beyond the library's own limit (span >=
   INT64_MAX / 8 elements): the library must refuse those. 0 for an empty
   view or one with a negative extent or stride (refused too). */
int64_t view_claim(const int64_t n[4], const fa_tensor *t) {
  int64_t s[4] = {t->stride_batch, t->stride_seq, t->stride_head, 1};
  int64_t span = 0;
  for (int i = 0; i < 4; i++) {
    if (n[i] <= 0) return 0;
    if (s[i] < 0) return 0;
    if (n[i] == 1) continue;
    if (s[i] > 0 && n[i] - 1 > (INT64_MAX - span) / s[i]) return -1;
    span += (n[i] - 1) * s[i];
  }
  if (span >= INT64_MAX / 8) return -2;
  return span + 1;
}

size_t dsize(fa_dtype t) { return t == FA_F32 ? 4 : 2; }
int dtype_valid(fa_dtype t) {
  return t == FA_F32 || t == FA_F16 || t == FA_BF16;
}

/* Extents of tensor i as the problem defines its view. */
void tensor_extents(const fz_case *c, int i, int64_t n[4]) {
  const fa_attention *a = &c->a;
  int dim =
      t_vdim[i] ? (a->head_dim_v ? a->head_dim_v : a->head_dim) : a->head_dim;
  if (!t_klike[i]) {
    n[0] = a->batch;
    n[1] = a->seqlen_q;
    n[2] = a->heads_q;
    if (c->varlen_q && c->arr[A_CUQ] && a->batch >= 0) {
      n[0] = 1;
      n[1] = c->arr[A_CUQ][a->batch];
    }
  } else {
    n[0] = a->batch;
    n[1] = a->seqlen_k;
    n[2] = a->heads_kv;
    if (c->paged) {
      n[0] = a->num_pages;
      n[1] = a->page_size;
    } else if (c->varlen_k && c->arr[A_CUK] && a->batch >= 0) {
      n[0] = 1;
      n[1] = c->arr[A_CUK][a->batch];
    }
  }
  n[3] = dim;
}

/* ---- decoding
 * ------------------------------------------------------------------ */

static int64_t edge_stride(unsigned b, int64_t cur, int dim) {
  static const int64_t e[8] = {-1,
                               0,
                               1,
                               INT64_MAX,
                               INT64_MIN,
                               (int64_t)1 << 40,
                               -((int64_t)1 << 40),
                               (int64_t)1 << 61};
  if (b < 8) return e[b];
  if (b < 16) // a little too small: overlap (wrapping, like a caller's bug)
    return (int64_t)((uint64_t)cur - (uint64_t)(b - 7));
  if (b < 24) return dim - 1;
  return (int64_t)(b % 97);
}

/* Strides of a [nb][ns][nh][nd] view in layout 0 BSHD, 1 BHSD, 2 SBHD, each
   padded by pad elements. */
void make_strides(int layout, int64_t nb, int64_t ns, int64_t nh, int64_t nd,
                  int pad, fa_tensor *t) {
  (void)nb;
  int64_t d = nd + pad;
  switch (layout) {
  case 1: // BHSD
    t->stride_seq = d;
    t->stride_head = ns * d + pad;
    t->stride_batch = nh * t->stride_head + pad;
    break;
  case 2: // SBHD
    t->stride_head = d;
    t->stride_batch = nh * d + pad;
    t->stride_seq = nb * t->stride_batch + pad;
    break;
  default: // BSHD
    t->stride_head = d;
    t->stride_seq = nh * d + pad;
    t->stride_batch = ns * t->stride_seq + pad;
  }
}

static int64_t clamp_ext(int64_t x) { return x < 1 ? 1 : x > 4096 ? 4096 : x; }

void fz_decode(fz_case *c, fz_in *in) {
  memset(c, 0, sizeof *c);
  c->lse_alias = -1;
  for (int i = 0; i < NT; i++) c->alias_of[i] = -1;
  unsigned ops = u8(in);
  c->ops = ops & 0x1f ? ops & 0x1f : 0x11; // explain + forward by default
  c->backend_sel = ops >> 5;
  c->threads = u8(in) % 4;
  unsigned dt = u8(in);
  c->dtype = dt < 0xf0 ? (fa_dtype)(dt % 3) : (fa_dtype)(int)(dt - 0xf0 + 3);
  if (dt == 0xff) c->dtype = (fa_dtype)-1;
  c->seed = u32(in);
  c->data_mode = u8(in);

  fa_attention *a = &c->a;
  fa_attention_init(a);
  a->batch = small_int(in, 1, 3);
  a->seqlen_q = small_int(in, 1, 12);
  a->seqlen_k = small_int(in, 1, 24);
  a->heads_kv = small_int(in, 1, 2);
  unsigned g = u8(in);
  int64_t hq64 = (int64_t)a->heads_kv * (int)(1 + g % 3);
  a->heads_q = g >= 0xf8                          ? small_int(in, 1, 8)
               : hq64 > INT_MAX || hq64 < INT_MIN ? a->heads_kv
                                                  : (int)hq64;
  if (g == 0xf7 && a->heads_kv > 0 && a->heads_kv <= 2)
    a->heads_q = 64 * a->heads_kv;
  unsigned hd = u8(in);
  static const int dims[8] = {64, 128, 256, 512, 513, 600, 0, -1};
  a->head_dim = hd < 0xf8 ? 1 + (int)(hd % 20) : dims[hd - 0xf8];
  unsigned hv = u8(in);
  a->head_dim_v = hv == 0     ? 0
                  : hv < 0xf8 ? 1 + (int)(hv % 20)
                              : dims[hv - 0xf8];
  unsigned sb = u8(in);
  a->scale = sb == 0     ? 0.0f
             : sb < 0xf8 ? (float)(sb % 124) / 32.0f * (sb & 1 ? -1.0f : 1.0f)
                         : edge_float(sb);
  unsigned cb = u8(in);
  a->causal = cb < 0xf8 ? (int)(cb % 3) : (cb & 1 ? 3 : -1);
  for (int w = 0; w < 2; w++) {
    unsigned b = u8(in);
    int v = b < 0x80 ? -1 : b < 0xf8 ? (int)((b - 0x80) % 24) : 0;
    if (b >= 0xf8) {
      static const int e[8] = {-2, INT_MAX, INT_MIN, 1 << 30, 0, 1, -1, 100000};
      v = e[b - 0xf8];
    }
    if (w == 0)
      a->window_left = v;
    else
      a->window_right = v;
  }
  unsigned cap = u8(in);
  a->softcap = cap < 0xc0   ? 0.0f
               : cap < 0xf8 ? 0.5f + 0.5f * (float)(cap - 0xc0)
                            : (cap & 1 ? -1.0f : edge_float(cap));

  unsigned feat = u8(in);
  c->alibi = feat & 1;
  c->sinks = (feat >> 1) & 1;
  int vmode = (feat >> 2) & 3;
  c->varlen_q = vmode == 1 || vmode == 2;
  c->varlen_k = vmode == 1 || vmode == 3;
  c->seqused = (feat >> 4) & 1;
  c->paged = (feat >> 5) & 1;
  c->lse_null = (feat >> 6) & 1;
  int mutate = (feat >> 7) & 1;

  // Arrays of the problem: allocated when batch (and heads_q for the
  // per-head ones) is small enough to hold them.
  int B = a->batch;
  c->arrays_ok = 1;
  int need_batch = c->varlen_q || c->varlen_k || c->seqused || c->paged;
  if (need_batch && (B < 0 || B > 64)) c->arrays_ok = 0;
  if ((c->alibi || c->sinks) && (a->heads_q < 0 || a->heads_q > 4096))
    c->arrays_ok = 0;
  int nb = B < 0 ? 0 : B;
  if (c->varlen_q && c->arrays_ok) {
    c->arr_n[A_CUQ] = (size_t)nb + 1;
    c->arr[A_CUQ] = calloc(nb + 1, sizeof(int32_t));
    unsigned first = u8(in);
    uint32_t at = first < 0xf0 ? 0 : first < 0xf8 ? first - 0xf0 : (uint32_t)-3;
    c->arr[A_CUQ][0] = (int32_t)at;
    for (int b = 0; b < nb; b++) {
      unsigned x = u8(in);
      uint32_t len =
          x < 0xf8    ? x % (a->seqlen_q > 0 ? (uint32_t)a->seqlen_q + 1u : 1u)
          : x == 0xf8 ? (uint32_t)a->seqlen_q + 1
          : x == 0xf9 ? (uint32_t)-1
                      : (uint32_t)1 << 30;
      at += len; // wraps like the int32 arithmetic a caller might do
      c->arr[A_CUQ][b + 1] = (int32_t)at;
    }
  }
  if (c->varlen_k && c->arrays_ok) {
    c->arr_n[A_CUK] = (size_t)nb + 1;
    c->arr[A_CUK] = calloc(nb + 1, sizeof(int32_t));
    unsigned first = u8(in);
    uint32_t at = first < 0xf0 ? 0 : first < 0xf8 ? first - 0xf0 : (uint32_t)-5;
    c->arr[A_CUK][0] = (int32_t)at;
    for (int b = 0; b < nb; b++) {
      unsigned x = u8(in);
      uint32_t len =
          x < 0xf8    ? x % (a->seqlen_k > 0 ? (uint32_t)a->seqlen_k + 1u : 1u)
          : x == 0xf8 ? (uint32_t)a->seqlen_k + 1
          : x == 0xf9 ? (uint32_t)-2
                      : (uint32_t)1 << 30;
      at += len;
      c->arr[A_CUK][b + 1] = (int32_t)at;
    }
  }
  if (c->seqused && c->arrays_ok) {
    c->arr_n[A_USED] = (size_t)nb;
    c->arr[A_USED] = calloc(nb ? nb : 1, sizeof(int32_t));
    for (int b = 0; b < nb; b++) {
      int64_t store = a->seqlen_k;
      if (c->arr[A_CUK])
        store = (int64_t)c->arr[A_CUK][b + 1] - c->arr[A_CUK][b];
      unsigned x = u8(in);
      c->arr[A_USED][b] =
          x < 0xf8 ? (int)(x % (store >= 0 && store < 1000 ? (unsigned)store + 1
                                                           : 1u))
          : x == 0xf8 ? (int32_t)(uint32_t)(store + 1)
          : x == 0xf9 ? -1
                      : INT_MAX;
    }
  }
  if (c->paged) {
    a->page_size = small_int(in, 1, 8);
    unsigned mb = u8(in);
    int64_t need =
        a->page_size > 0
            ? ((int64_t)a->seqlen_k + a->page_size - 1) / a->page_size
            : 1;
    a->max_blocks_per_seq = mb < 0xf8
                                ? (int)(need > 64 ? 64 : need) + (int)(mb % 2)
                            : mb == 0xf8 ? (int32_t)(uint32_t)(need - 1)
                            : mb == 0xf9 ? 0
                                         : -1;
    a->num_pages = small_int(in, 1, 12);
    int mbps = a->max_blocks_per_seq;
    if (c->arrays_ok && mbps > 0 && mbps <= 4096) {
      size_t n = (size_t)nb * mbps;
      c->arr_n[A_TABLE] = n;
      c->arr[A_TABLE] = calloc(n ? n : 1, sizeof(int32_t));
      for (size_t i = 0; i < n; i++) {
        unsigned x = u8(in);
        int np = a->num_pages > 0 && a->num_pages < 100000 ? a->num_pages : 1;
        c->arr[A_TABLE][i] = x < 0xf8    ? (int)(x % (unsigned)np)
                             : x == 0xf8 ? a->num_pages
                             : x == 0xf9 ? -1
                             : x == 0xfa ? INT_MIN
                                         : INT_MAX;
      }
    } else if (!c->arrays_ok || mbps > 4096) {
      c->arrays_ok = 0;
    } else {
      c->arr[A_TABLE] = calloc(1, sizeof(int32_t)); // refused before read
    }
    a->block_table = c->arr[A_TABLE];
    if (!a->block_table) {
      // Keep the problem paged even when the table could not be built: a
      // 1-element dummy, and the case is not run.
      c->arr[A_TABLE] = calloc(1, sizeof(int32_t));
      a->block_table = c->arr[A_TABLE];
      c->arrays_ok = 0;
    }
  }
  ts_rng r;
  ts_rng_seed(&r, c->seed ^ 0x5eedull);
  if (c->arrays_ok && (c->alibi || c->sinks)) {
    int hq = a->heads_q > 0 ? a->heads_q : 0;
    if (c->alibi) {
      c->arr_n[A_SLOPES] = (size_t)hq;
      float *s = calloc(hq ? hq : 1, sizeof(float));
      for (int h = 0; h < hq; h++)
        s[h] = (float)(ts_rng_uniform(&r) * (h % 3 == 2 ? -0.5 : 1.0));
      c->arr[A_SLOPES] = (int32_t *)s;
    }
    if (c->sinks) {
      c->arr_n[A_SINKS] = (size_t)hq;
      float *s = calloc(hq ? hq : 1, sizeof(float));
      for (int h = 0; h < hq; h++) {
        double x = 3.0 * ts_rng_normal(&r);
        if ((c->data_mode & 0x30) == 0x30 && h == 0) x = 1e4; // sink dominates
        s[h] = (float)x;
      }
      c->arr[A_SINKS] = (int32_t *)s;
    }
  }
  // Arrays go in guarded buffers, like tensors.
  for (int i = 0; i < NA; i++) {
    if (!c->arr[i]) continue;
    buf_make(&c->abuf[i], c->arr_n[i] * 4, 0);
    memcpy(c->abuf[i].data, c->arr[i], c->arr_n[i] * 4);
  }
  if (c->abuf[A_CUQ].used) a->cu_seqlens_q = (int32_t *)c->abuf[A_CUQ].data;
  if (c->abuf[A_CUK].used) a->cu_seqlens_k = (int32_t *)c->abuf[A_CUK].data;
  if (c->abuf[A_USED].used) a->seqused_k = (int32_t *)c->abuf[A_USED].data;
  if (c->abuf[A_TABLE].used) a->block_table = (int32_t *)c->abuf[A_TABLE].data;
  if (c->abuf[A_SLOPES].used) a->alibi_slopes = (float *)c->abuf[A_SLOPES].data;
  if (c->abuf[A_SINKS].used) a->sinks = (float *)c->abuf[A_SINKS].data;
  // A feature whose array could not be built stays on through a dummy
  // pointer (never followed: the case is not run).
  static int32_t dummy[1];
  if (c->varlen_q && !a->cu_seqlens_q) a->cu_seqlens_q = dummy;
  if (c->varlen_k && !a->cu_seqlens_k) a->cu_seqlens_k = dummy;
  if (c->seqused && !a->seqused_k) a->seqused_k = dummy;
  if (c->alibi && !a->alibi_slopes) a->alibi_slopes = (float *)dummy;
  if (c->sinks && !a->sinks) a->sinks = (float *)dummy;

  // Tensor layouts: one for the q side (q, o, do, dq), one for the k side.
  unsigned lq = u8(in), lk = u8(in);
  for (int i = 0; i < NT; i++) {
    unsigned l = t_klike[i] ? lk : lq;
    fa_tensor *t = &c->t[i];
    t->dtype = c->dtype;
    int64_t n[4];
    tensor_extents(c, i, n);
    int pad = (int)((l >> 2) % 4);
    if ((l >> 4) & 1) pad += (int)(i % 2); // tensors differ a little
    make_strides((int)(l % 3), clamp_ext(n[0]), clamp_ext(n[1]),
                 clamp_ext(n[2]), clamp_ext(n[3]), pad, t);
    if ((!t_klike[i] && c->varlen_q) ||
        (t_klike[i] && c->varlen_k && !c->paged))
      t->stride_batch = 0;
    if (l >= 0xe0 && n[0] > 1 && !t_output[i]) t->stride_batch = 0; // shared
  }

  // Defects: bad strides, NULL data, dtype mismatches, aliasing.
  int nmut = mutate ? 1 + (int)(u8(in) % 3) : 0;
  for (int m = 0; m < nmut; m++) {
    unsigned tgt = u8(in), kind = u8(in), val = u8(in);
    int i = (int)(tgt % (NT + 1));
    if (i == NT) { // lse
      if (kind % 2)
        c->lse_null = 1;
      else
        c->lse_alias = (int)(val % NT);
      continue;
    }
    fa_tensor *t = &c->t[i];
    int64_t n[4];
    tensor_extents(c, i, n);
    switch (kind % 6) {
    case 0:
      t->stride_batch = edge_stride(val, t->stride_batch, (int)n[3]);
      break;
    case 1:
      t->stride_seq = edge_stride(val, t->stride_seq, (int)n[3]);
      break;
    case 2:
      t->stride_head = edge_stride(val, t->stride_head, (int)n[3]);
      break;
    case 3:
      c->alias_of[i] = -2;
      break; // data = NULL
    case 4:
      // One in four: a number that is no fa_dtype (5..9; 3 and 4 are the
      // FP8 input dtypes since 0.2).
      t->dtype =
          val % 4 == 3 ? (fa_dtype)(int)(5 + val % 5) : (fa_dtype)(val % 3);
      break;
    case 5:
      c->alias_of[i] = (int)(val % NT);
      break;
    }
  }

  // Merge: parts shaped like o.
  unsigned mb = u8(in);
  c->m_n = mb < 0xf8    ? 1 + (int)(mb % FZ_MAX_PARTS)
           : mb == 0xf8 ? 0
           : mb == 0xf9 ? -1
           : mb == 0xfa ? 4097
                        : 2;
  c->m_batch = a->batch;
  c->m_seqlen = a->seqlen_q;
  c->m_heads = a->heads_q;
  c->m_dim = a->head_dim_v ? a->head_dim_v : a->head_dim;
  unsigned mf = u8(in);
  c->m_inplace = mf & 1;
  c->m_lse_inplace = (mf >> 1) & 1;
  c->m_overlap = (mf >> 2) & 3; // 1: o overlaps a part shifted; 2: lse shifted
  c->m_layout = mf >> 4;
}

/* ---- data
 * ------------------------------------------------------------------------ */

double draw(ts_rng *r, unsigned mode, fa_dtype t) {
  double x = ts_rng_normal(r);
  switch (mode & 7) {
  case 1:
    return x * 1e-3;
  case 2:
    return x * 30.0; // large logits at d ~ 40
  case 3:
    return t == FA_F16
               ? 65504.0 * (0.99 + 0.01 * ts_rng_uniform(r)) * (x < 0 ? -1 : 1)
               : x * 1e3;
  case 4:
    return 1.0; // every score equal
  case 5:
    return (double)(ts_rng_int(r, -2, 2));
  default:
    return x;
  }
}
