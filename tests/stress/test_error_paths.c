// SPDX-License-Identifier: MIT
// The status paths of core/ that tests/api did not reach (found by listing
// every fa_fail() call against the api tests' expectations): tensors whose
// strides overflow 64-bit offsets, outputs overlapping inputs or each other,
// lse overlapping o, an input, or (backward) a gradient, merges whose o or
// lse overlap a part at another offset, and a failed fa_malloc. Each call
// must fail with the documented status, a message naming the field (and the
// value where there is one), and no output byte written.
#include <limits.h>
#include <stdint.h>
#include <time.h>

#include "api_util.h"

enum { B = 2, SQ = 5, SK = 7, HQ = 4, HKV = 2, D = 8 };
enum { NQ = B * SQ * HQ * D, NK = B * SK * HKV * D, NL = B * HQ * SQ };

static fa_context *ctx;
static fa_attention base;
static au_buf qb, kb, vb, ob, lb, dob, dqb, dkb, dvb;

static fa_tensor Q(void *p) { return au_bshd(p, SQ, HQ, D); }
static fa_tensor K(void *p) { return au_bshd(p, SK, HKV, D); }

static void snap_all(void) {
  au_buf *all[] = {&qb, &kb, &vb, &ob, &lb, &dob, &dqb, &dkb, &dvb};
  for (int i = 0; i < 9; i++) au_snapshot(all[i]);
}

static void nothing_written(const char *what) {
  au_buf *all[] = {&qb, &kb, &vb, &ob, &lb, &dob, &dqb, &dkb, &dvb};
  static const char *nm[] = {"q", "k", "v", "o", "lse", "do", "dq", "dk", "dv"};
  for (int i = 0; i < 9; i++) {
    long at = au_changed(all[i]);
    CHECK(at < 0, "%s: %s changed (byte %ld) by a failing call", what, nm[i],
          at);
  }
}

#define FWD(what, q, k, v, o, lse, fields, value)                              \
  do {                                                                         \
    snap_all();                                                                \
    fa_status s_ = fa_forward(ctx, &base, q, k, v, o, lse);                    \
    EXPECT_FAIL(what, s_, FA_ERR_INVALID_ARGUMENT, fields, value);             \
    nothing_written(what);                                                     \
    /* A plan for those tensors is refused the same way (plans check the       \
       tensors they are made for). */                                          \
    fa_plan *p_ = NULL;                                                        \
    snap_all();                                                                \
    s_ = fa_plan_create(ctx, &base, q, k, v, o, &p_);                          \
    if (s_ == FA_OK) /* (the lse is a run's argument) */                       \
      s_ = fa_plan_forward(p_, q, k, v, o, lse);                               \
    EXPECT_FAIL(what " (plan)", s_, FA_ERR_INVALID_ARGUMENT, fields, value);   \
    nothing_written(what " (plan)");                                           \
    fa_plan_destroy(p_);                                                       \
  } while (0)

#define BWD(what, q, k, v, o, d_o, lse, dq, dk, dv, fields, value)             \
  do {                                                                         \
    snap_all();                                                                \
    fa_status s_ = fa_backward(ctx, &base, q, k, v, o, d_o, lse, dq, dk, dv);  \
    EXPECT_FAIL(what, s_, FA_ERR_INVALID_ARGUMENT, fields, value);             \
    nothing_written(what);                                                     \
  } while (0)

