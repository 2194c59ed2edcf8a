// SPDX-License-Identifier: MIT
// FP8 through the public API, on every usable backend:
//   - every code of both formats reaches O and LSE exactly as the header
//     defines it (decoded exactly, times the descale in fp32; a value that
//     overflows fp32 after descaling is inf; NaN codes are NaN), through
//     both tile paths (a decode-sized tile of packed GQA lanes, and the
//     tile product of a prefill);
//   - FP8 outputs, and bad descales on FP8 inputs, are refused with a
//     message naming the tensor, and write nothing.
// A backend that declines FP8 (FA_ERR_UNSUPPORTED with a reason) is
// reported and skipped; if none runs the codes, the test SKIPs.
#include <float.h>
#include <stdint.h>

#include "api_util.h"

typedef struct fmt {
  const char *name;
  fa_dtype t;
  int man, bias, ieee; // ieee: an all-ones exponent is inf/NaN (e5m2)
} fmt;

static const fmt kFormats[2] = {{"e4m3", FA_E4M3, 3, 7, 0},
                                {"e5m2", FA_E5M2, 2, 15, 1}};

/* A code's value from the format's definition. */
static double code_value(const fmt *f, unsigned c) {
  unsigned e = (c & 0x7fu) >> f->man, m = c & ((1u << f->man) - 1u);
  unsigned emax = f->ieee ? 31u : 15u;
  double v;
  if (f->ieee && e == emax)
    v = m ? NAN : INFINITY;
  else if (!f->ieee && e == emax && m == 7u)
    v = NAN;
  else if (e == 0)
    v = ldexp((double)m, 1 - f->bias - f->man);
  else
    v = ldexp(1.0 + ldexp((double)m, -f->man), (int)e - f->bias);
  return (c & 0x80u) ? -v : v;
}

/* The code of a small exact value (1.0, 0.5, ...). */
static uint8_t code_of(const fmt *f, double v) {
  for (unsigned c = 0; c < 256; c++)
    if (code_value(f, c) == v) return (uint8_t)c;
  return 0;
}

static fa_tensor view(void *p, fa_dtype t, int seq, int heads, int dim) {
  fa_tensor x;
  memset(&x, 0, sizeof x);
  x.data = p;
  x.dtype = t;
  x.stride_head = dim;
  x.stride_seq = (int64_t)heads * dim;
  x.stride_batch = (int64_t)seq * heads * dim;
  return x;
}

/* The expected fp32 of code c times descale x (NaN stays NaN). */
static float expect(const fmt *f, unsigned c, float x) {
  double v = code_value(f, c);
  return isnan(v) ? NAN : (float)v * x; // fp32 product, as the header says
}

static int same_f(float want, float got) {
  if (isnan(want)) return isnan(got);
  return want == got;
}

/* V = every code, one key: O = V (P = 1 exactly), q rows sq, heads hq,
   head_dim d (64: the FP8 decode rows' bf16 tables on CPUs that take
   them, cpu_rows_fp8_dp.h; 16: the widened rows). */
static int v_codes(fa_context *ctx, const char *be, const fmt *f, int sq,
                   int hq, float descale, int d) {
  const int dv = 256;
  uint8_t *q = calloc((size_t)sq * hq * d, 1), k[64],
          v[256]; // k: d <= 64 codes;
  float *o = malloc(sizeof(float) * (size_t)sq * hq * dv);
  float *lse = malloc(sizeof(float) * (size_t)sq * hq);
  if (!q || !o || !lse) exit(1);
  const uint8_t one = code_of(f, 1.0);
  memset(q, one, (size_t)sq * hq * d);
  memset(k, one, (size_t)d);
  for (unsigned c = 0; c < 256; c++) v[c] = (uint8_t)c;
  fa_attention a = ts_problem(1, sq, 1, hq, 1, d);
  a.head_dim_v = dv;
  fa_tensor tq = view(q, f->t, sq, hq, d), tk = view(k, f->t, 1, 1, d),
            tv = view(v, f->t, 1, 1, dv), to = view(o, FA_F32, sq, hq, dv);
  tv.descale = &descale;
  fa_status st = fa_forward(ctx, &a, tq, tk, tv, to, lse);
  int ran = st == FA_OK;
  if (st == FA_ERR_UNSUPPORTED)
    printf("  %s: %s declined: %s\n", be, f->name, fa_last_error());
  else
    EXPECT_OK("fa_forward (v codes)", st);
  for (int r = 0; ran && r < sq * hq; r++)
    for (unsigned c = 0; c < 256; c++) {
      float want = expect(f, c, descale), got = o[(size_t)r * dv + c];
      CHECK(same_f(want, got),
            "%s %s sq%d hq%d descale %g: v code 0x%02x gives o %.9g, want "
            "%.9g (row %d)",
            be, f->name, sq, hq, (double)descale, c, (double)got, (double)want,
            r);
    }
  free(q);
  free(o);
  free(lse);
  return ran;
}

