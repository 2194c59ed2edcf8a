// SPDX-License-Identifier: MIT
// Every bad input to fa_forward / fa_backward / fa_plan_* / fa_merge_states
// gets the documented status, a fa_last_error() message naming the field
// (and the bad value), and leaves every output byte as it was. Each case
// changes one thing in a problem that is first shown to be valid.
#include <stdint.h>

#include "api_util.h"

enum { B = 2, SQ = 5, SK = 7, HQ = 4, HKV = 2, D = 8 };
enum { NQ = B * SQ * HQ * D, NK = B * SK * HKV * D, NL = B * HQ * SQ };

static fa_context *ctx;
static au_buf qb, kb, vb, ob, lb; // inputs q, k, v; outputs o, lse
static fa_attention base;
static fa_tensor tq, tk, tv, to;

static void setup(void) {
  ctx = au_context_or_skip("cpu.scalar.f32");
  au_alloc(&qb, NQ * sizeof(float));
  au_alloc(&kb, NK * sizeof(float));
  au_alloc(&vb, NK * sizeof(float));
  au_alloc(&ob, NQ * sizeof(float));
  au_alloc(&lb, NL * sizeof(float));
  au_fill_uniform(qb.p, NQ, -1, 1);
  au_fill_uniform(kb.p, NK, -1, 1);
  au_fill_uniform(vb.p, NK, -1, 1);
  au_snapshot(&qb);
  au_snapshot(&kb);
  au_snapshot(&vb);
  base = ts_problem(B, SQ, SK, HQ, HKV, D);
  tq = au_bshd(qb.p, SQ, HQ, D);
  tk = au_bshd(kb.p, SK, HKV, D);
  tv = au_bshd(vb.p, SK, HKV, D);
  to = au_bshd(ob.p, SQ, HQ, D);
}

static void inputs_untouched(const char *what) {
  CHECK(au_changed(&qb) < 0 && au_changed(&kb) < 0 && au_changed(&vb) < 0,
        "%s: an input tensor was modified", what);
}

// One forward call that must fail: the status, the message, and not one
// byte of o or lse written.
static void fwd_case(const char *what, const fa_attention *a, fa_tensor q,
                     fa_tensor k, fa_tensor v, fa_tensor o, fa_status want,
                     const char *fields, const char *value) {
  au_poison(&ob, 0xa5);
  au_poison(&lb, 0x5a);
  fa_status s = fa_forward(ctx, a, q, k, v, o, lb.p);
  EXPECT_FAIL(what, s, want, fields, value);
  long at = au_changed(&ob);
  CHECK(at < 0, "%s: o written (byte %ld) by a failing call", what, at);
  at = au_changed(&lb);
  CHECK(at < 0, "%s: lse written (byte %ld) by a failing call", what, at);
  inputs_untouched(what);
}

#define FWD_A(what, a, want, fields, value)                                    \
  fwd_case(what, a, tq, tk, tv, to, want, fields, value)

static void test_valid_base(void) {
  au_poison(&ob, 0xa5);
  au_poison(&lb, 0x5a);
  fa_status s = fa_forward(ctx, &base, tq, tk, tv, to, lb.p);
  EXPECT_OK("base problem", s);
  CHECK(au_changed(&ob) >= 0 && au_changed(&lb) >= 0,
        "base problem: outputs not written");
  const float *o = ob.p;
  int finite = 1;
  for (int i = 0; i < NQ; i++) finite &= isfinite(o[i]) != 0;
  CHECK(finite, "base problem: non-finite output");
  inputs_untouched("base problem");
}

