// SPDX-License-Identifier: MIT
// libFuzzer harness for the public API. Bytes decode into an fa_attention,
// tensor layouts, dtypes and a few deliberate defects (valid and invalid
// alike, sizes kept small); every buffer is allocated to exactly the extent
// the problem claims, between guard bands (poisoned for ASan too), and the
// harness calls fa_explain, fa_forward, fa_plan_create/fa_plan_forward,
// fa_backward and fa_merge_states on the usable CPU backends it selects.
//
// Properties (any violation aborts, so libFuzzer keeps the input):
//   - every call returns a valid status; CPU calls never report
//     FA_ERR_NO_DEVICE or FA_ERR_BACKEND;
//   - a failing call leaves every byte of every buffer as it was, and
//     fa_last_error() is non-empty and names a field;
//   - a succeeding call leaves fa_last_error() empty, inputs and guard bands
//     untouched, writes nothing outside its output views, writes every
//     element of them, and matches the float64 oracle within fz_tol.h's
//     per-element bounds (NaN exactly where the oracle has NaN);
//   - fa_plan_forward agrees with fa_forward: same status, same bits;
//   - a problem whose tensors provably overflow 64-bit offsets is refused;
//   - fa_explain is snprintf-like: right length, always NUL-terminated,
//     never writes past len.
//
// Input format: see fz_decode(). Every byte string is a valid input
// (missing bytes read as 0). Build: clang -fsanitize=fuzzer,address,
// undefined (tests/fuzz/CMakeLists.txt), or for long runs the throughput
// build, FZ_THROUGHPUT (README.md); fuzz_replay.c runs the corpus without
// libFuzzer.
#define _POSIX_C_SOURCE 200809L
#ifdef FZ_GUARD_PAGES
#define _DEFAULT_SOURCE // MAP_ANONYMOUS
#endif
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn.h"
#include "fz_tol.h"
#include "oracle.h"
#include "tensor.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FZ_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define FZ_ASAN 1
#endif
#ifdef FZ_ASAN
#include <sanitizer/asan_interface.h>
#define FZ_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define FZ_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define FZ_POISON(p, n) ((void)(p), (void)(n))
#define FZ_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* The throughput build (FZ_THROUGHPUT) leaves the checker's own loops out
   of coverage: comparison tracing there took a quarter of each execution,
   and their edges say little the library's own do not. */
#if defined(FZ_THROUGHPUT) && defined(__clang__)
#define FZ_CHECKER __attribute__((no_sanitize("coverage")))
#else
#define FZ_CHECKER
#endif

/* Largest tensor (elements) the harness allocates; a valid-looking problem
   that claims more is only explained and planned, never run. FZ_CAP_WORK
   bounds the work of a run likewise (see setup_buffers). The throughput
   build lowers both (its checks cost time in proportion to the buffers). */
#ifndef FZ_CAP_ELEMS
#define FZ_CAP_ELEMS (1 << 20)
#endif
#ifndef FZ_CAP_WORK
#define FZ_CAP_WORK 2e7
#endif
#define FZ_GUARD 64
#define FZ_MAX_BACKENDS 12
#define FZ_MAX_PARTS 6

static int verbose;

/* ---- failure --------------------------------------------------------------
 */

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fuzz_api: PROPERTY VIOLATED: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  fflush(stderr);
  abort();
}

/* ---- input bytes -----------------------------------------------------------
 */

typedef struct fz_in {
  const uint8_t *p;
  size_t n, at;
} fz_in;

static unsigned u8(fz_in *in) { return in->at < in->n ? in->p[in->at++] : 0; }

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

/* ---- buffers --------------------------------------------------------------
 */

/* A payload of `bytes` at `align` bytes past a 64-byte boundary, between two
   guard bands of FZ_GUARD sentinel bytes (ASan-poisoned).

   With FZ_GUARD_PAGES (the throughput build, tests/fuzz/README.md: no ASan)
   the payload lies instead against an inaccessible page, so that a read or
   a write past that end faults at once: on its right (its end on a page
   boundary, a sentinel band on the left) or on its left (page-aligned, a
   band on the right), the side picked per buffer from the input's seed.
   The band on the other side catches writes there after the call, as
   always; reads there go unseen (the ASan build sees them). */
typedef struct fz_buf {
  unsigned char *alloc, *data, *snap;
  size_t bytes, total, lead, tail; // tail: the right band's length
  void *region;                    // FZ_GUARD_PAGES: the pages it lies in
  int used;
} fz_buf;

#define FZ_SENTINEL 0xcb

