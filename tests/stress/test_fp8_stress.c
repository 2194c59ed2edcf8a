// SPDX-License-Identifier: MIT
// FP8 non-finite codes in a paged KV cache, on every CPU kernel that takes
// FP8 (bound by name), against the float64 oracle: a decode step (split-KV, GQA
// heads packed, a sliding window) and a short prefill over a cache whose keys
// are random codes near the formats' largest values, with descales, plus
//   - a NaN code in a visible K row of kv head 0: the rows of its query
//     heads are NaN (O and LSE), the other kv head's rows are untouched;
//   - a NaN code (e5m2: also an inf) in a V row outside the window: no row
//     sees it, nothing is NaN;
//   - (e5m2) an inf code in a visible V row: its column is inf or NaN
//     exactly where the oracle's is.
// Checks: NaN/Inf parity with the oracle element by element, and the
// finite elements within the output precision's bound (f32 out: 1e-5 of
// max |O|). Exit 0 pass, 1 fail, 77 no backend runs FP8.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn.h"
#include "oracle.h"
#include "tensor.h"
#include "ts_kernels.h"

enum { B = 2, SQ = 3, SK = 700, HQ = 8, HKV = 2, D = 64, PS = 16 };
enum { PAGES = B * ((SK + PS - 1) / PS) };

static int failures;

/* Positions whose class differs from the oracle's: NaN against not NaN,
   inf against finite or the other inf (ts_nonfinite_parity counts every
   NaN; here NaN is expected where the oracle has it). */
static size_t class_mismatch(const double *ref, const double *got, size_t n,
                             size_t *first) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    int same = isnan(ref[i])   ? isnan(got[i])
               : isinf(ref[i]) ? got[i] == ref[i]
                               : isfinite(got[i]);
    if (!same && bad++ == 0) *first = i;
  }
  return bad;
}

typedef struct setup {
  fa_attention a;
  int32_t table[B * ((SK + PS - 1) / PS)];
  uint8_t *q, *k, *v; // q [B][SQ][HQ][D], k/v pages [PAGES][PS][HKV][D]
  float dsq, dsk, dsv;
} setup;

