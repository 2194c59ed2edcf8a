// SPDX-License-Identifier: MIT
// The properties every call keeps: statuses and messages, nothing written
// on failure, only output views written on success, every element written.
#include "fz_harness.h"

static void report_case_c(const fz_case *c, const char *backend,
                          const char *what);

/* ---- failure --------------------------------------------------------------
 */

void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fuzz_api: PROPERTY VIOLATED: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  fflush(stderr);
  abort();
}

/* ---- buffers as the calls see them
 * ----------------------------------------------- */

/* The buffer tensor i's data lives in (its own, or the one it aliases), or
   NULL when its data is NULL. */
fz_buf *buf_of(fz_case *c, int i) {
  if (!c->t[i].data) return NULL;
  return c->alias_of[i] >= 0 && c->t[i].data != c->tb[i].data
             ? &c->tb[c->alias_of[i]]
             : &c->tb[i];
}

fz_buf *lse_buf(fz_case *c) {
  return c->lse_alias >= 0 ? &c->tb[c->lse_alias] : &c->lse;
}

size_t lse_bytes(const fz_case *c) {
  const fa_attention *a = &c->a;
  if (a->batch < 1 || a->heads_q < 1 || a->seqlen_q < 1) return 0;
  if ((double)a->batch * a->heads_q * a->seqlen_q > FZ_CAP_ELEMS) return 0;
  return (size_t)a->batch * a->heads_q * a->seqlen_q * 4;
}

float *lse_ptr(fz_case *c) { return c->lse_null ? NULL : (float *)c->lse.data; }

static range tensor_range(const fz_case *c, int i) {
  range r = {0, 0};
  const fa_tensor *t = &c->t[i];
  if (!t->data || !dtype_valid(t->dtype) || c->claim[i] <= 0) return r;
  r.lo = (uintptr_t)t->data;
  r.hi = r.lo + (uintptr_t)c->claim[i] * dsize(t->dtype);
  return r;
}

int overlaps(range a, range b) {
  return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi;
}

/* The elements of view t with extents ext, as bytes from lo: painted into
   map (test 0) or tested against it (test 1: 1 if any byte is set). Dims
   of stride 0 repeat the same elements and are walked once. */
static int walk_bytes(const fa_tensor *t, const int64_t ext[4], uintptr_t lo,
                      unsigned char *map, size_t map_bytes, int test) {
  const int64_t s[4] = {t->stride_batch, t->stride_seq, t->stride_head, 1};
  int64_t n[4];
  for (int d = 0; d < 4; d++) n[d] = s[d] ? ext[d] : 1;
  const size_t es = dsize(t->dtype);
  for (int64_t a = 0; a < n[0]; a++)
    for (int64_t b = 0; b < n[1]; b++)
      for (int64_t h = 0; h < n[2]; h++)
        for (int64_t d = 0; d < n[3]; d++) {
          uintptr_t at = (uintptr_t)t->data +
                         (uintptr_t)(a * s[0] + b * s[1] + h * s[2] + d) * es;
          for (size_t e = 0; e < es; e++) {
            size_t x = (size_t)(at + e - lo);
            if (at + e < lo || x >= map_bytes) continue;
            if (!test)
              map[x] = 1;
            else if (map[x])
              return 1;
          }
        }
  return 0;
}

/* Whether views a and b (extents ext) share a byte, by painting. */
int tensors_meet(const fa_tensor *a, const fa_tensor *b, const int64_t ext[4],
                 uintptr_t lo, uintptr_t hi) {
  size_t bytes = (size_t)(hi - lo);
  unsigned char *map = calloc(bytes ? bytes : 1, 1);
  if (!map) die("harness out of memory");
  walk_bytes(a, ext, lo, map, bytes, 0);
  int meet = walk_bytes(b, ext, lo, map, bytes, 1);
  free(map);
  return meet;
}

/* Elements walked for tensor i (stride-0 dims once). */
static double walk_count(const fz_case *c, int i) {
  const fa_tensor *t = &c->t[i];
  const int64_t s[3] = {t->stride_batch, t->stride_seq, t->stride_head};
  double n = (double)c->ext[i][3];
  for (int d = 0; d < 3; d++) n *= s[d] ? (double)c->ext[i][d] : 1.0;
  return n;
}

