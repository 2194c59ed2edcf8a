// SPDX-License-Identifier: MIT
// The forward item's online-softmax step on S = Q.K^T with lanes as rows
// (amx_item.h), 16 rows at a time: rows that have seen keys take their exps
// against their running maxima with the block's maxima in the same pass
// (the lazy step); the others, and those whose maxima rise too far, their
// maxima first (amx_softmax_ref16), then the exps (amx_softmax_p16). The
// exps rounded to bf16 in key order are already the key pairs of P.V's A
// tile; each row's 16 partial maxima or sums are reduced across by
// amx_rows_reduce. Included by amx_item.h.
#ifndef FA_AMX_SOFTMAX_H
#define FA_AMX_SOFTMAX_H

#include "amx/amx_exp2.h"

/* Lane i of the result: the max (add = 0) or the sum (add = 1) of the 16
   lanes of v[i]. Each step halves the vectors, two shuffles and one op a
   pair (16 -> 8 of two rows' 8 partials, -> 4 of four rows' 4, -> 2 of
   eight rows' 2, -> 1), the rows left as lane 4 L + j = row 4 j + L, and
   one permute puts them in order: 31 shuffles and 15 ops, where a 16 x 16
   transpose first is 64 shuffles (on one port) and the same 15 ops. */
static inline __m512 amx_op(__m512 a, __m512 b, int add) {
  return add ? _mm512_add_ps(a, b) : _mm512_max_ps(a, b);
}
static inline __m512 amx_rows_reduce(__m512 v[16], int add) {
  for (int j = 0; j < 8; j++) // 256-bit halves
    v[j] = amx_op(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0x44),
                  _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0xee), add);
  for (int j = 0; j < 4; j++) // 128-bit quarters
    v[j] = amx_op(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0x88),
                  _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0xdd), add);
  for (int j = 0; j < 2; j++) // pairs within each quarter
    v[j] = amx_op(_mm512_shuffle_ps(v[2 * j], v[2 * j + 1], 0x44),
                  _mm512_shuffle_ps(v[2 * j], v[2 * j + 1], 0xee), add);
  const __m512 z = amx_op(_mm512_shuffle_ps(v[0], v[1], 0x88),
                          _mm512_shuffle_ps(v[0], v[1], 0xdd), add);
  return _mm512_permutexvar_ps(
      _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0),
      z);
}

/* The keys c .. c + 15 that lie in [lo, hi), as a mask. */
static inline __mmask16 amx_keys(int c, int lo, int hi) {
  const int a = lo - c < 0 ? 0 : lo - c, z = hi - c > 16 ? 16 : hi - c;
  return z <= a ? (__mmask16)0
                : (__mmask16)(((1u << z) - 1u) & ~((1u << a) - 1u));
}

/* The row maxima of 16 rows of S (pitch lds, keys [0, nc); with vlo,
   each row's visible keys [vlo, vhi) only), times mul (the scale when it
   is folded, > 0), with the running maxima m: the new maxima into mx and
   the references the exps subtract into ref (a row that has seen no key
   keeps -inf, its reference 0): mr[0..15] and mr[16..31]. A NaN score gives a
   NaN P and so a NaN sum: the maxima need not keep it. */
static void amx_softmax_ref16(const float *s, int lds, int nc, float mul,
                              const float *m, const int *vlo, const int *vhi,
                              float *mr) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  const int full = nc & ~15;
  const __mmask16 tailm = (__mmask16)((1u << (nc & 15)) - 1u);
  __m512 red[16];
  for (int i = 0; i < 16; i++) {
    const float *row = s + (size_t)i * lds;
    __m512 a = ninf, b = ninf;
    int c = 0;
    if (vlo) { // a row of a tile that meets a mask: its visible keys only
      for (c = vlo[i] & ~15; c < vhi[i]; c += 16)
        a = _mm512_max_ps(
            _mm512_mask_loadu_ps(ninf, amx_keys(c, vlo[i], vhi[i]), row + c),
            a);
      red[i] = a;
      continue;
    }
    for (; c + 32 <= full; c += 32) {
      a = _mm512_max_ps(_mm512_loadu_ps(row + c), a);
      b = _mm512_max_ps(_mm512_loadu_ps(row + c + 16), b);
    }
    if (c < full) a = _mm512_max_ps(_mm512_loadu_ps(row + c), a);
    if (tailm)
      b = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, tailm, row + full), b);
    red[i] = _mm512_max_ps(a, b);
  }
  const fa_vf x =
      vf_max(vf_load(m), _mm512_mul_ps(amx_rows_reduce(red, 0), vf_set1(mul)));
  vf_store(mr, x);
  vf_store(mr + 16, vf_neginf_to_zero(x));
}

