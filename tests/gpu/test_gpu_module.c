// SPDX-License-Identifier: MIT
// A GPU module seen from the public API, on any machine. One source, built
// twice: test_cuda_module (cuda.module) and test_hip_module (hip.module,
// -DFA_TEST_HIP). The core finds the module beside libflashattn and lists
// its backend; the module is loaded at run time, never linked (the test
// links the shared libflashattn only). The CUDA module must load
// everywhere (it links the CUDA runtime statically); the HIP one needs the
// ROCm runtime, and where it does not load the core's placeholder says
// why. Without a usable device every way of asking for the backend fails
// with FA_ERR_NO_DEVICE and a reason (no crash) and the CPU keeps working;
// with a device, dispatch names the kernel that runs a problem and why the
// others were skipped.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "flashattn.h"

#ifdef FA_TEST_HIP
#define RT "hip"
#define BACKEND_KIND FA_BACKEND_HIP
#define MODULE "libflashattn-hip.so"
#define MUST_LOAD 0
#else
#define RT "cuda"
#define BACKEND_KIND FA_BACKEND_CUDA
#define MODULE "libflashattn-cuda.so"
#define MUST_LOAD 1
#endif

static char *explain(const fa_attention *a, fa_dtype t) {
  size_t n = fa_explain(a, t, NULL, 0);
  char *buf = malloc(n + 1);
  if (buf) fa_explain(a, t, buf, n + 1);
  return buf;
}

static void problem(fa_attention *a, int d) {
  fa_attention_init(a);
  a->batch = 2;
  a->seqlen_q = a->seqlen_k = 1024;
  a->heads_q = a->heads_kv = 8;
  a->head_dim = d;
  a->causal = FA_CAUSAL_BOTTOM_RIGHT;
}

/* No usable device (or no module): reported, never a crash. */
static void check_unusable(void) {
  fa_context *ctx = NULL;
  fa_status s = fa_context_create(&ctx, BACKEND_KIND, 0);
  CHECK(s == FA_ERR_NO_DEVICE, "backend " RT ": got %s", fa_status_string(s));
  CHECK(strstr(fa_last_error(), RT) != NULL,
        "the error does not name the " RT " backend: %s", fa_last_error());
  printf("backend " RT ": %s: %s\n", fa_status_string(s), fa_last_error());
  s = fa_context_create_by_name(&ctx, RT);
  CHECK(s == FA_ERR_NO_DEVICE, "by name: got %s", fa_status_string(s));
#ifndef FA_TEST_HIP
  s = fa_context_create_by_name(&ctx, "cuda.sm90.bf16.d128");
  CHECK(s == FA_ERR_NO_DEVICE, "kernel by name: got %s", fa_status_string(s));
#endif
  // The CPU keeps working next to an unusable module.
  s = fa_context_create(&ctx, FA_BACKEND_AUTO, 0);
  CHECK(s == FA_OK, "FA_BACKEND_AUTO beside the module: %s", fa_last_error());
  if (s == FA_OK) fa_context_destroy(ctx);
}

#ifndef FA_TEST_HIP
/* FP8 on a device: the sm80 FP8 kernels take what the sm90 one declines
   (other head dims; a softcap), cuda.generic only what neither takes. */
static void check_fp8_dispatch(fa_attention *a) {
  static const struct {
    int d;
    float cap;
    const char *taken, *or_taken;
  } want[] = {
      {64, 0.0f, "cuda cuda.sm80.e4m3.d64: taken", NULL},
      {128, 0.0f, "cuda cuda.sm90.e4m3.d128: taken",
       "cuda cuda.sm80.e4m3.d128: taken"},
      {128, 4.0f, "cuda cuda.sm80.e4m3.d128: taken", NULL},
      {80, 0.0f, "cuda cuda.generic: taken", NULL},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    problem(a, want[i].d);
    a->softcap = want[i].cap;
    char *text = explain(a, FA_E4M3);
    if (!text) return;
    CHECK(strstr(text, want[i].taken) != NULL ||
              (want[i].or_taken && strstr(text, want[i].or_taken) != NULL),
          "e4m3 d%d softcap %g: want \"%s\":\n%s", want[i].d,
          (double)want[i].cap, want[i].taken, text);
    free(text);
  }
  a->softcap = 0.0f;
}
#endif