#ifdef FZ_GUARD_PAGES
#include <sys/mman.h>
#include <unistd.h>

/* [PROT_NONE page][usable: 2^k pages][PROT_NONE page], mapped once and kept
   in a pool per k: a warm harness makes no system call per execution. */
typedef struct fz_region {
  unsigned char *usable;
  size_t size;
  struct fz_region *next;
} fz_region;

static fz_region *region_pool[48];
static size_t page_bytes;
static uint32_t side_bits; // which side each buffer's page is on (per input)

static fz_region *region_get(size_t need) {
  if (!page_bytes) page_bytes = (size_t)sysconf(_SC_PAGESIZE);
  int k = 0;
  while ((page_bytes << k) < need) k++;
  fz_region *r = region_pool[k];
  if (r) {
    region_pool[k] = r->next;
    return r;
  }
  size_t size = page_bytes << k, map = size + 2 * page_bytes;
  unsigned char *m = mmap(NULL, map, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  r = malloc(sizeof *r);
  if (m == MAP_FAILED || !r) die("harness out of memory (%zu bytes)", need);
  if (mprotect(m, page_bytes, PROT_NONE) ||
      mprotect(m + page_bytes + size, page_bytes, PROT_NONE))
    die("mprotect failed");
  r->usable = m + page_bytes;
  r->size = size;
  return r;
}

static void region_put(fz_region *r) {
  int k = 0;
  while ((page_bytes << k) < r->size) k++;
  r->next = region_pool[k];
  region_pool[k] = r;
}
#endif

static void buf_make(fz_buf *b, size_t bytes, size_t align) {
  memset(b, 0, sizeof *b);
  b->bytes = bytes;
  b->lead = FZ_GUARD + align;
  b->tail = FZ_GUARD;
#ifdef FZ_GUARD_PAGES
  const int right = side_bits & 1;
  side_bits = side_bits >> 1 | side_bits << 31;
  b->lead = right ? FZ_GUARD : 0;
  b->tail = right ? 0 : FZ_GUARD;
  b->total = b->lead + bytes + b->tail;
  fz_region *r = region_get(b->total);
  b->region = r;
  b->alloc = right ? r->usable + r->size - b->total : r->usable;
#else
  b->total = b->lead + bytes + b->tail;
  b->alloc = aligned_alloc(64, (b->total + 63) / 64 * 64);
#endif
  b->snap = malloc(b->total);
  if (!b->alloc || !b->snap) die("harness out of memory (%zu bytes)", bytes);
  memset(b->alloc, FZ_SENTINEL, b->total);
  b->data = b->alloc + b->lead;
  b->used = 1;
  FZ_POISON(b->alloc, b->lead);
  FZ_POISON(b->data + bytes, b->tail);
}

static void buf_free(fz_buf *b) {
  if (!b->used) return;
  FZ_UNPOISON(b->alloc, b->total);
#ifdef FZ_GUARD_PAGES
  region_put(b->region);
#else
  free(b->alloc);
#endif
  free(b->snap);
  memset(b, 0, sizeof *b);
}

FZ_CHECKER static void buf_snapshot(fz_buf *b) {
  if (!b->used) return;
  FZ_UNPOISON(b->alloc, b->total);
  memcpy(b->snap, b->alloc, b->total);
  FZ_POISON(b->alloc, b->lead);
  FZ_POISON(b->data + b->bytes, b->tail);
}

/* Offset of the first byte that differs from the snapshot (guards
   included, relative to the payload), or LONG_MIN if none. */
FZ_CHECKER static long buf_changed(fz_buf *b) {
  if (!b->used) return LONG_MIN;
  FZ_UNPOISON(b->alloc, b->total);
  long at = LONG_MIN;
  if (memcmp(b->alloc, b->snap, b->total)) // (the loop only to locate it)
    for (size_t i = 0; i < b->total; i++)
      if (b->alloc[i] != b->snap[i]) {
        at = (long)i - (long)b->lead;
        break;
      }
  FZ_POISON(b->alloc, b->lead);
  FZ_POISON(b->data + b->bytes, b->tail);
  return at;
}

FZ_CHECKER static int guards_ok(fz_buf *b) {
  if (!b->used) return 1;
  FZ_UNPOISON(b->alloc, b->total);
  static unsigned char band[FZ_GUARD + 64];
  if (band[0] != FZ_SENTINEL) memset(band, FZ_SENTINEL, sizeof band);
  int ok = b->lead <= sizeof band && !memcmp(b->alloc, band, b->lead) &&
           !memcmp(b->data + b->bytes, band, b->tail);
  FZ_POISON(b->alloc, b->lead);
  FZ_POISON(b->data + b->bytes, b->tail);
  return ok;
}

/* ---- the decoded case
 * -------------------------------------------------------- */

enum { T_Q, T_K, T_V, T_O, T_DO, T_DQ, T_DK, T_DV, NT };
static const char *const tname[NT] = {"q",  "k",  "v",  "o",
                                      "do", "dq", "dk", "dv"};
static const int t_klike[NT] = {0, 1, 1, 0, 0, 0, 1, 1};
static const int t_vdim[NT] = {0, 0, 1, 1, 1, 0, 0, 1};
static const int t_output[NT] = {0, 0, 0, 1, 0, 1, 1, 1};

enum { A_CUQ, A_CUK, A_USED, A_TABLE, A_SLOPES, A_SINKS, NA };

typedef struct fz_case {
  unsigned ops, backend_sel, threads, data_mode;
  fa_dtype dtype;
  uint32_t seed;
  fa_attention a;
  int varlen_q, varlen_k, seqused, paged, alibi, sinks, lse_null;
  int32_t *arr[NA];
  size_t arr_n[NA];
  fz_buf abuf[NA];
  fa_tensor t[NT];
  int64_t ext[NT][4]; // the extents the problem claims for each view
  int64_t claim[NT];  // elements from data to the last one (span + 1)
  fz_buf tb[NT];      // each tensor's own buffer
  int alias_of[NT];   // -1, or the tensor whose buffer this one points into
  fz_buf lse;         // [batch][heads_q][seqlen_q] fp32
  int lse_alias;      // -1, or a tensor whose buffer lse points into
  int arrays_ok;      // the problem's arrays could be allocated
  int over[NT];       // the claim overflows 64-bit offsets: refuse the call
  int big[NT];        // the claim is too large to allocate: skip the call
  int lse_big;        // lse too large (or its dims invalid): skip calls
  unsigned char *marks[NT]; // marks_of's answers, made once per input
  int must_fail;            // the current call has an `over` tensor
  // merge
  int m_n, m_batch, m_seqlen, m_heads, m_dim;
  int m_inplace, m_lse_inplace, m_overlap;
  unsigned m_layout;
  // the parts' payloads and lse as first made (the same for every context:
  // copied, not drawn again), o_parts[p] at 2p, lse_parts[p] at 2p + 1
  unsigned char *m_data[2 * FZ_MAX_PARTS];
} fz_case;

/* ---- backends ---------------------------------------------------------------
 */

static fa_context *ctxs[FZ_MAX_BACKENDS];
static const char *ctx_names[FZ_MAX_BACKENDS];
static int n_ctx;

static void add_context(const char *name) {
  for (int i = 0; i < n_ctx; i++)
    if (!strcmp(ctx_names[i], name)) return;
  if (n_ctx >= FZ_MAX_BACKENDS) return;
  if (fa_context_create_by_name(&ctxs[n_ctx], name) != FA_OK) {
    fprintf(stderr, "fuzz_api: %s listed but unusable: %s\n", name,
            fa_last_error());
    abort();
  }
  ctx_names[n_ctx] = strdup(name);
  n_ctx++;
}

/* Contexts: every usable CPU backend (dispatch picks its kernel), then every
   kernel of a CPU backend with several, bound by name (a better kernel may
   shadow it for some problems). Kernel names come from fa_explain's lines
   "<backend> <kernel>: ...", for each dtype. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  // OpenMP workers must not spin between calls on a 2-core machine.
  setenv("KMP_BLOCKTIME", "0", 0);
  setenv("OMP_WAIT_POLICY", "passive", 0);
  verbose = getenv("FZ_VERBOSE") != NULL;
  int nb = fa_backend_count();
  for (int i = 0; i < nb; i++)
    if (!strncmp(fa_backend_name(i), "cpu", 3)) add_context(fa_backend_name(i));
  int n_backends = n_ctx;
  fa_attention a;
  fa_attention_init(&a);
  a.batch = a.seqlen_q = a.seqlen_k = a.heads_q = a.heads_kv = 1;
  a.head_dim = 64;
  char pairs[32][2][64];
  int np = 0;
  for (int t = 0; t < 3; t++) {
    char text[4096], *save = NULL;
    fa_explain(&a, (fa_dtype)t, text, sizeof text);
    for (char *line = strtok_r(text, "\n", &save); line && np < 32;
         line = strtok_r(NULL, "\n", &save)) {
      char backend[64], kernel[64];
      if (sscanf(line, "%63s %63[^:]:", backend, kernel) != 2) continue;
      if (strncmp(backend, "cpu-", 4) || strncmp(kernel, "cpu.", 4)) continue;
      int dup = 0;
      for (int k = 0; k < np; k++) dup |= !strcmp(pairs[k][1], kernel);
      if (dup) continue;
      snprintf(pairs[np][0], 64, "%s", backend);
      snprintf(pairs[np][1], 64, "%s", kernel);
      np++;
    }
  }
  for (int k = 0; k < np; k++) {
    int siblings = 0;
    for (int m = 0; m < np; m++) siblings += !strcmp(pairs[m][0], pairs[k][0]);
    if (siblings > 1) add_context(pairs[k][1]);
  }
  if (n_ctx == 0) {
    fprintf(stderr, "fuzz_api: no usable CPU backend\n");
    abort();
  }
  if (verbose || getenv("FZ_LIST")) {
    fprintf(stderr, "fuzz_api: %d backends, %d kernels:", n_backends,
            n_ctx - n_backends);
    for (int i = 0; i < n_ctx; i++) fprintf(stderr, " %s", ctx_names[i]);
    fprintf(stderr, "\n");
  }
  return 0;
}

/* ---- claims: what the problem says each view spans --------------------------
 */

/* Elements from the first to the last one of a view, or -1 if that does not
   fit 63 bits, or -2 if it is beyond the library's own limit (span >=
   INT64_MAX / 8 elements): the library must refuse those. 0 for an empty
   view or one with a negative extent or stride (refused too). */
static int64_t view_claim(const int64_t n[4], const fa_tensor *t) {
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

static size_t dsize(fa_dtype t) { return t == FA_F32 ? 4 : 2; }
static int dtype_valid(fa_dtype t) {
  return t == FA_F32 || t == FA_F16 || t == FA_BF16;
}

/* Extents of tensor i as the problem defines its view. */
static void tensor_extents(const fz_case *c, int i, int64_t n[4]) {
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
static void make_strides(int layout, int64_t nb, int64_t ns, int64_t nh,
                         int64_t nd, int pad, fa_tensor *t) {
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

static void fz_decode(fz_case *c, fz_in *in) {
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
      t->dtype =
          val % 4 == 3 ? (fa_dtype)(int)(4 + val % 5) : (fa_dtype)(val % 3);
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

static double draw(ts_rng *r, unsigned mode, fa_dtype t) {
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

static void report_case_c(const fz_case *c, const char *backend,
                          const char *what);

/* ---- buffers as the calls see them
 * ----------------------------------------------- */

/* The buffer tensor i's data lives in (its own, or the one it aliases), or
   NULL when its data is NULL. */
static fz_buf *buf_of(fz_case *c, int i) {
  if (!c->t[i].data) return NULL;
  return c->alias_of[i] >= 0 && c->t[i].data != c->tb[i].data
             ? &c->tb[c->alias_of[i]]
             : &c->tb[i];
}

static fz_buf *lse_buf(fz_case *c) {
  return c->lse_alias >= 0 ? &c->tb[c->lse_alias] : &c->lse;
}

static size_t lse_bytes(const fz_case *c) {
  const fa_attention *a = &c->a;
  if (a->batch < 1 || a->heads_q < 1 || a->seqlen_q < 1) return 0;
  if ((double)a->batch * a->heads_q * a->seqlen_q > FZ_CAP_ELEMS) return 0;
  return (size_t)a->batch * a->heads_q * a->seqlen_q * 4;
}

static float *lse_ptr(fz_case *c) {
  return c->lse_null ? NULL : (float *)c->lse.data;
}

typedef struct range {
  uintptr_t lo, hi;
} range;

static range tensor_range(const fz_case *c, int i) {
  range r = {0, 0};
  const fa_tensor *t = &c->t[i];
  if (!t->data || !dtype_valid(t->dtype) || c->claim[i] <= 0) return r;
  r.lo = (uintptr_t)t->data;
  r.hi = r.lo + (uintptr_t)c->claim[i] * dsize(t->dtype);
  return r;
}

static int overlaps(range a, range b) {
  return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi;
}

/* The library's rule, restated: an output may not overlap an input or
   another output. 1 if the call with these tensors must be refused. */
static int call_overlaps(fz_case *c, const int *outs, int n_out, const int *ins,
                         int n_in, int lse_is_output) {
  range lr = {0, 0};
  float *l = lse_ptr(c);
  if (l) {
    lr.lo = (uintptr_t)l;
    lr.hi = lr.lo + lse_bytes(c);
  }
  for (int x = 0; x < n_out; x++) {
    range o = tensor_range(c, outs[x]);
    for (int y = 0; y < n_in; y++)
      if (overlaps(o, tensor_range(c, ins[y]))) return 1;
    for (int y = 0; y < x; y++)
      if (overlaps(o, tensor_range(c, outs[y]))) return 1;
    if (overlaps(o, lr)) return 1;
  }
  if (lse_is_output)
    for (int y = 0; y < n_in; y++)
      if (overlaps(lr, tensor_range(c, ins[y]))) return 1;
  return 0;
}

static void all_snapshot(fz_case *c) {
  for (int i = 0; i < NT; i++) buf_snapshot(&c->tb[i]);
  for (int i = 0; i < NA; i++) buf_snapshot(&c->abuf[i]);
  buf_snapshot(&c->lse);
}

/* After a failing call: every byte of every buffer as it was. */
static void check_nothing_written(fz_case *c, const char *what) {
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
static void check_only_outputs_written(fz_case *c, const char *what,
                                       const int *outs, int n_out,
                                       int lse_written) {
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

static void check_status(fa_status s, const char *what, const char *backend) {
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
FZ_CHECKER static unsigned char *marks_of(fz_case *c, int i) {
  if (c->marks[i]) return c->marks[i]; // (the problem is the same per input)
  const fa_attention *a = &c->a;
  const fa_tensor *t = &c->t[i];
  fz_buf *b = buf_of(c, i);
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
FZ_CHECKER static size_t first_stray(const unsigned char *mk,
                                     const unsigned char *cur,
                                     const unsigned char *snap, size_t n,
                                     size_t es) {
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
FZ_CHECKER static void fill_input(fz_case *c, int i, ts_rng *r) {
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
static void poison_outputs(fz_case *c, const int *outs, int n, int lse) {
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
FZ_CHECKER static void extract_q(fz_case *c, int i, double *out,
                                 const char *what) {
  const fa_attention *a = &c->a;
  const fa_tensor *t = &c->t[i];
  fz_buf *bb = buf_of(c, i);
  unsigned char *mk = marks_of(c, i);
  size_t es = dsize(t->dtype), n = bb->bytes / es;
  const unsigned char *snap = bb->snap + bb->lead;
  size_t stray = first_stray(mk, bb->data, snap, n, es);
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

static void idx_name_q(size_t x, char *buf, size_t len, const void *ctx) {
  const int *s = ctx; // {seqlen, heads, dim}
  size_t d = x % s[2], h = x / s[2] % s[1], r = x / s[2] / s[1] % s[0],
         b = x / s[2] / s[1] / s[0];
  snprintf(buf, len, "[b=%zu][row=%zu][h=%zu][%zu]", b, r, h, d);
}

static void idx_name_lse(size_t x, char *buf, size_t len, const void *ctx) {
  const int *s = ctx; // {heads, seqlen}
  snprintf(buf, len, "[b=%zu][h=%zu][row=%zu]", x / s[1] / s[0],
           x / s[1] % s[0], x % s[1]);
}

typedef struct fz_run {
  fz_case *c;
  fa_context *ctx;
  const char *backend;
} fz_run;

static void report_case(const fz_run *run, const char *what) {
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

/* ---- the oracle
 * ------------------------------------------------------------------ */

typedef struct dense {
  double *o, *lse, *otol, *ltol;
  size_t no, nl;
} dense;

static void oracle_forward(fz_case *c, dense *d) {
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
}

static void grads_free(dense *d);

static void dense_free(dense *d) {
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

static const int fwd_outs[1] = {T_O}, fwd_ins[3] = {T_Q, T_K, T_V};

static fa_status call_forward(fz_run *run) {
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

FZ_CHECKER static void check_forward(fz_run *run, const dense *ref) {
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
      fz_compare("o", c->dtype, ref->o, got, ref->otol, ref->no,
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
typedef struct saved {
  unsigned char *o_pre, *o_post, *l_pre, *l_post;
  fz_buf *ob, *lb;
} saved;

static void save_buf(fz_buf *b, unsigned char **to) {
  *to = NULL;
  if (!b) return;
  *to = malloc(b->bytes + 1);
  if (!*to) die("harness out of memory");
  memcpy(*to, b->data, b->bytes);
}

static void saved_free(saved *s) {
  free(s->o_pre);
  free(s->o_post);
  free(s->l_pre);
  free(s->l_post);
  memset(s, 0, sizeof *s);
}

static void run_plan(fz_run *run, fa_status fwd_status, const char *fwd_msg,
                     saved *sv) {
  fz_case *c = run->c;
  if (sv->ob) memcpy(sv->ob->data, sv->o_pre, sv->ob->bytes);
  if (sv->lb) memcpy(sv->lb->data, sv->l_pre, sv->lb->bytes);
  all_snapshot(c);
  fa_plan *const sentinel = (fa_plan *)(uintptr_t)0x40;
  fa_plan *plan = sentinel;
  fa_status s = fa_plan_create(run->ctx, &c->a, c->t[T_Q], c->t[T_K],
                               c->t[T_V], c->t[T_O], &plan);
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
  size_t es = dsize(t->dtype), n = bb->bytes / es;
  unsigned char *mk = marks_of(c, i);
  const unsigned char *snap = bb->snap + bb->lead;
  size_t stray = first_stray(mk, bb->data, snap, n, es);
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

static void run_backward(fz_run *run, const dense *fwd, dense *cache,
                         int checked) {
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

static void run_merge(fz_run *run, fz_in *in) {
  fz_case *c = run->c;
  const int n = c->m_n, B = c->m_batch, S = c->m_seqlen, H = c->m_heads,
            D = c->m_dim;
  // Parts the harness holds: n of them when 1 <= n <= FZ_MAX_PARTS; for
  // n outside [1, 4096] one (the call must be refused before reading
  // o_parts); other n are not run.
  if (n > FZ_MAX_PARTS && n <= 4096) return;
  const int np = n >= 1 && n <= FZ_MAX_PARTS ? n : 1;
  const int valid_ext = B >= 1 && S >= 1 && H >= 1 && D >= 1;
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
      legal = 0;
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

/* ---- the case
 * ------------------------------------------------------------------------ */

static void setup_buffers(fz_case *c) {
  for (int i = 0; i < NT; i++) {
    tensor_extents(c, i, c->ext[i]);
    int64_t cl =
        dtype_valid(c->t[i].dtype) ? view_claim(c->ext[i], &c->t[i]) : 1;
    c->claim[i] = cl;
    c->over[i] = cl < 0;
    c->big[i] = cl > FZ_CAP_ELEMS;
  }
  // Each tensor gets its own buffer of exactly its claim, at an
  // element-aligned offset past a 64-byte boundary.
  for (int i = 0; i < NT; i++) {
    int64_t cl = c->claim[i];
    if (cl < 0 || cl > FZ_CAP_ELEMS) cl = 1;
    size_t es = dtype_valid(c->t[i].dtype) ? dsize(c->t[i].dtype) : 4;
    buf_make(&c->tb[i], (size_t)cl * es, ((c->seed >> (i * 2)) & 3) * es);
    c->t[i].data = c->tb[i].data;
  }
  for (int i = 0; i < NT; i++) {
    int j = c->alias_of[i];
    if (j == -2)
      c->t[i].data = NULL;
    else if (j >= 0 && j != i && c->tb[j].bytes >= c->tb[i].bytes &&
             !c->big[i] && !c->over[i])
      c->t[i].data = c->tb[j].data; // fits: the library may use all of it
    else
      c->alias_of[i] = -1;
  }
  size_t lb = lse_bytes(c);
  if (lb == 0 || lb / 4 > FZ_CAP_ELEMS) {
    lb = 4;
    c->lse_big = 1;
  }
  // The oracle's work (and the library's) bounded too: a valid-looking
  // problem of 600 x 600 x 600 is skipped like one too large to hold.
  const fa_attention *a = &c->a;
  // Each (batch, head, q tile, k tile) costs at least a 16 x 16 x 16 tile
  // product and its bookkeeping, whatever the sizes.
  double dd =
      (double)a->head_dim + (a->head_dim_v ? a->head_dim_v : a->head_dim);
  double tiles = (double)a->batch * a->heads_q * ceil(a->seqlen_q / 16.0) *
                 ceil(a->seqlen_k / 16.0);
  double work = (double)a->batch * a->heads_q * a->seqlen_q * a->seqlen_k * dd;
  if (work > FZ_CAP_WORK || tiles * 2e4 > FZ_CAP_WORK) c->lse_big = 1;
  buf_make(&c->lse, lb, 0);
  // (lse is a float *: it may alias another buffer only where a float may
  // start.)
  if (c->lse_alias >= 0 && c->tb[c->lse_alias].bytes >= lb &&
      (uintptr_t)c->tb[c->lse_alias].data % sizeof(float) == 0) {
    buf_free(&c->lse); // lse inside another tensor's buffer
    c->lse.data = c->tb[c->lse_alias].data;
  } else {
    c->lse_alias = -1;
  }
}

/* Whether a call over tensors ids may run: 0 no (a claim too large to
   hold), 1 yes, 2 yes and it must be refused (a claim overflows). */
static int call_mode(const fz_case *c, const int *ids, int n) {
  if (!c->arrays_ok) return 0;
  int over = 0, big = c->lse_big;
  for (int x = 0; x < n; x++) {
    over |= c->over[ids[x]];
    big |= c->big[ids[x]];
  }
  return over ? 2 : big ? 0 : 1;
}

static void free_case(fz_case *c) {
  for (int i = 0; i < NT; i++) {
    buf_free(&c->tb[i]);
    free(c->marks[i]);
    c->marks[i] = NULL;
  }
  for (int i = 0; i < 2 * FZ_MAX_PARTS; i++) {
    free(c->m_data[i]);
    c->m_data[i] = NULL;
  }
  for (int i = 0; i < NA; i++) {
    buf_free(&c->abuf[i]);
    free(c->arr[i]);
  }
  buf_free(&c->lse);
}

/* fa_explain: snprintf semantics in a guarded buffer of a fuzzed size. */
static void run_explain(fz_case *c, fz_in *in) {
  size_t len = u8(in) * 8;
  size_t need = fa_explain(&c->a, c->dtype, NULL, 0);
  if (fa_last_error()[0]) die("fa_explain left fa_last_error() set");
  fz_buf b;
  buf_make(&b, len ? len : 1, 0);
  memset(b.data, 0x77, b.bytes);
  size_t got = fa_explain(&c->a, c->dtype, (char *)b.data, len);
  if (got != need) die("fa_explain returned %zu, then %zu", need, got);
  if (!guards_ok(&b)) die("fa_explain wrote outside its buffer");
  if (len) {
    size_t sl = strnlen((char *)b.data, len);
    if (sl == len) die("fa_explain left the text unterminated (len %zu)", len);
    if (sl != (need < len ? need : len - 1))
      die("fa_explain wrote %zu characters, needs %zu, len %zu", sl, need, len);
  } else if (b.data[0] != 0x77) {
    die("fa_explain wrote with len 0");
  }
  if (need == 0) die("fa_explain returned an empty text");
  buf_free(&b);
}

/* The problem's scalar fields and arrays by the rules of flashattn.h,
   restated independently of core/: 1 if valid. Only a valid problem's
   arrays are followed to place data (and the library must refuse any
   other). */
static int problem_sane(const fz_case *c) {
  const fa_attention *a = &c->a;
  if (!c->arrays_ok) return 0;
  if (a->batch < 1 || a->seqlen_q < 1 || a->seqlen_k < 1 || a->heads_q < 1 ||
      a->heads_kv < 1 || a->heads_q % a->heads_kv || a->head_dim < 1 ||
      a->head_dim_v < 0)
    return 0;
  const int32_t *cq = a->cu_seqlens_q, *ck = a->cu_seqlens_k;
  if (!cq && !ck && !a->seqused_k && !a->block_table) return 1;
  for (int b = 0; b < a->batch; b++) {
    if (cq && (cq[0] < 0 || (int64_t)cq[b + 1] - cq[b] < 0 ||
               (int64_t)cq[b + 1] - cq[b] > a->seqlen_q))
      return 0;
    if (ck && (ck[0] < 0 || (int64_t)ck[b + 1] - ck[b] < 0 ||
               (int64_t)ck[b + 1] - ck[b] > a->seqlen_k))
      return 0;
  }
  if (a->block_table) {
    if (a->page_size < 1 || a->max_blocks_per_seq < 1 || a->num_pages < 1 ||
        (int64_t)a->max_blocks_per_seq * a->page_size < a->seqlen_k || ck)
      return 0;
  }
  for (int b = 0; b < a->batch; b++) {
    int store = ck ? ck[b + 1] - ck[b] : a->seqlen_k;
    int len = store;
    if (a->seqused_k) {
      if (a->seqused_k[b] < 0 || a->seqused_k[b] > store) return 0;
      len = a->seqused_k[b];
    }
    if (a->block_table)
      for (int64_t i = 0; i < ((int64_t)len + a->page_size - 1) / a->page_size;
           i++) {
        int32_t pg = a->block_table[(int64_t)b * a->max_blocks_per_seq + i];
        if (pg < 0 || pg >= a->num_pages) return 0;
      }
  }
  return 1;
}

static const int all_ids[NT] = {T_Q, T_K, T_V, T_O, T_DO, T_DQ, T_DK, T_DV};
static const int fwd_ids[4] = {T_Q, T_K, T_V, T_O};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!n_ctx) LLVMFuzzerInitialize(NULL, NULL);
  fz_in in = {data, size, 0};
#ifdef FZ_GUARD_PAGES
  uint32_t sb = 0; // the case's seed bytes (see fz_decode), mixed
  for (size_t i = 3; i < 7 && i < size; i++)
    sb |= (uint32_t)data[i] << 8 * (i - 3);
  side_bits = (sb ^ 0x9e3779b9u) * 0x85ebca6bu;
  side_bits ^= side_bits >> 13;
#endif
  static fz_case c;
  fz_decode(&c, &in);
  setup_buffers(&c);
  if (c.ops & 0x10) run_explain(&c, &in);

  // One context per input (cheap), every context when the selector is 7.
  int first = 0, last = n_ctx - 1;
  if (c.backend_sel != 7) first = last = (int)c.backend_sel % n_ctx;
  const int fwd_mode = call_mode(&c, fwd_ids, 4);
  const int bwd_mode = call_mode(&c, all_ids, NT);
  const int sane = problem_sane(&c);
  if (sane && !c.lse_big) { // (bounded work only: see setup_buffers)
    ts_rng r;
    ts_rng_seed(&r, c.seed);
    const int ins[4] = {T_Q, T_K, T_V, T_DO};
    for (int x = 0; x < 4; x++) {
      int i = ins[x];
      if (c.t[i].data == c.tb[i].data && dtype_valid(c.t[i].dtype) &&
          c.claim[i] > 0 && !c.big[i])
        fill_input(&c, i, &r);
    }
  }
  dense fwd, bwd_ref;
  memset(&fwd, 0, sizeof fwd);
  memset(&bwd_ref, 0, sizeof bwd_ref);
  for (int bi = first; bi <= last; bi++) {
    fz_run run = {&c, ctxs[bi], ctx_names[bi]};
    if (fa_context_set_threads(run.ctx, (int)c.threads) != FA_OK)
      die("fa_context_set_threads(%u) failed", c.threads);
    if (!fwd_mode) {
      // Too large to allocate: only what reads no tensor.
      if ((c.ops & 0x08) && c.arrays_ok) {
        fa_plan *p = NULL;
        fa_status s = fa_plan_create(run.ctx, &c.a, c.t[T_Q], c.t[T_K],
                                     c.t[T_V], c.t[T_O], &p);
        check_status(s, "fa_plan_create", run.backend);
        fa_plan_destroy(p);
      }
      if (c.ops & 0x04) run_merge(&run, &in);
      continue;
    }
    if (!(c.ops & 0x0f)) continue;
    saved sv;
    memset(&sv, 0, sizeof sv);
    poison_outputs(&c, fwd_outs, 1, 1);
    sv.ob = buf_of(&c, T_O);
    sv.lb = lse_ptr(&c) ? lse_buf(&c) : NULL;
    save_buf(sv.ob, &sv.o_pre);
    save_buf(sv.lb, &sv.l_pre);
    c.must_fail = fwd_mode == 2;
    fa_status fs = call_forward(&run);
    char fmsg[512];
    snprintf(fmsg, sizeof fmsg, "%s", fa_last_error());
    save_buf(sv.ob, &sv.o_post);
    save_buf(sv.lb, &sv.l_post);
    int checked = 0;
    if (fs == FA_OK && !sane) {
      report_case(&run, "fa_forward");
      die("fa_forward accepted a problem whose fields or arrays break the "
          "rules of flashattn.h");
    }
    if (fs == FA_OK) {
      if (!fwd.o) oracle_forward(&c, &fwd); // once per input
      check_forward(&run, &fwd);
      checked = 1;
    }
    if (c.ops & 0x08) run_plan(&run, fs, fmsg, &sv);
    if (sv.ob) memcpy(sv.ob->data, sv.o_post, sv.ob->bytes);
    if (sv.lb) memcpy(sv.lb->data, sv.l_post, sv.lb->bytes);
    c.must_fail = bwd_mode == 2;
    if ((c.ops & 0x02) && bwd_mode) run_backward(&run, &fwd, &bwd_ref, checked);
    if (c.ops & 0x04) run_merge(&run, &in);
    saved_free(&sv);
    // With aliasing, a forward may write o or lse into a buffer the
    // backward reads (do): the gradients' oracle is then per context.
    int aliased = c.lse_alias >= 0;
    for (int i = 0; i < NT; i++) aliased |= c.alias_of[i] >= 0;
    if (aliased) dense_free(&bwd_ref);
  }
  dense_free(&fwd);
  dense_free(&bwd_ref);
  free_case(&c);
  return 0;
}
