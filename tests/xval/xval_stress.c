// SPDX-License-Identifier: MIT
// Groups fwd.stress, bwd.stress and fwd.longrow: the numerics tests/stress
// checked on the CPU backends only, as grid cases every backend and kernel
// gets (GPU included), each element against the oracle
// (XV_EXPECT_ELEMENTWISE, or XV_EXPECT_EXACT where the result is exact):
//   - every row sees one key (causal bottom-right, window_left 0): O = v
//     bit for bit, in every dtype;
//   - rows that see no key (causal with sq > sk, with and without sinks; a
//     zero window; seqused_k 0): O exactly 0, LSE -inf or the sink;
//   - scores of -inf and +inf (XV_GEN_INF_Q): a row whose every score is
//     -inf is NaN, unlike a row with no key;
//   - a NaN in q, k, v or dO on small shapes that take the row-streaming
//     paths as well as the tile ones: forward and backward NaN exactly
//     where the oracle's is (0 * NaN through a masked P or dS must not
//     leak);
//   - GQA 64 query heads per kv head; head dims 1 and 512 backward;
// and group fwd.longrow: one query row against 131072 keys (split-KV);
// rows of 40000 keys on one thread (longer than the CPU forward's folded
// chunks) with a window, sinks and a NaN in v; rows of ~20000 keys folded
// through whole tiles (80 lanes: bf16 AMX items and GEMM tiles).
#include "xval.h"
#include "xval_groups.h"

static const fa_dtype dts[3] = {FA_F32, FA_F16, FA_BF16};

/* One case: the defaults, compared element by element, then the fields
   given (the enclosing function has l, c and bwd). */
#define S(...)                                                                 \
  XV_CASE(l, c, c.bwd = bwd; c.expect = XV_EXPECT_ELEMENTWISE; __VA_ARGS__)

static void stress_cases(xv_list *l, int bwd) {
  xcase c;
  for (int t = 0; t < 3; t++) {
    // One key per row: the diagonal.
    S(c.dt = dts[t]; c.sq = c.sk = 19; c.hq = 4; c.d = c.dv = 24; c.causal = BR;
      c.wl = 0; c.expect = bwd ? c.expect : XV_EXPECT_EXACT);
    S(c.dt = dts[t]; c.sq = c.sk = 70; c.hq = 4; c.causal = BR; c.wl = 0;
      c.expect = bwd ? c.expect : XV_EXPECT_EXACT);
    // Infinite scores (forward: the backward of a NaN row is NaN, and the
    // oracle's gradients say where).
    if (!bwd) {
      S(c.dt = dts[t]; c.b = 1; c.sq = c.sk = 12; c.hkv = 1; c.d = c.dv = 8;
        c.causal = BR; c.gen = XV_GEN_INF_Q);
      S(c.dt = dts[t]; c.sq = 70; c.sk = 130; c.hq = 4; c.causal = BR;
        c.gen = XV_GEN_INF_Q);
    }
    // One NaN in q, k, v (or dO, backward) through the tile product path
    // (16 rows and more) and the row-streaming one (a few rows), under a
    // causal mask, a two-sided window and a GQA decode step.
    // 16-bit cases at head dim 64, which the tensor-core kernels take.
    const int dn = dts[t] == FA_F32 ? 8 : 64;
    for (int g = XV_GEN_NAN_Q; g <= XV_GEN_NAN_DO; g++) {
      if (g == XV_GEN_NAN_DO && !bwd) continue;
      S(c.dt = dts[t]; c.gen = g; c.b = 1; c.sq = c.sk = 16; c.hq = 1;
        c.hkv = 1; c.d = c.dv = dn; c.causal = BR);
      S(c.dt = dts[t]; c.gen = g; c.b = 1; c.sq = c.sk = 6; c.hq = 1; c.hkv = 1;
        c.d = c.dv = dn; c.causal = BR);
      S(c.dt = dts[t]; c.gen = g; c.b = 1; c.sq = c.sk = 40; c.hq = 1;
        c.hkv = 1; c.d = c.dv = dn; c.wl = 3; c.wr = 2);
      S(c.dt = dts[t]; c.gen = g; c.b = 1; c.sq = 5; c.sk = 40; c.hq = 1;
        c.hkv = 1; c.d = c.dv = dn; c.wl = 3; c.wr = 2);
      S(c.dt = dts[t]; c.gen = g; c.b = 1; c.sq = 2; c.sk = 3000; c.hq = 4;
        c.hkv = 1; c.d = c.dv = dn; c.wl = 1000; c.wr = 0);
    }
  }
  // Row maxima that rise along the keys, a little and a lot, through
  // several kv blocks (tile kernels: 128 lanes), full and causal.
  for (int t = 0; t < 3; t++)
    for (int cz = 0; cz < 2; cz++)
      S(c.dt = dts[t]; c.gen = XV_GEN_RISING_K; c.b = 1; c.sq = 128;
        c.sk = 1100; c.hq = 2; c.hkv = 1; c.d = c.dv = 64;
        c.causal = cz ? BR : 0);
  // Rows with no visible key.
  S(c.sq = 12; c.sk = 5; c.d = c.dv = 16; c.causal = BR);
  S(c.sq = 12; c.sk = 5; c.d = c.dv = 16; c.causal = BR; c.sinks = 1);
  S(c.sq = 70; c.sk = 30; c.causal = BR; c.dt = FA_BF16);
  S(c.sq = 12; c.sk = 5; c.d = c.dv = 16; c.wl = 0; c.wr = 0);
  S(c.b = 3; c.sq = 12; c.sk = 40; c.d = c.dv = 16; c.seqused = 1);
  // Head dims 1 and 512 through the backward (fwd.dims has them forward).
  for (int i = 0; bwd && i < 2; i++)
    for (int t = 0; t < 3; t += 2)
      S(c.dt = dts[t]; c.sq = 13; c.sk = 29; c.hkv = 1;
        c.d = c.dv = i ? 512 : 1; c.causal = BR);
  // GQA 64 x 2 kv heads.
  S(c.b = 1; c.sq = 5; c.sk = 300; c.hq = 128; c.hkv = 2; c.d = c.dv = 32;
    c.causal = BR);
  S(c.b = 1; c.sq = 5; c.sk = 300; c.hq = 128; c.hkv = 2; c.causal = BR;
    c.dt = FA_BF16);
}