/* K = the finite codes (the others 0), q rows one-hot, one key, scale 1:
   lse = q . (descale k) = the code's value times the descale. Lanes: hq
   heads of one kv head, sq rows; queries cover dims [dim0, dim0 + hq sq).
   head_dim_v dv: 64 or 16, as d in v_codes. */
static void k_codes(fa_context *ctx, const char *be, const fmt *f, int sq,
                    int hq, float descale, int dv) {
  const int d = 256;
  uint8_t *q = calloc((size_t)sq * hq * d, 1), k[256], v[64];
  float *o = malloc(sizeof(float) * (size_t)sq * hq * dv);
  float *lse = malloc(sizeof(float) * (size_t)sq * hq);
  if (!q || !o || !lse) exit(1);
  for (unsigned c = 0; c < 256; c++)
    k[c] = isfinite(code_value(f, c)) ? (uint8_t)c : 0;
  memset(v, code_of(f, 1.0), sizeof v);
  fa_attention a = ts_problem(1, sq, 1, hq, 1, d);
  a.head_dim_v = dv;
  a.scale = 1.0f;
  fa_tensor tq = view(q, f->t, sq, hq, d), tk = view(k, f->t, 1, 1, d),
            tv = view(v, f->t, 1, 1, dv), to = view(o, FA_F32, sq, hq, dv);
  tk.descale = &descale;
  // Codes that overflow fp32 once descaled are inf, and 0 * inf in every
  // lane's dot product makes all scores NaN.
  int overflow = 0;
  for (int c = 0; c < d; c++) overflow |= isinf(expect(f, k[c], descale));
  for (int dim0 = 0; dim0 < d; dim0 += sq * hq) {
    memset(q, 0, (size_t)sq * hq * d);
    for (int r = 0; r < sq * hq && dim0 + r < d; r++)
      q[(size_t)r * d + dim0 + r] = code_of(f, 1.0);
    fa_status st = fa_forward(ctx, &a, tq, tk, tv, to, lse);
    if (st) {
      EXPECT_OK("fa_forward (k codes)", st);
      break;
    }
    for (int r = 0; r < sq * hq && dim0 + r < d; r++) {
      // lse is [batch][heads][seq]; lane r is row r / hq of head r % hq.
      float got = lse[(size_t)(r % hq) * sq + r / hq];
      // A score of +-inf makes the row NaN (the header's rule).
      float want = expect(f, k[dim0 + r], descale);
      if (isinf(want) || overflow) want = NAN;
      CHECK(same_f(want, got),
            "%s %s sq%d hq%d descale %g: k code 0x%02x gives lse %.9g, "
            "want %.9g",
            be, f->name, sq, hq, (double)descale, k[dim0 + r], (double)got,
            (double)want);
    }
  }
  // One NaN code in the key row: every lane's score, so its lse, is NaN.
  k[5] = f->ieee ? 0x7d : 0xff;
  if (fa_forward(ctx, &a, tq, tk, tv, to, lse) == FA_OK)
    for (int r = 0; r < sq * hq; r++)
      CHECK(isnan(lse[r]), "%s %s sq%d hq%d: a NaN k code gives lse %g", be,
            f->name, sq, hq, (double)lse[r]);
  free(q);
  free(o);
  free(lse);
}

static int codes_on(const char *be) {
  fa_context *ctx = NULL;
  if (fa_context_create_by_name(&ctx, be) != FA_OK) return 0;
  int ran = 0;
  for (int i = 0; i < 2; i++) {
    const fmt *f = &kFormats[i];
    // Descales: none (1), one that rounds, two that overflow the largest
    // codes to inf (448 * 1e36 > FLT_MAX; 3e37 times the e4m3 decoder's
    // unit 256 overflows too, which sends the in-place decode path back to
    // the tile path), one that makes subnormals.
    const float ds[5] = {1.0f, 1.37f, 1e36f, 3e37f, 1e-36f};
    for (int x = 0; x < 5; x++) {
      // Decode-sized tiles (8 GQA lanes) and prefill-sized ones.
      ran |= v_codes(ctx, be, f, 1, 8, ds[x], 16);
      if (!ran) break;
      v_codes(ctx, be, f, 1, 8, ds[x], 64);
      v_codes(ctx, be, f, 64, 1, ds[x], 16);
      k_codes(ctx, be, f, 1, 8, ds[x], 16);
      k_codes(ctx, be, f, 1, 8, ds[x], 64);
      k_codes(ctx, be, f, 64, 2, ds[x], 16);
    }
  }
  fa_context_destroy(ctx);
  if (ran) printf("  %s: every code of e4m3 and e5m2 checked\n", be);
  return ran;
}

