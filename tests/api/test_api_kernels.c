// SPDX-License-Identifier: MIT
// Every kernel compiled in, bound by name (fa_context_create_by_name with
// the kernel name that fa_explain and fa_plan_describe print):
//   - a problem it declines fails with FA_ERR_UNSUPPORTED, and the message
//     gives that kernel's reason (head_dim 600 for every kernel; the
//     kernel-specific declines below), writing nothing;
//   - a problem it accepts runs on it: fa_plan_describe names it, and the
//     kernel the core actually called (fa_last_kernel_run, internal) is it,
//     for fa_forward, fa_plan_forward and, where the kernel has one, the
//     backward entries (fa_backward, fa_plan_backward); a forward-only
//     kernel declines the backward saying so.
// The kernels are enumerated from the registry (internal: this test links
// the static library), never guessed from file names.
//   test_api_kernels cpu   the kernels of the host memory space
//   test_api_kernels gpu   the GPU kernels: exit 77 (SKIP) where no GPU
//                          backend is usable (no module, no device)
#include "api_util.h"
#include "registry.h"

static size_t dtype_bytes(fa_dtype t) { return t == FA_F32 ? 4 : 2; }

/* The query length of the problems (32, or 1 for kernels that only
   decode). */
static int g_sq = 32;

/* A small dense problem: b1, g_sq queries, 32 keys, h2, head_dim d,
   causal. */
static fa_attention problem(int d) {
  fa_attention a = ts_problem(1, g_sq, 32, 2, 2, d);
  a.causal = FA_CAUSAL_BOTTOM_RIGHT;
  return a;
}

/* Buffers of one problem in the context's memory space. */
typedef struct bufs {
  fa_context *ctx;
  void *t[8]; // q k v o do dq dk dv
  float *lse, *descale;
  size_t bytes;
} bufs;

static fa_tensor view(void *p, fa_dtype dt, int d) {
  fa_tensor t = au_bshd(p, 32, 2, d);
  t.dtype = dt;
  return t;
}

static int bufs_make(bufs *b, fa_context *ctx, fa_dtype dt, int d) {
  memset(b, 0, sizeof *b);
  b->ctx = ctx;
  b->bytes = (size_t)32 * 2 * d * dtype_bytes(dt);
  unsigned char *host = calloc(1, b->bytes);
  float one = 1.0f;
  int bad = !host;
  for (int i = 0; i < 8 && !bad; i++)
    bad = fa_malloc(ctx, b->bytes, &b->t[i]) ||
          fa_copy_to_device(ctx, b->t[i], host, b->bytes);
  static const float zeros[64];
  bad = bad || fa_malloc(ctx, sizeof zeros, (void **)&b->lse) ||
        fa_copy_to_device(ctx, b->lse, zeros, sizeof zeros) ||
        fa_malloc(ctx, sizeof(float), (void **)&b->descale) ||
        fa_copy_to_device(ctx, b->descale, &one, sizeof one);
  free(host);
  return bad ? -1 : 0;
}

static void bufs_free(bufs *b) {
  for (int i = 0; i < 8; i++) fa_free(b->ctx, b->t[i]);
  fa_free(b->ctx, b->lse);
  fa_free(b->ctx, b->descale);
}

/* Fill o and the gradients with a byte pattern; 1 if they still hold it. */
static void poison_outputs(bufs *b) {
  unsigned char *p = malloc(b->bytes);
  memset(p, 0xA5, b->bytes);
  for (int i = 3; i < 8; i++)
    if (i != 4) fa_copy_to_device(b->ctx, b->t[i], p, b->bytes);
  free(p);
}

static int outputs_poisoned(bufs *b) {
  unsigned char *p = malloc(b->bytes);
  int ok = 1;
  for (int i = 3; i < 8 && ok; i++) {
    if (i == 4) continue;
    fa_copy_to_host(b->ctx, p, b->t[i], b->bytes);
    for (size_t j = 0; j < b->bytes && ok; j++) ok = p[j] == 0xA5;
  }
  free(p);
  return ok;
}

static fa_status forward(bufs *b, const fa_attention *a, fa_dtype dt,
                         int descaled) {
  int d = a->head_dim;
  fa_tensor q = view(b->t[0], dt, d);
  if (descaled) q.descale = b->descale;
  return fa_forward(b->ctx, a, q, view(b->t[1], dt, d), view(b->t[2], dt, d),
                    view(b->t[3], dt, d), b->lse);
}

static fa_status backward(bufs *b, const fa_attention *a, fa_dtype dt) {
  int d = a->head_dim;
  return fa_backward(b->ctx, a, view(b->t[0], dt, d), view(b->t[1], dt, d),
                     view(b->t[2], dt, d), view(b->t[3], dt, d),
                     view(b->t[4], dt, d), b->lse, view(b->t[5], dt, d),
                     view(b->t[6], dt, d), view(b->t[7], dt, d));
}

