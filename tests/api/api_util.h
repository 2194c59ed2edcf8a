// SPDX-License-Identifier: MIT
// Helpers for the public-API tests: failure counting (unit_check.h), small
// dense BSHD problems on the host, byte snapshots of output buffers, and
// matching of error messages ("names the field" = the field's identifier
// appears as a whole word; "and the value" = the number appears unglued
// from other digits).
#ifndef FA_TESTS_API_UTIL_H
#define FA_TESTS_API_UTIL_H

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "flashattn.h"
#include "ts_kernels.h"
#include "ts_problem.h"

UT_UNUSED static int au_is_ident(char c) {
  return isalnum((unsigned char)c) || c == '_';
}

// field occurs in msg, not glued to other identifier characters.
UT_UNUSED static int au_has_word(const char *msg, const char *field) {
  size_t n = strlen(field);
  for (const char *s = strstr(msg, field); s; s = strstr(s + 1, field)) {
    int before = s > msg && au_is_ident(s[-1]);
    int after = au_is_ident(s[n]);
    if (!before && !after) return 1;
  }
  return 0;
}

// value occurs in msg (case-insensitively), not glued to other digits.
UT_UNUSED static int au_has_value(const char *msg, const char *value) {
  size_t n = strlen(value), m = strlen(msg);
  for (size_t i = 0; i + n <= m; i++) {
    size_t j = 0;
    while (j < n && tolower((unsigned char)msg[i + j]) ==
                        tolower((unsigned char)value[j]))
      j++;
    if (j < n) continue;
    int before = i > 0 && isdigit((unsigned char)msg[i - 1]);
    int after = isdigit((unsigned char)msg[i + n]) || msg[i + n] == '.';
    if (!before && !after) return 1;
  }
  return 0;
}

UT_UNUSED static const char *au_status_name(fa_status s) {
  switch (s) {
  case FA_OK:
    return "FA_OK";
  case FA_ERR_INVALID_ARGUMENT:
    return "FA_ERR_INVALID_ARGUMENT";
  case FA_ERR_UNSUPPORTED:
    return "FA_ERR_UNSUPPORTED";
  case FA_ERR_NO_DEVICE:
    return "FA_ERR_NO_DEVICE";
  case FA_ERR_OUT_OF_MEMORY:
    return "FA_ERR_OUT_OF_MEMORY";
  case FA_ERR_BACKEND:
    return "FA_ERR_BACKEND";
  }
  return "(not a status)";
}

// Check a failing call: status, a message naming every word of `fields`
// (space-separated; NULL: any non-empty message) and showing value (NULL:
// not checked).
#define EXPECT_FAIL(what, got, want, field, value)                             \
  au_expect_fail(__FILE__, __LINE__, what, got, want, field, value)

UT_UNUSED static void au_expect_fail(const char *file, int line,
                                     const char *what, fa_status got,
                                     fa_status want, const char *field,
                                     const char *value) {
  const char *msg = fa_last_error();
  ut_checks++;
  if (got != want) {
    ut_report(file, line, what, "status %s, want %s (message: \"%s\")",
              au_status_name(got), au_status_name(want), msg ? msg : "(null)");
    return;
  }
  ut_checks++;
  if (!msg || !*msg) {
    ut_report(file, line, what, "fa_last_error() is empty after a failure");
    return;
  }
  const char *f = field ? field : "";
  while (*f) {
    char w[64];
    size_t n = 0;
    while (*f == ' ') f++;
    while (*f && *f != ' ' && n + 1 < sizeof w) w[n++] = *f++;
    w[n] = '\0';
    if (!n) break;
    ut_checks++;
    if (!au_has_word(msg, w))
      ut_report(file, line, what, "message \"%s\" does not name '%s'", msg, w);
  }
  ut_checks++;
  if (value && !au_has_value(msg, value))
    ut_report(file, line, what, "message \"%s\" does not show value '%s'", msg,
              value);
}

#define EXPECT_OK(what, got)                                                   \
  CHECK((got) == FA_OK, "%s: status %s, message \"%s\"", what,                 \
        au_status_name(got), fa_last_error())

// A context bound to backend or kernel `name`; where it cannot be made,
// the test is skipped (exit 77) with the reason.
UT_UNUSED static fa_context *au_context_or_skip(const char *name) {
  fa_context *c = NULL;
  if (fa_context_create_by_name(&c, name) != FA_OK) {
    fprintf(stderr, "%s not available (%s): skipping\n", name, fa_last_error());
    exit(77);
  }
  return c;
}

// ---- host buffers ----------------------------------------------------------

// A buffer with its snapshot, to prove a failing call wrote no byte.
typedef struct au_buf {
  void *p;
  size_t bytes;
  unsigned char *snap;
} au_buf;

UT_UNUSED static void au_alloc(au_buf *b, size_t bytes) {
  b->bytes = bytes;
  b->p = malloc(bytes);
  b->snap = malloc(bytes);
  if (!b->p || !b->snap) {
    fprintf(stderr, "out of host memory\n");
    exit(1);
  }
}

UT_UNUSED static void au_free(au_buf *b) {
  free(b->p);
  free(b->snap);
  b->p = NULL;
  b->snap = NULL;
}

// Fill with a byte pattern and remember it.
UT_UNUSED static void au_poison(au_buf *b, unsigned char pattern) {
  memset(b->p, pattern, b->bytes);
  memcpy(b->snap, b->p, b->bytes);
}

UT_UNUSED static void au_snapshot(au_buf *b) {
  memcpy(b->snap, b->p, b->bytes);
}

// Offset of the first changed byte, or -1.
UT_UNUSED static long au_changed(const au_buf *b) {
  const unsigned char *p = b->p;
  for (size_t i = 0; i < b->bytes; i++)
    if (p[i] != b->snap[i]) return (long)i;
  return -1;
}

UT_UNUSED static void au_fill_uniform(float *x, size_t n, double lo,
                                      double hi) {
  for (size_t i = 0; i < n; i++) x[i] = (float)ut_rand_uniform(lo, hi);
}

// A dense BSHD fp32 view of buffer p: [.., seq, heads, dim].
UT_UNUSED static fa_tensor au_bshd(void *p, int seq, int heads, int dim) {
  return ts_bshd(p, FA_F32, seq, heads, dim);
}

// The kernel ctx plans for a small dense forward of dtype (f32 or bf16;
// the data is never read), as fa_plan_describe names it, into name; "" with
// the reason printed when the plan fails.
UT_UNUSED static const char *au_kernel_taken(fa_context *ctx, fa_dtype dtype,
                                             char *name, size_t len) {
  static float data[4][2 * 16 * 2 * 64]; // b 2, s 16, h 2, d 64
  fa_attention a;
  fa_attention_init(&a);
  a.batch = 2;
  a.seqlen_q = a.seqlen_k = 16;
  a.heads_q = a.heads_kv = 2;
  a.head_dim = a.head_dim_v = 64;
  fa_tensor t[4];
  for (int i = 0; i < 4; i++) t[i] = ts_bshd(data[i], dtype, 16, 2, 64);
  fa_plan *plan = NULL;
  name[0] = '\0';
  if (fa_plan_create(ctx, &a, t[0], t[1], t[2], t[3], &plan) != FA_OK) {
    fprintf(stderr, "au_kernel_taken: %s\n", fa_last_error());
    return name;
  }
  char text[1024];
  fa_plan_describe(plan, text, sizeof text);
  fa_plan_destroy(plan);
  const char *k = strstr(text, "kernel=");
  if (k) (void)snprintf(name, len, "%.*s", (int)strcspn(k + 7, " "), k + 7);
  return name;
}

#endif
