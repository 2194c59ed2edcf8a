// SPDX-License-Identifier: MIT
// FP8 decoding and encoding, all 256 codes of e4m3 and e5m2: the CPU
// decoder (core/fp8.h), the GPU loaders' decoder (backends/gpu/fp8.h,
// compiled here as plain C) and the encoder, against a reference built from
// the format definitions with ldexp (no bit tricks shared with the code
// under test), and the bf16 bits of core/fp8.h's lookup tables. The vector
// decoders of each ISA are checked through every backend by
// tests/api/test_api_fp8.c.
#include <math.h>
#include <string.h>

#include "../../backends/gpu/fp8.h"
#include "check.h"
#include "dtype.h"

typedef struct fmt {
  const char *name;
  fa_dtype t;
  int man, bias;
  int has_inf; // e5m2: exponent all ones is inf/NaN; e4m3: only S.1111.111
} fmt;

static const fmt kE4m3 = {"e4m3", FA_E4M3, 3, 7, 0};
static const fmt kE5m2 = {"e5m2", FA_E5M2, 2, 15, 1};

/* The value of code c: NaN for NaN codes, +-inf for e5m2's infinities. */
static double ref_value(const fmt *f, unsigned c) {
  int emax = f->has_inf ? 31 : 15;
  int neg = (c & 0x80) != 0;
  unsigned e = (c & 0x7f) >> f->man, m = c & ((1u << f->man) - 1);
  double v;
  if (f->has_inf && e == (unsigned)emax)
    v = m ? NAN : INFINITY;
  else if (!f->has_inf && e == 15 && m == 7)
    v = NAN;
  else if (e == 0)
    v = ldexp((double)m, 1 - f->bias - f->man);
  else
    v = ldexp(1.0 + ldexp((double)m, -f->man), (int)e - f->bias);
  return neg ? -v : v;
}

static int same(double want, float got) {
  if (isnan(want)) return isnan(got);
  return (double)got == want && !signbit(got) == !signbit(want);
}

static void check_decode(const fmt *f) {
  int nans = 0;
  double max = 0.0;
  for (unsigned c = 0; c < 256; c++) {
    const uint8_t code = (uint8_t)c;
    const double want = ref_value(f, c);
    const int e5 = f->t == FA_E5M2;
    if (isnan(want)) nans++;
    if (isfinite(want) && fabs(want) > max) max = fabs(want);
    float cpu = fa_fp8_to_f32(code, f->t);
    CHECK(same(want, cpu), "%s code 0x%02x: fa_fp8_to_f32 %.9g, want %.9g",
          f->name, c, (double)cpu, want);
    // GPU: f16 bits, bf16 bits and fp32, each widened by core/dtype.h.
    uint16_t h = e5 ? fa_gpu_e5m2_to_f16(code) : fa_gpu_e4m3_to_f16(code);
    uint16_t b = e5 ? fa_gpu_e5m2_to_bf16(code) : fa_gpu_e4m3_to_bf16(code);
    CHECK(same(want, fa_f16_to_f32(h)), "%s code 0x%02x: gpu f16 0x%04x",
          f->name, c, h);
    CHECK(same(want, fa_bf16_to_f32(b)), "%s code 0x%02x: gpu bf16 0x%04x",
          f->name, c, b);
    CHECK(same(want, fa_gpu_fp8_to_f32(code, e5)), "%s code 0x%02x: gpu f32",
          f->name, c);
    // The CPU's lookup tables (core/fp8.h): the magnitude's bf16 bits, the
    // sign in bit 15.
    const unsigned mag = c & 0x7fu;
    const uint16_t tb =
        (uint16_t)((e5 ? FA_E5M2_BF16_BITS(mag) : FA_E4M3_BF16_BITS(mag)) |
                   (c & 0x80u) << 8);
    CHECK(same(want, fa_bf16_to_f32(tb)),
          "%s code 0x%02x: FA_*_BF16_BITS 0x%04x", f->name, c, tb);
    // Decode and scale in one product (the vector decoders' route): the
    // same bits as decoding, then multiplying.
    const float xs[3] = {1.0f, 1.37f, 3.0e-30f};
    for (int i = 0; i < 3; i++) {
      float got = fa_fp8_scaled_f32(code, e5, xs[i] * (e5 ? 1.0f : 256.0f));
      CHECK(same(isnan(want) ? want : (double)(cpu * xs[i]), got),
            "%s code 0x%02x: fa_fp8_scaled_f32 x %g gives %.9g", f->name, c,
            (double)xs[i], (double)got);
    }
    // Pairs: the code in either half, next to a partner code.
    for (unsigned partner = 0; partner < 256; partner += 37) {
      uint16_t lo = (uint16_t)(c | partner << 8),
               hi = (uint16_t)(partner | c << 8);
      uint32_t hl = fa_gpu_fp8x2_to_f16x2(lo, e5),
               hh = fa_gpu_fp8x2_to_f16x2(hi, e5);
      uint32_t bl = fa_gpu_fp8x2_to_bf16x2(lo, e5),
               bh = fa_gpu_fp8x2_to_bf16x2(hi, e5);
      CHECK(same(want, fa_f16_to_f32((uint16_t)hl)) &&
                same(want, fa_f16_to_f32((uint16_t)(hh >> 16))) &&
                same(want, fa_bf16_to_f32((uint16_t)bl)) &&
                same(want, fa_bf16_to_f32((uint16_t)(bh >> 16))),
            "%s code 0x%02x beside 0x%02x: gpu x2 forms", f->name, c, partner);
      double pw = ref_value(f, partner);
      CHECK(same(pw, fa_f16_to_f32((uint16_t)(hl >> 16))) &&
                same(pw, fa_bf16_to_f32((uint16_t)bh)),
            "%s partner 0x%02x of 0x%02x: gpu x2 forms", f->name, partner, c);
    }
    // Four codes per word, branch-free (e4m3 times 2^-8): the code in
    // each of the four bytes, beside every partner code.
    for (unsigned partner = 0; partner < 256; partner++) {
      const double pw = ref_value(f, partner),
                   unit = e5 ? 1.0 : 1.0 / FA_GPU_E4M3X4_UNIT;
      for (int at = 0; at < 4; at++) {
        uint32_t w = 0;
        for (int byte = 0; byte < 4; byte++)
          w |= (uint32_t)(byte == at ? c : partner) << (8 * byte);
        uint32_t h2[2];
        fa_gpu_fp8x4_to_f16x2(w, e5, &h2[0], &h2[1]);
        int ok = 1;
        for (int byte = 0; byte < 4; byte++) {
          const uint16_t bits = (uint16_t)(h2[byte / 2] >> (16 * (byte % 2)));
          const double v = (double)fa_f16_to_f32(bits) * unit;
          ok &= same(byte == at ? want : pw, (float)v);
        }
        CHECK(ok, "%s code 0x%02x in byte %d beside 0x%02x: gpu x4 form",
              f->name, c, at, partner);
      }
    }
    // One byte per element through the generic loaders.
    CHECK(fa_dtype_size(f->t) == 1, "%s: size %zu", f->name,
          fa_dtype_size(f->t));
    const uint8_t buf[8] = {0, code};
    CHECK(same(want, fa_load(buf, f->t, 1)), "%s code 0x%02x: fa_load", f->name,
          c);
  }
  CHECK(nans == (f->has_inf ? 6 : 2), "%s: %d NaN codes", f->name, nans);
  CHECK(max == (f->has_inf ? 57344.0 : 448.0), "%s: max %g", f->name, max);
}