/* The reason the dispatch message gives for kernel `name`: the text after
   "<name>: " up to the next "; " (the core's "backend kernel: why; ..."
   list). Empty when the message does not mention the kernel so. */
static void reason_of(const char *msg, const char *name, char *out,
                      size_t len) {
  out[0] = '\0';
  size_t n = strlen(name);
  for (const char *s = strstr(msg, name); s; s = strstr(s + 1, name)) {
    if (s[n] != ':' || (s > msg && s[-1] != ' ')) continue;
    const char *r = s + n + 1;
    while (*r == ' ') r++;
    const char *end = strstr(r, "; ");
    size_t m = end ? (size_t)(end - r) : strlen(r);
    if (m >= len) m = len - 1;
    memcpy(out, r, m);
    out[m] = '\0';
    return;
  }
}

/* A declined problem: FA_ERR_UNSUPPORTED from fa_plan_create and
   fa_forward (or fa_backward), the kernel's reason naming every word of
   `words` (and value, if set), outputs untouched. */
static void expect_declined(const char *kname, bufs *b, const fa_attention *a,
                            fa_dtype dt, int descaled, int bwd,
                            const char *words, const char *value) {
  char what[256], why[512];
  snprintf(what, sizeof what, "%s declines %s (%s%s, head_dim %d)", kname,
           bwd ? "the backward" : "the forward",
           dt == FA_F32   ? "f32"
           : dt == FA_F16 ? "f16"
                          : "bf16",
           descaled ? ", descaled" : "", a->head_dim);
  poison_outputs(b);
  fa_status s = bwd ? backward(b, a, dt) : forward(b, a, dt, descaled);
  EXPECT_FAIL(what, s, FA_ERR_UNSUPPORTED, NULL, NULL);
  reason_of(fa_last_error(), kname, why, sizeof why);
  CHECK(why[0], "%s: the message \"%s\" gives no reason for %s", what,
        fa_last_error(), kname);
  for (const char *w = words; *w;) {
    char word[64];
    size_t n = 0;
    while (*w == ' ') w++;
    while (*w && *w != ' ' && n + 1 < sizeof word) word[n++] = *w++;
    word[n] = '\0';
    if (n)
      CHECK(au_has_word(why, word), "%s: reason \"%s\" does not name '%s'",
            what, why, word);
  }
  if (value)
    CHECK(au_has_value(why, value), "%s: reason \"%s\" does not show %s", what,
          why, value);
  CHECK(fa_last_kernel_run() == NULL, "%s: a kernel ran", what);
  CHECK(outputs_poisoned(b), "%s: outputs were written", what);
  if (!bwd) { // the plan declines it the same way
    fa_plan *p = NULL;
    fa_tensor q = view(b->t[0], dt, a->head_dim);
    if (descaled) q.descale = b->descale;
    s = fa_plan_create(b->ctx, a, q, view(b->t[1], dt, a->head_dim),
                       view(b->t[2], dt, a->head_dim),
                       view(b->t[3], dt, a->head_dim), &p);
    EXPECT_FAIL(what, s, FA_ERR_UNSUPPORTED, NULL, NULL);
    CHECK(p == NULL, "%s: a failing fa_plan_create set the plan", what);
    fa_plan_destroy(p);
  }
}

/* The plan names kernel k, and running it (and the one-shot call) calls k. */
static void expect_runs_on(const fa_kernel *k, bufs *b, const fa_attention *a,
                           fa_dtype dt, int bwd) {
  const int d = a->head_dim;
  fa_tensor t[8];
  for (int i = 0; i < 8; i++) t[i] = view(b->t[i], dt, d);
  char what[160], desc[1024], token[160];
  snprintf(what, sizeof what, "%s runs the %s (%s, head_dim %d)", k->name,
           bwd ? "backward" : "forward",
           dt == FA_F32   ? "f32"
           : dt == FA_F16 ? "f16"
                          : "bf16",
           d);
  fa_plan *p = NULL;
  fa_status s = bwd ? fa_plan_create_backward(b->ctx, a, t[0], t[1], t[2], t[3],
                                              t[4], t[5], t[6], t[7], &p)
                    : fa_plan_create(b->ctx, a, t[0], t[1], t[2], t[3], &p);
  EXPECT_OK(what, s);
  if (s) return;
  fa_plan_describe(p, desc, sizeof desc);
  snprintf(token, sizeof token, "kernel=%s ", k->name);
  CHECK(strstr(desc, token) != NULL, "%s: fa_plan_describe says \"%s\"", what,
        desc);
  s = bwd ? fa_plan_backward(p, t[0], t[1], t[2], t[3], t[4], b->lse, t[5],
                             t[6], t[7])
          : fa_plan_forward(p, t[0], t[1], t[2], t[3], b->lse);
  if (!s) s = fa_synchronize(b->ctx);
  EXPECT_OK(what, s);
  const fa_kernel *ran = fa_last_kernel_run();
  CHECK(ran == k, "%s: the plan ran %s", what, ran ? ran->name : "nothing");
  fa_plan_destroy(p);
  s = bwd ? backward(b, a, dt) : forward(b, a, dt, 0);
  if (!s) s = fa_synchronize(b->ctx);
  EXPECT_OK(what, s);
  ran = fa_last_kernel_run();
  CHECK(ran == k, "%s: %s ran %s", what, bwd ? "fa_backward" : "fa_forward",
        ran ? ran->name : "nothing");
}