/* Long rows, a group of their own (ci-arm64's emulated run leaves out
   every test named *longrow*). */
void xv_fwd_longrow(xv_list *l) {
  const int bwd = 0;
  xcase c;
  // One query against 131072 keys (split-KV), f32 and bf16.
  for (int t = 0; t < 3; t += 2)
    S(c.dt = dts[t]; c.b = 1; c.sq = 1; c.sk = 131072; c.hq = 4; c.hkv = 2;
      c.d = c.dv = t ? 64 : 32; c.threads = 8);
  // Rows of 40000 keys on one thread: row i sees keys 9995 + i ..
  // 39996 + i; then, with row i from key 13331 + i, a NaN in v (key sk/3 =
  // 13333) that rows 0..2 see and row 3 does not.
  for (int t = 0; t < 3; t += 2) {
    S(c.dt = dts[t]; c.b = 1; c.sq = 4; c.sk = 40000; c.hq = 2; c.hkv = 1;
      c.d = t ? 64 : 16; c.dv = t ? 64 : 8; c.causal = BR; c.wl = 30001;
      c.sinks = 1; c.threads = 1);
    S(c.dt = dts[t]; c.b = 1; c.sq = 4; c.sk = 40000; c.hq = 2; c.hkv = 1;
      c.d = t ? 64 : 16; c.dv = t ? 64 : 8; c.causal = BR; c.wl = 26665;
      c.sinks = 1; c.threads = 1; c.gen = XV_GEN_NAN_V);
  }
  // The same through whole tiles: 40 rows of 2 q heads per kv head (80
  // lanes), row i sees keys 9980 + i .. 29960 + i (the state folds); then
  // the NaN in v (key 10000) that rows 0..20 see and rows 21.. do not.
  for (int g = 0; g < 2; g++)
    S(c.dt = FA_BF16; c.b = 1; c.sq = 40; c.sk = 30000; c.hq = 2; c.hkv = 1;
      c.d = 32; c.dv = 16; c.causal = BR; c.wl = 19980; c.threads = 1;
      c.gen = g ? XV_GEN_NAN_V : c.gen);
}

void xv_fwd_stress(xv_list *l) { stress_cases(l, 0); }
void xv_bwd_stress(xv_list *l) { stress_cases(l, 1); }

#undef S
