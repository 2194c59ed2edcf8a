// SPDX-License-Identifier: MIT
// fp16 / bf16 <-> fp32 conversions (core/dtype.h) against a reference built
// from double arithmetic (frexp / ldexp and an explicit round-half-to-even),
// which shares no bit tricks with the code under test.
#include <float.h>
#include <math.h>
#include <string.h>

#include "check.h"
#include "dtype.h"

// ---- the reference ------------------------------------------------------

// A storage format with `mant_bits` stored mantissa bits and an exponent
// field of `exp_bits` bits (IEEE layout, bias 2^(exp_bits-1) - 1).
typedef struct fmt {
  const char *name;
  int mant_bits, exp_bits;
} fmt;

static const fmt kHalf = {"f16", 10, 5};
static const fmt kBf16 = {"bf16", 7, 8};

static int fmt_bias(const fmt *f) { return (1 << (f->exp_bits - 1)) - 1; }
static int fmt_exp_max(const fmt *f) { return (1 << f->exp_bits) - 1; }
static uint32_t fmt_inf(const fmt *f) {
  return (uint32_t)fmt_exp_max(f) << f->mant_bits;
}
static uint32_t fmt_sign(const fmt *f) {
  return 1u << (f->mant_bits + f->exp_bits);
}
// Exponent of one unit in the last place of subnormals.
static int fmt_sub_ulp_exp(const fmt *f) {
  return 1 - fmt_bias(f) - f->mant_bits;
}

// The value a bit pattern stands for, as a double (NaN for every NaN).
static double ref_value(const fmt *f, uint32_t bits) {
  int neg = (bits & fmt_sign(f)) != 0;
  uint32_t e = (bits >> f->mant_bits) & (uint32_t)fmt_exp_max(f);
  uint32_t m = bits & ((1u << f->mant_bits) - 1u);
  double v;
  if (e == (uint32_t)fmt_exp_max(f))
    v = m ? NAN : INFINITY;
  else if (e == 0)
    v = ldexp((double)m, fmt_sub_ulp_exp(f));
  else
    v = ldexp((double)((1u << f->mant_bits) + m),
              (int)e - fmt_bias(f) - f->mant_bits);
  return neg ? -v : v;
}

// Round t >= 0 (an exact double) to the nearest integer, ties to even,
// without relying on the floating-point rounding mode.
static double round_half_even(double t) {
  double fl = floor(t), frac = t - fl;
  if (frac > 0.5) return fl + 1.0;
  if (frac < 0.5) return fl;
  return fmod(fl, 2.0) == 0.0 ? fl : fl + 1.0;
}

// Correctly rounded conversion of a non-NaN double to the format's bits.
static uint32_t ref_round(const fmt *f, double x) {
  uint32_t sign = signbit(x) ? fmt_sign(f) : 0u;
  double a = fabs(x);
  if (isinf(a)) return sign | fmt_inf(f);
  if (a == 0.0) return sign;
  double min_normal = ldexp(1.0, 1 - fmt_bias(f));
  int e;
  (void)frexp(a, &e); // a = frac * 2^e, frac in [0.5, 1)
  int ulp_exp = a < min_normal ? fmt_sub_ulp_exp(f) : e - 1 - f->mant_bits;
  double q = round_half_even(ldexp(a, -ulp_exp));
  double v = ldexp(q, ulp_exp);
  if (v < min_normal) return sign | (uint32_t)q; // q == 2^mant: min normal
  double fr = frexp(v, &e);
  int biased = e - 1 + fmt_bias(f);
  if (biased >= fmt_exp_max(f)) return sign | fmt_inf(f);
  uint32_t mant = (uint32_t)ldexp(fr * 2.0 - 1.0, f->mant_bits);
  return sign | ((uint32_t)biased << f->mant_bits) | mant;
}

static int is_nan_bits(const fmt *f, uint32_t bits) {
  uint32_t mag = bits & (fmt_sign(f) - 1u);
  return mag > fmt_inf(f);
}

