// SPDX-License-Identifier: MIT
// The fields 0.2 added, refused when wrong: a sized-struct mismatch, a
// descale that is NaN, inf, 0 or negative (one value, or one entry of a
// per-head array), positions out of range or set without
// FA_POSITIONS_EXPLICIT, dsinks without sinks, a backward_mode that is not
// one, rows_q that disagrees with cu_seqlens_q. Each fails with
// FA_ERR_INVALID_ARGUMENT and a message naming the field (and the value),
// at every entry point that takes it (fa_forward, fa_backward,
// fa_plan_create, fa_plan_create_backward, and for values read per call,
// fa_plan_forward / fa_plan_backward on a plan made when they were
// valid), and writes nothing: o, lse, dq, dk, dv and dsinks keep their
// poison.
#include <stdint.h>

#include "api_util.h"

enum { B = 2, SQ = 5, SK = 7, HQ = 4, HKV = 2, D = 8 };
enum { NQ = B * SQ * HQ * D, NK = B * SK * HKV * D, NL = B * HQ * SQ };

static fa_context *ctx;
static au_buf qb, kb, vb, ob, dob, lb, dqb, dkb, dvb, dsb; // dsb: dsinks
static float lse_good[NL];
static float sinks[HQ];
static fa_attention base;
static fa_tensor tq, tk, tv, to, tdo, tdq, tdk, tdv;

static void setup(void) {
  ctx = au_context_or_skip("cpu.scalar.f32");
  au_buf *all[] = {&qb, &kb, &vb, &ob, &dob, &lb, &dqb, &dkb, &dvb, &dsb};
  const size_t n[] = {NQ, NK, NK, NQ, NQ, NL, NQ, NK, NK, HQ};
  for (int i = 0; i < 10; i++) au_alloc(all[i], n[i] * sizeof(float));
  au_fill_uniform(qb.p, NQ, -1, 1);
  au_fill_uniform(kb.p, NK, -1, 1);
  au_fill_uniform(vb.p, NK, -1, 1);
  au_fill_uniform(dob.p, NQ, -1, 1);
  for (int h = 0; h < HQ; h++) sinks[h] = 0.25f * (float)h;
  base = ts_problem(B, SQ, SK, HQ, HKV, D);
  tq = au_bshd(qb.p, SQ, HQ, D);
  tk = au_bshd(kb.p, SK, HKV, D);
  tv = au_bshd(vb.p, SK, HKV, D);
  to = au_bshd(ob.p, SQ, HQ, D);
  tdo = au_bshd(dob.p, SQ, HQ, D);
  tdq = au_bshd(dqb.p, SQ, HQ, D);
  tdk = au_bshd(dkb.p, SK, HKV, D);
  tdv = au_bshd(dvb.p, SK, HKV, D);
  // A valid o and lse for the backward's inputs.
  fa_status s = fa_forward(ctx, &base, tq, tk, tv, to, lse_good);
  if (s) {
    fprintf(stderr, "base forward failed: %s\n", fa_last_error());
    exit(1);
  }
  au_snapshot(&ob);
}

static void poison_all(void) {
  au_poison(&lb, 0x5a);
  au_poison(&dqb, 0xa5);
  au_poison(&dkb, 0xa5);
  au_poison(&dvb, 0xa5);
  au_poison(&dsb, 0xa5);
}

static void nothing_written(const char *what, int forward) {
  // o is the forward's output and the backward's input: poisoned for the
  // forward only (it must keep the base forward's values for the backward).
  au_buf *out[] = {&ob, &lb, &dqb, &dkb, &dvb, &dsb};
  const char *names[] = {"o", "lse", "dq", "dk", "dv", "dsinks"};
  for (int i = 0; i < 6; i++) {
    long at = au_changed(out[i]);
    CHECK(at < 0, "%s: %s written (byte %ld) by a failing %s", what, names[i],
          at, forward ? "forward" : "backward");
  }
}

/* Tensors of one call. */
typedef struct call {
  fa_tensor q, k, v, o, d_o, dq, dk, dv;
} call;

static call base_call(void) {
  call c = {tq, tk, tv, to, tdo, tdq, tdk, tdv};
  return c;
}

