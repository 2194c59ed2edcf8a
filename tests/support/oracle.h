// SPDX-License-Identifier: MIT
// The float64 oracle every backend is validated against, and a "naive
// same-precision" attention for the FlashAttention error rule.
//
// The oracle is deliberately a different algorithm from the library's
// online softmax: for each query row it first computes every visible score
// and the row maximum (pass 1), then the exponentials, their sum and the
// weighted sum of V (pass 2), all in double. It reimplements the masking and
// addressing semantics of include/flashattn.h from the header's text; it does
// not include any core/ header except dtype.h (for the exact fp16/bf16 bit
// conversions), so a bug in core/problem.h cannot hide behind a shared helper.
//
// Positions (aligned or FA_POSITIONS_EXPLICIT, per-sequence arrays too)
// follow the header's formula shift = qpos(b) - kpos(b).
//
// All inputs are host memory. Dense outputs use these layouts:
//   o, dq:      [batch][seqlen_q][heads_q][head_dim(_v)]  (varlen: row i of
//               sequence b at [b][i]; rows past the sequence's length are 0)
//   lse:        [batch][heads_q][seqlen_q]  (natural log; -inf for a row with
//               no visible key, or the sink logit when sinks are given; rows
//               past a varlen sequence's length are -inf)
//   dk, dv:     [batch][seqlen_k][heads_kv][head_dim(_v)] over LOGICAL keys
//               (paged/varlen mapped to key positions 0..len-1; keys past a
//               sequence's real length are 0)
#ifndef FA_TESTS_ORACLE_H
#define FA_TESTS_ORACLE_H

#include <stdint.h>

#include "flashattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Forward in float64. Tensors are host memory, any dtype (FP8 decoded
   from the formats' definitions, descales applied as the header says),
   strided per fa_tensor/fa_attention semantics incl. varlen (cu_seqlens_q/k,
   batch stride 0), seqused_k, paged KV (block_table, page_size), GQA, causal
   both alignments, windows, softcap, ALiBi, sinks, scale 0 => 1/sqrt(head_dim),
   head_dim_v 0 => head_dim. o or lse may be NULL. Returns 0 on success,
   -1 on an argument it cannot interpret (message on stderr). */
int fa_oracle_forward(const fa_attention *a, fa_tensor q, fa_tensor k,
                      fa_tensor v, double *o, double *lse);

/* Backward in float64 for the loss L = sum(d_o * O): dq dense
   [batch][seqlen_q][heads_q][head_dim]; dk, dv dense over LOGICAL keys
   [batch][seqlen_k][heads_kv][head_dim or head_dim_v] (paged/varlen mapped
   to logical positions; GQA summed over the group; softcap chain rule;
   sinks are constants). Any output may be NULL. Returns 0 on success. */
int fa_oracle_backward(const fa_attention *a, fa_tensor q, fa_tensor k,
                       fa_tensor v, fa_tensor d_o, double *dq, double *dk,
                       double *dv);

/* The natural scale of each gradient element: the sums of the backward
   with every term replaced by its magnitude, taken before D = rowsum(dO*O)
   cancels against dP:
     dq_i = |scale| sum_j P_ij (|dP_ij| + |D_i|) |softcap'| |k_j|,
     dk_j = |scale| sum_i P_ij (|dP_ij| + |D_i|) |softcap'| |q_i|,
     dv_j = sum_i P_ij |dO_i|   (GQA groups summed, layouts as above).
   A correct floating-point evaluation of the gradient errs by about
   n * u relative to this, whatever the cancellation; it is never 0 where
   a gradient term exists (unlike the gradient itself, which is exactly 0
   when every row sees one key). Tests normalise gradient errors by it. */
int fa_oracle_backward_magnitude(const fa_attention *a, fa_tensor q,
                                 fa_tensor k, fa_tensor v, fa_tensor d_o,
                                 double *dq, double *dk, double *dv);

/* The sinks' gradient in float64 for the same loss: dsinks[h] = -sum over
   the rows of every sequence of exp(sink[h] - lse) * (dO . O) (the
   header's formula, with the oracle's O and LSE), and in mag[h] the same
   sum of |exp(sink - lse)| * sum_c |dO_c O_c|, the natural scale of its
   rounding error. a->sinks must be set; either output may be NULL. */
int fa_oracle_dsinks(const fa_attention *a, fa_tensor q, fa_tensor k,
                     fa_tensor v, fa_tensor d_o, double *dsinks, double *mag);