// ---- the code under test, behind one interface ------------------------------

static float to_f32(const fmt *f, uint16_t h) {
  return f == &kHalf ? fa_f16_to_f32(h) : fa_bf16_to_f32(h);
}
static uint16_t from_f32(const fmt *f, float x) {
  return f == &kHalf ? fa_f32_to_f16(x) : fa_f32_to_bf16(x);
}

static float float_of_bits(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}
static uint32_t bits_of_float(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

// One fp32 -> narrow conversion against the reference.
static void check_down(const fmt *f, float x) {
  uint16_t got = from_f32(f, x);
  if (isnan(x)) {
    CHECK(is_nan_bits(f, got), "%s(NaN 0x%08x) = 0x%04x, not a NaN", f->name,
          (unsigned)bits_of_float(x), (unsigned)got);
    return;
  }
  uint32_t want = ref_round(f, (double)x);
  CHECK(got == want, "%s(%.9g = 0x%08x) = 0x%04x, want 0x%04x", f->name,
        (double)x, (unsigned)bits_of_float(x), (unsigned)got, (unsigned)want);
}

// Every 16-bit pattern widens exactly and narrows back to itself (NaNs stay
// NaN; their payload may be canonicalised).
static void test_all_patterns(const fmt *f) {
  for (uint32_t h = 0; h < 65536u; h++) {
    float v = to_f32(f, (uint16_t)h);
    double want = ref_value(f, h);
    if (isnan(want)) {
      CHECK(isnan(v), "%s 0x%04x -> %g, want NaN", f->name, (unsigned)h,
            (double)v);
      uint16_t back = from_f32(f, v);
      CHECK(is_nan_bits(f, back), "%s NaN 0x%04x -> 0x%04x round trip", f->name,
            (unsigned)h, (unsigned)back);
      continue;
    }
    CHECK((double)v == want && !signbit(v) == !signbit(want),
          "%s 0x%04x -> %.9g, want %.9g", f->name, (unsigned)h, (double)v,
          want);
    uint16_t back = from_f32(f, v);
    CHECK(back == h, "%s round trip 0x%04x -> %.9g -> 0x%04x", f->name,
          (unsigned)h, (double)v, (unsigned)back);
  }
}

// Around every representable value: the value, the midpoint to the next
// one (a tie), and their fp32 neighbours, both signs.
static void test_boundaries(const fmt *f) {
  uint32_t inf = fmt_inf(f);
  for (uint32_t h = 0; h < inf; h++) {
    double lo = ref_value(f, h);
    double hi = h + 1 < inf ? ref_value(f, h + 1)
                            : ldexp(1.0, fmt_exp_max(f) - fmt_bias(f));
    double mid = 0.5 * (lo + hi); // one more bit: exact in fp32
    float pts[2] = {(float)lo, (float)mid};
    if ((double)pts[1] != mid) {
      CHECK(0, "%s midpoint %.17g not exact in fp32", f->name, mid);
      continue;
    }
    for (int k = 0; k < 2; k++) {
      float down = pts[k], up = pts[k];
      for (int step = 0; step < 3; step++) {
        check_down(f, down);
        check_down(f, -down);
        check_down(f, up);
        check_down(f, -up);
        down = nextafterf(down, 0.0f);
        up = nextafterf(up, INFINITY);
      }
    }
  }
}

// A strided sweep over all 2^32 fp32 patterns plus random ones.
static void test_sweep(const fmt *f) {
  for (uint64_t u = 0; u < (1ull << 32); u += 1021)
    check_down(f, float_of_bits((uint32_t)u));
  for (int i = 0; i < 2000000; i++)
    check_down(f, float_of_bits((uint32_t)ut_rand64()));
}

// Hand-computed cases: the reference must agree with these too.
static void test_named_f16(void) {
  struct {
    float x;
    uint16_t want;
  } c[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3c00},
      {-2.0f, 0xc000},
      {65504.0f, 0x7bff},  // largest finite
      {65519.99f, 0x7bff}, // just below the overflow tie
      {65520.0f, 0x7c00},  // tie between 65504 and 2^16 -> even: inf
      {1.0e5f, 0x7c00},
      {-1.0e5f, 0xfc00},
      {FLT_MAX, 0x7c00},
      {INFINITY, 0x7c00},
      {-INFINITY, 0xfc00},
      {0x1.0p-24f, 0x0001},          // smallest subnormal
      {0x1.0p-25f, 0x0000},          // tie between 0 and 2^-24 -> even: 0
      {0x1.000002p-25f, 0x0001},     // just above that tie
      {0x1.8p-24f, 0x0002},          // tie between 1 and 2 units -> 2
      {0x1.4p-23f, 0x0002},          // 2.5 units: tie -> 2
      {0x1.ff8p-15f, 0x03ff},        // largest subnormal
      {0x1.ffcp-15f, 0x0400},        // tie 1023.5 units -> even: min normal
      {0x1.0p-14f, 0x0400},          // smallest normal
      {1.0f + 0x1.0p-11f, 0x3c00},   // tie -> even mantissa 0
      {1.0f + 0x1.8p-10f, 0x3c02},   // tie between 1 and 2 ulps -> 2
      {1.0f + 0x1.002p-11f, 0x3c01}, // just above the tie
      {0x1.0p-30f, 0x0000},          // far below: signed zero
      {-0x1.0p-30f, 0x8000},
  };
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
    uint16_t got = fa_f32_to_f16(c[i].x);
    CHECK(got == c[i].want, "f16(%a) = 0x%04x, want 0x%04x", (double)c[i].x,
          (unsigned)got, (unsigned)c[i].want);
    CHECK(ref_round(&kHalf, (double)c[i].x) == c[i].want,
          "reference f16(%a) disagrees with the hand value", (double)c[i].x);
  }
  // NaNs of every kind stay NaN, including signalling patterns whose payload
  // lies entirely in the bits a conversion drops (naively: infinity).
  uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u,
                     0x7f801fffu, 0x7fffffffu, 0x7fa00000u};
  for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
    uint16_t h = fa_f32_to_f16(float_of_bits(nans[i]));
    CHECK(is_nan_bits(&kHalf, h), "f16(NaN 0x%08x) = 0x%04x", (unsigned)nans[i],
          (unsigned)h);
    uint16_t b = fa_f32_to_bf16(float_of_bits(nans[i]));
    CHECK(is_nan_bits(&kBf16, b), "bf16(NaN 0x%08x) = 0x%04x",
          (unsigned)nans[i], (unsigned)b);
  }
}

