// SPDX-License-Identifier: MIT
// The HIP backend "hip" (AMD Instinct MI200 gfx90a, MI300 gfx942), as the
// loadable module libflashattn-hip.so.
//
// The core dlopens this module at first use and calls fa_module_backends()
// (FA_MODULE_ENTRY) with its services. The module links libamdhip64: where
// the ROCm runtime is not installed, dlopen fails and the core's placeholder
// entry "hip" reports the loader's message; where the runtime is present but
// no supported device is, the probe reports why (no device, or an
// architecture this build has no code for). fa_explain() and
// FA_LOG=dispatch print both; nothing crashes.
//
// The host side is the one the CUDA module shares (backends/gpu/
// gpu_backend.h over gpu_runtime.h's HIP names); this file adds the probe,
// the devices it takes (CDNA archs it has code for) and its kernels. Each
// kernel owns its admission and its plan (core/backend.h); plan() reserves
// the scratch the plan needs in the context's workspace, so that a call
// fills one fa_gpu_params (backends/gpu/gpu_host.h), enqueues on the
// context's stream and neither allocates, copies nor synchronises; it runs
// exactly the kernel dispatch chose. Every HIP call is checked: failures
// become FA_ERR_BACKEND (FA_ERR_OUT_OF_MEMORY for allocations) with
// hipGetErrorString's text, through core->fail.
//
// Kernels (dispatch takes the highest score among those that accept),
// each arch's glue beside its kernels:
//   hip.cdna.*    cdna/cdna_host.h (MFMA forward, score 20)
//   hip.generic  every problem with head dims <= 256, forward and backward
//       (backends/gpu/generic_kernels.h, wave64). Score 0.
// For triage and tests, bind a context to a kernel by name
// (fa_context_create_by_name(&ctx, "hip.generic")).
#include <limits.h>
#include <stdint.h>

#include "hip_internal.h"

#define FA_GPU_RUNTIME_HIP 1
#define FA_GPU_BACKEND_NAME "hip"
#define FA_GPU_LAUNCHER(x) fa_hip_launch_##x
#include "gpu_backend.h" // state, workspace, memory, generic kernels, merge

#ifndef FA_HIP_ARCHS
#define FA_HIP_ARCHS "gfx90a,gfx942"
#endif

#define BACKEND_NAME FA_GPU_BACKEND_NAME

/* ---- which architectures this build has code for ------------------------- */

/* "gfx90a:sramecc+:xnack-" -> "gfx90a"; 1 if FA_HIP_ARCHS lists it. */
static int arch_compiled(const char *gcn, char *base, size_t len) {
  size_t n = strcspn(gcn, ":");
  if (n >= len) n = len - 1;
  memcpy(base, gcn, n);
  base[n] = '\0';
  const char *list = FA_HIP_ARCHS;
  while (*list) {
    size_t m = strcspn(list, ",");
    if (m == n && strncmp(list, base, n) == 0) return 1;
    list += m;
    if (*list == ',') list++;
  }
  return 0;
}

/* ---- probe and contexts -------------------------------------------------- */

static int probe(char *why, size_t len) {
  int n = 0;
  hipError_t e = hipGetDeviceCount(&n);
  if (e != hipSuccess || n < 1) {
    char text[160] = "0 devices";
    if (e != hipSuccess) rt_text(e, text, sizeof text);
    (void)snprintf(why, len, "no usable AMD GPU: hipGetDeviceCount: %s", text);
    (void)hipGetLastError();
    return 0;
  }
  hipDeviceProp_t prop;
  e = hipGetDeviceProperties(&prop, 0);
  if (e != hipSuccess) {
    char text[160];
    rt_text(e, text, sizeof text);
    (void)snprintf(why, len, "hipGetDeviceProperties(0): %s", text);
    (void)hipGetLastError();
    return 0;
  }
  char base[64];
  if (!arch_compiled(prop.gcnArchName, base, sizeof base)) {
    (void)snprintf(why, len,
                   "device 0 (%s) is %s; this build of %s has code for %s "
                   "only (CDNA wave64 with MFMA; set FA_HIP_ARCHITECTURES)",
                   prop.name, base, BACKEND_NAME, FA_HIP_ARCHS);
    return 0;
  }
  probed_units = prop.multiProcessorCount > 0 ? prop.multiProcessorCount
                                              : 304; // an MI300X
  return 1;
}

static fa_status ctx_create(int device, void **state) {
  int n = 0;
  CK(hipGetDeviceCount(&n), "hipGetDeviceCount");
  if (device >= n)
    return core->fail(FA_ERR_NO_DEVICE,
                      "device=%d: this machine has %d AMD "
                      "GPU%s",
                      device, n, n == 1 ? "" : "s");
  hipDeviceProp_t prop;
  CK(hipGetDeviceProperties(&prop, device), "hipGetDeviceProperties");
  char base[64];
  if (!arch_compiled(prop.gcnArchName, base, sizeof base))
    return core->fail(FA_ERR_NO_DEVICE,
                      "device=%d is %s; %s has code for %s "
                      "only",
                      device, base, BACKEND_NAME, FA_HIP_ARCHS);
  return state_create(device, prop.multiProcessorCount, 0, state);
}

#define FA_DTYPE_bf16 FA_BF16
#define FA_DTYPE_f16 FA_F16

/* ---- plans --------------------------------------------------------------- */

/* The planner's inputs: the MFMA tile's 4 wavefronts x 32 queries as the
   largest B_r, 64 keys as B_c (the kernels keep K/V tiles of their own width
   in LDS, cdna_fwd.h, so B_c is only the split-KV granularity), and no
   memory budget (the tile, not a budget, bounds the blocks). */
static void hip_caps(const fa_kernel_query *q, int forward, fa_caps *caps) {
  caps->fast_mem_bytes = (size_t)1
                         << 34; // no budget (the planner counts in int)
  caps->num_workers = 2 * query_units(q);
  caps->tile_align = 32; // MFMA 32x32 granularity
  caps->max_block_q = FA_CDNA_BLOCK_Q;
  caps->max_block_k = 64;
  caps->max_splits = 128;
  caps->pack_gqa = forward;  // both forward kernels take (row, head) lanes
  caps->max_small_lanes = 0; // a tile spans one kv head
}

/* Both kernels' plans: the generic kernels' rule on the caps above. */
static fa_status plan_hip(const fa_kernel_query *q, fa_plan_data *d,
                          const char *name) {
  fa_caps caps;
  hip_caps(q, !is_backward(q), &caps);
  return plan_generic_kernel(q, &caps, d, name);
}

static fa_status plan_generic(const fa_kernel_query *q, fa_plan_data *d) {
  return plan_hip(q, d, "hip.generic");
}

static int supports_generic(const fa_kernel_query *q, char *why, size_t len) {
  return fa_gpu_generic_supports(q, why, len);
}

/* ---- the arches ---------------------------------------------------------- */

#include "cdna/cdna_host.h"

/* ---- the kernel table ---------------------------------------------------- */

static const fa_kernel kernels[] = {
    FA_CDNA_KERNELS,
    {.name = "hip.generic",
     .supports = supports_generic,
     .score = NULL,
     .plan = plan_generic,
     .forward = fwd_generic,
     .backward = bwd_generic},
};

FA_GPU_MODULE(FA_BACKEND_HIP, FA_MEMORY_HIP)
