// SPDX-License-Identifier: MIT
// The error bounds a case's result must meet against the float64 oracle,
// and why each number is what it is (XV_EXPECT_RULE).
#include <math.h>

#include "xval_run.h"

/* ---- error bounds ----------------------------------------------------------
 */

/* Forward bound on the relative Frobenius error of O.
   f32: 1e-5, plus xv_f32_logit_term for large logits. The library accumulates
   in fp32: every output element is a convex combination of v rows computed with
   fp32 sums of at most ~2k terms, whose relative error grows like sqrt(n) *
   2^-24 ~ 3e-6 for n = 2048 in the worst case we run (measured: 1e-7..6e-7 on
   this grid); an indexing or masking bug gives errors of 1e-2 and up. f16/bf16:
   2 x err(naive same-precision attention) + 1e-3. The naive attention rounds P
   and O to the storage type, so its error (measured ~0.6 unit roundoff: f16
   ~3e-4, bf16 ~2.4e-3) is the unavoidable cost of that type; the library may be
   at most twice as bad. The floor covers cases where the naive result happens
   to be exact or nearly so (e.g. most rows see one key, so O = v bit for bit)
   while a library legitimately differs by its own final rounding of O: 1e-3 is
   ~2 f16 unit roundoffs (2^-11 ~ 4.9e-4) and below the rms error of one bf16
   rounding (~1.6e-3), so no real bug (errors of 1e-2 and up) fits under it. The
   max-abs metric has the same bound, plus half a unit roundoff for 16-bit
   outputs (xv_fwd_max_bound; measured worst before that term: 0.25 of the
   bound for f32, 0.45 for f16/bf16 over 25 seeds x 3 backends). */
double xv_fwd_bound(fa_dtype t, double naive_err, double max_lse) {
  if (t == FA_F32) return 1e-5 + xv_f32_logit_term(max_lse);
  return 2.0 * naive_err + 1e-3;
}

/* The forward max metric's bound: xv_fwd_bound plus, for 16-bit types,
   half a unit roundoff, for the reason xv_bwd_max_bound gives: O's worst
   element is set by its own rounding (up to u/2 of |o|) on top of P
   rounded to the type, and where the naive attention's largest elements
   happen to round well, 2x its max error sits below one rounding step.
   Seen on cpu.amxbf16.bf16 (fwd.paged, seed 0xeda2d3947ade case 19: max
   4.75e-3 against 4.38e-3 = 2 x 1.69e-3 + 1e-3, its norm error 2.29e-3
   at the naive's 2.33e-3). The norm metric keeps the tight bound, and an
   indexing or masking bug (1e-2 and up) still fails both. */
double xv_fwd_max_bound(fa_dtype t, double naive_max_err, double max_lse) {
  if (t == FA_F32) return xv_fwd_bound(t, naive_max_err, max_lse);
  return xv_fwd_bound(t, naive_max_err, max_lse) + 0.5 * ts_unit_roundoff(t);
}

/* What large logits add to the f32 bound. The weights that matter have
   scores near the row maximum m, and P = exp(s - m) carries the absolute
   rounding error of that difference, ~ u |m| with u = 2^-24 (s and m each
   round relative to their size), which the sums and the final division
   carry into O. |LSE| is within log(seqlen_k) of |m|, and it is what the
   oracle gives: 3 u max|LSE|. (xval fwd.fp8 case 10, e5m2 with qamp = 8,
   has max|LSE| ~ 250: measured worst over 200 seeds 2.1e-5, ~ 1.4 u |m|,
   against 1e-5 + 4.5e-5.) */
double xv_f32_logit_term(double max_lse) {
  return 3.0 * 0x1p-24 * (isfinite(max_lse) ? max_lse : 0.0);
}

/* LSE is fp32 for every dtype and depends only on the scores, which are
   exact products of storage values summed in fp32: 1e-5 (relative to
   max(|lse|, 1), see ts_lse_err; measured ~5e-8). For f16/bf16 the naive
   rule is added in case a backend computes scores from rounded
   intermediates. */
double xv_lse_bound(fa_dtype t, double naive_err) {
  if (t == FA_F32) return 1e-5;
  return 2.0 * naive_err + 1e-5;
}

