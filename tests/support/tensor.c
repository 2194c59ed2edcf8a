// SPDX-License-Identifier: MIT
#define _POSIX_C_SOURCE 200809L
#include "tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dtype.h"

/* ---- dtypes -------------------------------------------------------------- */

const char *ts_dtype_name(fa_dtype t) { return fa_dtype_name(t); }
size_t ts_dtype_size(fa_dtype t) { return fa_dtype_size(t); }

double ts_load(const void *base, fa_dtype t, int64_t idx) {
  return fa_load(base, t, idx);
}

void ts_store(void *base, fa_dtype t, int64_t idx, double x) {
  // double -> float is one rounding; float -> f16/bf16 a second one. Test
  // data is generated as float first, so the double rounding never matters.
  fa_store(base, t, idx, (float)x);
}

double ts_round(fa_dtype t, double x) {
  float f = (float)x;
  if (t == FA_F16) return fa_f16_to_f32(fa_f32_to_f16(f));
  if (t == FA_BF16) return fa_bf16_to_f32(fa_f32_to_bf16(f));
  if (t == FA_E4M3) return fa_e4m3_to_f32(fa_f32_to_e4m3(f));
  if (t == FA_E5M2) return fa_e5m2_to_f32(fa_f32_to_e5m2(f));
  return f;
}

double ts_unit_roundoff(fa_dtype t) {
  return t == FA_F32    ? ldexp(1.0, -24)
         : t == FA_F16  ? ldexp(1.0, -11)
         : t == FA_E4M3 ? ldexp(1.0, -4)
         : t == FA_E5M2 ? ldexp(1.0, -3)
                        : ldexp(1.0, -8);
}

/* ---- layouts ------------------------------------------------------------- */

const char *ts_layout_name(int layout) {
  switch (layout) {
  case TS_BSHD:
    return "bshd";
  case TS_BHSD:
    return "bhsd";
  case TS_SBHD:
    return "sbhd";
  }
  return "?";
}

size_t ts_make_strides(int layout, int nb, int ns, int nh, int nd, int pad,
                       fa_tensor *t) {
  int64_t sb, ss, sh;
  switch (layout) {
  case TS_BHSD:
    ss = (int64_t)nd + pad;
    sh = ns * ss + pad;
    sb = nh * sh + pad;
    break;
  case TS_SBHD:
    sh = (int64_t)nd + pad;
    sb = nh * sh + pad;
    ss = nb * sb + pad;
    break;
  default: // TS_BSHD
    sh = (int64_t)nd + pad;
    ss = nh * sh + pad;
    sb = ns * ss + pad;
    break;
  }
  t->stride_batch = sb;
  t->stride_seq = ss;
  t->stride_head = sh;
  if (nb <= 0 || ns <= 0 || nh <= 0 || nd <= 0) return 0;
  return (size_t)((nb - 1) * sb + (ns - 1) * ss + (nh - 1) * sh + nd);
}

/* ---- guarded buffers ------------------------------------------------------
 */

/* Position-dependent sentinel: a shifted or partial copy cannot match it. */
static unsigned char sentinel(size_t i) {
  return (unsigned char)(0xA5u ^ (unsigned)(i * 131u + 7u));
}

int ts_buf_alloc(ts_buf *b, size_t bytes) {
  memset(b, 0, sizeof *b);
  size_t total = bytes + 2 * (size_t)TS_GUARD_BYTES;
  b->alloc = malloc(total);
  if (!b->alloc) return -1;
  b->host = b->alloc + TS_GUARD_BYTES;
  b->bytes = bytes;
  for (size_t i = 0; i < TS_GUARD_BYTES; i++) {
    b->alloc[i] = sentinel(i);
    b->host[bytes + i] = sentinel(i + 1000);
  }
  memset(b->host, 0, bytes);
  return 0;
}

void ts_buf_free(fa_context *ctx, ts_buf *b) {
  if (b->dev_alloc && ctx) fa_free(ctx, b->dev_alloc);
  free(b->alloc);
  memset(b, 0, sizeof *b);
}

void *ts_buf_dev(const ts_buf *b) {
  return b->dev_alloc ? (unsigned char *)b->dev_alloc + TS_GUARD_BYTES : NULL;
}

fa_status ts_buf_upload(fa_context *ctx, ts_buf *b) {
  size_t total = b->bytes + 2 * (size_t)TS_GUARD_BYTES;
  if (!b->dev_alloc) {
    fa_status s = fa_malloc(ctx, total, &b->dev_alloc);
    if (s) return s;
  }
  return fa_copy_to_device(ctx, b->dev_alloc, b->alloc, total);
}

