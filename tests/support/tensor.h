// SPDX-License-Identifier: MIT
// Test helpers: strided layouts, guarded buffers mirrored into a context's
// memory space, NaN poisoning, seeded random numbers, error metrics and the
// skip convention. Everything a test needs to say "the library wrote exactly
// what it should, where it should, and nothing else".
#ifndef FA_TESTS_TENSOR_H
#define FA_TESTS_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "flashattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exit code of a test that cannot run here (CTest SKIP_RETURN_CODE). */
#define TS_SKIP 77

/* ---- dtypes -------------------------------------------------------------- */

const char *ts_dtype_name(fa_dtype t);
size_t ts_dtype_size(fa_dtype t);
/* Element idx of a buffer of type t, widened to double. */
double ts_load(const void *base, fa_dtype t, int64_t idx);
/* Store x (rounded to nearest even) as element idx of type t. */
void ts_store(void *base, fa_dtype t, int64_t idx, double x);
/* x rounded to t and widened back. */
double ts_round(fa_dtype t, double x);
/* Unit roundoff of t: 2^-24, 2^-11, 2^-8. */
double ts_unit_roundoff(fa_dtype t);

/* ---- layouts ------------------------------------------------------------- */

typedef enum ts_layout {
  TS_BSHD = 0, /* [batch][seq][heads][dim]: FlashAttention's usual layout */
  TS_BHSD = 1, /* [batch][heads][seq][dim]: PyTorch SDPA's */
  TS_SBHD = 2  /* [seq][batch][heads][dim]: seq stride > batch stride */
} ts_layout;

const char *ts_layout_name(int layout);

/* Strides (in elements) of a [nb][ns][nh][nd] view in `layout`, every
   stride padded by `pad` extra elements so that the view is genuinely
   strided (pad 0 = dense). Sets t->stride_*; returns the number of elements
   the view spans (max offset + 1), 0 if any extent is 0. */
size_t ts_make_strides(int layout, int nb, int ns, int nh, int nd, int pad,
                       fa_tensor *t);

/* ---- guarded buffers ------------------------------------------------------
 */

/* Bytes of sentinel before and after every payload. */
#define TS_GUARD_BYTES 256

/* A payload between two guard bands, on the host, plus its mirror in a
   context's memory space (guards included, so out-of-bounds writes made by
   a device show up on the host copy too). */
typedef struct ts_buf {
  unsigned char *alloc; /* host: guard | payload | guard */
  unsigned char *host;  /* host payload (alloc + TS_GUARD_BYTES) */
  size_t bytes;         /* payload bytes */
  void *dev_alloc;      /* fa_malloc'd mirror of alloc, or NULL */
} ts_buf;

/* Allocate a payload of `bytes` (0 allowed) with guard bands filled with the
   sentinel; the payload is zeroed. Returns 0 or -1 (out of memory). */
int ts_buf_alloc(ts_buf *b, size_t bytes);
/* Free host and device memory (ctx may be NULL if never uploaded). */
void ts_buf_free(fa_context *ctx, ts_buf *b);
/* The payload in the context's memory space (after ts_buf_upload). */
void *ts_buf_dev(const ts_buf *b);
/* Copy the whole host allocation (guards too) to the context's space,
   allocating the mirror on first use. */
fa_status ts_buf_upload(fa_context *ctx, ts_buf *b);
/* Copy the whole mirror back over the host allocation. */
fa_status ts_buf_download(fa_context *ctx, ts_buf *b);
/* 1 if both guard bands still hold the sentinel bit for bit; else 0 and a
   line on `log` (may be NULL) naming the buffer and the first bad byte. */
int ts_buf_guards_ok(const ts_buf *b, const char *name, FILE *log);

/* ---- poison ----------------------------------------------------------------
 */

/* The NaN bit pattern used to poison buffers of type t (a quiet NaN with a
   recognisable payload; never produced by arithmetic). */