/* The library's rule is exact: two views overlap when an element of each
   shares a byte, not when their address ranges meet (interleaved views
   are disjoint). Restated by painting bytes; views too large to walk keep
   the range answer. j < 0: the lse range r instead of a tensor. */
static int views_meet(const fz_case *c, int i, int j, range r) {
  range a = tensor_range(c, i), b = j >= 0 ? tensor_range(c, j) : r;
  if (!overlaps(a, b)) return 0;
  if (walk_count(c, i) + (j >= 0 ? walk_count(c, j) : 0) > 1e7) return 1;
  size_t bytes = (size_t)(a.hi - a.lo);
  unsigned char *map = calloc(bytes, 1);
  if (!map) die("harness out of memory");
  walk_bytes(&c->t[i], c->ext[i], a.lo, map, bytes, 0);
  int meet = 0;
  if (j >= 0) {
    meet = walk_bytes(&c->t[j], c->ext[j], a.lo, map, bytes, 1);
  } else {
    for (uintptr_t x = b.lo > a.lo ? b.lo : a.lo; x < b.hi && x < a.hi; x++)
      if (map[x - a.lo]) {
        meet = 1;
        break;
      }
  }
  free(map);
  return meet;
}

/* The library's rule, restated: an output may not overlap an input or
   another output. 1 if the call with these tensors must be refused. */
int call_overlaps(fz_case *c, const int *outs, int n_out, const int *ins,
                  int n_in, int lse_is_output) {
  range lr = {0, 0};
  float *l = lse_ptr(c);
  if (l) {
    lr.lo = (uintptr_t)l;
    lr.hi = lr.lo + lse_bytes(c);
  }
  const range none = {0, 0};
  for (int x = 0; x < n_out; x++) {
    for (int y = 0; y < n_in; y++)
      if (views_meet(c, outs[x], ins[y], none)) return 1;
    for (int y = 0; y < x; y++)
      if (views_meet(c, outs[x], outs[y], none)) return 1;
    if (views_meet(c, outs[x], -1, lr)) return 1;
  }
  if (lse_is_output)
    for (int y = 0; y < n_in; y++)
      if (views_meet(c, ins[y], -1, lr)) return 1;
  return 0;
}

void all_snapshot(fz_case *c) {
  for (int i = 0; i < NT; i++) buf_snapshot(&c->tb[i]);
  for (int i = 0; i < NA; i++) buf_snapshot(&c->abuf[i]);
  buf_snapshot(&c->lse);
}

/* After a failing call: every byte of every buffer as it was. */
void check_nothing_written(fz_case *c, const char *what) {
  for (int i = 0; i < NT; i++) {
    long at = buf_changed(&c->tb[i]);
    if (at != LONG_MIN)
      die("%s failed but changed buffer %s at byte %ld", what, tname[i], at);
  }
  for (int i = 0; i < NA; i++)
    if (buf_changed(&c->abuf[i]) != LONG_MIN)
      die("%s failed but changed a problem array", what);
  if (buf_changed(&c->lse) != LONG_MIN) die("%s failed but changed lse", what);
}

/* After a succeeding call: guards intact everywhere, arrays unchanged, and
   every buffer but those the call writes (its outputs' and lse's) too. */
void check_only_outputs_written(fz_case *c, const char *what, const int *outs,
                                int n_out, int lse_written) {
  for (int i = 0; i < NT; i++) {
    if (!c->tb[i].used) continue;
    if (!guards_ok(&c->tb[i]))
      die("%s wrote a guard band of %s's buffer", what, tname[i]);
    int written = 0;
    for (int x = 0; x < n_out; x++) written |= buf_of(c, outs[x]) == &c->tb[i];
    if (lse_written && lse_ptr(c) && lse_buf(c) == &c->tb[i]) written = 1;
    if (!written && buf_changed(&c->tb[i]) != LONG_MIN)
      die("%s changed %s's buffer, which it does not write", what, tname[i]);
  }
  for (int i = 0; i < NA; i++)
    if (!guards_ok(&c->abuf[i]) || buf_changed(&c->abuf[i]) != LONG_MIN)
      die("%s changed a problem array", what);
  if (!guards_ok(&c->lse)) die("%s wrote a guard band of lse", what);
  if (!(lse_written && lse_ptr(c)) && buf_changed(&c->lse) != LONG_MIN)
    die("%s changed lse, which it does not write", what);
}