static void test_overflowing_strides(void) {
  fa_tensor t = Q(qb.p);
  t.stride_batch = INT64_MAX / 2;
  FWD("q.stride_batch INT64_MAX/2", t, K(kb.p), K(vb.p), Q(ob.p), lb.p, "q",
      NULL);
  t = K(kb.p);
  t.stride_seq = (int64_t)1 << 61; // 6 x 2^61 overflows
  FWD("k.stride_seq 2^61", Q(qb.p), t, K(vb.p), Q(ob.p), lb.p, "k", NULL);
  t = Q(ob.p);
  t.stride_head = INT64_MAX;
  FWD("o.stride_head INT64_MAX", Q(qb.p), K(kb.p), K(vb.p), t, lb.p, "o", NULL);
  // Merge: a part whose strides overflow.
  fa_tensor parts[2] = {Q(qb.p), Q(dob.p)};
  parts[1].stride_seq = INT64_MAX / 3;
  const float *lses[2] = {lb.p, lb.p};
  snap_all();
  fa_status s =
      fa_merge_states(ctx, 2, parts, lses, B, SQ, HQ, D, Q(ob.p), NULL);
  EXPECT_FAIL("merge part stride_seq INT64_MAX/3", s, FA_ERR_INVALID_ARGUMENT,
              "o_parts", NULL);
  nothing_written("merge part stride overflow");
}

static void test_cross_overlaps(void) {
  // o overlapping each input; lse overlapping o and each input.
  FWD("o overlaps q", Q(qb.p), K(kb.p), K(vb.p), Q(qb.p), lb.p, "o q", NULL);
  fa_tensor o_in_k = Q((float *)kb.p + 3); // (k's buffer is larger than o)
  FWD("o overlaps k", Q(qb.p), K(kb.p), K(vb.p), o_in_k, lb.p, "o k", NULL);
  FWD("lse overlaps o", Q(qb.p), K(kb.p), K(vb.p), Q(ob.p), (float *)ob.p + 7,
      "lse o", NULL);
  FWD("lse overlaps v", Q(qb.p), K(kb.p), K(vb.p), Q(ob.p), (float *)vb.p,
      "lse v", NULL);
  // Backward: a gradient overlapping an input, another gradient, or lse
  // (lse is an input of the backward: the library once accepted this).
  fa_status s =
      fa_forward(ctx, &base, Q(qb.p), K(kb.p), K(vb.p), Q(ob.p), lb.p);
  EXPECT_OK("forward for backward", s);
  BWD("dq overlaps do", Q(qb.p), K(kb.p), K(vb.p), Q(ob.p), Q(dob.p), lb.p,
      Q(dob.p), K(dkb.p), K(dvb.p), "dq do", NULL);
  BWD("dv overlaps dk", Q(qb.p), K(kb.p), K(vb.p), Q(ob.p), Q(dob.p), lb.p,
      Q(dqb.p), K(dkb.p), K((float *)dkb.p + 1), "dv dk", NULL);
  BWD("dk overlaps v", Q(qb.p), K(kb.p), K(vb.p), Q(ob.p), Q(dob.p), lb.p,
      Q(dqb.p), K(vb.p), K(dvb.p), "dk v", NULL);
  // lse inside dq's buffer: the forward wrote it there (dq is not part of
  // the forward); the backward must then refuse dq.
  float *lse_in_dq = (float *)dqb.p + 16;
  s = fa_forward(ctx, &base, Q(qb.p), K(kb.p), K(vb.p), Q(ob.p), lse_in_dq);
  EXPECT_OK("forward writing lse into dq's buffer", s);
  BWD("dq overlaps lse", Q(qb.p), K(kb.p), K(vb.p), Q(ob.p), Q(dob.p),
      lse_in_dq, Q(dqb.p), K(dkb.p), K(dvb.p), "dq lse", NULL);
  float *lse_in_dv = (float *)dvb.p;
  s = fa_forward(ctx, &base, Q(qb.p), K(kb.p), K(vb.p), Q(ob.p), lse_in_dv);
  EXPECT_OK("forward writing lse into dv's buffer", s);
  BWD("dv overlaps lse", Q(qb.p), K(kb.p), K(vb.p), Q(ob.p), Q(dob.p),
      lse_in_dv, Q(dqb.p), K(dkb.p), K(dvb.p), "dv lse", NULL);
}

