// SPDX-License-Identifier: MIT
// What a GPU loader does to an input element beyond reading it: the FP8
// element tags (decode through backends/gpu/fp8.h, exactly, to fp32) and the
// tensors' descales (include/flashattn.h: each decoded element times its
// tensor's descale in fp32, before the attention). Device code only, after
// compat.h; the generic kernels use both for every input dtype, so a
// problem without descales multiplies by 1 (exact: nothing changes).
#ifndef FA_GPU_INPUT_DECODE_H
#define FA_GPU_INPUT_DECODE_H

#include "compat.h"
#include "fp8.h"
#include "gpu_params.h"

/* Input tags in the form of compat.h's (load only: outputs are not FP8). */
struct fa_gpu_e4m3 {
  typedef uint8_t storage;
  static FA_GPU_DEVICE float load(const uint8_t *p) {
    return fa_gpu_fp8_to_f32(*p, 0);
  }
};
struct fa_gpu_e5m2 {
  typedef uint8_t storage;
  static FA_GPU_DEVICE float load(const uint8_t *p) {
    return fa_gpu_fp8_to_f32(*p, 1);
  }
};

/* Run a statement with T bound to the input tag of fa_dtype `dtype` (0 f32,
   1 f16, 2 bf16, 3 e4m3, 4 e5m2). */
#define FA_GPU_INPUT_SWITCH(dtype, T, ...)                                     \
  switch (dtype) {                                                             \
  case 3: {                                                                    \
    typedef fa_gpu_e4m3 T;                                                     \
    __VA_ARGS__;                                                               \
  } break;                                                                     \
  case 4: {                                                                    \
    typedef fa_gpu_e5m2 T;                                                     \
    __VA_ARGS__;                                                               \
  } break;                                                                     \
  default:                                                                     \
    FA_GPU_DTYPE_SWITCH(dtype, T, __VA_ARGS__);                                \
  }

/* The descale of an input for sequence b, kv head hk: 1 without one; one
   value, or per (sequence, kv head) (the FlashAttention-3 layout, the same
   index for q, whose head h reads kv head h / group). */
FA_GPU_DEVICE float fa_gpu_descale(const fa_gpu_descale_ref &d,
                                   const fa_gpu_params &p, int b, int hk) {
  if (!d.data) return 1.0f;
  return d.per_head ? d.data[(int64_t)b * p.prob.heads_kv + hk] : d.data[0];
}

#endif