/* Naive same-precision attention: what a plain (non-tiled) attention in the
   inputs' storage dtype computes, the yardstick of FlashAttention's test
   rule "error(library) <= 2 x error(naive same precision) + floor".
   Forward, for dtype t:
     - S = scale * q.k accumulated in fp32 from the exact storage values,
       then softcap (tanhf) and ALiBi in fp32;
     - softmax in fp32 (row max, expf, sum; the sink joins the sum);
     - P is rounded to t before P.V (as a framework's fp16 matmul would);
     - P.V accumulated in fp32, the output rounded to t;
     - lse = m + logf(l) in fp32 (not rounded: the library's LSE is fp32).
   For t = FA_F32 the roundings are no-ops: a plain fp32 attention.
   Outputs are dense float arrays with the oracle's layouts (o and lse may be
   NULL). Returns 0 on success. */
int fa_naive_forward(const fa_attention *a, fa_tensor q, fa_tensor k,
                     fa_tensor v, float *o, float *lse);
/* The same rounding P and O to t, the output dtype, instead of the inputs'
   (FP8 inputs, or 16-bit inputs with another output dtype: the rule then
   applies to the decoded inputs in the output's precision).
   fa_naive_forward uses t = the input dtype (bf16 for FP8 inputs). */
int fa_naive_forward_out(const fa_attention *a, fa_tensor q, fa_tensor k,
                         fa_tensor v, fa_dtype t, float *o, float *lse);
/* The same with P, an operand of the P.V product, rounded to the input
   dtype (as a 16-bit matmul, tensor cores or vdpbf16ps would; FP8 inputs:
   to t) and O to t: the yardstick for 16-bit inputs with an f32 output. */
int fa_naive_forward_to(const fa_attention *a, fa_tensor q, fa_tensor k,
                        fa_tensor v, fa_dtype t, float *o, float *lse);
/* The same with P rounded to e4m3 (times 2^8, the scale the FP8 tensor-core
   kernels store P with: cuda.sm90.e4m3.*, cuda.sm90.e5m2.*) and O to t: the
   yardstick of a kernel whose P V product takes FP8 operands. */
int fa_naive_forward_p8(const fa_attention *a, fa_tensor q, fa_tensor k,
                        fa_tensor v, fa_dtype t, float *o, float *lse);
/* The same with P rounded to tp, the dtype of a kernel's P V operands
   (f16 for the kernels that decode FP8 inputs to f16 tiles:
   cuda.sm80.e4m3.*, cuda.sm80.e5m2.*), and O to t. */
int fa_naive_forward_pt(const fa_attention *a, fa_tensor q, fa_tensor k,
                        fa_tensor v, fa_dtype tp, fa_dtype t, float *o,
                        float *lse);

/* Naive same-precision backward, on top of the naive forward above (O is
   the naive forward's output, already rounded to t, which is d_o's dtype,
   the output dtype):
     - dV = P_t^T dO accumulated in fp32, rounded to t;
     - dP = dO.v in fp32; D = rowsum(dO * O_t) in fp32;
     - dS = P (dP - D) in fp32, times the softcap derivative, rounded to t;
     - dQ = scale * dS_t K and dK = scale * dS_t^T Q in fp32, rounded to t.
   Dense float outputs with the oracle's layouts (any may be NULL). */
int fa_naive_backward(const fa_attention *a, fa_tensor q, fa_tensor k,
                      fa_tensor v, fa_tensor d_o, float *dq, float *dk,
                      float *dv);

/* ---- the semantics, exposed so tests address tensors the same way ---- */

/* Real query length of sequence b (cu_seqlens_q or seqlen_q). */
int fa_oracle_len_q(const fa_attention *a, int b);
/* Real key length of sequence b (seqused_k, else cu_seqlens_k, else
   seqlen_k). */
int fa_oracle_len_k(const fa_attention *a, int b);
/* Rows of k/v storage that sequence b owns (cu_seqlens_k difference, else
   seqlen_k; for paged KV, max_blocks_per_seq * page_size). */
int fa_oracle_storage_k(const fa_attention *a, int b);
/* Element offset of row i / head h of a q-like tensor (q, o, do, dq). */
int64_t fa_oracle_q_index(const fa_attention *a, const fa_tensor *t, int b,
                          int i, int h);
/* Element offset of key j / kv head h of a k-like tensor, through the block
   table when paged. */
int64_t fa_oracle_k_index(const fa_attention *a, const fa_tensor *t, int b,
                          int j, int h);
/* 1 if query i of sequence b sees key j (j < len_k assumed in range). */
int fa_oracle_visible(const fa_attention *a, int b, int i, int j);
/* Number of keys query i of sequence b sees. */
int fa_oracle_visible_count(const fa_attention *a, int b, int i);

#ifdef __cplusplus
}
#endif

#endif