/* How far (in log2 units) a row's maximum in a block may pass the
   running maximum before the row takes it as its new reference: P is then
   at most 2^8, far inside fp32 and bf16, and O and l keep the reference
   they were summed against (the final normalisation and the LSE use it),
   so no rescale is due. */
#define FA_AMX_LAZY_LOG2 8

/* The exps of 16 rows against the references of amx_softmax_ref16 (mr),
   or with mr NULL ("lazy") against the running maxima m themselves, the
   block's row maxima taken in the same pass: 0 if one of them passes m by
   more than FA_AMX_LAZY_LOG2 (m, l, mu untouched, P to be made again with
   references), else m stays, mu = 1, and l adds the sums. P as bf16 pairs
   of keys into p2 (rows of ldp pairs, keys [nc, ncp) zero, ncp a multiple
   of 32); with p32 also the fp32 exps back into S (for the masked products
   of the body); m, l, mu updated as column_done does. The sums add the
   fp32 exps, not the rounded P (summing the bf16 pairs cost the LSE a
   factor 100 in accuracy: 5e-6 against its bound of 1e-5). */
static int amx_softmax_p16(float *s, int lds, int nc, int ncp, float mul,
                           const float *mr, float *m, float *l, float *mu,
                           uint32_t *p2, int ldp, int p32, const int *vlo,
                           const int *vhi) {
  const int lazy = !mr;
  const fa_vf mx = lazy ? vf_load(m) : vf_load(mr),
              ref = lazy ? mx : vf_load(mr + 16);
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f),
               ninf = _mm512_set1_ps(-INFINITY),
               refl = _mm512_mul_ps(ref, log2e),
               k = _mm512_mul_ps(vf_set1(mul), log2e);
  __m512 red[16], top[16];
  for (int i = 0; i < 16; i++) {
    const __m512 ri = _mm512_permutexvar_ps(_mm512_set1_epi32(i), refl);
    float *row = s + (size_t)i * lds;
    uint32_t *prow = p2 + (size_t)i * ldp;
    __m512 sum = _mm512_setzero_ps(), sum2 = sum, a = ninf, b = ninf;
    const int klo = vlo ? vlo[i] : 0, khi = vlo ? vhi[i] : nc;
    int c = 0;
    for (; klo == 0 && c + 32 <= khi; c += 32) { // whole pair tiles, no masks
      const __m512 x0 = _mm512_loadu_ps(row + c),
                   x1 = _mm512_loadu_ps(row + c + 16);
      if (lazy) {
        a = _mm512_max_ps(x0, a);
        b = _mm512_max_ps(x1, b);
      }
      const __m512 lo = amx_exp2(_mm512_fmsub_ps(x0, k, ri), 0xffff),
                   hi = amx_exp2(_mm512_fmsub_ps(x1, k, ri), 0xffff);
      const __m512bh pb = _mm512_cvtne2ps_pbh(hi, lo);
      sum = _mm512_add_ps(sum, lo);
      sum2 = _mm512_add_ps(sum2, hi);
      _mm512_storeu_si512(prow + c / 2, (__m512i)pb);
      if (p32) {
        _mm512_storeu_ps(row + c, lo);
        _mm512_storeu_ps(row + c + 16, hi);
      }
    }
    sum = _mm512_add_ps(sum, sum2);
    for (; c < ncp; c += 32) {
      const __mmask16 in0 = amx_keys(c, klo, khi),
                      in1 = amx_keys(c + 16, klo, khi);
      if (lazy) {
        a = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, in0, row + c), a);
        b = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, in1, row + c + 16), b);
      }
      const __m512 p0 = amx_p16(row + c, in0, k, ri),
                   p1 = amx_p16(row + c + 16, in1, k, ri);
      const __m512bh pb = _mm512_cvtne2ps_pbh(p1, p0);
      sum = _mm512_add_ps(sum, _mm512_add_ps(p0, p1));
      _mm512_storeu_si512(prow + c / 2, (__m512i)pb);
      if (p32) {
        _mm512_storeu_ps(row + c, p0);
        _mm512_storeu_ps(row + c + 16, p1);
      }
    }
    red[i] = sum;
    top[i] = _mm512_max_ps(a, b);
  }
  if (lazy &&
      _mm512_cmp_ps_mask(
          _mm512_mul_ps(amx_rows_reduce(top, 0), vf_set1(mul)),
          _mm512_add_ps(mx, _mm512_set1_ps(FA_AMX_LAZY_LOG2 * 0.693147181f)),
          _CMP_GT_OQ))
    return 0;
  column_done(m, l, mu, 0, mx, ref, amx_rows_reduce(red, 1));
  return 1;
}