static uint8_t encode(const fmt *f, float x) {
  return f->t == FA_E4M3 ? fa_f32_to_e4m3(x) : fa_f32_to_e5m2(x);
}

static void check_encode(const fmt *f) {
  // Every value encodes to its own code (the NaN codes to one NaN code).
  for (unsigned c = 0; c < 256; c++) {
    double v = ref_value(f, c);
    uint8_t got = encode(f, (float)v);
    if (isnan(v))
      CHECK(isnan(ref_value(f, got)) && (got & 0x80) == (c & 0x80),
            "%s NaN code 0x%02x encodes to 0x%02x", f->name, c, got);
    else
      CHECK(got == c, "%s %g encodes to 0x%02x, want 0x%02x", f->name, v, got,
            c);
  }
  // Midpoints between neighbouring positive codes round to the even one;
  // just inside them to the nearer.
  unsigned top = f->has_inf ? 0x7b : 0x7e;
  for (unsigned c = 0; c < top; c++) {
    double a = ref_value(f, c), b = ref_value(f, c + 1), mid = (a + b) / 2;
    unsigned even = (c & 1) ? c + 1 : c;
    CHECK(encode(f, (float)mid) == even,
          "%s midpoint %g -> 0x%02x, want 0x%02x", f->name, mid,
          encode(f, (float)mid), even);
    CHECK(encode(f, (float)(mid - (b - a) / 8)) == c &&
              encode(f, (float)(mid + (b - a) / 8)) == c + 1,
          "%s near the midpoint of 0x%02x and 0x%02x", f->name, c, c + 1);
  }
  // Saturation: beyond the largest finite value, infinities too where the
  // format has none.
  double max = ref_value(f, top);
  CHECK(encode(f, (float)(max * 1.5)) == top, "%s 1.5 max", f->name);
  CHECK(encode(f, -1e30f) == (0x80 | top), "%s -1e30", f->name);
  CHECK(encode(f, INFINITY) == (f->has_inf ? 0x7c : top), "%s inf", f->name);
  CHECK(encode(f, 1e-30f) == 0 && encode(f, -1e-30f) == 0x80,
        "%s tiny values round to signed zero", f->name);
}

int main(void) {
  check_decode(&kE4m3);
  check_decode(&kE5m2);
  check_encode(&kE4m3);
  check_encode(&kE5m2);
  CHECK(!strcmp(fa_dtype_name(FA_E4M3), "e4m3") &&
            !strcmp(fa_dtype_name(FA_E5M2), "e5m2"),
        "dtype names");
  CHECK(fa_dtype_valid(FA_E4M3) && fa_dtype_valid(FA_E5M2) &&
            !fa_dtype_valid((fa_dtype)5),
        "fa_dtype_valid");
  return ut_finish("test_fp8_decode");
}