static void test_merge_overlaps(void) {
  // Two parts (o and do's buffers, with lse and a second lse in dq's).
  float *l0 = lb.p, *l1 = (float *)dqb.p;
  fa_tensor parts[2] = {Q(ob.p), Q(dob.p)};
  const float *lses[2] = {l0, l1};
  snap_all();
  EXPECT_OK("merge in place (o is part 1, lse is lse_parts[0])",
            fa_merge_states(ctx, 2, parts, lses, B, SQ, HQ, D, Q(dob.p), l0));
#define MERGE(what, o, lse, fields)                                            \
  do {                                                                         \
    snap_all();                                                                \
    fa_status s_ = fa_merge_states(ctx, 2, parts, lses, B, SQ, HQ, D, o, lse); \
    EXPECT_FAIL(what, s_, FA_ERR_INVALID_ARGUMENT, fields, NULL);              \
    nothing_written(what);                                                     \
  } while (0)
  fa_tensor shifted = Q((float *)dob.p + 1);
  MERGE("merge o one element into part 1", shifted, NULL, "o o_parts");
  fa_tensor relaid = Q(dob.p);
  relaid.stride_head = D * SQ; // same data, another layout (BHSD-like)
  relaid.stride_seq = D;
  relaid.stride_batch = (int64_t)D * SQ * HQ;
  MERGE("merge o = part 1 with another layout", relaid, NULL, "o o_parts");
  MERGE("merge lse one float into lse_parts[1]", Q(qb.p), l1 + 1,
        "lse lse_parts");
  MERGE("merge lse inside o_parts[0]", Q(qb.p), (float *)ob.p, "lse o_parts");
  MERGE("merge lse inside o", Q(qb.p), (float *)qb.p + 2, "lse o");
#undef MERGE
}

static void test_malloc_failure(void) {
  // A size no allocator grants (ASan's returns NULL with
  // allocator_may_return_null=1, set by CMake for this test).
  void *const sentinel = (void *)(uintptr_t)0x40;
  void *p = sentinel;
  fa_status s = fa_malloc(ctx, (size_t)1 << 60, &p);
  EXPECT_FAIL("malloc 2^60 bytes", s, FA_ERR_OUT_OF_MEMORY, "bytes", NULL);
  CHECK(p == sentinel, "a failing fa_malloc wrote *ptr");
}

/* A contiguous BSHD view at fake address `slot` * 2^52: plans look at the
   tensors' layout (strides, alignment) and never read them, and slots that
   far apart never overlap. */
static fa_tensor fake_bshd(int slot, int64_t seq, int64_t heads, int64_t dim,
                           fa_dtype dt) {
  fa_tensor t = {(void *)((uintptr_t)slot << 52),
                 dt,
                 seq * heads * dim,
                 heads * dim,
                 dim,
                 NULL,
                 0};
  return t;
}

/* Valid problems too large for any memory: fa_explain accepts them (it
   reads no tensor) and fa_plan_create either accepts them or refuses
   tensors whose offsets overflow 64 bits; neither may overflow (the plan's
   arithmetic, once int: caught by UBSan in the sanitizer build) nor take
   seconds (the plan's block count once walked 2^31 q blocks; the array
   checks once looped over 2^31 sequences that have no arrays). */