/* Rows per pass of amx_softmax's max phase. */
#define FA_AMX_SOFTMAX_ROWS 64

/* One online-softmax step for nrow rows of S (a multiple of 16; the
   arguments as amx_softmax_p16's, vlo / vhi per row). Rows that have seen
   keys before take the lazy step, 16 at a time; the rest, and any 16 whose
   maxima pass their references by too much, take the maxima of up to
   FA_AMX_SOFTMAX_ROWS rows first, then their exps, so that the exps of one
   group of 16 rows run back to back with the next group's instead of
   waiting, group by group, on a max pass and its reduction. */
static void amx_softmax(int nrow, float *s, int lds, int nc, int ncp, float mul,
                        float *m, float *l, float *mu, uint32_t *p2, int ldp,
                        int p32, const int *vlo, const int *vhi) {
  float mr[2 * FA_AMX_SOFTMAX_ROWS]; // per 16 rows: maxima, references
  for (int r0 = 0; r0 < nrow; r0 += FA_AMX_SOFTMAX_ROWS) {
    const int n =
        nrow - r0 < FA_AMX_SOFTMAX_ROWS ? nrow - r0 : FA_AMX_SOFTMAX_ROWS;
    unsigned todo = 0; // groups of 16 left for the two passes
    for (int g = 0; g < n; g += 16) {
      const int r = r0 + g;
      const int seen =
          !_mm512_cmp_ps_mask(vf_load(m + r), vf_set1(-INFINITY), _CMP_EQ_OQ);
      if (!seen || p32 ||
          !amx_softmax_p16(s + (size_t)r * lds, lds, nc, ncp, mul, NULL, m + r,
                           l + r, mu + r, p2 + (size_t)r * ldp, ldp, p32,
                           vlo ? vlo + r : NULL, vlo ? vhi + r : NULL))
        todo |= 1u << (g / 16);
    }
    for (int g = 0; g < n; g += 16) {
      const int r = r0 + g;
      if (todo >> (g / 16) & 1)
        amx_softmax_ref16(s + (size_t)r * lds, lds, nc, mul, m + r,
                          vlo ? vlo + r : NULL, vlo ? vhi + r : NULL,
                          mr + 2 * g);
    }
    for (int g = 0; g < n; g += 16) {
      const int r = r0 + g;
      if (todo >> (g / 16) & 1)
        (void)amx_softmax_p16(s + (size_t)r * lds, lds, nc, ncp, mul,
                              mr + 2 * g, m + r, l + r, mu + r,
                              p2 + (size_t)r * ldp, ldp, p32,
                              vlo ? vlo + r : NULL, vlo ? vhi + r : NULL);
    }
  }
}

#endif