/* The words a message may name: fields of fa_attention, tensors, fields of
   fa_tensor and the parameters of each entry point. */
FZ_CHECKER static int names_field(const char *msg) {
  static const char *const words[] = {"batch",
                                      "seqlen_q",
                                      "seqlen_k",
                                      "heads_q",
                                      "heads_kv",
                                      "head_dim",
                                      "head_dim_v",
                                      "scale",
                                      "causal",
                                      "window_left",
                                      "window_right",
                                      "softcap",
                                      "alibi_slopes",
                                      "sinks",
                                      "cu_seqlens_q",
                                      "cu_seqlens_k",
                                      "seqused_k",
                                      "block_table",
                                      "max_blocks_per_seq",
                                      "page_size",
                                      "num_pages",
                                      "q",
                                      "k",
                                      "v",
                                      "o",
                                      "do",
                                      "dq",
                                      "dk",
                                      "dv",
                                      "lse",
                                      "dtype",
                                      "ctx",
                                      "plan",
                                      "n",
                                      "o_parts",
                                      "lse_parts",
                                      "seqlen",
                                      "heads",
                                      "stride_batch",
                                      "stride_seq",
                                      "stride_head",
                                      "data",
                                      NULL};
  for (int w = 0; words[w]; w++) {
    size_t n = strlen(words[w]);
    for (const char *s = strstr(msg, words[w]); s;
         s = strstr(s + 1, words[w])) {
      int before = s > msg && (s[-1] == '_' || (s[-1] >= 'a' && s[-1] <= 'z') ||
                               (s[-1] >= '0' && s[-1] <= '9'));
      char e = s[n];
      int after = e == '_' || (e >= 'a' && e <= 'z') || (e >= '0' && e <= '9');
      if (!before && !after) return 1;
    }
  }
  return 0;
}

void check_status(fa_status s, const char *what, const char *backend) {
  const char *msg = fa_last_error();
  if (s == FA_OK) {
    if (msg[0])
      die("%s on %s succeeded but fa_last_error() = \"%s\"", what, backend,
          msg);
    return;
  }
  if (s != FA_ERR_INVALID_ARGUMENT && s != FA_ERR_UNSUPPORTED &&
      s != FA_ERR_OUT_OF_MEMORY)
    die("%s on %s returned status %d (%s): \"%s\"", what, backend, (int)s,
        fa_status_string(s), msg);
  if (!msg[0])
    die("%s on %s failed (%s) with an empty fa_last_error()", what, backend,
        fa_status_string(s));
  // UNSUPPORTED is about a kernel, not a field: naming the kernel will do
  // ("no backward kernel").
  if (!names_field(msg) && !(s == FA_ERR_UNSUPPORTED && strstr(msg, "cpu.")))
    die("%s on %s failed (%s) with a message naming no field: \"%s\"", what,
        backend, fa_status_string(s), msg);
  if (verbose)
    fprintf(stderr, "  %s on %s: %s: %s\n", what, backend, fa_status_string(s),
            msg);
}

/* 1 marks a logical element (must be written), 2 one that may be written
   (key rows past seqused_k in their storage, the rest of a named page), 0
   one that must not be: stride padding, unnamed pages. Over the buffer
   tensor i lives in, in elements from its data pointer. */
FZ_CHECKER unsigned char *marks_of(fz_case *c, int i) {
  if (c->marks[i]) return c->marks[i]; // (the problem is the same per input)
  const fa_attention *a = &c->a;
  const fa_tensor *t = &c->t[i];
  fz_buf *b = buf_of(c, i);
  if (!b) { // NULL data: the library accepts it only for an empty view
    if (c->ext[i][0] && c->ext[i][1] && c->ext[i][2] && c->ext[i][3])
      die("%s.data is NULL, its view has elements, and a call accepted it",
          tname[i]);
    c->marks[i] = calloc(1, 1);
    if (!c->marks[i]) die("harness out of memory");
    return c->marks[i];
  }
  size_t n = b->bytes / dsize(t->dtype);
  unsigned char *mk = calloc(n + 1, 1);
  if (!mk) die("harness out of memory");
  int dim = (int)c->ext[i][3], heads = (int)c->ext[i][2];
  for (int s = 0; s < a->batch; s++) {
    int rows = t_klike[i] ? fa_oracle_len_k(a, s) : fa_oracle_len_q(a, s);
    int extra = rows;
    if (t_klike[i]) {
      if (a->block_table)
        extra = (rows + a->page_size - 1) / a->page_size * a->page_size;
      else
        extra = fa_oracle_storage_k(a, s);
    }
    for (int r = 0; r < extra; r++)
      for (int h = 0; h < heads; h++) {
        int64_t o = t_klike[i] ? fa_oracle_k_index(a, t, s, r, h)
                               : fa_oracle_q_index(a, t, s, r, h);
        if (o < 0 || o + dim > (int64_t)n)
          die("%s: element %" PRId64 " of the view lies outside its claimed "
              "extent of %zu elements",
              tname[i], o, n);
        for (int d = 0; d < dim; d++)
          if (mk[o + d] != 1) mk[o + d] = r < rows ? 1 : 2;
      }
  }
  c->marks[i] = mk;
  return mk;
}