static void test_problem_fields(void) {
  fa_attention a;
  fwd_case("NULL problem", NULL, tq, tk, tv, to, FA_ERR_INVALID_ARGUMENT, NULL,
           NULL);
  {
    au_poison(&ob, 0xa5);
    au_poison(&lb, 0x5a);
    fa_status s = fa_forward(NULL, &base, tq, tk, tv, to, lb.p);
    EXPECT_FAIL("NULL ctx", s, FA_ERR_INVALID_ARGUMENT, "ctx", NULL);
    CHECK(au_changed(&ob) < 0 && au_changed(&lb) < 0, "NULL ctx: written");
  }
#define INT_FIELD(field, bad, str, name)                                       \
  do {                                                                         \
    a = base;                                                                  \
    a.field = bad;                                                             \
    FWD_A(#field " = " str, &a, FA_ERR_INVALID_ARGUMENT, name, str);           \
  } while (0)
  INT_FIELD(batch, -2, "-2", "batch");
  INT_FIELD(seqlen_q, -1, "-1", "seqlen_q");
  INT_FIELD(seqlen_k, -7, "-7", "seqlen_k");
  INT_FIELD(heads_q, 0, "0", "heads_q");
  INT_FIELD(heads_q, -4, "-4", "heads_q");
  INT_FIELD(heads_kv, 0, "0", "heads_kv");
  INT_FIELD(heads_kv, -1, "-1", "heads_kv");
  INT_FIELD(head_dim, 0, "0", "head_dim");
  INT_FIELD(head_dim, -8, "-8", "head_dim");
  INT_FIELD(head_dim_v, -1, "-1", "head_dim_v");
  INT_FIELD(causal, 3, "3", "causal");
  INT_FIELD(causal, -1, "-1", "causal");
  INT_FIELD(window_left, -2, "-2", "window_left");
  INT_FIELD(window_right, -5, "-5", "window_right");

  a = base;
  a.heads_kv = 3; // 4 % 3 != 0
  FWD_A("heads_q % heads_kv", &a, FA_ERR_INVALID_ARGUMENT, "heads_q heads_kv",
        "3");
  a = base;
  a.causal = FA_CAUSAL_BOTTOM_RIGHT;
  a.window_right = 2;
  FWD_A("causal with window_right 2", &a, FA_ERR_INVALID_ARGUMENT,
        "window_right", "2");
  a = base;
  a.causal = FA_CAUSAL_TOP_LEFT;
  a.window_right = 1;
  FWD_A("top-left causal with window_right 1", &a, FA_ERR_INVALID_ARGUMENT,
        "window_right", "1");
  a = base;
  a.softcap = -1.5f;
  FWD_A("softcap -1.5", &a, FA_ERR_INVALID_ARGUMENT, "softcap", "-1.5");
  a = base;
  a.softcap = NAN;
  FWD_A("softcap NaN", &a, FA_ERR_INVALID_ARGUMENT, "softcap", "nan");
  a = base;
  a.scale = NAN;
  FWD_A("scale NaN", &a, FA_ERR_INVALID_ARGUMENT, "scale", "nan");
  a = base;
  a.scale = INFINITY;
  FWD_A("scale +inf", &a, FA_ERR_INVALID_ARGUMENT, "scale", "inf");
  a = base;
  a.scale = -INFINITY;
  FWD_A("scale -inf", &a, FA_ERR_INVALID_ARGUMENT, "scale", "-inf");
  // Paging fields without a block table are a mistake, not a no-op.
  a = base;
  a.page_size = 4;
  FWD_A("page_size without block_table", &a, FA_ERR_INVALID_ARGUMENT,
        "block_table", NULL);
#undef INT_FIELD
}

static void test_tensors(void) {
  fa_tensor t;
  // NULL data.
  t = tq;
  t.data = NULL;
  fwd_case("q.data NULL", &base, t, tk, tv, to, FA_ERR_INVALID_ARGUMENT, "q",
           NULL);
  t = tk;
  t.data = NULL;
  fwd_case("k.data NULL", &base, tq, t, tv, to, FA_ERR_INVALID_ARGUMENT, "k",
           NULL);
  t = tv;
  t.data = NULL;
  fwd_case("v.data NULL", &base, tq, tk, t, to, FA_ERR_INVALID_ARGUMENT, "v",
           NULL);
  t = to;
  t.data = NULL;
  fwd_case("o.data NULL", &base, tq, tk, tv, t, FA_ERR_INVALID_ARGUMENT, "o",
           NULL);

  // Negative strides.
  t = tq;
  t.stride_seq = -1;
  fwd_case("q.stride_seq -1", &base, t, tk, tv, to, FA_ERR_INVALID_ARGUMENT,
           "q stride_seq", "-1");
  t = tk;
  t.stride_batch = -112;
  fwd_case("k.stride_batch -112", &base, tq, t, tv, to, FA_ERR_INVALID_ARGUMENT,
           "k stride_batch", "-112");
  t = tv;
  t.stride_head = -8;
  fwd_case("v.stride_head -8", &base, tq, tk, t, to, FA_ERR_INVALID_ARGUMENT,
           "v stride_head", "-8");
  t = to;
  t.stride_seq = -32;
  fwd_case("o.stride_seq -32", &base, tq, tk, tv, t, FA_ERR_INVALID_ARGUMENT,
           "o stride_seq", "-32");

  // o overlapping itself.
  t = to;
  t.stride_seq = HQ * D - 1;
  fwd_case("o rows overlap", &base, tq, tk, tv, t, FA_ERR_INVALID_ARGUMENT,
           "o stride_seq", NULL);
  t = to;
  t.stride_head = D - 1;
  fwd_case("o heads overlap", &base, tq, tk, tv, t, FA_ERR_INVALID_ARGUMENT,
           "o", NULL);
  t = to;
  t.stride_batch = 0;
  fwd_case("o batches alias", &base, tq, tk, tv, t, FA_ERR_INVALID_ARGUMENT,
           "o", NULL);

  // dtype disagreements.
  t = tk;
  t.dtype = FA_F16;
  fwd_case("k f16, q f32", &base, tq, t, tv, to, FA_ERR_INVALID_ARGUMENT,
           "k dtype", NULL);
  t = tv;
  t.dtype = FA_BF16;
  fwd_case("v bf16, q f32", &base, tq, tk, t, to, FA_ERR_INVALID_ARGUMENT,
           "v dtype", NULL);
  t = to;
  t.dtype = FA_F16;
  // o has the output dtype, which may differ from the inputs' (0.2): an
  // f16 o from f32 inputs runs (the CPU kernels store each row in o's dtype).
  t = to;
  t.dtype = FA_F16;
  t.stride_batch *= 2; // (f16 rows in the f32 buffer: same bytes, no overlap)
  t.stride_seq *= 2;
  t.stride_head *= 2;
  {
    fa_status st_ = fa_forward(ctx, &base, tq, tk, tv, t, lb.p);
    EXPECT_OK("o f16, q f32 (0.2: output dtype group)", st_);
  }
  t = to;
  t.dtype = FA_F16;
  t.descale = &base.scale;
  fwd_case("o with a descale", &base, tq, tk, tv, t, FA_ERR_INVALID_ARGUMENT,
           "o descale", NULL);
  t = to;
  t.dtype = (fa_dtype)5; // the output dtype is o's own: still a valid one
  fwd_case("o dtype 5", &base, tq, tk, tv, t, FA_ERR_INVALID_ARGUMENT,
           "o dtype", "5");
  t = tq;
  t.dtype = (fa_dtype)7;
  fwd_case("q dtype 7", &base, t, tk, tv, to, FA_ERR_INVALID_ARGUMENT, "dtype",
           "7");

  // Valid but unusual strides are accepted: inputs may alias (a k/v cache
  // shared by the whole batch).
  t = tk;
  t.stride_batch = 0;
  fa_tensor t2 = tv;
  t2.stride_batch = 0;
  fa_status s = fa_forward(ctx, &base, tq, t, t2, to, lb.p);
  EXPECT_OK("k/v batch stride 0 (shared cache)", s);
}

static void test_varlen(void) {
  int32_t cu_q[B + 1] = {0, 3, 5}, cu_k[B + 1] = {0, 7, 10};
  fa_attention a = base;
  fa_tensor q0 = tq, o0 = to, k0 = tk, v0 = tv;
  q0.stride_batch = 0;
  o0.stride_batch = 0;
  k0.stride_batch = 0;
  v0.stride_batch = 0;
  a.cu_seqlens_q = cu_q;
  a.cu_seqlens_k = cu_k;
  fa_status s = fa_forward(ctx, &a, q0, k0, v0, o0, lb.p);
  EXPECT_OK("valid varlen", s);

  fwd_case("varlen q with batch stride", &a, tq, k0, v0, o0,
           FA_ERR_INVALID_ARGUMENT, "q stride_batch", NULL);
  fwd_case("varlen o with batch stride", &a, q0, k0, v0, to,
           FA_ERR_INVALID_ARGUMENT, "o stride_batch", NULL);
  fwd_case("varlen k with batch stride", &a, q0, tk, v0, o0,
           FA_ERR_INVALID_ARGUMENT, "k stride_batch", NULL);

  int32_t bad_q[B + 1] = {0, 4, 3};
  a.cu_seqlens_q = bad_q;
  fwd_case("cu_seqlens_q decreasing", &a, q0, k0, v0, o0,
           FA_ERR_INVALID_ARGUMENT, "cu_seqlens_q", NULL);
  int32_t long_q[B + 1] = {0, 6, 8}; // sequence 0: 6 rows > seqlen_q 5
  a.cu_seqlens_q = long_q;
  fwd_case("cu_seqlens_q longer than seqlen_q", &a, q0, k0, v0, o0,
           FA_ERR_INVALID_ARGUMENT, "cu_seqlens_q", "6");
  int32_t neg_q[B + 1] = {-2, 1, 3};
  a.cu_seqlens_q = neg_q;
  fwd_case("cu_seqlens_q[0] negative", &a, q0, k0, v0, o0,
           FA_ERR_INVALID_ARGUMENT, "cu_seqlens_q", "-2");
  a.cu_seqlens_q = cu_q;
  int32_t bad_k[B + 1] = {0, 5, 2};
  a.cu_seqlens_k = bad_k;
  fwd_case("cu_seqlens_k decreasing", &a, q0, k0, v0, o0,
           FA_ERR_INVALID_ARGUMENT, "cu_seqlens_k", NULL);
  int32_t long_k[B + 1] = {0, 2, 10}; // sequence 1: 8 keys > seqlen_k 7
  a.cu_seqlens_k = long_k;
  fwd_case("cu_seqlens_k longer than seqlen_k", &a, q0, k0, v0, o0,
           FA_ERR_INVALID_ARGUMENT, "cu_seqlens_k", "8");

  // seqused_k.
  a = base;
  int32_t used[B] = {7, 3};
  a.seqused_k = used;
  s = fa_forward(ctx, &a, tq, tk, tv, to, lb.p);
  EXPECT_OK("valid seqused_k", s);
  int32_t over[B] = {8, 3};
  a.seqused_k = over;
  FWD_A("seqused_k 8 > seqlen_k 7", &a, FA_ERR_INVALID_ARGUMENT, "seqused_k",
        "8");
  int32_t neg[B] = {2, -1};
  a.seqused_k = neg;
  FWD_A("seqused_k -1", &a, FA_ERR_INVALID_ARGUMENT, "seqused_k", "-1");
}

static void test_paged(void) {
  enum { PS = 4, PAGES = 5 };
  au_buf kp, vp;
  au_alloc(&kp, PAGES * PS * HKV * D * sizeof(float));
  au_alloc(&vp, PAGES * PS * HKV * D * sizeof(float));
  au_fill_uniform(kp.p, PAGES * PS * HKV * D, -1, 1);
  au_fill_uniform(vp.p, PAGES * PS * HKV * D, -1, 1);
  fa_tensor pk = au_bshd(kp.p, PS, HKV, D), pv = au_bshd(vp.p, PS, HKV, D);
  int32_t table[B][2] = {{3, 0}, {4, 1}};
  fa_attention a = base;
  a.block_table = &table[0][0];
  a.max_blocks_per_seq = 2;
  a.page_size = PS;
  a.num_pages = PAGES;
  fa_status s = fa_forward(ctx, &a, tq, pk, pv, to, lb.p);
  EXPECT_OK("valid paged", s);

  fa_attention c = a;
  c.page_size = 0;
  fwd_case("page_size 0", &c, tq, pk, pv, to, FA_ERR_INVALID_ARGUMENT,
           "page_size", "0");
  c = a;
  c.page_size = -4;
  fwd_case("page_size -4", &c, tq, pk, pv, to, FA_ERR_INVALID_ARGUMENT,
           "page_size", "-4");
  c = a;
  c.max_blocks_per_seq = 1; // 1 x 4 < seqlen_k 7
  fwd_case("block table too short", &c, tq, pk, pv, to, FA_ERR_INVALID_ARGUMENT,
           "max_blocks_per_seq", "1");
  c = a;
  c.num_pages = 0;
  fwd_case("num_pages 0", &c, tq, pk, pv, to, FA_ERR_INVALID_ARGUMENT,
           "num_pages", "0");
  table[1][1] = 9;
  fwd_case("block_table entry 9 of 5 pages", &a, tq, pk, pv, to,
           FA_ERR_INVALID_ARGUMENT, "block_table", "9");
  table[1][1] = PAGES;
  fwd_case("block_table entry == num_pages", &a, tq, pk, pv, to,
           FA_ERR_INVALID_ARGUMENT, "block_table", NULL);
  table[1][1] = -1;
  fwd_case("block_table entry -1", &a, tq, pk, pv, to, FA_ERR_INVALID_ARGUMENT,
           "block_table", "-1");
  table[1][1] = 1;
  int32_t cu_k[B + 1] = {0, 7, 14};
  c = a;
  c.cu_seqlens_k = cu_k;
  fa_tensor pk0 = pk, pv0 = pv;
  fwd_case("paged with cu_seqlens_k", &c, tq, pk0, pv0, to,
           FA_ERR_INVALID_ARGUMENT, "cu_seqlens_k", NULL);

  // Entries past a sequence's real length are never followed, so they may
  // hold anything.
  int32_t used[B] = {4, 7};
  table[0][1] = -12345;
  c = a;
  c.seqused_k = used;
  s = fa_forward(ctx, &c, tq, pk, pv, to, lb.p);
  EXPECT_OK("garbage past seqused_k", s);
  table[0][1] = 0;
  au_free(&kp);
  au_free(&vp);
}

static void test_unsupported(void) {
  // cpu.scalar.f32 runs head dims 1..512: 600 is valid but unsupported.
  enum { BD = 600 };
  au_buf q, k, v, o, l;
  au_alloc(&q, 2 * BD * sizeof(float));
  au_alloc(&k, 3 * BD * sizeof(float));
  au_alloc(&v, 3 * BD * sizeof(float));
  au_alloc(&o, 2 * BD * sizeof(float));
  au_alloc(&l, 2 * sizeof(float));
  au_fill_uniform(q.p, 2 * BD, -1, 1);
  au_fill_uniform(k.p, 3 * BD, -1, 1);
  au_fill_uniform(v.p, 3 * BD, -1, 1);
  fa_attention a = ts_problem(1, 2, 3, 1, 1, BD);
  au_poison(&o, 0xa5);
  au_poison(&l, 0x5a);
  fa_status s =
      fa_forward(ctx, &a, au_bshd(q.p, 2, 1, BD), au_bshd(k.p, 3, 1, BD),
                 au_bshd(v.p, 3, 1, BD), au_bshd(o.p, 2, 1, BD), l.p);
  EXPECT_FAIL("head_dim 600 on cpu.scalar.f32", s, FA_ERR_UNSUPPORTED,
              "head_dim", "600");
  CHECK(au_changed(&o) < 0 && au_changed(&l) < 0,
        "unsupported problem: output written");
  // The same through an AUTO context: no backend here may claim it.
  fa_context *auto_ctx = NULL;
  if (fa_context_create(&auto_ctx, FA_BACKEND_AUTO, 0) == FA_OK) {
    s = fa_forward(auto_ctx, &a, au_bshd(q.p, 2, 1, BD), au_bshd(k.p, 3, 1, BD),
                   au_bshd(v.p, 3, 1, BD), au_bshd(o.p, 2, 1, BD), l.p);
    if (s != FA_OK) {
      EXPECT_FAIL("head_dim 600 on AUTO", s, FA_ERR_UNSUPPORTED, "head_dim",
                  "600");
      CHECK(au_changed(&o) < 0 && au_changed(&l) < 0,
            "unsupported problem (AUTO): output written");
    }
    fa_context_destroy(auto_ctx);
  }
  // head_dim_v alone out of range.
  a.head_dim = 4;
  a.head_dim_v = BD;
  s = fa_forward(ctx, &a, au_bshd(q.p, 2, 1, 4), au_bshd(k.p, 3, 1, 4),
                 au_bshd(v.p, 3, 1, BD), au_bshd(o.p, 2, 1, BD), l.p);
  EXPECT_FAIL("head_dim_v 600 on cpu.scalar.f32", s, FA_ERR_UNSUPPORTED,
              "head_dim_v", "600");
  CHECK(au_changed(&o) < 0 && au_changed(&l) < 0,
        "unsupported head_dim_v: output written");
  au_free(&q);
  au_free(&k);
  au_free(&v);
  au_free(&o);
  au_free(&l);
}

// ---- backward ---------------------------------------------------------------

static void test_backward(void) {
  au_buf o_in, lse_in, dob, dqb, dkb, dvb;
  au_alloc(&o_in, NQ * sizeof(float));
  au_alloc(&lse_in, NL * sizeof(float));
  au_alloc(&dob, NQ * sizeof(float));
  au_alloc(&dqb, NQ * sizeof(float));
  au_alloc(&dkb, NK * sizeof(float));
  au_alloc(&dvb, NK * sizeof(float));
  au_fill_uniform(dob.p, NQ, -1, 1);
  fa_tensor o = au_bshd(o_in.p, SQ, HQ, D), d_o = au_bshd(dob.p, SQ, HQ, D);
  fa_tensor dq = au_bshd(dqb.p, SQ, HQ, D), dk = au_bshd(dkb.p, SK, HKV, D),
            dv = au_bshd(dvb.p, SK, HKV, D);
  fa_status s = fa_forward(ctx, &base, tq, tk, tv, o, lse_in.p);
  EXPECT_OK("forward for backward", s);
  s = fa_backward(ctx, &base, tq, tk, tv, o, d_o, lse_in.p, dq, dk, dv);
  EXPECT_OK("valid backward", s);
  au_snapshot(&o_in);
  au_snapshot(&lse_in);
  au_snapshot(&dob);

#define BWD_CASE(what, ctx_, a, q, k, v, o_, do_, lse, dq_, dk_, dv_, want,    \
                 fields, value)                                                \
  do {                                                                         \
    au_poison(&dqb, 0xa5);                                                     \
    au_poison(&dkb, 0xa6);                                                     \
    au_poison(&dvb, 0xa7);                                                     \
    fa_status st_ =                                                            \
        fa_backward(ctx_, a, q, k, v, o_, do_, lse, dq_, dk_, dv_);            \
    EXPECT_FAIL(what, st_, want, fields, value);                               \
    CHECK(au_changed(&dqb) < 0 && au_changed(&dkb) < 0 &&                      \
              au_changed(&dvb) < 0,                                            \
          "%s: a gradient was written by a failing call", what);               \
    CHECK(au_changed(&o_in) < 0 && au_changed(&lse_in) < 0 &&                  \
              au_changed(&dob) < 0,                                            \
          "%s: a backward input was modified", what);                          \
    inputs_untouched(what);                                                    \
  } while (0)

  fa_attention a = base;
  a.batch = -1;
  BWD_CASE("backward batch -1", ctx, &a, tq, tk, tv, o, d_o, lse_in.p, dq, dk,
           dv, FA_ERR_INVALID_ARGUMENT, "batch", "-1");
  BWD_CASE("backward NULL ctx", NULL, &base, tq, tk, tv, o, d_o, lse_in.p, dq,
           dk, dv, FA_ERR_INVALID_ARGUMENT, "ctx", NULL);
  BWD_CASE("backward NULL problem", ctx, NULL, tq, tk, tv, o, d_o, lse_in.p, dq,
           dk, dv, FA_ERR_INVALID_ARGUMENT, NULL, NULL);
  BWD_CASE("backward NULL lse", ctx, &base, tq, tk, tv, o, d_o, NULL, dq, dk,
           dv, FA_ERR_INVALID_ARGUMENT, "lse", NULL);
  fa_tensor t = d_o;
  t.data = NULL;
  BWD_CASE("backward do.data NULL", ctx, &base, tq, tk, tv, o, t, lse_in.p, dq,
           dk, dv, FA_ERR_INVALID_ARGUMENT, NULL, NULL);
  t = dq;
  t.data = NULL;
  BWD_CASE("backward dq.data NULL", ctx, &base, tq, tk, tv, o, d_o, lse_in.p, t,
           dk, dv, FA_ERR_INVALID_ARGUMENT, "dq", NULL);
  t = dk;
  t.dtype = FA_F16;
  BWD_CASE("backward dk f16", ctx, &base, tq, tk, tv, o, d_o, lse_in.p, dq, t,
           dv, FA_ERR_INVALID_ARGUMENT, "dk dtype", NULL);
  t = dv;
  t.stride_seq = HKV * D - 2;
  BWD_CASE("backward dv overlaps itself", ctx, &base, tq, tk, tv, o, d_o,
           lse_in.p, dq, dk, t, FA_ERR_INVALID_ARGUMENT, "dv", NULL);
  t = dq;
  t.stride_head = -1;
  BWD_CASE("backward dq negative stride", ctx, &base, tq, tk, tv, o, d_o,
           lse_in.p, t, dk, dv, FA_ERR_INVALID_ARGUMENT, "dq stride_head",
           "-1");
  a = base;
  a.softcap = -2.0f;
  BWD_CASE("backward softcap -2", ctx, &a, tq, tk, tv, o, d_o, lse_in.p, dq, dk,
           dv, FA_ERR_INVALID_ARGUMENT, "softcap", "-2");
#undef BWD_CASE
  au_free(&o_in);
  au_free(&lse_in);
  au_free(&dob);
  au_free(&dqb);
  au_free(&dkb);
  au_free(&dvb);
}