fa_status ts_buf_download(fa_context *ctx, ts_buf *b) {
  size_t total = b->bytes + 2 * (size_t)TS_GUARD_BYTES;
  return fa_copy_to_host(ctx, b->alloc, b->dev_alloc, total);
}

int ts_buf_guards_ok(const ts_buf *b, const char *name, FILE *log) {
  for (size_t i = 0; i < TS_GUARD_BYTES; i++) {
    if (b->alloc[i] != sentinel(i)) {
      if (log)
        fprintf(log, "guard band BEFORE %s overwritten at byte -%zu\n", name,
                (size_t)TS_GUARD_BYTES - i);
      return 0;
    }
    if (b->host[b->bytes + i] != sentinel(i + 1000)) {
      if (log)
        fprintf(log, "guard band AFTER %s overwritten at byte +%zu\n", name, i);
      return 0;
    }
  }
  return 1;
}

/* ---- poison ----------------------------------------------------------------
 */

uint32_t ts_poison_bits(fa_dtype t) {
  // Quiet NaNs with a payload arithmetic never produces (default NaNs are
  // 0x7fc00000 / 0x7e00 / 0x7fc0). FP8 has no room for a payload: its
  // NaN code 0x7f (both formats); no output holds it (outputs are not FP8).
  return t == FA_F32    ? 0x7fc5a5a5u
         : t == FA_F16  ? 0x7e5au
         : t == FA_BF16 ? 0x7fdau
                        : 0x7fu;
}

void ts_poison(void *p, fa_dtype t, size_t n) {
  uint32_t bits = ts_poison_bits(t);
  if (t == FA_F32) {
    uint32_t *d = p;
    for (size_t i = 0; i < n; i++) d[i] = bits;
  } else if (ts_dtype_size(t) == 1) {
    memset(p, (int)bits, n);
  } else {
    uint16_t *d = p;
    for (size_t i = 0; i < n; i++) d[i] = (uint16_t)bits;
  }
}

int ts_is_poison(const void *p, fa_dtype t, int64_t idx) {
  if (t == FA_F32) {
    uint32_t u;
    memcpy(&u, (const uint32_t *)p + idx, 4);
    return u == ts_poison_bits(t);
  }
  if (ts_dtype_size(t) == 1)
    return ((const uint8_t *)p)[idx] == (uint8_t)ts_poison_bits(t);
  return ((const uint16_t *)p)[idx] == (uint16_t)ts_poison_bits(t);
}

void ts_poison_f32(float *p, size_t n) { ts_poison(p, FA_F32, n); }

/* ---- random numbers (xoshiro256** seeded through splitmix64) ------------- */

static uint64_t splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int ts_seed_from_env(void) {
  const char *e = getenv("FA_TEST_SEED");
  return e && *e;
}

uint64_t ts_seed_base(void) {
  const char *e = getenv("FA_TEST_SEED");
  if (e && *e) return strtoull(e, NULL, 0);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t x = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^
               ((uint64_t)getpid() << 32);
  return splitmix(&x) & 0xffffffffffffull; // 48 bits: easy to paste
}

uint64_t ts_case_seed(uint64_t base, uint64_t index) {
  uint64_t x = base ^ (index * 0xd1b54a32d192ed03ull);
  return splitmix(&x);
}

void ts_rng_seed(ts_rng *r, uint64_t seed) {
  for (int i = 0; i < 4; i++) r->s[i] = splitmix(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t ts_rng_u64(ts_rng *r) {
  uint64_t *s = r->s;
  uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

double ts_rng_uniform(ts_rng *r) {
  return (double)(ts_rng_u64(r) >> 11) * 0x1.0p-53;
}

double ts_rng_normal(ts_rng *r) {
  // Box-Muller; u1 in (0, 1] so the log is finite.
  double u1 = 1.0 - ts_rng_uniform(r), u2 = ts_rng_uniform(r);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int ts_rng_int(ts_rng *r, int lo, int hi) {
  if (hi <= lo) return lo;
  return lo + (int)(ts_rng_u64(r) % (uint64_t)(hi - lo + 1));
}

void ts_rng_shuffle(ts_rng *r, int *a, int n) {
  for (int i = n - 1; i > 0; i--) {
    int j = ts_rng_int(r, 0, i), t = a[i];
    a[i] = a[j];
    a[j] = t;
  }
}

/* ---- comparisons ----------------------------------------------------------
 */

double ts_rel_err(const double *ref, const double *got, size_t n) {
  double num = 0.0, den = 0.0;
  size_t nz = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(ref[i])) continue;
    if (!isfinite(got[i])) return INFINITY;
    double e = got[i] - ref[i];
    num += e * e;
    den += ref[i] * ref[i];
    nz += got[i] != 0.0;
  }
  if (den > 0.0) return sqrt(num / den);
  return nz ? sqrt(num / (double)nz) : 0.0;
}

double ts_rel_err_f(const double *ref, const float *got, size_t n) {
  double num = 0.0, den = 0.0;
  size_t nz = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(ref[i])) continue;
    if (!isfinite(got[i])) return INFINITY;
    double e = (double)got[i] - ref[i];
    num += e * e;
    den += ref[i] * ref[i];
    nz += got[i] != 0.0f;
  }
  if (den > 0.0) return sqrt(num / den);
  return nz ? sqrt(num / (double)nz) : 0.0;
}

