// SPDX-License-Identifier: MIT
// A plan runs the layout it was made for, and nothing else: a call whose
// tensors differ from the plan's (a dtype, a stride, less alignment, a
// descale added, removed or changed from one value to per head) fails with
// FA_ERR_INVALID_ARGUMENT naming the tensor and the field, writes nothing,
// and leaves the plan usable; more alignment than planned is fine. A
// forward plan run as a backward one, and a backward plan run as a forward
// one, fail saying which it is.
#include <stdint.h>

#include "api_util.h"

enum { B = 2, SQ = 9, SK = 13, H = 2, D = 16 };
enum { NQ = B * SQ * H * D, NK = B * SK * H * D, NL = B * H * SQ };
enum { SLACK = 64 }; // floats of room to shift a view off its alignment

static fa_context *ctx;
static fa_attention a;
static au_buf bq, bk, bv, bo, bdo, bdq, bdk, bdv, bl;
static float one = 1.0f, per_head[B * H] = {1.0f, 0.5f, 2.0f, 1.0f};

static void alloc64(au_buf *b, size_t floats) {
  b->bytes = ((floats + SLACK) * sizeof(float) + 63) / 64 * 64;
  b->p = aligned_alloc(64, b->bytes); // (a size that is a multiple of 64)
  b->snap = malloc(b->bytes);
  if (!b->p || !b->snap) exit(1);
  memset(b->p, 0, b->bytes);
}

static fa_tensor T(au_buf *b, int seq) {
  return au_bshd((float *)b->p + SLACK / 2, seq, H, D);
}

typedef struct call {
  fa_tensor q, k, v, o, d_o, dq, dk, dv;
} call;

static call base(void) {
  call c = {T(&bq, SQ),  T(&bk, SK),  T(&bv, SK),  T(&bo, SQ),
            T(&bdo, SQ), T(&bdq, SQ), T(&bdk, SK), T(&bdv, SK)};
  return c;
}

static void poison_outputs(int bwd) {
  if (!bwd) {
    au_poison(&bo, 0xa5);
    au_poison(&bl, 0x5a);
  }
  au_poison(&bdq, 0xa5);
  au_poison(&bdk, 0xa5);
  au_poison(&bdv, 0xa5);
}

static void nothing_written(const char *what) {
  au_buf *o[] = {&bo, &bl, &bdq, &bdk, &bdv};
  const char *n[] = {"o", "lse", "dq", "dk", "dv"};
  for (int i = 0; i < 5; i++) {
    long at = au_changed(o[i]);
    CHECK(at < 0, "%s: %s written (byte %ld)", what, n[i], at);
  }
}

static fa_status run(fa_plan *p, const call *c, int bwd) {
  return bwd ? fa_plan_backward(p, c->q, c->k, c->v, c->o, c->d_o, bl.p, c->dq,
                                c->dk, c->dv)
             : fa_plan_forward(p, c->q, c->k, c->v, c->o, bl.p);
}

/* The plan (made for base()) refuses call c naming `fields`, writes
   nothing, and runs base() again afterwards. */
static void refuses(const char *what, fa_plan *p, const call *c, int bwd,
                    const char *fields) {
  if (bwd) { // o and lse are the backward's inputs: valid ones
    call b = base();
    fa_forward(ctx, &a, b.q, b.k, b.v, b.o, bl.p);
    au_snapshot(&bo);
    au_snapshot(&bl);
  }
  poison_outputs(bwd);
  EXPECT_FAIL(what, run(p, c, bwd), FA_ERR_INVALID_ARGUMENT, fields, NULL);
  nothing_written(what);
  call b = base();
  EXPECT_OK(what, run(p, &b, bwd));
}