// ---- plans -----------------------------------------------------------------

static void test_plans(void) {
  fa_plan *const sentinel = (fa_plan *)(uintptr_t)0x1234;
  fa_plan *plan = sentinel;
  fa_status s = fa_plan_create(NULL, &base, tq, tk, tv, to, &plan);
  EXPECT_FAIL("plan NULL ctx", s, FA_ERR_INVALID_ARGUMENT, "ctx", NULL);
  CHECK(plan == sentinel, "plan written by a failing create");
  s = fa_plan_create(ctx, NULL, tq, tk, tv, to, &plan);
  EXPECT_FAIL("plan NULL problem", s, FA_ERR_INVALID_ARGUMENT, NULL, NULL);
  CHECK(plan == sentinel, "plan written by a failing create");
  s = fa_plan_create(ctx, &base, tq, tk, tv, to, NULL);
  EXPECT_FAIL("plan NULL out", s, FA_ERR_INVALID_ARGUMENT, "plan", NULL);
  fa_attention a = base;
  a.heads_q = 3;
  s = fa_plan_create(ctx, &a, tq, tk, tv, to, &plan);
  EXPECT_FAIL("plan heads 3 % 2", s, FA_ERR_INVALID_ARGUMENT,
              "heads_q heads_kv", "3");
  CHECK(plan == sentinel, "plan written by a failing create");
  fa_tensor bad_dtype = tq;
  bad_dtype.dtype = (fa_dtype)5;
  s = fa_plan_create(ctx, &base, bad_dtype, tk, tv, to, &plan);
  EXPECT_FAIL("plan dtype 5", s, FA_ERR_INVALID_ARGUMENT, "dtype", "5");
  CHECK(plan == sentinel, "plan written by a failing create");
  a = base;
  a.head_dim = a.head_dim_v = 600;
  {
    // Tensors shaped for d = 600 (plans do not read them): the kernels'
    // refusal, not a layout error, is what this case checks.
    // (at fake, far-apart addresses).
    fa_tensor q6 =
        au_bshd((void *)((uintptr_t)1 << 44), a.seqlen_q, a.heads_q, 600);
    fa_tensor k6 =
        au_bshd((void *)((uintptr_t)2 << 44), a.seqlen_k, a.heads_kv, 600);
    fa_tensor v6 =
        au_bshd((void *)((uintptr_t)3 << 44), a.seqlen_k, a.heads_kv, 600);
    fa_tensor o6 =
        au_bshd((void *)((uintptr_t)4 << 44), a.seqlen_q, a.heads_q, 600);
    s = fa_plan_create(ctx, &a, q6, k6, v6, o6, &plan);
  }
  EXPECT_FAIL("plan head_dim 600", s, FA_ERR_UNSUPPORTED, "head_dim", "600");
  CHECK(plan == sentinel, "plan written by a failing create");
  int32_t bad_cu[B + 1] = {0, 4, 1};
  a = base;
  a.cu_seqlens_q = bad_cu;
  s = fa_plan_create(ctx, &a, tq, tk, tv, to, &plan);
  EXPECT_FAIL("plan bad cu_seqlens_q", s, FA_ERR_INVALID_ARGUMENT,
              "cu_seqlens_q", NULL);
  CHECK(plan == sentinel, "plan written by a failing create");

  plan = NULL;
  s = fa_plan_create(ctx, &base, tq, tk, tv, to, &plan);
  EXPECT_OK("valid plan", s);
  if (!plan) return;
  CHECK(fa_last_error()[0] == '\0', "message after success: \"%s\"",
        fa_last_error());

#define PLAN_CASE(what, pl_, q_, k_, v_, o_, want, fields, value)              \
  do {                                                                         \
    au_poison(&ob, 0xa5);                                                      \
    au_poison(&lb, 0x5a);                                                      \
    fa_status st_ = fa_plan_forward(pl_, q_, k_, v_, o_, lb.p);                \
    EXPECT_FAIL(what, st_, want, fields, value);                               \
    CHECK(au_changed(&ob) < 0 && au_changed(&lb) < 0,                          \
          "%s: output written by a failing call", what);                       \
  } while (0)
  PLAN_CASE("plan_forward NULL plan", NULL, tq, tk, tv, to,
            FA_ERR_INVALID_ARGUMENT, "plan", NULL);
  fa_tensor t = tq;
  t.data = NULL;
  PLAN_CASE("plan_forward q.data NULL", plan, t, tk, tv, to,
            FA_ERR_INVALID_ARGUMENT, "q", NULL);
  t = to;
  t.dtype = FA_BF16;
  PLAN_CASE("plan_forward o bf16", plan, tq, tk, tv, t, FA_ERR_INVALID_ARGUMENT,
            "o dtype", NULL);
  t = to;
  t.stride_seq = 1;
  PLAN_CASE("plan_forward o overlaps", plan, tq, tk, tv, t,
            FA_ERR_INVALID_ARGUMENT, "o", NULL);
  t = tk;
  t.stride_seq = -16;
  PLAN_CASE("plan_forward k negative stride", plan, tq, t, tv, to,
            FA_ERR_INVALID_ARGUMENT, "k stride_seq", "-16");
#undef PLAN_CASE

  // The plan runs and matches fa_forward bit for bit.
  au_poison(&ob, 0xa5);
  au_poison(&lb, 0x5a);
  s = fa_plan_forward(plan, tq, tk, tv, to, lb.p);
  EXPECT_OK("plan forward", s);
  float o1[NQ], l1[NL];
  memcpy(o1, ob.p, sizeof o1);
  memcpy(l1, lb.p, sizeof l1);
  au_poison(&ob, 0x11);
  au_poison(&lb, 0x22);
  s = fa_forward(ctx, &base, tq, tk, tv, to, lb.p);
  EXPECT_OK("forward", s);
  CHECK(memcmp(o1, ob.p, sizeof o1) == 0 && memcmp(l1, lb.p, sizeof l1) == 0,
        "fa_plan_forward and fa_forward differ");

  char buf[512];
  size_t n = fa_plan_describe(plan, buf, sizeof buf);
  CHECK(n > 0 && n == strlen(buf), "describe length %zu vs %zu", n,
        strlen(buf));
  CHECK(strstr(buf, fa_context_backend(ctx)) != NULL,
        "describe does not name the backend: %s", buf);
  CHECK(fa_plan_describe(plan, NULL, 0) == n, "describe length query");
  char tiny[4] = {'x', 'x', 'x', 'x'};
  CHECK(fa_plan_describe(plan, tiny, sizeof tiny) == n && tiny[3] == '\0',
        "truncated describe not terminated");
  printf("plan: %s\n", buf);
  (void)fa_plan_describe(NULL, buf, sizeof buf); // must not crash
  fa_plan_destroy(plan);
  fa_plan_destroy(NULL);
}

