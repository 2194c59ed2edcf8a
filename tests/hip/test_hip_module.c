// SPDX-License-Identifier: MIT
// The HIP module seen from the public API, on any machine: the core finds
// libflashattn-hip.so beside libflashattn and lists backend "hip".
// Without a ROCm runtime the core's placeholder "hip" says why the module
// did not load; with the runtime but no supported device the module's probe
// says why; every way of asking for it then fails with FA_ERR_NO_DEVICE and
// a reason, never a crash. With a device, dispatch names the kernel that
// runs a problem and why the others were skipped.
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
  // Backend "hip" and the placeholder of a module that did not load share
  // the name; the placeholder's reason names the module file.
  const char *line = strstr(text, "hip: unavailable: ");
  int loaded = !line || !strstr(line, "libflashattn-hip.so");
  int usable = 0;
  for (int i = 0; i < fa_backend_count(); i++)
    usable |= strcmp(fa_backend_name(i), "hip") == 0;
  fa_context *ctx = NULL;
  if (!loaded) {
    // The module did not load (no ROCm runtime here): the placeholder says
    // why, with the loader's message.
    printf("the HIP module did not load here; reported\n");
  } else if (!usable) {
    CHECK(line != NULL, "expected \"hip: unavailable: <reason>\"");
    CHECK(line && line[18] && line[18] != '\n', "no reason given");
    printf("the HIP module loaded; no usable device: reported\n");
  }
  if (!usable) {
    fa_status s = fa_context_create(&ctx, FA_BACKEND_HIP, 0);
    CHECK(s == FA_ERR_NO_DEVICE, "FA_BACKEND_HIP: got %s", fa_status_string(s));
    CHECK(strstr(fa_last_error(), "hip") != NULL,
          "the error does not name the HIP backend: %s", fa_last_error());
    printf("FA_BACKEND_HIP: %s: %s\n", fa_status_string(s), fa_last_error());
    s = fa_context_create_by_name(&ctx, "hip");
    CHECK(s == FA_ERR_NO_DEVICE, "by name: got %s", fa_status_string(s));
    // The CPU keeps working next to an unusable module.
    s = fa_context_create(&ctx, FA_BACKEND_AUTO, 0);
    if (s == FA_OK) fa_context_destroy(ctx);
  } else {
    CHECK(strstr(text, "hip hip.cdna.bf16.d128: taken") != NULL,
          "bf16 d128 does not take hip.cdna.bf16.d128");
    free(text);
    problem(&a, 80);
    text = explain(&a, FA_F16);
    printf("fa_explain (f16, d80):\n%s", text);
    CHECK(strstr(text, "hip hip.generic: taken") != NULL,
          "f16 d80 does not take hip.generic");
    fa_status s = fa_context_create(&ctx, FA_BACKEND_HIP, 0);
    CHECK(s == FA_OK, "FA_BACKEND_HIP: %s", fa_last_error());
    if (ctx) {
      CHECK(strcmp(fa_context_backend(ctx), "hip") == 0, "backend %s",
            fa_context_backend(ctx));
      fa_context_destroy(ctx);
    }
    s = fa_context_create(&ctx, FA_BACKEND_HIP, 4096);
    CHECK(s == FA_ERR_NO_DEVICE, "device 4096: got %s", fa_status_string(s));
  }
  free(text);
  if (ut_finish("hip.module")) return 1;
  printf("module checks passed\n");
  return 0;
}
