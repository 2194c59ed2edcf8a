// SPDX-License-Identifier: MIT
// What the GPU kernels' shared admission (backends/gpu/gpu_host.h) accepts
// of the FP8 and descale problems, on any machine: the generic kernels'
// supports() takes FP8 inputs (e4m3, e5m2), descales (scalar, per head) and
// every output dtype in the forward, and declines the backward of those
// with a reason naming what; the tensor-core kernels' shared checks decline
// them all with a reason; the parameters the kernels get carry the output
// dtype and the descales. The GPU run of the same problems is xval's
// fwd.fp8 and fwd.fp8-decode groups bound to cuda.generic / hip.generic.
// No GPU needed; labels cuda, hip, unit.
#include <stdio.h>
#include <string.h>

#include "gpu_host.h"
#include "problem.h"

static int failures, checks;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    checks++;                                                                  \
    if (!(cond)) {                                                             \
      failures++;                                                              \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                              \
      printf(__VA_ARGS__);                                                     \
      printf("\n");                                                            \
    }                                                                          \
  } while (0)

static const float one = 1.0f, per_head[4] = {1.0f, 2.0f, 0.5f, 4.0f};

/* b2 hq4 hkv2 sq16 sk32 d64, contiguous BSHD tensors of input dtype `in`
   and output dtype `out`; descale 0 none, 1 scalar (q, k, v), 2 per head. */
typedef struct setup {
  fa_problem p;
  fa_layout l;
  fa_kernel_query kq;
} setup;

static fa_tensor tensor(fa_dtype t, int s, int h, int descale) {
  static char dummy[16];
  fa_tensor x = {dummy, t, (int64_t)s * h * 64, (int64_t)h * 64, 64, NULL, 0};
  if (descale) {
    x.descale = descale == 2 ? per_head : &one;
    x.descale_per_head = descale == 2;
  }
  return x;
}

static int make(setup *u, fa_dtype in, fa_dtype out, int descale, int bwd) {
  fa_attention a;
  fa_attention_init(&a);
  a.batch = 2;
  a.seqlen_q = 16;
  a.seqlen_k = 32;
  a.heads_q = 4;
  a.heads_kv = 2;
  a.head_dim = 64;
  memset(u, 0, sizeof *u);
  if (fa_problem_init(&u->p, &a, in)) return 0;
  u->l.op = bwd ? FA_OP_BACKWARD : FA_OP_FORWARD;
  u->l.q = tensor(in, 16, 4, descale);
  u->l.k = tensor(in, 32, 2, descale);
  u->l.v = tensor(in, 32, 2, descale);
  u->l.o = tensor(out, 16, 4, 0);
  if (bwd) {
    u->l.d_o = u->l.dq = tensor(out, 16, 4, 0);
    u->l.dk = u->l.dv = tensor(out, 32, 2, 0);
  }
  u->l.align = 16;
  u->p.dtype_out = out;
  u->p.descaled = descale != 0;
  u->kq.problem = &u->p;
  u->kq.layout = &u->l;
  return 1;
}

static const char *name(fa_dtype t) { return fa_gpu_dtype_name(t); }

/* supports() of the generic kernels, and the tensor-core kernels' shared
   checks, on one problem; `words`: what a decline must say (NULL: the
   generic kernels accept it). */
static void expect(fa_dtype in, fa_dtype out, int descale, int bwd,
                   const char *generic_words) {
  setup u;
  char what[128], why[512] = "";
  snprintf(what, sizeof what, "%s %s -> %s, descale %d", bwd ? "bwd" : "fwd",
           name(in), name(out), descale);
  CHECK(make(&u, in, out, descale, bwd), "%s: fa_problem_init failed", what);
  int ok = fa_gpu_generic_supports(&u.kq, why, sizeof why);
  if (!generic_words) {
    CHECK(ok, "%s: the generic kernels decline it: %s", what, why);
  } else {
    CHECK(!ok, "%s: the generic kernels accept it", what);
    CHECK(strstr(why, generic_words) != NULL,
          "%s: reason \"%s\" does not say \"%s\"", what, why, generic_words);
  }
  // The tensor-core kernels: plain inputs and outputs only.
  int plain = out == in && !descale;
  why[0] = '\0';
  ok = fa_gpu_features_ok(&u.kq, why, sizeof why);
  CHECK(ok == plain, "%s: the tensor-core checks %s it (%s)", what,
        ok ? "accept" : "decline", why);
  if (!ok)
    CHECK(strstr(why, out != in ? "output dtype" : "descales") != NULL,
          "%s: tensor-core reason \"%s\"", what, why);
}

int main(void) {
  static const fa_dtype fp8[2] = {FA_E4M3, FA_E5M2};
  static const fa_dtype outs[3] = {FA_F32, FA_F16, FA_BF16};
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int d = 0; d < 3; d++) {
        expect(fp8[i], outs[j], d, 0, NULL);
        expect(fp8[i], outs[j], d, 1, "FP8 inputs");
      }
  // 16/32-bit inputs: the forward takes descales and a wider output too;
  // the backward writes the gradients in the input dtype, undescaled.
  expect(FA_BF16, FA_F32, 0, 0, NULL);
  expect(FA_F16, FA_BF16, 2, 0, NULL);
  expect(FA_F32, FA_F32, 1, 0, NULL);
  expect(FA_BF16, FA_F32, 0, 1, "output dtype f32");
  expect(FA_BF16, FA_BF16, 1, 1, "descales");
  expect(FA_BF16, FA_BF16, 0, 1, NULL);

  // fa_explain's query (no layout): an FP8 problem is judged with its
  // default bf16 output.
  setup u;
  char why[512] = "";
  CHECK(make(&u, FA_E4M3, FA_BF16, 0, 0), "fa_problem_init");
  u.p.dtype_out = u.p.dtype == FA_E4M3 ? FA_BF16 : u.p.dtype;
  u.kq.layout = NULL;
  CHECK(fa_gpu_generic_supports(&u.kq, why, sizeof why),
        "fa_explain's FP8 query declined: %s", why);

  // The kernels' parameters carry the output dtype and the descales.
  CHECK(make(&u, FA_E5M2, FA_F16, 2, 0), "fa_problem_init");
  fa_fwd_args args;
  memset(&args, 0, sizeof args);
  args.q = u.l.q;
  args.k = u.l.k;
  args.v = u.l.v;
  args.o = u.l.o;
  fa_plan_data plan;
  memset(&plan, 0, sizeof plan);
  fa_gpu_params g;
  fa_gpu_fill_forward(&g, &u.p, &plan, &args);
  CHECK(g.prob.dtype == FA_E5M2 && g.prob.dtype_out == FA_F16,
        "dtypes %d -> %d", g.prob.dtype, g.prob.dtype_out);
  CHECK(g.descale_q.data == per_head && g.descale_q.per_head == 1 &&
            g.descale_k.data == per_head && g.descale_v.per_head == 1,
        "descales not passed to the kernel parameters");
  CHECK(make(&u, FA_E4M3, FA_BF16, 0, 0), "fa_problem_init");
  args.q = u.l.q;
  fa_gpu_fill_forward(&g, &u.p, &plan, &args);
  CHECK(g.descale_q.data == NULL, "no descale: the parameters have one");

  printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