/* Refusals: FP8 outputs, FP8 inputs with bad descales or mixed dtypes. */
static void refusals(void) {
  fa_context *ctx = NULL;
  if (fa_context_create(&ctx, FA_BACKEND_CPU, 0) != FA_OK) return;
  enum { S = 4, H = 2, D = 8 };
  uint8_t q[S * H * D], k[S * H * D], v[S * H * D], o8[S * H * D];
  uint16_t k16[S * H * D];
  float o[S * H * D], lse[S * H], dq[S * H * D], dk[S * H * D], dv[S * H * D],
      d_o[S * H * D];
  memset(q, 0x38, sizeof q); // 1.0 in e4m3
  memset(k, 0x38, sizeof k);
  memset(v, 0x38, sizeof v);
  memset(k16, 0, sizeof k16);
  fa_attention a;
  fa_attention_init(&a);
  a.batch = 1;
  a.seqlen_q = a.seqlen_k = S;
  a.heads_q = a.heads_kv = H;
  a.head_dim = D;
  fa_tensor tq = view(q, FA_E4M3, S, H, D), tk = view(k, FA_E4M3, S, H, D),
            tv = view(v, FA_E4M3, S, H, D), to = view(o, FA_F32, S, H, D);
  memset(o, 0x5a, sizeof o);
  EXPECT_FAIL("o in e4m3",
              fa_forward(ctx, &a, tq, tk, tv, view(o8, FA_E4M3, S, H, D), lse),
              FA_ERR_INVALID_ARGUMENT, "o FP8", NULL);
  EXPECT_FAIL("o in e5m2",
              fa_forward(ctx, &a, tq, tk, tv, view(o8, FA_E5M2, S, H, D), lse),
              FA_ERR_INVALID_ARGUMENT, "o FP8", NULL);
  EXPECT_FAIL("k in bf16 beside e4m3 q",
              fa_forward(ctx, &a, tq, view(k16, FA_BF16, S, H, D), tv, to, lse),
              FA_ERR_INVALID_ARGUMENT, "k", NULL);
  const float bad[4] = {0.0f, -1.0f, NAN, INFINITY};
  for (int i = 0; i < 4; i++) {
    fa_tensor x = tv;
    x.descale = &bad[i];
    EXPECT_FAIL("bad v descale", fa_forward(ctx, &a, tq, tk, x, to, lse),
                FA_ERR_INVALID_ARGUMENT, "v.descale", NULL);
  }
  float one = 1.0f;
  fa_tensor od = to;
  od.descale = &one;
  EXPECT_FAIL("descale on o", fa_forward(ctx, &a, tq, tk, tv, od, lse),
              FA_ERR_INVALID_ARGUMENT, "o.descale", NULL);
  unsigned char fresh = 0x5a;
  int untouched = 1;
  for (size_t i = 0; i < sizeof o; i++)
    untouched &= ((unsigned char *)o)[i] == fresh;
  CHECK(untouched, "a refused forward wrote o");
  // The backward: FP8 do or gradients are outputs too.
  EXPECT_OK("fa_forward e4m3 -> f32", fa_forward(ctx, &a, tq, tk, tv, to, lse));
  for (int i = 0; i < S * H * D; i++) d_o[i] = 1.0f;
  fa_tensor tdo = view(d_o, FA_F32, S, H, D), tdq = view(dq, FA_F32, S, H, D),
            tdk = view(dk, FA_F32, S, H, D), tdv = view(dv, FA_F32, S, H, D);
  EXPECT_OK("fa_backward e4m3 -> f32",
            fa_backward(ctx, &a, tq, tk, tv, to, tdo, lse, tdq, tdk, tdv));
  EXPECT_FAIL("do in e4m3",
              fa_backward(ctx, &a, tq, tk, tv, to, view(o8, FA_E4M3, S, H, D),
                          lse, tdq, tdk, tdv),
              FA_ERR_INVALID_ARGUMENT, "do FP8", NULL);
  EXPECT_FAIL("dk in e5m2",
              fa_backward(ctx, &a, tq, tk, tv, to, tdo, lse, tdq,
                          view(o8, FA_E5M2, S, H, D), tdv),
              FA_ERR_INVALID_ARGUMENT, "FP8", NULL);
  // Merge parts are attention outputs.
  const float *lp[1] = {lse};
  fa_tensor part = view(o8, FA_E4M3, S, H, D);
  EXPECT_FAIL("merge of e4m3 parts",
              fa_merge_states(ctx, 1, &part, lp, 1, S, H, D, to, NULL),
              FA_ERR_INVALID_ARGUMENT, "FP8", NULL);
  // fa_explain knows the dtype and runs it on a CPU kernel.
  char text[4096];
  fa_explain(&a, FA_E5M2, text, sizeof text);
  CHECK(strstr(text, "e5m2") && strstr(text, "cpu."),
        "fa_explain for e5m2 says: %s", text);
  fa_context_destroy(ctx);
}

int main(void) {
  refusals();
  int ran = 0;
  for (int i = 0; i < fa_backend_count(); i++)
    ran += codes_on(fa_backend_name(i));
  // And every CPU kernel that takes FP8, by name (the best would shadow
  // the others).
  static char kernels[16][64];
  const int nk = ts_kernels_accepting("cpu", FA_E4M3, kernels, 16);
  for (int i = 0; i < nk; i++) ran += codes_on(kernels[i]);
  if (!ran) {
    printf("SKIP: no backend runs FP8 here\n");
    return 77;
  }
  return ut_finish("test_api_fp8");
}