/* Backward bound on the errors of dq, dk, dv, which are normalised by the
   gradient magnitudes of fa_oracle_backward_magnitude() (the sums with every
   term replaced by its absolute value, before D = rowsum(dO * O) cancels
   against dP), not by |ref|: ||got - ref|| / ||mag|| and
   max|got - ref| / max(mag). A floating-point sum is accurate to ~n u
   relative to the sum of its terms' magnitudes, whatever the cancellation;
   relative to |ref| it is not, and |ref| is exactly 0 when every row sees
   one key (dS = P (dP - D) = 0) while a correct kernel returns rounding
   noise that grows with the rows summed (measured 1.4e-5 absolute for dk
   over 300 rows on a GPU kernel).
   f32: 2e-5 (measured worst 0.065 of it over 10 seeds x 3 CPU backends;
   a wrong term is off by O(1)).
   f16/bf16: 2 x err(naive same-precision backward, which rounds P, dS, O
   and the gradients to the storage type; measured ~0.3 unit roundoff)
   + the forward's floor of 1e-3, for the same reason (measured worst 0.63
   of the bound, bf16 max metric, over 10 seeds x 3 backends). */
double xv_bwd_bound(fa_dtype t, double naive_err) {
  if (t == FA_F32) return 2e-5;
  return 2.0 * naive_err + 1e-3;
}

/* The max metric's bound: xv_bwd_bound plus, for 16-bit types, half a unit
   roundoff. The worst element of a 16-bit gradient is set by its output
   rounding (up to u/2 of |x|) on top of P and dS rounded to the type (each
   up to u/2 of the magnitude): where the naive backward's largest
   elements happen to round well, 2x its max error sits below one rounding
   step, and a correct kernel whose fp32 value lands past a rounding
   midpoint fails. Seen on cpu.amxbf16.bf16 (P and dS in bf16) in about 1
   bf16 case in 100 (bwd.masks, seed 0x68682bc299c6 case 16: dk 3.4e-3
   against 2.9e-3, the element one bf16 step from the naive's, its fp32
   error 0.9 of u/2 of its magnitude). The norm metric keeps the tight
   bound: a wrong term still fails both. */
double xv_bwd_max_bound(fa_dtype t, double naive_max_err) {
  if (t == FA_F32) return xv_bwd_bound(t, naive_max_err);
  return xv_bwd_bound(t, naive_max_err) + 0.5 * ts_unit_roundoff(t);
}

/* The naive same-precision result must itself agree with the oracle to a
   few unit roundoffs (it does, at ~0.6 u): if it does not, the two
   references disagree on semantics and the 2x rule would be vacuous. 16 u
   (f16 7.8e-3, bf16 6.3e-2) is far above any rounding effect and far below
   any semantic difference (1e-1 and up). */
int xv_naive_sane(fa_dtype t, double naive_err) {
  return t == FA_F32 || naive_err <= 16.0 * ts_unit_roundoff(t);
}

/* The dtype whose rules bound a case whose inputs are in and outputs out:
   f32 when both are, else the less precise one (a kernel may round P and
   dS, operands of its products, to a 16-bit input dtype, as tensor cores
   and vdpbf16ps do, and its results to a 16-bit output dtype). */
fa_dtype xv_bound_dtype(fa_dtype in, fa_dtype out) {
  // FP8 inputs are decoded exactly (and their products formed in fp32
  // from the decoded values): only the output rounds.
  if (in == FA_F32 || in == FA_E4M3 || in == FA_E5M2) return out;
  if (out == FA_F32) return in;
  return ts_unit_roundoff(in) >= ts_unit_roundoff(out) ? in : out;
}

/* dsinks against the float64 oracle: |got - ref| relative to the sum of
   its terms' magnitudes (fa_oracle_dsinks), which a correct fp32 sum meets
   to ~n u; the library's D = dO . O uses its own O, rounded to the output
   dtype, which costs up to a few of that dtype's unit roundoffs: f32 2e-5,
   16-bit 4 u + 1e-3 (a wrong sign or a missing row is off by O(1)). */
double xv_dsinks_bound(fa_dtype t) {
  return t == FA_F32 ? 2e-5 : 4.0 * ts_unit_roundoff(t) + 1e-3;
}