static void test_extreme_valid_problems(void) {
  // batch, seqlen_q, seqlen_k, heads_q, heads_kv
  static const int big[4][5] = {{1, INT_MAX, INT_MAX, 1, 1},
                                {1 << 20, 1 << 20, 1 << 20, 1 << 20, 1 << 20},
                                {INT_MAX, 3, 5, 1, 1},
                                {1, 3, 5, INT_MAX, 1}}; // a 2^31-head group
  for (int i = 0; i < 4; i++) {
    fa_attention a =
        ts_problem(big[i][0], big[i][1], big[i][2], big[i][3], big[i][4], 128);
    a.causal = FA_CAUSAL_BOTTOM_RIGHT;
    double t0 = (double)clock() / CLOCKS_PER_SEC;
    char text[2048];
    size_t n = fa_explain(&a, FA_BF16, text, sizeof text);
    CHECK(n > 0 && strstr(text, "taken"), "extreme problem %d: explain: %s", i,
          text);
    fa_tensor q = fake_bshd(1, a.seqlen_q, a.heads_q, 128, FA_BF16);
    fa_tensor k = fake_bshd(2, a.seqlen_k, a.heads_kv, 128, FA_BF16);
    fa_tensor v = fake_bshd(3, a.seqlen_k, a.heads_kv, 128, FA_BF16);
    fa_tensor o = fake_bshd(4, a.seqlen_q, a.heads_q, 128, FA_BF16);
    fa_plan *plan = NULL;
    fa_status s = fa_plan_create(ctx, &a, q, k, v, o, &plan);
    CHECK(s == FA_OK || (s == FA_ERR_INVALID_ARGUMENT &&
                         strstr(fa_last_error(), "overflow")),
          "extreme problem %d: plan: %d %s", i, (int)s, fa_last_error());
    if (plan) {
      fa_plan_describe(plan, text, sizeof text);
      fa_plan_destroy(plan);
    }
    double dt = (double)clock() / CLOCKS_PER_SEC - t0;
    CHECK(dt < 1.0, "extreme problem %d: explain + plan took %.1f s", i, dt);
  }
}

/* A paged problem at the largest seqlen_k: 2048 pages of 2^20 slots (the
   array check once computed the block count in int: UB at INT_MAX). */
static void test_paged_int_max(void) {
  enum { MB = 2048 };
  static int32_t table[MB];
  for (int i = 0; i < MB; i++) table[i] = i % 3;
  fa_attention a = ts_problem(1, 1, INT_MAX, 1, 1, 64);
  a.block_table = table;
  a.max_blocks_per_seq = MB;
  a.page_size = 1 << 20;
  a.num_pages = 3;
  fa_tensor q = fake_bshd(1, 1, 1, 64, FA_F32);
  fa_tensor k = fake_bshd(2, 1 << 20, 1, 64, FA_F32); // a page per "batch"
  fa_tensor v = fake_bshd(3, 1 << 20, 1, 64, FA_F32);
  fa_tensor o = fake_bshd(4, 1, 1, 64, FA_F32);
  fa_plan *plan = NULL;
  EXPECT_OK("plan of a paged INT_MAX-key problem",
            fa_plan_create(ctx, &a, q, k, v, o, &plan));
  fa_plan_destroy(plan);
  table[MB - 1] = 3; // the last block, past num_pages: refused
  fa_status s = fa_plan_create(ctx, &a, q, k, v, o, &plan);
  EXPECT_FAIL("paged INT_MAX keys, last entry 3 of 3 pages", s,
              FA_ERR_INVALID_ARGUMENT, "block_table", "3");
}

int main(void) {
  if (fa_context_create_by_name(&ctx, "cpu.scalar.f32") != FA_OK) {
    fprintf(stderr, "cpu.scalar.f32 not available: %s\n", fa_last_error());
    return 77;
  }
  au_buf *in[] = {&qb, &kb, &vb, &dob};
  size_t n[] = {NQ, NK, NK, NQ};
  for (int i = 0; i < 4; i++) {
    au_alloc(in[i], n[i] * sizeof(float));
    au_fill_uniform(in[i]->p, n[i], -1, 1);
  }
  au_alloc(&ob, NQ * sizeof(float));
  au_alloc(&lb, NL * sizeof(float));
  au_alloc(&dqb, NQ * sizeof(float));
  au_alloc(&dkb, NK * sizeof(float));
  au_alloc(&dvb, NK * sizeof(float));
  base = ts_problem(B, SQ, SK, HQ, HKV, D);
  test_overflowing_strides();
  test_cross_overlaps();
  test_merge_overlaps();
  test_malloc_failure();
  test_extreme_valid_problems();
  test_paged_int_max();
  fa_context_destroy(ctx);
  au_buf *all[] = {&qb, &kb, &vb, &ob, &lb, &dob, &dqb, &dkb, &dvb};
  for (int i = 0; i < 9; i++) au_free(all[i]);
  return ut_finish("test_error_paths");
}