static void test_named_bf16(void) {
  struct {
    float x;
    uint16_t want;
  } c[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3f80},
      {1.0f + 0x1.0p-8f, 0x3f80},  // tie -> even
      {1.0f + 0x1.8p-7f, 0x3f82},  // tie between 1 and 2 ulps -> 2
      {1.0f + 0x1.02p-8f, 0x3f81}, // just above the tie
      {0x1.fep127f, 0x7f7f},       // largest finite bf16
      {FLT_MAX, 0x7f80},           // rounds past it: inf
      {INFINITY, 0x7f80},
      {-INFINITY, 0xff80},
      {0x1.0p-133f, 0x0001},  // smallest bf16 subnormal
      {0x1.0p-134f, 0x0000},  // tie -> even 0
      {0x1.0p-149f, 0x0000},  // smallest fp32 subnormal
      {-0x1.8p-133f, 0x8002}, // tie between 1 and 2 units -> 2
  };
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
    uint16_t got = fa_f32_to_bf16(c[i].x);
    CHECK(got == c[i].want, "bf16(%a) = 0x%04x, want 0x%04x", (double)c[i].x,
          (unsigned)got, (unsigned)c[i].want);
    CHECK(ref_round(&kBf16, (double)c[i].x) == c[i].want,
          "reference bf16(%a) disagrees with the hand value", (double)c[i].x);
  }
}

