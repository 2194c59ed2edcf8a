// SPDX-License-Identifier: MIT
// What the parts of the API fuzzer share: build options, the decoded case
// and the functions each part offers the others. fuzz_api.c says what the
// harness checks; the parts are fz_mem.c (guarded buffers), fz_decode.c
// (bytes to a case, input data), fz_check.c (the properties every call
// must keep) and fz_run.c (the oracle and the calls: forward, plan,
// backward, merge).
#ifndef FZ_HARNESS_H
#define FZ_HARNESS_H

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

// FZ_VERBOSE: print every failing call's status (fuzz_api.c).
extern int verbose;

/* ---- input bytes -----------------------------------------------------------
 */

typedef struct fz_in {
  const uint8_t *p;
  size_t n, at;
} fz_in;

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

/* ---- the decoded case
 * -------------------------------------------------------- */

enum { T_Q, T_K, T_V, T_O, T_DO, T_DQ, T_DK, T_DV, NT };
// Each tensor's name, and whether it is shaped like k, has v's dim, is an
// output (fz_decode.c).
extern const char *const tname[NT];
extern const int t_klike[NT], t_vdim[NT], t_output[NT];

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

/* Bytes [lo, hi) of a view (fz_check.c). */
typedef struct range {
  uintptr_t lo, hi;
} range;

/* One call's case, context and the name it is reported under. */
typedef struct fz_run {
  fz_case *c;
  fa_context *ctx;
  const char *backend;
} fz_run;

/* ---- the oracle
 * ------------------------------------------------------------------ */

typedef struct dense {
  double *o, *lse, *otol, *ltol;
  size_t no, nl;
} dense;

/* run_plan (fz_run.c): the o and lse buffers before and after fa_forward. */
typedef struct saved {
  unsigned char *o_pre, *o_post, *l_pre, *l_post;
  fz_buf *ob, *lb;
} saved;

/* ---- fz_mem.c: guarded buffers */
#ifdef FZ_GUARD_PAGES
extern uint32_t side_bits; // which side each buffer's page is on
#endif
void buf_make(fz_buf *b, size_t bytes, size_t align);
void buf_free(fz_buf *b);
void buf_snapshot(fz_buf *b);
long buf_changed(fz_buf *b);
int guards_ok(fz_buf *b);

/* ---- fz_decode.c: input bytes, claims, decoding, input data */
unsigned u8(fz_in *in);
int64_t view_claim(const int64_t n[4], const fa_tensor *t);
size_t dsize(fa_dtype t);
int dtype_valid(fa_dtype t);
void tensor_extents(const fz_case *c, int i, int64_t n[4]);
void make_strides(int layout, int64_t nb, int64_t ns, int64_t nh, int64_t nd,
                  int pad, fa_tensor *t);
void fz_decode(fz_case *c, fz_in *in);
double draw(ts_rng *r, unsigned mode, fa_dtype t);

/* ---- fz_check.c: the properties a call must keep */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
fz_buf *buf_of(fz_case *c, int i);
fz_buf *lse_buf(fz_case *c);
size_t lse_bytes(const fz_case *c);
float *lse_ptr(fz_case *c);
int overlaps(range a, range b);
/* Whether views a and b (extents ext) share a byte, by painting the
   buffer [lo, hi) they both lie in. */
int tensors_meet(const fa_tensor *a, const fa_tensor *b, const int64_t ext[4],
                 uintptr_t lo, uintptr_t hi);
int call_overlaps(fz_case *c, const int *outs, int n_out, const int *ins,
                  int n_in, int lse_is_output);
void all_snapshot(fz_case *c);
void check_nothing_written(fz_case *c, const char *what);
void check_only_outputs_written(fz_case *c, const char *what, const int *outs,
                                int n_out, int lse_written);
void check_status(fa_status s, const char *what, const char *backend);
unsigned char *marks_of(fz_case *c, int i);
size_t first_stray(const unsigned char *mk, const unsigned char *cur,
                   const unsigned char *snap, size_t n, size_t es);
void fill_input(fz_case *c, int i, ts_rng *r);
void poison_outputs(fz_case *c, const int *outs, int n, int lse);
void extract_q(fz_case *c, int i, double *out, const char *what);
void idx_name_q(size_t x, char *buf, size_t len, const void *ctx);
void idx_name_lse(size_t x, char *buf, size_t len, const void *ctx);
void report_case(const fz_run *run, const char *what);

/* ---- fz_run.c: the oracle and the calls */
extern const int fwd_outs[1], fwd_ins[3];
void oracle_forward(fz_case *c, dense *d);
void dense_free(dense *d);
fa_status call_forward(fz_run *run);
void check_forward(fz_run *run, const dense *ref);
void save_buf(fz_buf *b, unsigned char **to);
void saved_free(saved *s);
void run_plan(fz_run *run, fa_status fwd_status, const char *fwd_msg,
              saved *sv);
void run_backward(fz_run *run, const dense *fwd, dense *cache, int checked);
void run_merge(fz_run *run, fz_in *in);

#endif