/* The first of n elements of es bytes outside the view (mk 0) that differs
   from the snapshot, or n if none: runs of them compared at once. */
FZ_CHECKER size_t first_stray(const unsigned char *mk, const unsigned char *cur,
                              const unsigned char *snap, size_t n, size_t es) {
  for (size_t x = 0; x < n;) {
    if (mk[x]) {
      x++;
      continue;
    }
    size_t e = x;
    while (e < n && !mk[e]) e++;
    if (memcmp(cur + x * es, snap + x * es, (e - x) * es))
      for (; x < e; x++)
        if (memcmp(cur + x * es, snap + x * es, es)) return x;
    x = e;
  }
  return n;
}

/* Fill the logical elements of input tensor i with data, everything else in
   its buffer with the poison NaN (a library that reads padding, unnamed
   pages or keys past seqused_k produces NaN where the oracle has none). */
FZ_CHECKER void fill_input(fz_case *c, int i, ts_rng *r) {
  fa_tensor *t = &c->t[i];
  size_t n = c->tb[i].bytes / dsize(t->dtype);
  // A NaN payload of its own, not the outputs' poison: a tensor aliasing
  // this buffer may read it, and the NaN it produces must not pass for an
  // output element left unwritten.
  if (t->dtype == FA_F32) {
    const uint32_t in_poison = 0x7fc0deadu;
    for (size_t x = 0; x < n; x++) memcpy((float *)t->data + x, &in_poison, 4);
  } else {
    const uint16_t in_poison = t->dtype == FA_F16 ? 0x7e11 : 0x7f91;
    for (size_t x = 0; x < n; x++)
      memcpy((uint16_t *)t->data + x, &in_poison, 2);
  }
  unsigned char *mk = marks_of(c, i);
  unsigned mode = c->data_mode;
  int nan_in = (mode >> 3) & 3; // 1: one NaN in q, 2: in k, 3: in v
  for (size_t x = 0; x < n; x++)
    if (mk[x] == 1)
      ts_store(t->data, t->dtype, (int64_t)x, draw(r, mode, t->dtype));
  if ((nan_in == 1 && i == T_Q) || (nan_in == 2 && i == T_K) ||
      (nan_in == 3 && i == T_V)) {
    size_t count = 0;
    for (size_t x = 0; x < n; x++) count += mk[x] == 1;
    if (count) {
      size_t pick = (size_t)ts_rng_u64(r) % count, seen = 0;
      for (size_t x = 0; x < n; x++)
        if (mk[x] == 1 && seen++ == pick) {
          ts_store(t->data, t->dtype, (int64_t)x, NAN);
          break;
        }
    }
  }
}

/* Poison the outputs' buffers, except those an output shares with another
   tensor (aliasing): that buffer may be some call's input, which poison
   would corrupt (a refused call must leave it as the inputs were). */
void poison_outputs(fz_case *c, const int *outs, int n, int lse) {
  for (int x = 0; x < n; x++) {
    int i = outs[x];
    fz_buf *b = buf_of(c, i);
    if (!b || !dtype_valid(c->t[i].dtype) || b != &c->tb[i]) continue;
    int shared = 0;
    for (int j = 0; j < NT; j++) shared |= j != i && buf_of(c, j) == b;
    if (shared || (lse_ptr(c) && lse_buf(c) == b)) continue;
    ts_poison(b->data, c->t[i].dtype, b->bytes / dsize(c->t[i].dtype));
  }
  if (lse && lse_ptr(c) && c->lse_alias < 0) {
    fz_buf *b = lse_buf(c);
    ts_poison_f32((float *)b->data, b->bytes / 4);
  }
}