// fa_load / fa_store / the row forms agree with the scalar conversions.
static void test_load_store(void) {
  CHECK(fa_dtype_size(FA_F32) == 4, "size f32 %zu", fa_dtype_size(FA_F32));
  CHECK(fa_dtype_size(FA_F16) == 2, "size f16 %zu", fa_dtype_size(FA_F16));
  CHECK(fa_dtype_size(FA_BF16) == 2, "size bf16 %zu", fa_dtype_size(FA_BF16));
  CHECK(strcmp(fa_dtype_name(FA_F32), "f32") == 0, "%s", fa_dtype_name(FA_F32));
  CHECK(strcmp(fa_dtype_name(FA_F16), "f16") == 0, "%s", fa_dtype_name(FA_F16));
  CHECK(strcmp(fa_dtype_name(FA_BF16), "bf16") == 0, "%s",
        fa_dtype_name(FA_BF16));

  enum { N = 37 };
  float src[N], row[N];
  uint16_t buf16[N + 2];
  float buf32[N + 2];
  for (int i = 0; i < N; i++)
    src[i] = (float)ut_rand_uniform(-70000.0, 70000.0);
  src[3] = NAN;
  src[4] = -0.0f;
  src[5] = 0x1.0p-20f;
  fa_dtype types[3] = {FA_F32, FA_F16, FA_BF16};
  for (int t = 0; t < 3; t++) {
    void *buf = types[t] == FA_F32 ? (void *)buf32 : (void *)buf16;
    memset(buf16, 0xa5, sizeof buf16);
    memset(buf32, 0xa5, sizeof buf32);
    // Element-wise store at offset 1, row load.
    for (int i = 0; i < N; i++) fa_store(buf, types[t], 1 + i, src[i]);
    fa_load_row(row, buf, types[t], 1, N);
    for (int i = 0; i < N; i++) {
      float want;
      if (types[t] == FA_F32)
        want = src[i];
      else if (types[t] == FA_F16)
        want = fa_f16_to_f32(fa_f32_to_f16(src[i]));
      else
        want = fa_bf16_to_f32(fa_f32_to_bf16(src[i]));
      float one = fa_load(buf, types[t], 1 + i);
      int same = isnan(want) ? isnan(one) && isnan(row[i])
                             : (bits_of_float(one) == bits_of_float(want) &&
                                bits_of_float(row[i]) == bits_of_float(want));
      CHECK(same, "%s element %d: load %g row %g want %g",
            fa_dtype_name(types[t]), i, (double)one, (double)row[i],
            (double)want);
    }
    // Guards around the stored range are untouched.
    if (types[t] == FA_F32)
      CHECK(bits_of_float(buf32[0]) == 0xa5a5a5a5u &&
                bits_of_float(buf32[N + 1]) == 0xa5a5a5a5u,
            "f32 store wrote outside [1, N]");
    else
      CHECK(buf16[0] == 0xa5a5 && buf16[N + 1] == 0xa5a5,
            "%s store wrote outside [1, N]", fa_dtype_name(types[t]));
    // Row store equals element stores.
    uint16_t copy16[N + 2];
    float copy32[N + 2];
    memcpy(copy16, buf16, sizeof copy16);
    memcpy(copy32, buf32, sizeof copy32);
    fa_store_row(buf, types[t], 1, src, N);
    CHECK(memcmp(copy16, buf16, sizeof copy16) == 0 &&
              memcmp(copy32, buf32, sizeof copy32) == 0,
          "%s store_row differs from element-wise store",
          fa_dtype_name(types[t]));
  }
}

int main(void) {
  test_named_f16();
  test_named_bf16();
  test_all_patterns(&kHalf);
  test_all_patterns(&kBf16);
  test_boundaries(&kHalf);
  test_boundaries(&kBf16);
  test_sweep(&kHalf);
  test_sweep(&kBf16);
  test_load_store();
  return ut_finish("test_dtype");
}