double ts_max_err(const double *ref, const double *got, size_t n) {
  double e = 0.0, r = 0.0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(ref[i])) continue;
    if (!isfinite(got[i])) return INFINITY;
    double d = fabs(got[i] - ref[i]);
    if (d > e) e = d;
    if (fabs(ref[i]) > r) r = fabs(ref[i]);
  }
  return r > 0.0 ? e / r : e;
}

double ts_max_err_f(const double *ref, const float *got, size_t n) {
  double e = 0.0, r = 0.0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(ref[i])) continue;
    if (!isfinite(got[i])) return INFINITY;
    double d = fabs((double)got[i] - ref[i]);
    if (d > e) e = d;
    if (fabs(ref[i]) > r) r = fabs(ref[i]);
  }
  return r > 0.0 ? e / r : e;
}

/* One body for the four scaled metrics: max != 0 selects the max-abs
   form; gotf (float) is used when got is NULL. */
static double scaled(const double *ref, const double *got, const float *gotf,
                     const double *scale, size_t n, int max) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(ref[i])) continue;
    double g = got ? got[i] : (double)gotf[i];
    if (!isfinite(g)) return INFINITY;
    double e = fabs(g - ref[i]), w = fabs(scale[i]);
    if (max) {
      if (e > num) num = e;
      if (w > den) den = w;
    } else {
      num += e * e;
      den += w * w;
    }
  }
  if (!max) {
    num = sqrt(num);
    den = sqrt(den);
  }
  return den > 0.0 ? num / den : num;
}

double ts_scaled_err(const double *ref, const double *got, const double *scale,
                     size_t n) {
  return scaled(ref, got, NULL, scale, n, 0);
}

double ts_scaled_err_f(const double *ref, const float *got, const double *scale,
                       size_t n) {
  return scaled(ref, NULL, got, scale, n, 0);
}

double ts_scaled_max_err(const double *ref, const double *got,
                         const double *scale, size_t n) {
  return scaled(ref, got, NULL, scale, n, 1);
}

double ts_scaled_max_err_f(const double *ref, const float *got,
                           const double *scale, size_t n) {
  return scaled(ref, NULL, got, scale, n, 1);
}

double ts_lse_err(const double *ref, const double *got, size_t n) {
  double num = 0.0, den = 0.0;
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(ref[i])) continue;
    if (!isfinite(got[i])) return INFINITY;
    double e = got[i] - ref[i];
    num += e * e;
    den += ref[i] * ref[i];
    m++;
  }
  if (den < (double)m) den = (double)m;
  return den > 0.0 ? sqrt(num / den) : 0.0;
}

double ts_lse_err_f(const double *ref, const float *got, size_t n) {
  double num = 0.0, den = 0.0;
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(ref[i])) continue;
    if (!isfinite(got[i])) return INFINITY;
    double e = (double)got[i] - ref[i];
    num += e * e;
    den += ref[i] * ref[i];
    m++;
  }
  if (den < (double)m) den = (double)m;
  return den > 0.0 ? sqrt(num / den) : 0.0;
}

size_t ts_nonfinite_parity(const double *ref, const double *got, size_t n,
                           size_t *first) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    int ok;
    if (isnan(ref[i]) || isnan(got[i]))
      ok = 0;
    else if (isinf(ref[i]) || isinf(got[i]))
      ok = ref[i] == got[i];
    else
      ok = 1;
    if (!ok && bad++ == 0 && first) *first = i;
  }
  return bad;
}

double ts_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