static fa_status run_forward(const fa_attention *a, const call *c) {
  memcpy(ob.snap, ob.p, ob.bytes);
  au_poison(&ob, 0xa5);
  poison_all();
  return fa_forward(ctx, a, c->q, c->k, c->v, c->o, lb.p);
}

static void restore_o(void) {
  // Put the base forward's o back for the backward calls.
  fa_forward(ctx, &base, tq, tk, tv, to, lse_good);
  au_snapshot(&ob);
}

static fa_status run_backward(const fa_attention *a, const call *c) {
  poison_all();
  au_snapshot(&ob);
  return fa_backward(ctx, a, c->q, c->k, c->v, c->o, c->d_o, lse_good, c->dq,
                     c->dk, c->dv);
}

/* One bad problem or call: FA_ERR_INVALID_ARGUMENT naming fields (and
   value) from fa_forward, fa_backward, fa_plan_create and
   fa_plan_create_backward, nothing written, no plan made. */
static void entries(const char *what, const fa_attention *a, const call *c,
                    const char *fields, const char *value, int bwd_only) {
  char w[256];
  fa_plan *p = (fa_plan *)(uintptr_t)1;
  if (!bwd_only) {
    snprintf(w, sizeof w, "%s (fa_forward)", what);
    EXPECT_FAIL(w, run_forward(a, c), FA_ERR_INVALID_ARGUMENT, fields, value);
    nothing_written(w, 1);
    restore_o();
    snprintf(w, sizeof w, "%s (fa_plan_create)", what);
    EXPECT_FAIL(w, fa_plan_create(ctx, a, c->q, c->k, c->v, c->o, &p),
                FA_ERR_INVALID_ARGUMENT, fields, value);
    CHECK(p == (fa_plan *)(uintptr_t)1, "%s: the plan pointer was written", w);
  }
  snprintf(w, sizeof w, "%s (fa_backward)", what);
  EXPECT_FAIL(w, run_backward(a, c), FA_ERR_INVALID_ARGUMENT, fields, value);
  nothing_written(w, 0);
  snprintf(w, sizeof w, "%s (fa_plan_create_backward)", what);
  EXPECT_FAIL(w,
              fa_plan_create_backward(ctx, a, c->q, c->k, c->v, c->o, c->d_o,
                                      c->dq, c->dk, c->dv, &p),
              FA_ERR_INVALID_ARGUMENT, fields, value);
  CHECK(p == (fa_plan *)(uintptr_t)1, "%s: the plan pointer was written", w);
}

static void all_entries(const char *what, const fa_attention *a, const call *c,
                        const char *fields, const char *value) {
  entries(what, a, c, fields, value, 0);
}

/* Values the problem's arrays hold are read per call: plans made while
   they were valid refuse the run once they are not. set(1) makes them
   bad, set(0) good again. */
static void per_call(const char *what, const fa_attention *a, const call *c,
                     void (*set)(int bad), const char *fields,
                     const char *value) {
  char w[256];
  set(0);
  fa_plan *pf = NULL, *pb = NULL;
  EXPECT_OK(what, fa_plan_create(ctx, a, c->q, c->k, c->v, c->o, &pf));
  EXPECT_OK(what, fa_plan_create_backward(ctx, a, c->q, c->k, c->v, c->o,
                                          c->d_o, c->dq, c->dk, c->dv, &pb));
  set(1);
  all_entries(what, a, c, fields, value);
  if (pf) {
    snprintf(w, sizeof w, "%s (fa_plan_forward)", what);
    memcpy(ob.snap, ob.p, ob.bytes);
    au_poison(&ob, 0xa5);
    poison_all();
    EXPECT_FAIL(w, fa_plan_forward(pf, c->q, c->k, c->v, c->o, lb.p),
                FA_ERR_INVALID_ARGUMENT, fields, value);
    nothing_written(w, 1);
    restore_o();
  }
  if (pb) {
    snprintf(w, sizeof w, "%s (fa_plan_backward)", what);
    poison_all();
    au_snapshot(&ob);
    EXPECT_FAIL(w,
                fa_plan_backward(pb, c->q, c->k, c->v, c->o, c->d_o, lse_good,
                                 c->dq, c->dk, c->dv),
                FA_ERR_INVALID_ARGUMENT, fields, value);
    nothing_written(w, 0);
  }
  set(0);
  if (pf) { // and runs again once they are valid
    EXPECT_OK(what, fa_plan_forward(pf, c->q, c->k, c->v, c->o, lb.p));
    restore_o();
  }
  fa_plan_destroy(pf);
  fa_plan_destroy(pb);
}