// ---- merge -----------------------------------------------------------------

static void test_merge_errors(void) {
  // Two valid parts: o and lse of the base problem, twice.
  au_buf p0, p1, l0, l1;
  au_alloc(&p0, NQ * sizeof(float));
  au_alloc(&p1, NQ * sizeof(float));
  au_alloc(&l0, NL * sizeof(float));
  au_alloc(&l1, NL * sizeof(float));
  EXPECT_OK("part 0",
            fa_forward(ctx, &base, tq, tk, tv, au_bshd(p0.p, SQ, HQ, D), l0.p));
  EXPECT_OK("part 1",
            fa_forward(ctx, &base, tq, tk, tv, au_bshd(p1.p, SQ, HQ, D), l1.p));
  fa_tensor parts[2] = {au_bshd(p0.p, SQ, HQ, D), au_bshd(p1.p, SQ, HQ, D)};
  const float *lses[2] = {l0.p, l1.p};
  EXPECT_OK("valid merge",
            fa_merge_states(ctx, 2, parts, lses, B, SQ, HQ, D, to, lb.p));

#define MERGE_CASE(what, c, n, op, lp, b, s, h, d, o, want, fields, value)     \
  do {                                                                         \
    au_poison(&ob, 0xa5);                                                      \
    au_poison(&lb, 0x5a);                                                      \
    fa_status st_ = fa_merge_states(c, n, op, lp, b, s, h, d, o, lb.p);        \
    EXPECT_FAIL(what, st_, want, fields, value);                               \
    CHECK(au_changed(&ob) < 0 && au_changed(&lb) < 0,                          \
          "%s: output written by a failing call", what);                       \
  } while (0)
  MERGE_CASE("merge NULL ctx", NULL, 2, parts, lses, B, SQ, HQ, D, to,
             FA_ERR_INVALID_ARGUMENT, "ctx", NULL);
  MERGE_CASE("merge n 0", ctx, 0, parts, lses, B, SQ, HQ, D, to,
             FA_ERR_INVALID_ARGUMENT, "n", "0");
  MERGE_CASE("merge n -1", ctx, -1, parts, lses, B, SQ, HQ, D, to,
             FA_ERR_INVALID_ARGUMENT, "n", "-1");
  MERGE_CASE("merge NULL o_parts", ctx, 2, NULL, lses, B, SQ, HQ, D, to,
             FA_ERR_INVALID_ARGUMENT, "o_parts", NULL);
  MERGE_CASE("merge NULL lse_parts", ctx, 2, parts, NULL, B, SQ, HQ, D, to,
             FA_ERR_INVALID_ARGUMENT, "lse_parts", NULL);
  const float *lses_hole[2] = {l0.p, NULL};
  MERGE_CASE("merge NULL lse_parts[1]", ctx, 2, parts, lses_hole, B, SQ, HQ, D,
             to, FA_ERR_INVALID_ARGUMENT, "lse_parts", NULL);
  MERGE_CASE("merge batch -1", ctx, 2, parts, lses, -1, SQ, HQ, D, to,
             FA_ERR_INVALID_ARGUMENT, "batch", "-1");
  MERGE_CASE("merge seqlen -1", ctx, 2, parts, lses, B, -1, HQ, D, to,
             FA_ERR_INVALID_ARGUMENT, "seqlen", "-1");
  MERGE_CASE("merge heads 0", ctx, 2, parts, lses, B, SQ, 0, D, to,
             FA_ERR_INVALID_ARGUMENT, "heads", "0");
  MERGE_CASE("merge head_dim 0", ctx, 2, parts, lses, B, SQ, HQ, 0, to,
             FA_ERR_INVALID_ARGUMENT, "head_dim", "0");
  fa_tensor bad[2] = {parts[0], parts[1]};
  bad[1].data = NULL;
  MERGE_CASE("merge part 1 data NULL", ctx, 2, bad, lses, B, SQ, HQ, D, to,
             FA_ERR_INVALID_ARGUMENT, "o_parts", NULL);
  bad[1] = parts[1];
  bad[0].stride_seq = -32;
  MERGE_CASE("merge part 0 negative stride", ctx, 2, bad, lses, B, SQ, HQ, D,
             to, FA_ERR_INVALID_ARGUMENT, "stride_seq", "-32");
  bad[0] = parts[0];
  bad[1].dtype = (fa_dtype)5;
  MERGE_CASE("merge part 1 dtype 5", ctx, 2, bad, lses, B, SQ, HQ, D, to,
             FA_ERR_INVALID_ARGUMENT, "dtype", "5");
  fa_tensor o_bad = to;
  o_bad.data = NULL;
  MERGE_CASE("merge o.data NULL", ctx, 2, parts, lses, B, SQ, HQ, D, o_bad,
             FA_ERR_INVALID_ARGUMENT, "o", NULL);
  o_bad = to;
  o_bad.stride_seq = D; // heads of row i+1 land on heads of row i
  MERGE_CASE("merge o overlaps itself", ctx, 2, parts, lses, B, SQ, HQ, D,
             o_bad, FA_ERR_INVALID_ARGUMENT, "o", NULL);
#undef MERGE_CASE
  au_free(&p0);
  au_free(&p1);
  au_free(&l0);
  au_free(&l1);
}

int main(void) {
  setup();
  test_valid_base();
  test_problem_fields();
  test_tensors();
  test_varlen();
  test_paged();
  test_unsupported();
  test_backward();
  test_plans();
  test_merge_errors();
  fa_context_destroy(ctx);
  au_free(&qb);
  au_free(&kb);
  au_free(&vb);
  au_free(&ob);
  au_free(&lb);
  return ut_finish("test_api_errors");
}
