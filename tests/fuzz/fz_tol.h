// SPDX-License-Identifier: MIT
// Per-element error bounds for checking the library against the float64
// oracle on arbitrary (fuzzed, extreme) inputs.
//
// The xval rule (relative Frobenius error <= 2 x a naive same-precision
// attention + a floor) is statistical: it holds over large random tensors.
// A fuzzer builds tiny tensors with cancelling values, logits of 1e4 and
// rows that see one key, where a norm ratio means nothing. These bounds are
// instead a forward error analysis of any correct fp32-accumulating
// implementation, element by element:
//
//   logits   |ds_ij| <= e_s,i = eps * ((d+4) |scale| sum_d |q_d k_d| +
//                               4 (softcap + |alibi term| + |s| + |sink|))
//   P        |dP_ij| / P_ij <= e_P,i = 2 e_s,i + (lse error) + eps (nk + 16)
//   O        |do_id| <= K (e_P,i + eps (nk + 8)) max_j |v_jd|
//                       + 2 u_t max_j |v_jd| (P rounded to the dtype once,
//                         as a same-precision attention may)
//                       + u_t |o_id| (the final rounding to the dtype)
//   LSE      |dl_i|  <= K (e_s,i + eps (nk + 8 + |l_i|))
//
// and, for the backward, the same propagated through dP = dO.v,
// D = dO.O (O as stored by the forward, so with its rounding), dS =
// P (dP - D) g and the three products (see fz_tol.c), using P_ij <= 1 and
// sum_j P_ij <= 1 where the exact P is not at hand. K = 8 is a safety
// factor; eps = 2^-24 (fp32 accumulation); u_t the unit roundoff of the
// storage dtype (0 for f32). An indexing, masking or scaling bug moves an
// element by O(max |v|), orders of magnitude above these bounds for any
// logits below ~1e5; bounds only become vacuous where fp32 itself is (logit
// magnitudes ~ 1/eps).
//
// Where the logit error bound reaches 1 (|logits| ~ 1/eps, e.g. f16 inputs
// near 65504 at d = 64), fp32 cannot resolve the softmax: the forward must
// still be finite (tolerance +inf), the backward is unconstrained
// (tolerance -1): it recomputes P = exp(s - lse) from such logits.
//
// Where a scaled product overflows fp32 itself (a scale near FLT_MAX),
// nothing is promised (tolerance -1) forward or backward.
//
// Rows with no visible key get tolerance 0: O must be exactly 0 and LSE
// exactly -inf (or the sink logit).
#ifndef FA_TESTS_FZ_TOL_H
#define FA_TESTS_FZ_TOL_H

#include <stddef.h>
#include <stdio.h>

#include "flashattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tolerances for the forward, in the oracle's dense layouts: otol like o
   ([b][sq][hq][dv]), ltol like lse ([b][hq][sq]). Host views and arrays;
   the problem must be valid. oref/lref: the oracle's outputs. NaN inputs
   give NaN tolerances (check NaN parity instead). Returns 0, -1 on OOM. */
int fz_fwd_tol(const fa_attention *a, fa_tensor q, fa_tensor k, fa_tensor v,
               const double *oref, const double *lref, double *otol,
               double *ltol);

/* Tolerances for the backward: dqtol like q ([b][sq][hq][d]), dktol and
   dvtol over logical keys ([b][sk][hkv][d or dv]). oref/lref/otol/ltol as
   from the forward (the library's o and lse carry those errors into the
   backward); dqref/dkref/dvref: the oracle's gradients (for the final
   rounding term). Returns 0, -1 on OOM. */
int fz_bwd_tol(const fa_attention *a, fa_tensor q, fa_tensor k, fa_tensor v,
               fa_tensor d_o, const double *oref, const double *lref,
               const double *otol, const double *ltol, const double *dqref,
               const double *dkref, const double *dvref, double *dqtol,
               double *dktol, double *dvtol);

/* Unit roundoff of the storage dtype's final rounding (0 for f32, whose
   results are fp32 accumulations already covered by eps terms; 2^-11 for
   f16, 2^-8 for bf16) and the absolute floor of its subnormal spacing. */
double fz_round_rel(fa_dtype t);
double fz_round_abs(fa_dtype t);

/* Compare got against ref within tol, element by element: NaN in ref needs
   NaN in got; an infinity needs the same infinity; a finite ref needs a
   finite got within tol (tol NaN or +inf: finiteness only; tol < 0:
   anything), except that a ref
   beyond the largest finite value of dtype t (within tol) may come back as
   that infinity. leak_ok accepts two known NaN defects of the CPU kernels
   (see tests/stress): bit 1, a NaN where ref is finite or infinite (a NaN
   or infinite input reaching rows that cannot see it through masked zeros,
   0 * NaN, 0 * inf); bit 2, -inf
   where ref is NaN (an LSE whose row max dropped a NaN score); bit 4, any
   non-NaN where ref is NaN (a row whose max dropped its NaN score comes out
   empty, O = 0; a NaN in V whose weight underflowed to exactly 0 is
   skipped by the row-streaming path). Prints up to 4 violations on
   log, prefixed by name; returns the number of violations. index_name (may be
   NULL) names a flat index for messages. */
size_t
fz_compare(const char *name, fa_dtype t, const double *ref, const double *got,
           const double *tol, size_t n, int leak_ok, FILE *log,
           void (*index_name)(size_t i, char *buf, size_t len, const void *ctx),
           const void *ctx);

/* The worst |got - ref| / tol of the last fz_compare call over the
   elements with finite values and a finite positive tol (0 when none):
   how close a passing comparison came to its bound. Not thread-safe. */
double fz_last_margin(void);

#ifdef __cplusplus
}
#endif

#endif
