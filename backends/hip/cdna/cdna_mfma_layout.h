// SPDX-License-Identifier: MIT
// Where the elements of an MFMA operand live in a CDNA wavefront (64 lanes):
// pure functions (lane, register item) -> (row, column), for the two shapes
// the CDNA kernels use. They compile as plain C (tests/hip checks them on the
// CPU, tests/hip/test_hip_mfma_layout.c) and as HIP device code.
//
// Source of the layouts: AMD's documentation of the matrix instructions --
// the CDNA2/CDNA3 ISA guides ("Matrix fused-multiply-add" chapter), the AMD
// Matrix Instruction Calculator (github.com/ROCm/amd_matrix_instruction_
// calculator, e.g. `--instruction v_mfma_f32_32x32x8f16 --detail-
// instruction`) and the AMD lab notes "AMD matrix cores" (gpuopen.com). For
// the single-block ("1 block") shapes below they state, with i the row and
// j the column of the 32x32 (16x16) matrix and k the reduction index:
//   v_mfma_f32_32x32x8{f16,bf16_1k}: A[i][k] in lane i + 32*(k/4), item k%4;
//     B[k][j] in lane j + 32*(k/4), item k%4; D[i][j] in lane
//     j + 32*((i/4)%2), register 4*(i/8) + i%4 (16 fp32 registers).
//   v_mfma_f32_16x16x16{f16,bf16_1k}: A[i][k] in lane i + 16*(k/4), item k%4;
//     B[k][j] in lane j + 16*(k/4), item k%4; D[i][j] in lane
//     j + 16*(i/4), register i%4 (4 fp32 registers).
// The functions below go the other way (what the kernel needs: "my lane,
// my register -> which element"); the test writes the documented direction
// independently and checks both agree element by element, and emulates the
// instruction on the CPU from these functions alone.
#ifndef FA_CDNA_MFMA_LAYOUT_H
#define FA_CDNA_MFMA_LAYOUT_H

#if defined(__HIP__) || defined(__CUDACC__)
#define FA_MFMA_HD                                                             \
  static __host__ __device__ inline __attribute__((always_inline))
#else
#define FA_MFMA_HD static inline
#endif

#define FA_MFMA_LANES 64

/* ---- 32x32x8: D(32x32) += A(32x8) B(8x32); 4 inputs, 16 outputs a lane ----
 */
#define FA_MFMA32_K 8    // reduction length of one instruction
#define FA_MFMA32_IN 4   // A (and B) items per lane
#define FA_MFMA32_OUT 16 // fp32 accumulator registers per lane

/* A operand, item v (0..3) of `lane`: row *i, reduction index *k. */
FA_MFMA_HD void fa_mfma32_a(int lane, int v, int *i, int *k) {
  *i = lane % 32;
  *k = 4 * (lane / 32) + v;
}

/* B operand, item v of `lane`: reduction index *k, column *j. */
FA_MFMA_HD void fa_mfma32_b(int lane, int v, int *k, int *j) {
  *k = 4 * (lane / 32) + v;
  *j = lane % 32;
}

/* Accumulator register r (0..15) of `lane`: row *i, column *j. */
FA_MFMA_HD void fa_mfma32_c(int lane, int r, int *i, int *j) {
  *i = 8 * (r / 4) + 4 * (lane / 32) + r % 4;
  *j = lane % 32;
}

/* ---- 16x16x16: D(16x16) += A(16x16) B(16x16); 4 inputs, 4 outputs -------- */
#define FA_MFMA16_K 16
#define FA_MFMA16_IN 4
#define FA_MFMA16_OUT 4

FA_MFMA_HD void fa_mfma16_a(int lane, int v, int *i, int *k) {
  *i = lane % 16;
  *k = 4 * (lane / 16) + v;
}

FA_MFMA_HD void fa_mfma16_b(int lane, int v, int *k, int *j) {
  *k = 4 * (lane / 16) + v;
  *j = lane % 16;
}

FA_MFMA_HD void fa_mfma16_c(int lane, int r, int *i, int *j) {
  *i = 4 * (lane / 16) + r;
  *j = lane % 16;
}

/* The property the CDNA forward kernel is built on (32x32x8): registers
   4t..4t+3 of an accumulator tile C, read as the B operand of the t-th
   8-deep step of a following product (C as its 32 x 32 reduction-by-column
   operand), are exactly its items 0..3 -- no data moves between lanes.
   Returns the accumulator register that holds item v of step t. */
FA_MFMA_HD int fa_mfma32_c_as_b(int t, int v) { return 4 * t + v; }

#endif