/* Output tensor i after success: nothing outside its view written, every
   logical element written; widened into the oracle's dense q layout. */
FZ_CHECKER void extract_q(fz_case *c, int i, double *out, const char *what) {
  const fa_attention *a = &c->a;
  const fa_tensor *t = &c->t[i];
  fz_buf *bb = buf_of(c, i);
  unsigned char *mk = marks_of(c, i); // (NULL data: an empty view, n = 0)
  size_t es = dsize(t->dtype), n = bb ? bb->bytes / es : 0;
  size_t stray = bb ? first_stray(mk, bb->data, bb->snap + bb->lead, n, es) : 0;
  if (stray < n)
    die("%s: %s element %zu (outside its view) was written", what, tname[i],
        stray);
  int dim = (int)c->ext[i][3];
  for (int b = 0; b < a->batch; b++)
    for (int r = 0; r < a->seqlen_q; r++)
      for (int h = 0; h < a->heads_q; h++) {
        double *d =
            out + (((size_t)b * a->seqlen_q + r) * a->heads_q + h) * dim;
        if (r >= fa_oracle_len_q(a, b)) {
          for (int e = 0; e < dim; e++) d[e] = 0.0;
          continue;
        }
        int64_t o = fa_oracle_q_index(a, t, b, r, h);
        for (int e = 0; e < dim; e++) {
          if (ts_is_poison(t->data, t->dtype, o + e)) {
            report_case_c(c, "(extract)", what);
            die("%s: %s[b=%d][row=%d][h=%d][%d] was never written", what,
                tname[i], b, r, h, e);
          }
          d[e] = ts_load(t->data, t->dtype, o + e);
        }
      }
}

void idx_name_q(size_t x, char *buf, size_t len, const void *ctx) {
  const int *s = ctx; // {seqlen, heads, dim}
  size_t d = x % s[2], h = x / s[2] % s[1], r = x / s[2] / s[1] % s[0],
         b = x / s[2] / s[1] / s[0];
  snprintf(buf, len, "[b=%zu][row=%zu][h=%zu][%zu]", b, r, h, d);
}

void idx_name_lse(size_t x, char *buf, size_t len, const void *ctx) {
  const int *s = ctx; // {heads, seqlen}
  snprintf(buf, len, "[b=%zu][h=%zu][row=%zu]", x / s[1] / s[0],
           x / s[1] % s[0], x % s[1]);
}

void report_case(const fz_run *run, const char *what) {
  report_case_c(run->c, run->backend, what);
}

static void report_case_c(const fz_case *c, const char *backend,
                          const char *what) {
  const fa_attention *a = &c->a;
  fprintf(stderr,
          "fuzz_api: %s on %s: dtype %d b%d sq%d sk%d hq%d hkv%d d%d dv%d "
          "scale %g causal %d window %d,%d softcap %g alibi %d sinks %d "
          "varlen %d/%d seqused %d paged %d (ps %d mbps %d pages %d) "
          "data mode 0x%x seed 0x%x threads %u\n",
          what, backend, (int)c->dtype, a->batch, a->seqlen_q, a->seqlen_k,
          a->heads_q, a->heads_kv, a->head_dim, a->head_dim_v, (double)a->scale,
          a->causal, a->window_left, a->window_right, (double)a->softcap,
          c->alibi, c->sinks, c->varlen_q, c->varlen_k, c->seqused, c->paged,
          a->page_size, a->max_blocks_per_seq, a->num_pages, c->data_mode,
          c->seed, c->threads);
  for (int i = 0; i < NT; i++)
    fprintf(stderr,
            "  %s: dtype %d strides (%" PRId64 ",%" PRId64 ",%" PRId64
            ") claim %" PRId64 " alias %d\n",
            tname[i], (int)c->t[i].dtype, c->t[i].stride_batch,
            c->t[i].stride_seq, c->t[i].stride_head, c->claim[i],
            c->alias_of[i]);
  fprintf(stderr, "  lse: %s alias %d\n", c->lse_null ? "NULL" : "set",
          c->lse_alias);
}