/* Declines particular to one kernel: (kernel, dtype, descaled, words,
   value, head_dim: 0 = the one it accepts). Where the CPU lacks the
   kernel's feature it declines for that first: the kernel then accepts no
   probe and these are not run. */
static const struct {
  const char *kernel;
  fa_dtype dt;
  int descaled;
  const char *words, *value;
  int head_dim;
} specific[] = {
    {"cpu.avx512bf16.bf16", FA_F32, 0, "dtype bf16", "f32"},
    {"cpu.avx512bf16.bf16", FA_F16, 0, "dtype bf16", "f16"},
    {"cpu.avx512bf16.bf16", FA_BF16, 1, "descaled", NULL},
    {"cpu.amxbf16.bf16", FA_F32, 0, "dtype bf16", "f32"},
    {"cpu.amxbf16.bf16", FA_BF16, 1, "descaled", NULL},
    {"cpu.amxbf16.bf16", FA_BF16, 0, "head_dim", "48", 48},
};

static int test_kernel(const fa_backend *be, const fa_kernel *k) {
  fa_context *ctx = NULL;
  fa_status s = fa_context_create_by_name(&ctx, k->name);
  EXPECT_OK(k->name, s);
  if (s) return 0;
  CHECK(strcmp(fa_context_backend(ctx), be->name) == 0,
        "a context bound to %s reports backend %s", k->name,
        fa_context_backend(ctx));
  // The problem it accepts: the first of these query lengths, dtypes and
  // head dims.
  static const fa_dtype dts[3] = {FA_F32, FA_BF16, FA_F16};
  static const int dims[4] = {64, 128, 32, 256}, sqs[2] = {32, 1};
  int found = 0, d = 0;
  fa_dtype dt = FA_F32;
  char last_why[512] = "";
  for (int l = 0; l < 2 && !found; l++)
    for (int i = 0; i < 3 && !found; i++)
      for (int j = 0; j < 4 && !found; j++) {
        g_sq = sqs[l];
        fa_attention a = problem(dims[j]);
        bufs b;
        if (bufs_make(&b, ctx, dts[i], dims[j])) {
          CHECK(0, "%s: out of memory", k->name);
          continue;
        }
        fa_tensor t = view(b.t[0], dts[i], dims[j]);
        fa_plan *p = NULL;
        s = fa_plan_create(ctx, &a, t, view(b.t[1], dts[i], dims[j]),
                           view(b.t[2], dts[i], dims[j]),
                           view(b.t[3], dts[i], dims[j]), &p);
        if (s == FA_OK) {
          found = 1; // (g_sq stays the accepted length)
          dt = dts[i];
          d = dims[j];
        } else {
          snprintf(last_why, sizeof last_why, "%s", fa_last_error());
        }
        fa_plan_destroy(p);
        bufs_free(&b);
      }
  if (!found) {
    // Only a kernel this machine cannot run may accept nothing.
    char why[512];
    reason_of(last_why, k->name, why, sizeof why);
    printf("  %s: accepts none of the probe problems here: %s\n", k->name, why);
    g_sq = 32;
    // (A GPU kernel may want shapes the probes lack: said, not failed.)
    CHECK(strstr(why, "lacks") != NULL || be->memory_space != FA_MEMORY_HOST,
          "%s accepts no probe problem, and not for want of a CPU feature: "
          "%s",
          k->name, last_why);
    fa_context_destroy(ctx);
    return 0;
  }
  printf("  %s (backend %s): runs %s head_dim %d\n", k->name, be->name,
         dt == FA_F32   ? "f32"
         : dt == FA_F16 ? "f16"
                        : "bf16",
         d);
  bufs b;
  if (bufs_make(&b, ctx, dt, 600)) { // big enough for head_dim 600 too
    CHECK(0, "%s: out of memory", k->name);
    fa_context_destroy(ctx);
    return 0;
  }
  fa_attention a = problem(d);
  expect_runs_on(k, &b, &a, dt, 0);
  if (k->backward) {
    expect_runs_on(k, &b, &a, dt, 1);
  } else {
    expect_declined(k->name, &b, &a, dt, 0, 1, "backward", NULL);
  }
  fa_attention big = problem(600);
  expect_declined(k->name, &b, &big, dt, 0, 0, "head_dim", "600");
  for (size_t i = 0; i < sizeof specific / sizeof specific[0]; i++) {
    if (strcmp(specific[i].kernel, k->name)) continue;
    fa_attention x = specific[i].head_dim ? problem(specific[i].head_dim) : a;
    expect_declined(k->name, &b, &x, specific[i].dt, specific[i].descaled, 0,
                    specific[i].words, specific[i].value);
  }
  bufs_free(&b);
  fa_context_destroy(ctx);
  g_sq = 32;
  return 1;
}