/* ---- struct_size -------------------------------------------------------- */

/* The 0.1 fa_attention: no size first, the problem starts with batch. */
typedef struct attention_v01 {
  int batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, head_dim_v;
  float scale;
  int causal, window_left, window_right;
  float softcap;
  const float *alibi_slopes, *sinks;
  const int32_t *cu_seqlens_q, *cu_seqlens_k, *seqused_k, *block_table;
  int max_blocks_per_seq, page_size, num_pages;
} attention_v01;

static void test_struct_size(void) {
  const call c = base_call();
  fa_attention a = base;
  char v[32];
  a.struct_size = 0;
  all_entries("struct_size 0", &a, &c, "struct_size", "0");
  a.struct_size = sizeof(fa_attention) - 8;
  snprintf(v, sizeof v, "%zu", sizeof(fa_attention) - 8);
  all_entries("struct_size sizeof - 8", &a, &c, "struct_size", v);
  struct {
    fa_attention a;
    unsigned char newer[8]; // a newer caller's extra field
  } big;
  memset(&big, 0, sizeof big);
  big.a = base;
  big.a.struct_size = sizeof(fa_attention) + 8;
  snprintf(v, sizeof v, "%zu", sizeof(fa_attention) + 8);
  all_entries("struct_size sizeof + 8", &big.a, &c, "struct_size", v);
  // A 0.1 program's problem: its first bytes are batch and seqlen_q. It
  // is read through its first field only (the size), never further.
  union {
    attention_v01 old;
    fa_attention pad; // (so that the object is as large as the new one)
  } u;
  memset(&u, 0, sizeof u);
  u.old.batch = B;
  u.old.seqlen_q = SQ;
  u.old.seqlen_k = SK;
  u.old.heads_q = HQ;
  u.old.heads_kv = HKV;
  u.old.head_dim = D;
  u.old.window_left = u.old.window_right = -1;
  size_t as_size;
  memcpy(&as_size, &u, sizeof as_size);
  snprintf(v, sizeof v, "%zu", as_size);
  all_entries("a 0.1 fa_attention (batch first)", &u.pad, &c, "struct_size", v);
  // fa_explain says the same instead of misreading the struct.
  char text[1024];
  fa_explain(&u.pad, FA_F32, text, sizeof text);
  CHECK(strstr(text, "struct_size") != NULL,
        "fa_explain of a 0.1 struct: \"%s\"", text);
}

/* ---- descales -------------------------------------------------------------
 */

static float ds_one[1] = {1.0f};
static float ds_head[B * HKV] = {1.0f, 0.5f, 2.0f, 1.0f};
static float *ds_target; // the entry set() spoils
static float ds_bad;

static void set_descale(int bad) { *ds_target = bad ? ds_bad : 0.75f; }