uint32_t ts_poison_bits(fa_dtype t);
/* Fill n elements of type t at p with the poison pattern. */
void ts_poison(void *p, fa_dtype t, size_t n);
/* 1 if element idx of type t still holds the poison pattern exactly. */
int ts_is_poison(const void *p, fa_dtype t, int64_t idx);
/* Fill n fp32 values with the poison NaN (for lse arrays). */
void ts_poison_f32(float *p, size_t n);

/* ---- random numbers ------------------------------------------------------ */

typedef struct ts_rng {
  uint64_t s[4];
} ts_rng;

/* The run's base seed: FA_TEST_SEED from the environment when set (decimal
   or 0x hex), else derived from the time and the process id. */
uint64_t ts_seed_base(void);
/* 1 if FA_TEST_SEED fixed the seed. */
int ts_seed_from_env(void);
/* Seed for case `index` of a run with base seed `base`. */
uint64_t ts_case_seed(uint64_t base, uint64_t index);
void ts_rng_seed(ts_rng *r, uint64_t seed);
uint64_t ts_rng_u64(ts_rng *r);
double ts_rng_uniform(ts_rng *r);          /* [0, 1) */
double ts_rng_normal(ts_rng *r);           /* N(0, 1) */
int ts_rng_int(ts_rng *r, int lo, int hi); /* uniform in [lo, hi] */
void ts_rng_shuffle(ts_rng *r, int *a, int n);

/* ---- comparisons ----------------------------------------------------------
 */

/* Relative Frobenius error ||got - ref|| / ||ref|| over n values, skipping
   positions where ref is not finite (check those with ts_nonfinite_parity).
   If ref is identically 0 (e.g. dq when every row sees exactly one key, so
   dS = P (dP - D) vanishes), a relative error means nothing: the result is
   then the rms of got over its nonzero values, an absolute error on data
   whose natural scale is ~1 (unit-normal test inputs), and 0 if got is 0
   too. A non-finite got where ref is finite makes the result +inf. */
double ts_rel_err(const double *ref, const double *got, size_t n);
/* The same with a float reference (naive same-precision results). */
double ts_rel_err_f(const double *ref, const float *got, size_t n);
/* Largest elementwise error relative to the largest reference magnitude:
   max|got - ref| / max|ref| over positions where ref is finite (absolute
   if max|ref| is 0; +inf if got is not finite where ref is). Catches
   localised errors that a Frobenius norm over a large tensor dilutes. */
double ts_max_err(const double *ref, const double *got, size_t n);
double ts_max_err_f(const double *ref, const float *got, size_t n);
/* Error normalised by a separate scale array (e.g. the gradient
   magnitudes of fa_oracle_backward_magnitude): ||got - ref|| / ||scale||
   (Frobenius) and max|got - ref| / max|scale| over positions where ref is
   finite; +inf if got is not finite there; absolute if the scale is 0. */
double ts_scaled_err(const double *ref, const double *got, const double *scale,
                     size_t n);
double ts_scaled_err_f(const double *ref, const float *got, const double *scale,
                       size_t n);
double ts_scaled_max_err(const double *ref, const double *got,
                         const double *scale, size_t n);
double ts_scaled_max_err_f(const double *ref, const float *got,
                           const double *scale, size_t n);
/* Error of values whose natural scale is ~1 (LSE): ||got - ref|| /
   max(||ref||, sqrt(m)) over the m positions where ref is finite. */
double ts_lse_err(const double *ref, const double *got, size_t n);
double ts_lse_err_f(const double *ref, const float *got, size_t n);
/* Number of positions where finiteness differs, or both are infinite with
   different signs, or either is NaN. *first gets the first such index
   (unchanged when none). */
size_t ts_nonfinite_parity(const double *ref, const double *got, size_t n,
                           size_t *first);

/* Seconds on a monotonic clock. */
double ts_now(void);

#ifdef __cplusplus
}
#endif

#endif