/* An AUTO context (not bound): for each dtype the kernel the plan names is
   the kernel that runs, forward and backward. */
static void auto_context_agrees(void) {
  fa_context *ctx = NULL;
  EXPECT_OK("AUTO context", fa_context_create(&ctx, FA_BACKEND_CPU, 0));
  if (!ctx) return;
  static const fa_dtype dts[3] = {FA_F32, FA_BF16, FA_F16};
  for (int i = 0; i < 3; i++)
    for (int bwd = 0; bwd < 2; bwd++) {
      bufs b;
      if (bufs_make(&b, ctx, dts[i], 64)) break;
      fa_attention a = problem(64);
      fa_tensor t[8];
      for (int j = 0; j < 8; j++) t[j] = view(b.t[j], dts[i], 64);
      fa_plan *p = NULL;
      fa_status s =
          bwd ? fa_plan_create_backward(ctx, &a, t[0], t[1], t[2], t[3], t[4],
                                        t[5], t[6], t[7], &p)
              : fa_plan_create(ctx, &a, t[0], t[1], t[2], t[3], &p);
      EXPECT_OK("AUTO plan", s);
      if (!s) {
        char desc[1024];
        fa_plan_describe(p, desc, sizeof desc);
        s = bwd ? fa_plan_backward(p, t[0], t[1], t[2], t[3], t[4], b.lse, t[5],
                                   t[6], t[7])
                : fa_plan_forward(p, t[0], t[1], t[2], t[3], b.lse);
        EXPECT_OK("AUTO plan run", s);
        const fa_kernel *ran = fa_last_kernel_run();
        char token[160];
        snprintf(token, sizeof token, "kernel=%s ", ran ? ran->name : "?");
        CHECK(ran && strstr(desc, token), "AUTO: the plan says \"%s\", %s ran",
              desc, ran ? ran->name : "nothing");
        printf("  AUTO %s %s: %s\n",
               i == 0   ? "f32"
               : i == 1 ? "bf16"
                        : "f16",
               bwd ? "backward" : "forward", ran ? ran->name : "nothing");
      }
      fa_plan_destroy(p);
      bufs_free(&b);
    }
  fa_context_destroy(ctx);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "cpu";
  const int gpu = strcmp(mode, "gpu") == 0;
  if (!gpu && strcmp(mode, "cpu")) {
    fprintf(stderr, "usage: %s cpu|gpu\n", argv[0]);
    return 2;
  }
  int kernels = 0, tested = 0;
  for (int i = 0; i < fa_registry_size(); i++) {
    const fa_registry_entry *e = fa_registry_at(i);
    const fa_backend *be = e->backend;
    const int host =
        be->memory_space == FA_MEMORY_HOST && be->kind == FA_BACKEND_CPU;
    if (host == gpu) continue;
    if (!e->usable) {
      printf("backend %s: not usable here (%s): its %d kernels are not "
             "tested\n",
             be->name, e->why, be->num_kernels);
      continue;
    }
    printf("backend %s: %d kernels\n", be->name, be->num_kernels);
    for (int k = 0; k < be->num_kernels; k++) {
      kernels++;
      tested += test_kernel(be, &be->kernels[k]);
    }
  }
  if (!gpu) auto_context_agrees();
  // Binding by name a kernel that is not compiled in is FA_ERR_NO_DEVICE.
  fa_context *c = NULL;
  EXPECT_FAIL("a kernel name that is not compiled in",
              fa_context_create_by_name(&c, "cpu.no-such-kernel"),
              FA_ERR_NO_DEVICE, NULL, NULL);
  if (gpu && kernels == 0) {
    printf("SKIP: no usable GPU backend (no module or no device)\n");
    return ut_failures ? 1 : 77;
  }
  CHECK(kernels > 0, "no %s kernel is compiled in and usable",
        gpu ? "GPU" : "CPU");
  printf("%d kernels, %d run\n", kernels, tested);
  return ut_finish(gpu ? "test_api_kernels gpu" : "test_api_kernels cpu");
}
