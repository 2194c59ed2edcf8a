// SPDX-License-Identifier: MIT
// The CUDA module seen from the public API, on any machine: the core finds
// libflashattn-cuda.so beside libflashattn and lists backend "cuda";
// without a driver or device, fa_explain says why it is unavailable and
// every way of asking for it fails with FA_ERR_NO_DEVICE and a reason (no
// crash); with a device, dispatch names the kernel that runs a problem and
// why the others were skipped. Links the shared libflashattn only (which
// never links the module).
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "flashattn.h"

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

int main(void) {
  fa_attention a;
  problem(&a, 128);
  char *text = explain(&a, FA_BF16);
  if (!text) return 1;
  printf("fa_explain (bf16, d128, causal):\n%s", text);
  const char *line = strstr(text, "cuda");
  CHECK(line != NULL, "fa_explain has no cuda line: is libflashattn-cuda.so "
                      "beside libflashattn?");
  // The placeholder of a module that did not load says "module ... not
  // loaded" (or refused to start); the loaded backend's reasons differ.
  CHECK(strstr(text, "libflashattn-cuda.so not loaded") == NULL &&
            strstr(text, "libflashattn-cuda.so refused") == NULL &&
            strstr(text, "libflashattn-cuda.so lacks") == NULL,
        "the CUDA module did not load");
  // The module is loaded at run time, never linked.
  void *h = dlopen("libflashattn-cuda.so", RTLD_NOW | RTLD_NOLOAD);
  if (!h) {
    // Not found under that bare name: the registry opened it by path.
    CHECK(line != NULL, "module not loaded");
  } else {
    dlclose(h);
  }

  int usable = 0;
  for (int i = 0; i < fa_backend_count(); i++)
    usable |= strcmp(fa_backend_name(i), "cuda") == 0;

  fa_context *ctx = NULL;
  if (!usable) {
    // No driver or device here: reported, never a crash.
    CHECK(line && strncmp(line, "cuda: unavailable: ", 19) == 0,
          "expected \"cuda: unavailable: <reason>\"");
    if (line) {
      const char *why = line + 19;
      CHECK(*why && *why != '\n', "the unavailable line gives no reason");
    }
    fa_status s = fa_context_create(&ctx, FA_BACKEND_CUDA, 0);
    CHECK(s == FA_ERR_NO_DEVICE, "FA_BACKEND_CUDA: got %s",
          fa_status_string(s));
    CHECK(strstr(fa_last_error(), "cuda") != NULL,
          "the error does not name cuda: %s", fa_last_error());
    printf("FA_BACKEND_CUDA: %s: %s\n", fa_status_string(s), fa_last_error());
    s = fa_context_create_by_name(&ctx, "cuda");
    CHECK(s == FA_ERR_NO_DEVICE, "by name: got %s", fa_status_string(s));
    s = fa_context_create_by_name(&ctx, "cuda.sm90.bf16.d128");
    CHECK(s == FA_ERR_NO_DEVICE, "kernel by name: got %s", fa_status_string(s));
    printf("no usable CUDA device here: checked that this is reported\n");
  } else {
    // sm_90 devices take the sm90 kernel, others the sm80 one.
    CHECK(strstr(text, "cuda cuda.sm90.bf16.d128: taken") != NULL ||
              strstr(text, "cuda cuda.sm80.bf16.d128: taken") != NULL,
          "bf16 d128 takes neither cuda.sm90.bf16.d128 nor "
          "cuda.sm80.bf16.d128");
    free(text);
    problem(&a, 80);
    text = explain(&a, FA_F16);
    printf("fa_explain (f16, d80):\n%s", text);
    CHECK(strstr(text, "cuda cuda.generic: taken") != NULL,
          "f16 d80 does not take cuda.generic");
    CHECK(strstr(text, "cuda.sm80.f16.d64: skipped: head_dim 80") != NULL,
          "no reason for skipping cuda.sm80.f16.d64");
    free(text);
    problem(&a, 300);
    text = explain(&a, FA_F32);
    CHECK(strstr(text, "cuda.generic: skipped: head_dim 300 > 256") != NULL,
          "d300 not refused with a reason");
    fa_status s = fa_context_create(&ctx, FA_BACKEND_CUDA, 0);
    CHECK(s == FA_OK, "FA_BACKEND_CUDA: %s", fa_last_error());
    if (ctx) {
      CHECK(strcmp(fa_context_backend(ctx), "cuda") == 0, "context backend %s",
            fa_context_backend(ctx));
      fa_context_destroy(ctx);
    }
    s = fa_context_create(&ctx, FA_BACKEND_CUDA, 4096);
    CHECK(s == FA_ERR_NO_DEVICE, "device 4096: got %s", fa_status_string(s));
    printf("device 4096: %s\n", fa_last_error());
  }
  free(text);
  if (ut_finish("cuda.module")) return 1;
  printf("module checks passed\n");
  return 0;
}