static void test_descales(void) {
  static const struct {
    float x;
    const char *shown;
  } bad[] = {{NAN, "nan"}, {INFINITY, "inf"}, {-INFINITY, "-inf"},
             {0.0f, "0"},  {-2.0f, "-2"},     {-0.0f, "-0"}};
  static const char *tn[3] = {"q", "k", "v"};
  for (int t = 0; t < 3; t++)
    for (int per = 0; per < 2; per++)
      for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        call c = base_call();
        fa_tensor *x = t == 0 ? &c.q : t == 1 ? &c.k : &c.v;
        x->descale = per ? ds_head : ds_one;
        x->descale_per_head = per;
        ds_target = per ? &ds_head[3] : &ds_one[0];
        ds_bad = bad[i].x;
        char what[128], fields[32];
        snprintf(what, sizeof what, "%s.descale%s = %s", tn[t],
                 per ? "[3] (per head)" : "", bad[i].shown);
        snprintf(fields, sizeof fields, "%s descale[%d]", tn[t], per ? 3 : 0);
        per_call(what, &base, &c, set_descale, fields,
                 bad[i].x == 0.0f ? NULL : bad[i].shown);
        ds_one[0] = 1.0f;
        ds_head[3] = 1.0f;
      }
  // Outputs never take a descale; descale_per_head is 0 or 1, and 1 needs
  // an array.
  call c = base_call();
  c.dq.descale = ds_one;
  entries("dq.descale set", &base, &c, "dq descale", NULL, 1);
  c = base_call();
  c.d_o.descale = ds_one;
  entries("do.descale set", &base, &c, "do descale", NULL, 1);
  c = base_call();
  c.o.descale = ds_one;
  all_entries("o.descale set", &base, &c, "o descale", NULL);
  c = base_call();
  c.k.descale = ds_one;
  c.k.descale_per_head = 2;
  all_entries("k.descale_per_head = 2", &base, &c, "k descale_per_head", "2");
  c = base_call();
  c.v.descale_per_head = 1;
  all_entries("v.descale_per_head without a descale", &base, &c,
              "v descale_per_head descale", NULL);
}

/* ---- positions ------------------------------------------------------------
 */

static int64_t qpos_arr[B], kpos_arr[B];
static int64_t *pos_target, pos_bad;
static void set_position(int bad) { *pos_target = bad ? pos_bad : 3; }

static void test_positions(void) {
  const call c = base_call();
  const int64_t L = FA_POSITION_LIMIT;
  char v[32];
  fa_attention a = base;
  a.positions = FA_POSITIONS_EXPLICIT;
  static const int64_t scalar_bad[] = {((int64_t)1 << 40), -((int64_t)1 << 40),
                                       INT64_MAX, INT64_MIN};
  for (int i = 0; i < 4; i++) {
    fa_attention x = a;
    x.q_position = scalar_bad[i];
    snprintf(v, sizeof v, "%lld", (long long)scalar_bad[i]);
    all_entries("q_position out of range", &x, &c, "q_position", v);
    x = a;
    x.k_position = scalar_bad[i];
    all_entries("k_position out of range", &x, &c, "k_position", v);
  }
  fa_attention ok = a;
  ok.q_position = L - 1;
  ok.k_position = -(L - 1);
  poison_all();
  EXPECT_OK("positions at the limit - 1",
            fa_forward(ctx, &ok, tq, tk, tv, to, lb.p));
  restore_o();
  // Per-sequence entries: alone out of range, or with the scalar.
  a.q_positions = qpos_arr;
  a.k_positions = kpos_arr;
  static const int64_t entry_bad[] = {((int64_t)1 << 40), -((int64_t)1 << 41),
                                      INT64_MIN};
  for (int i = 0; i < 3; i++) {
    snprintf(v, sizeof v, "%lld", (long long)entry_bad[i]);
    pos_target = &qpos_arr[1];
    pos_bad = entry_bad[i];
    per_call("q_positions[1] out of range", &a, &c, set_position,
             "q_positions[1]", v);
    pos_target = &kpos_arr[0];
    per_call("k_positions[0] out of range", &a, &c, set_position,
             "k_positions[0]", v);
  }
  fa_attention sum = a;
  sum.q_position = L / 2 + 1; // each valid, the sum is not
  pos_target = &qpos_arr[0];
  pos_bad = L / 2;
  snprintf(v, sizeof v, "%lld", (long long)(L / 2));
  per_call("q_position + q_positions[0] out of range", &sum, &c, set_position,
           "q_positions q_position", v);
  // Positions set while positions is FA_POSITIONS_ALIGNED.
  fa_attention al = base;
  al.q_position = 5;
  all_entries("q_position with FA_POSITIONS_ALIGNED", &al, &c,
              "q_position positions", NULL);
  al = base;
  al.k_position = -1;
  all_entries("k_position with FA_POSITIONS_ALIGNED", &al, &c,
              "k_position positions", NULL);
  al = base;
  al.q_positions = qpos_arr;
  all_entries("q_positions with FA_POSITIONS_ALIGNED", &al, &c,
              "q_positions positions", NULL);
  al = base;
  al.k_positions = kpos_arr;
  all_entries("k_positions with FA_POSITIONS_ALIGNED", &al, &c,
              "k_positions positions", NULL);
  al = base;
  al.positions = 2;
  all_entries("positions = 2", &al, &c, "positions", "2");
  al.positions = -1;
  all_entries("positions = -1", &al, &c, "positions", "-1");
}