/* With a device: the kernels dispatch takes and skips, with reasons.
   text: fa_explain of bf16 d128 (freed here). */
static void check_usable(fa_attention *a, char *text) {
#ifdef FA_TEST_HIP
  CHECK(strstr(text, "hip hip.cdna.bf16.d128: taken") != NULL,
        "bf16 d128 does not take hip.cdna.bf16.d128");
#else
  // sm_90 devices take the sm90 kernel, others the sm80 one.
  CHECK(strstr(text, "cuda cuda.sm90.bf16.d128: taken") != NULL ||
            strstr(text, "cuda cuda.sm80.bf16.d128: taken") != NULL,
        "bf16 d128 takes neither cuda.sm90.bf16.d128 nor "
        "cuda.sm80.bf16.d128");
  check_fp8_dispatch(a);
#endif
  free(text);
  problem(a, 80);
  text = explain(a, FA_F16);
  if (!text) return;
  printf("fa_explain (f16, d80):\n%s", text);
  CHECK(strstr(text, RT " " RT ".generic: taken") != NULL,
        "f16 d80 does not take " RT ".generic");
#ifndef FA_TEST_HIP
  CHECK(strstr(text, "cuda.sm80.f16.d64: skipped: head_dim 80") != NULL,
        "no reason for skipping cuda.sm80.f16.d64");
  free(text);
  problem(a, 300);
  text = explain(a, FA_F32);
  if (!text) return;
  CHECK(strstr(text, "cuda.generic: skipped: head_dim 300 > 256") != NULL,
        "d300 not refused with a reason");
#endif
  free(text);
  fa_context *ctx = NULL;
  fa_status s = fa_context_create(&ctx, BACKEND_KIND, 0);
  CHECK(s == FA_OK, "backend " RT ": %s", fa_last_error());
  if (ctx) {
    CHECK(strcmp(fa_context_backend(ctx), RT) == 0, "context backend %s",
          fa_context_backend(ctx));
    fa_context_destroy(ctx);
  }
  s = fa_context_create(&ctx, BACKEND_KIND, 4096);
  CHECK(s == FA_ERR_NO_DEVICE, "device 4096: got %s", fa_status_string(s));
  printf("device 4096: %s\n", fa_last_error());
}

int main(void) {
  fa_attention a;
  problem(&a, 128);
  char *text = explain(&a, FA_BF16);
  if (!text) return 1;
  printf("fa_explain (bf16, d128, causal):\n%s", text);
  CHECK(strstr(text, RT) != NULL,
        "fa_explain has no " RT " line: is " MODULE " beside libflashattn?");
  // Backend RT and the placeholder of a module that did not load share the
  // name; the placeholder's reason names the module file ("module ... not
  // loaded", "lacks", "refused to start"), the loaded backend's do not.
  const char *line = strstr(text, RT ": unavailable: ");
  const int loaded = !line || !strstr(line, MODULE);
  if (MUST_LOAD) CHECK(loaded, "the " RT " module did not load");
  int usable = 0;
  for (int i = 0; i < fa_backend_count(); i++)
    usable |= strcmp(fa_backend_name(i), RT) == 0;

  if (!loaded) {
    printf("the " RT " module did not load here; reported\n");
  } else if (!usable) {
    CHECK(line != NULL, "expected \"" RT ": unavailable: <reason>\"");
    if (line) {
      const char *why = line + strlen(RT ": unavailable: ");
      CHECK(*why && *why != '\n', "the unavailable line gives no reason");
    }
    printf("the " RT " module loaded; no usable device: reported\n");
  }
  if (!usable) {
    check_unusable();
    free(text);
  } else {
    check_usable(&a, text);
  }
  if (ut_finish(RT ".module")) return 1;
  printf("module checks passed\n");
  return 0;
}
