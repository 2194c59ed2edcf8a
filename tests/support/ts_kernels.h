// SPDX-License-Identifier: MIT
// The kernels of a backend, as the public API shows them: fa_explain's
// lines "<backend> <kernel>: ...". For tests that run every kernel of a
// kind of problem bound by name, without reading the registry or guessing
// names.
#ifndef FA_TESTS_TS_KERNELS_H
#define FA_TESTS_TS_KERNELS_H

#include <stdio.h>
#include <string.h>

#include "flashattn.h"

#if defined(__GNUC__)
#define TS_KERNELS_UNUSED __attribute__((unused))
#else
#define TS_KERNELS_UNUSED
#endif

/* The kernels of backend `backend` that accept a small dense forward with
   inputs of dtype (every line of the backend's kernels not "skipped"),
   into names[0 .. max), in table order. @return how many. */
TS_KERNELS_UNUSED static int ts_kernels_accepting(const char *backend,
                                                  fa_dtype dtype,
                                                  char (*names)[64], int max) {
  fa_attention a;
  fa_attention_init(&a);
  a.batch = a.heads_q = a.heads_kv = 1;
  a.seqlen_q = a.seqlen_k = 16;
  a.head_dim = a.head_dim_v = 64;
  static char text[1 << 15];
  fa_explain(&a, dtype, text, sizeof text);
  const size_t nb = strlen(backend);
  int n = 0;
  for (const char *ln = text; ln && *ln && n < max;) {
    const char *eol = strchr(ln, '\n');
    const char *colon = strchr(ln, ':');
    if (!strncmp(ln, backend, nb) && ln[nb] == ' ' && colon &&
        (!eol || colon < eol) && strncmp(colon, ": skipped", 9) != 0)
      (void)snprintf(names[n++], 64, "%.*s", (int)(colon - ln - nb - 1),
                     ln + nb + 1);
    ln = eol ? eol + 1 : NULL;
  }
  return n;
}

#endif