/* One case: sq rows (1: decode), the defects given, on one context. */
static int run_case(fa_context *ctx, const char *be, fa_dtype t, int sq,
                    int defect, unsigned seed) {
  setup s;
  memset(&s, 0, sizeof s);
  ts_rng r;
  ts_rng_seed(&r, seed);
  fa_attention *a = &s.a;
  fa_attention_init(a);
  a->batch = B;
  a->seqlen_q = sq;
  a->seqlen_k = SK;
  a->heads_q = HQ;
  a->heads_kv = HKV;
  a->head_dim = D;
  a->window_left = 200;
  a->causal = FA_CAUSAL_BOTTOM_RIGHT;
  a->block_table = s.table;
  a->max_blocks_per_seq = (SK + PS - 1) / PS;
  a->page_size = PS;
  a->num_pages = PAGES;
  for (int i = 0; i < PAGES; i++) s.table[i] = (i * 7 + 3) % PAGES;
  const size_t nq = (size_t)B * sq * HQ * D, nk = (size_t)PAGES * PS * HKV * D;
  s.q = malloc(nq);
  s.k = malloc(nk);
  s.v = malloc(nk);
  double *oref = malloc(sizeof(double) * nq);
  double *lref = malloc(sizeof(double) * B * HQ * sq);
  float *o = malloc(sizeof(float) * nq);
  float *lse = malloc(sizeof(float) * B * HQ * sq);
  if (!s.q || !s.k || !s.v || !oref || !lref || !o || !lse) exit(1);
  // Values near the format's largest finite one (and their negatives),
  // scaled down by the descales so the scores stay O(1).
  const double big = t == FA_E4M3 ? 448.0 : 57344.0;
  s.dsq = (float)(1.0 / big);
  s.dsk = (float)(0.37 / big);
  s.dsv = (float)(3.0 / big);
  for (size_t i = 0; i < nq; i++)
    ts_store(s.q, t, (int64_t)i, big * (2.0 * ts_rng_uniform(&r) - 1.0));
  for (size_t i = 0; i < nk; i++) {
    ts_store(s.k, t, (int64_t)i, big * (2.0 * ts_rng_uniform(&r) - 1.0));
    ts_store(s.v, t, (int64_t)i, big * (2.0 * ts_rng_uniform(&r) - 1.0));
  }
  fa_tensor tq = {s.q, t, (int64_t)sq * HQ * D, HQ * D, D, &s.dsq, 0};
  fa_tensor tk = {s.k, t, (int64_t)PS * HKV * D, HKV * D, D, &s.dsk, 0};
  fa_tensor tv = {s.v, t, (int64_t)PS * HKV * D, HKV * D, D, &s.dsv, 0};
  fa_tensor to = {o, FA_F32, (int64_t)sq * HQ * D, HQ * D, D, NULL, 0};
  const uint8_t nan_code = t == FA_E4M3 ? 0x7f : 0x7e;
  int visible = SK - 5, hidden = 10; // inside / outside every row's window
  if (defect & 1) s.k[fa_oracle_k_index(a, &tk, 0, visible, 0) + 3] = nan_code;
  if (defect & 2) {
    s.v[fa_oracle_k_index(a, &tv, 1, hidden, 1) + 5] = nan_code;
    if (t == FA_E5M2) s.v[fa_oracle_k_index(a, &tv, 1, hidden, 0) + 6] = 0x7c;
  }
  if ((defect & 4) && t == FA_E5M2)
    s.v[fa_oracle_k_index(a, &tv, 1, visible, 1) + 7] = 0xfc; // -inf
  ts_poison(o, FA_F32, nq);
  fa_status st = fa_forward(ctx, a, tq, tk, tv, to, lse);
  int ran = st == FA_OK;
  if (st && st != FA_ERR_UNSUPPORTED) {
    printf("FAIL %s %s sq%d defect %d: %s: %s\n", be, ts_dtype_name(t), sq,
           defect, fa_status_string(st), fa_last_error());
    failures++;
  }
  if (ran && fa_oracle_forward(a, tq, tk, tv, oref, lref) == 0) {
    double *got = malloc(sizeof(double) * nq);
    double *lg = malloc(sizeof(double) * B * HQ * sq);
    if (!got || !lg) exit(1);
    for (size_t i = 0; i < nq; i++) got[i] = o[i];
    for (size_t i = 0; i < (size_t)B * HQ * sq; i++) lg[i] = lse[i];
    size_t first = 0, bad = class_mismatch(oref, got, nq, &first);
    size_t lfirst = 0,
           lbad = class_mismatch(lref, lg, (size_t)B * HQ * sq, &lfirst);
    double err = ts_max_err(oref, got, nq);
    int nans = 0;
    for (size_t i = 0; i < nq; i++) nans += isnan(got[i]);
    int ok = !bad && !lbad && err <= 1e-5;
    // The defects must show where they should (the check that the case
    // tests what it says): a visible NaN K code makes kv head 0's rows NaN.
    if ((defect & 1) && nans == 0) ok = 0;
    if (defect == 2 && nans) ok = 0;
    printf("%s %s %s sq%d defect %d: parity %zu/%zu err %.2e NaN elements %d\n",
           ok ? "PASS" : "FAIL", be, ts_dtype_name(t), sq, defect, bad, lbad,
           err, nans);
    if (!ok) {
      failures++;
      if (bad)
        printf("    o[%zu]: got %g, oracle %g\n", first, got[first],
               oref[first]);
    }
    free(got);
    free(lg);
  }
  free(s.q);
  free(s.k);
  free(s.v);
  free(oref);
  free(lref);
  free(o);
  free(lse);
  return ran;
}

static int on_backend(const char *be) {
  fa_context *ctx = NULL;
  if (fa_context_create_by_name(&ctx, be) != FA_OK) return 0;
  int ran = 0;
  fa_context_set_threads(ctx, 8); // split-KV whatever the host's cores
  const fa_dtype ts[2] = {FA_E4M3, FA_E5M2};
  for (int i = 0; i < 2; i++)
    for (int sq = 1; sq <= SQ; sq += SQ - 1)
      for (int defect = 0; defect < 8; defect++)
        ran |=
            run_case(ctx, be, ts[i], sq, defect, 1000u * i + 10u * sq + defect);
  fa_context_destroy(ctx);
  return ran;
}

int main(void) {
  int ran = 0;
  // Every CPU kernel that takes FP8, bound by name.
  static char kernels[16][64];
  const int nk = ts_kernels_accepting("cpu", FA_E4M3, kernels, 16);
  for (int i = 0; i < nk; i++) ran |= on_backend(kernels[i]);
  if (!ran) {
    printf("SKIP: no CPU backend runs FP8\n");
    return 77;
  }
  printf("test_fp8_stress: %d failures\n", failures);
  return failures ? 1 : 0;
}