static void test_plan(int bwd) {
  call c = base();
  fa_plan *p = NULL;
  fa_status s = bwd ? fa_plan_create_backward(ctx, &a, c.q, c.k, c.v, c.o,
                                              c.d_o, c.dq, c.dk, c.dv, &p)
                    : fa_plan_create(ctx, &a, c.q, c.k, c.v, c.o, &p);
  EXPECT_OK(bwd ? "backward plan" : "forward plan", s);
  if (s) return;
  char desc[512];
  fa_plan_describe(p, desc, sizeof desc);
  printf("%s\n", desc);
  CHECK(strstr(desc, "align=64") != NULL, "the plan's alignment: %s", desc);
  const int nt = bwd ? 8 : 4;
  static const char *names[8] = {"q", "k", "v", "o", "do", "dq", "dk", "dv"};
  for (int i = 0; i < nt; i++) {
    char what[128], fields[64];
    // A dtype (bf16 views of the same bytes: only the layout differs).
    c = base();
    fa_tensor *t = &c.q + i;
    t->dtype = FA_BF16;
    snprintf(what, sizeof what, "%s: %s.dtype bf16 (planned f32)",
             bwd ? "backward" : "forward", names[i]);
    snprintf(fields, sizeof fields, "%s dtype", names[i]);
    refuses(what, p, &c, bwd, fields);
    // A stride.
    c = base();
    t = &c.q + i;
    t->stride_seq += D; // (the call never runs: no room needed)
    snprintf(what, sizeof what, "%s: %s.stride_seq + %d",
             bwd ? "backward" : "forward", names[i], D);
    snprintf(fields, sizeof fields, "%s stride_seq", names[i]);
    if (i != 4 || bwd) refuses(what, p, &c, bwd, fields);
    // Less alignment: 4 bytes past the planned 64.
    c = base();
    t = &c.q + i;
    t->data = (float *)t->data + 1;
    snprintf(what, sizeof what, "%s: %s.data 4 bytes off 64",
             bwd ? "backward" : "forward", names[i]);
    snprintf(fields, sizeof fields, "%s data", names[i]);
    refuses(what, p, &c, bwd, fields);
  }
  // Descales added (one value, per head) where the plan had none.
  for (int i = 0; i < 3; i++) {
    char what[128], fields[64];
    for (int per = 0; per < 2; per++) {
      c = base();
      fa_tensor *t = &c.q + i;
      t->descale = per ? per_head : &one;
      t->descale_per_head = per;
      snprintf(what, sizeof what, "%s: %s.descale added (%s)",
               bwd ? "backward" : "forward", names[i],
               per ? "per head" : "one value");
      snprintf(fields, sizeof fields, "%s descale", names[i]);
      refuses(what, p, &c, bwd, fields);
    }
  }
  // The wrong kind of plan.
  c = base();
  poison_outputs(0);
  s = run(p, &c, !bwd);
  EXPECT_FAIL(bwd ? "a backward plan run by fa_plan_forward"
                  : "a forward plan run by fa_plan_backward",
              s, FA_ERR_INVALID_ARGUMENT, bwd ? "backward" : "forward", NULL);
  nothing_written("the wrong kind of plan");
  fa_plan_destroy(p);

  // A plan with descales: a call without, or with the other kind, fails.
  c = base();
  c.k.descale = per_head;
  c.k.descale_per_head = 1;
  s = bwd ? fa_plan_create_backward(ctx, &a, c.q, c.k, c.v, c.o, c.d_o, c.dq,
                                    c.dk, c.dv, &p)
          : fa_plan_create(ctx, &a, c.q, c.k, c.v, c.o, &p);
  EXPECT_OK("a plan with k.descale per head", s);
  if (s) return;
  call d = c;
  d.k.descale = NULL;
  d.k.descale_per_head = 0;
  poison_outputs(bwd);
  EXPECT_FAIL("k.descale removed", run(p, &d, bwd), FA_ERR_INVALID_ARGUMENT,
              "k descale", NULL);
  nothing_written("k.descale removed");
  d = c;
  d.k.descale = &one;
  d.k.descale_per_head = 0;
  poison_outputs(bwd);
  EXPECT_FAIL("k.descale one value for per head", run(p, &d, bwd),
              FA_ERR_INVALID_ARGUMENT, "k descale", NULL);
  nothing_written("k.descale one value for per head");
  d = c;
  d.k.descale = per_head + 0; // another array of the same kind: fine
  EXPECT_OK("k.descale, same kind", run(p, &d, bwd));
  fa_plan_destroy(p);

  // More alignment than planned is fine: plan on a 4-byte-aligned o.
  c = base();
  c.o.data = (float *)c.o.data + 1;
  if (bwd) c.dq.data = (float *)c.dq.data + 1;
  s = bwd ? fa_plan_create_backward(ctx, &a, c.q, c.k, c.v, c.o, c.d_o, c.dq,
                                    c.dk, c.dv, &p)
          : fa_plan_create(ctx, &a, c.q, c.k, c.v, c.o, &p);
  EXPECT_OK("a plan on a 4-byte-aligned view", s);
  if (s) return;
  fa_plan_describe(p, desc, sizeof desc);
  CHECK(strstr(desc, "align=4") != NULL, "the plan's alignment: %s", desc);
  call b = base();
  if (bwd) fa_forward(ctx, &a, b.q, b.k, b.v, b.o, bl.p);
  EXPECT_OK("a 64-byte-aligned call on a 4-byte plan", run(p, &b, bwd));
  fa_plan_destroy(p);
}

int main(void) {
  if (fa_context_create_by_name(&ctx, "cpu.scalar.f32")) {
    fprintf(stderr, "cpu.scalar.f32 unavailable: %s\n", fa_last_error());
    return 77;
  }
  au_buf *all[] = {&bq, &bk, &bv, &bo, &bdo, &bdq, &bdk, &bdv};
  const size_t n[] = {NQ, NK, NK, NQ, NQ, NQ, NK, NK};
  for (int i = 0; i < 8; i++) alloc64(all[i], n[i]);
  alloc64(&bl, NL);
  au_fill_uniform((float *)bq.p, NQ + SLACK, -1, 1);
  au_fill_uniform((float *)bk.p, NK + SLACK, -1, 1);
  au_fill_uniform((float *)bv.p, NK + SLACK, -1, 1);
  au_fill_uniform((float *)bdo.p, NQ + SLACK, -1, 1);
  fa_attention_init(&a);
  a.batch = B;
  a.seqlen_q = SQ;
  a.seqlen_k = SK;
  a.heads_q = a.heads_kv = H;
  a.head_dim = D;
  a.causal = FA_CAUSAL_BOTTOM_RIGHT;
  test_plan(0);
  test_plan(1);
  fa_context_destroy(ctx);
  for (int i = 0; i < 8; i++) au_free(all[i]);
  au_free(&bl);
  return ut_finish("test_api_plan_layout");
}