/* ---- backward fields, rows_q -------------------------------------------- */

static int32_t cu_q[B + 1], cu_k[B + 1];

static void test_backward_fields(void) {
  const call c = base_call();
  fa_attention a = base;
  a.dsinks = dsb.p;
  all_entries("dsinks without sinks", &a, &c, "dsinks sinks", NULL);
  a = base;
  a.backward_mode = 2;
  all_entries("backward_mode = 2", &a, &c, "backward_mode", "2");
  a.backward_mode = -1;
  all_entries("backward_mode = -1", &a, &c, "backward_mode", "-1");
  // dsinks with sinks is valid, and written by the backward only.
  a = base;
  a.sinks = sinks;
  a.dsinks = dsb.p;
  fa_forward(ctx, &a, tq, tk, tv, to, lse_good);
  au_snapshot(&ob);
  poison_all();
  EXPECT_OK("dsinks with sinks (forward)",
            fa_forward(ctx, &a, tq, tk, tv, to, lse_good));
  CHECK(au_changed(&dsb) < 0, "fa_forward wrote dsinks");
  EXPECT_OK("dsinks with sinks (backward)",
            fa_backward(ctx, &a, tq, tk, tv, to, tdo, lse_good, tdq, tdk, tdv));
  CHECK(au_changed(&dsb) >= 0, "fa_backward did not write dsinks");
  restore_o();
}

/* rows_q stays 2 SQ; cu_seqlens_q[batch], read per call, moves. */
static int32_t rows_bad;
static void set_rows(int bad) { cu_q[B] = bad ? rows_bad : 2 * SQ; }

static void test_rows(void) {
  // Varlen: two sequences of SQ (and SK) rows in one [1][2S] tensor.
  cu_q[0] = cu_k[0] = 0;
  for (int b = 0; b < B; b++) {
    cu_q[b + 1] = cu_q[b] + SQ;
    cu_k[b + 1] = cu_k[b] + SK;
  }
  call c = base_call();
  fa_tensor *qs[] = {&c.q, &c.o, &c.d_o, &c.dq},
            *ks[] = {&c.k, &c.v, &c.dk, &c.dv};
  for (int i = 0; i < 4; i++) {
    qs[i]->stride_batch = 0;
    ks[i]->stride_batch = 0;
  }
  static fa_attention a;
  a = base;
  a.cu_seqlens_q = cu_q;
  a.cu_seqlens_k = cu_k;
  a.rows_q = 2 * SQ;
  static const int32_t bad[] = {2 * SQ - 1, 2 * SQ + 1, SQ};
  for (int i = 0; i < 3; i++) {
    char v[32];
    rows_bad = bad[i];
    snprintf(v, sizeof v, "%d", bad[i]);
    per_call("rows_q != cu_seqlens_q[batch]", &a, &c, set_rows,
             "rows_q cu_seqlens_q", v);
  }
  fa_attention x = a;
  x.rows_q = 2 * SQ + 2; // the field itself against the array
  all_entries("rows_q = 2 SQ + 2", &x, &c, "rows_q cu_seqlens_q", NULL);
  x.rows_q = -1;
  all_entries("rows_q = -1", &x, &c, "rows_q", "-1");
  x = base;
  x.rows_q = 10;
  const call dense = base_call();
  all_entries("rows_q without cu_seqlens_q", &x, &dense, "rows_q cu_seqlens_q",
              NULL);
  x = a;
  x.rows_k = 2 * SK + 3;
  char v[32];
  snprintf(v, sizeof v, "%d", 2 * SK + 3);
  all_entries("rows_k != cu_seqlens_k[batch]", &x, &c, "rows_k cu_seqlens_k",
              v);
}

int main(void) {
  setup();
  test_struct_size();
  test_descales();
  test_positions();
  test_backward_fields();
  test_rows();
  fa_context_destroy(ctx);
  return ut_finish("test_api_fields");
}
