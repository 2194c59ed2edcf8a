// SPDX-License-Identifier: MIT
// The backward groups of the grid, the tensor-core shapes and the edge
// numerics (fwd.edge, bwd.edge).
#include "tensor.h"
#include "xval.h"
#include "xval_groups.h"

typedef xv_list list;

/* ---- backward groups ----------------------------------------------------- */

void xv_bwd_dims(xv_list *l) {
  static const int dims[] = {1, 8, 13, 32, 64, 80, 96, 128, 256};
  static const int lens[][2] = {{33, 47}, {47, 33}, {64, 64}, {17, 129}};
  for (int i = 0; i < 9; i++)
    for (int t = 0; t < 2; t++) {
      xcase c = xv_default();
      c.bwd = 1;
      c.dt = t ? low(i) : FA_F32;
      c.d = c.dv = dims[i];
      c.sq = lens[(i + t) % 4][0];
      c.sk = lens[(i + t) % 4][1];
      c.causal = (i + t) % 3 == 1 ? BR : 0;
      c.hkv = i % 2 ? 1 : 2;
      c.layout = t ? TS_BHSD : TS_BSHD;
      if (dims[i] >= 128) c.b = 1;
      add(l, c);
    }
  static const int dv[][2] = {{64, 32}, {32, 80}};
  for (int i = 0; i < 2; i++)
    for (int t = 0; t < 2; t++) {
      xcase c = xv_default();
      c.bwd = 1;
      c.dt = t ? low(i) : FA_F32;
      c.d = dv[i][0];
      c.dv = dv[i][1];
      c.sq = 40;
      c.sk = 56;
      c.causal = t ? BR : 0;
      add(l, c);
    }
  xcase c = xv_default();
  c.bwd = 1;
  c.hdv0 = 1;
  c.d = c.dv = 48;
  add(l, c);
  for (int t = 0; t < 2; t++) { // the largest head dim
    c = xv_default();
    c.bwd = 1;
    c.b = 1;
    c.d = c.dv = 512;
    c.sq = 33;
    c.sk = 40;
    c.dt = t ? FA_BF16 : FA_F32;
    c.causal = t ? BR : 0;
    add(l, c);
  }
}

void xv_bwd_lengths(xv_list *l) {
  static const int lens[][2] = {{1, 1},     {1, 300},   {300, 1},   {127, 129},
                                {129, 127}, {128, 128}, {300, 300}, {257, 513}};
  for (int i = 0; i < 8; i++)
    for (int t = 0; t < 2; t++) {
      xcase c = xv_default();
      c.bwd = 1;
      c.dt = t ? low(i) : FA_F32;
      c.sq = lens[i][0];
      c.sk = lens[i][1];
      c.hq = 2;
      c.hkv = 1;
      c.causal = (i + t) % 3 == 1 ? BR : (i + t) % 3 == 2 ? TL : 0;
      if (c.sq >= 256 || c.sk >= 256) c.b = 1;
      add(l, c);
    }
}

void xv_bwd_masks(xv_list *l) {
  static const int pick[] = {0, 1, 2, 3, 4, 5, 6, 8};
  static const int shapes[][2] = {{17, 65}, {65, 17}, {64, 64}};
  for (int s = 0; s < 3; s++)
    for (int m = 0; m < 8; m++) {
      xcase c = xv_default();
      c.bwd = 1;
      c.dt = dtypes[(m + s) % 3];
      set_mask(&c, masks[pick[m]]);
      c.sq = shapes[s][0];
      c.sk = shapes[s][1];
      c.hkv = 1;
      c.d = c.dv = 32;
      add(l, c);
    }
}

void xv_bwd_features(xv_list *l) {
  xcase c;
#define F(...)                                                                 \
  XV_CASE(l, c, c.bwd = 1; c.hq = 4; c.hkv = 2; c.sq = 40; c.sk = 56;          \
          c.d = c.dv = 32; __VA_ARGS__)
  F(c.cap = 2.0f);
  F(c.cap = 1.0f; c.scale = 0.5f; c.causal = BR; c.dt = FA_F16);
  F(c.alibi = 1; c.causal = BR);
  F(c.alibi = 1; c.dt = FA_BF16);
  F(c.sinks = 1);
  F(c.sinks = 1; c.causal = BR; c.sq = 56; c.sk = 40); // empty rows
  F(c.sinks = 1; c.dt = FA_F16; c.causal = TL);
  F(c.cap = 3.0f; c.alibi = 1; c.sinks = 1; c.wl = 10; c.wr = 3);
  F(c.scale = 0.4f; c.causal = BR);
  F(c.qamp = 4.0f);
  F(c.qamp = 4.0f; c.causal = TL; c.dt = FA_BF16);
#undef F
}

void xv_bwd_gqa(xv_list *l) {
  static const int h[][2] = {{8, 2}, {8, 2}, {7, 1}, {7, 1}, {8, 1}, {4, 4}};
  for (int i = 0; i < 6; i++) {
    xcase c = xv_default();
    c.bwd = 1;
    c.hq = h[i][0];
    c.hkv = h[i][1];
    c.d = c.dv = 32;
    c.sq = 40;
    c.sk = 56;
    c.dt = i % 2 ? low(i / 2) : FA_F32;
    c.causal = i % 2 ? BR : 0;
    if (i == 4) c.wl = 8, c.wr = 8;
    add(l, c);
  }
}

void xv_bwd_varlen(xv_list *l) {
  xcase c;
#define V(...)                                                                 \
  XV_CASE(l, c, c.bwd = 1; c.varlen = 1; c.b = 5; c.sq = 40; c.sk = 60;        \
          c.hq = 4; c.hkv = 2; c.d = c.dv = 32; __VA_ARGS__)
  V();
  V(c.causal = BR; c.dt = FA_F16);
  V(c.causal = TL);
  V(c.wl = 6; c.wr = 2; c.dt = FA_BF16);
  V(c.hq = 8; c.hkv = 1; c.causal = BR);
  V(c.seqused = 1; c.causal = BR);
  V(c.varlen = 2; c.causal = BR);
  V(c.sinks = 1; c.sq = 60; c.sk = 40; c.causal = BR);
  V(c.slack = 6; c.mixed = 1);
#undef V
}

void xv_bwd_paged(xv_list *l) {
  xcase c;
#define P(...)                                                                 \
  XV_CASE(l, c, c.bwd = 1; c.page = 16; c.seqused = 1; c.b = 3; c.sq = 17;     \
          c.sk = 70; c.d = c.dv = 32; __VA_ARGS__)
  P();
  P(c.page = 3; c.causal = BR; c.dt = FA_F16);
  P(c.page = 1; c.seqused = 0);
  P(c.page = 7; c.hq = 4; c.hkv = 1; c.dt = FA_BF16; c.causal = BR);
  P(c.page = 5; c.varlen = 2; c.causal = BR);
  P(c.page = 3; c.slack = 8; c.mixed = 1; c.dt = FA_F16);
#undef P
}

void xv_bwd_layout(xv_list *l) {
  xcase c;
#define L(...)                                                                 \
  XV_CASE(l, c, c.bwd = 1; c.sq = 40; c.sk = 56; c.hq = 4; c.d = c.dv = 32;    \
          __VA_ARGS__)
  L(c.layout = TS_BHSD);
  L(c.layout = TS_SBHD; c.pad = 3; c.dt = FA_F16);
  L(c.pad = 16; c.dt = FA_BF16; c.causal = BR);
  L(c.layout = XV_LAYOUT_PACKED; c.sq = c.sk = 48; c.hkv = 2);
  L(c.layout = TS_BHSD; c.mixed = 1; c.pad = 1; c.causal = TL);
#undef L
}

/* Shapes of the GPU tensor-core kernels (16-bit, head dims 64/128): the
   groups above mostly use d32, which those kernels hand to the generic
   ones. Sizes stay small enough for the float64 oracle and the CPU
   backends, with q blocks and key blocks cut at odd places. */
void xv_fwd_tensor_core(xv_list *l) {
  xcase c;
#define T(...) XV_CASE(l, c, c.d = c.dv = 128; c.dt = FA_BF16; __VA_ARGS__)
  // Decode through the d128 decode tile (GQA packed, split-KV).
  T(c.threads = 8; c.sq = 1; c.b = 3; c.hq = 8; c.hkv = 2; c.sk = 1000;
    c.seqused = 1);
  T(c.threads = 8; c.sq = 1; c.b = 2; c.hq = 8; c.hkv = 2; c.sk = 777;
    c.dt = FA_F16);
  T(c.threads = 8; c.sq = 4; c.b = 1; c.hq = 4; c.hkv = 1; c.sk = 1500;
    c.causal = BR);
  // Prefill-sized blocks.
  T(c.sq = 200; c.sk = 300; c.hq = 4; c.hkv = 2; c.causal = BR);
  T(c.sq = 129; c.sk = 129; c.d = c.dv = 64; c.dt = FA_F16; c.causal = TL);
  T(c.b = 3; c.sq = 150; c.sk = 190; c.varlen = 1; c.seqused = 1; c.slack = 5;
    c.hq = 4; c.hkv = 2; c.d = c.dv = 64);
#undef T
}

void xv_bwd_tensor_core(xv_list *l) {
  xcase c;
#define T(...)                                                                 \
  XV_CASE(l, c, c.bwd = 1; c.d = c.dv = 128; c.dt = FA_BF16; c.hq = 4;         \
          c.hkv = 2; __VA_ARGS__)
  T(c.sq = 200; c.sk = 300);
  T(c.sq = 200; c.sk = 300; c.causal = BR; c.dt = FA_F16);
  T(c.sq = 300; c.sk = 130; c.causal = TL);
  T(c.sq = 257; c.sk = 257; c.wl = 40; c.wr = 7; c.dt = FA_F16);
  T(c.b = 1; c.sq = 129; c.sk = 260; c.hq = 7; c.hkv = 1; c.causal = BR);
  T(c.b = 3; c.sq = 150; c.sk = 190; c.varlen = 1; c.seqused = 1; c.slack = 5;
    c.causal = BR);
  T(c.sq = 1; c.sk = 129);
  T(c.sq = 17; c.sk = 200; c.causal = BR; c.dt = FA_F16);
  T(c.d = c.dv = 64; c.sq = 200; c.sk = 300);
  T(c.d = c.dv = 64; c.sq = 300; c.sk = 300; c.causal = BR; c.dt = FA_F16);
  T(c.d = c.dv = 64; c.b = 3; c.sq = 150; c.sk = 190; c.varlen = 1;
    c.seqused = 1; c.slack = 5; c.hq = 7; c.hkv = 1);
  T(c.d = c.dv = 64; c.sq = 130; c.sk = 70; c.wl = 20; c.wr = 20;
    c.qamp = 4.0f);
#undef T
}

/* tests/stress's edge numerics (logits of +-1e4, f16 near 65504, equal
   scores, a NaN in q, k or v) through every backend, each element within
   fz_tol.h's forward bounds: what any correct fp32-accumulating kernel
   meets. (On the GPU tensor-core kernels a NaN in v may also reach rows
   that cannot see it, as flashattn.h allows: a NaN there is accepted.)
   The bounds assume rounded logits, so at +-1e4 they allow ~0.25 max|v|
   and catch what breaks there (exp overflow or underflow, a lost row max:
   NaN, inf, 0); tests/stress keeps the CPU's tight bound for these
   exact-integer logits (1e-5 max|v|); the inf inputs and the NaN rules of
   the backward are groups fwd.stress and bwd.stress (xval_stress.c). Shapes
   include d64 f16/bf16 ones, which the GPU tensor-core kernels take. */
static void edge_cases(list *l, int bwd) {
  xcase c;
#define E(...)                                                                 \
  XV_CASE(l, c, c.bwd = bwd; c.expect = XV_EXPECT_ELEMENTWISE; __VA_ARGS__)
  // Logits of +-1e4, exact in fp32 (integer q, k; scale 1).
  for (int g = XV_GEN_LOGITS_POS; g <= XV_GEN_LOGITS_NEG; g++) {
    E(c.gen = g; c.sq = 17; c.sk = 70; c.hq = 2; c.hkv = 1; c.d = c.dv = 16;
      c.scale = 1.0f);
    E(c.gen = g; c.sq = 17; c.sk = 70; c.hq = 2; c.hkv = 1; c.d = c.dv = 16;
      c.scale = 1.0f; c.causal = BR);
    E(c.gen = g; c.sq = 40; c.sk = 70; c.hq = 2; c.hkv = 1; c.d = c.dv = 16;
      c.scale = 1.0f; c.wl = 20; c.wr = 3);
    E(c.gen = g; c.sq = 70; c.sk = 130; c.hq = 4; c.hkv = 2; c.scale = 1.0f;
      c.causal = BR; c.dt = FA_BF16);
  }
  // f16 near 65504: O(1) logits (scale 1 / (65504^2 * 8)), then the
  // default scale (logits ~1e9, beyond fp32's resolution: finite only).
  const float tiny = (float)(1.0 / (65504.0 * 65504.0 * 8.0));
  E(c.gen = XV_GEN_F16MAX; c.dt = FA_F16; c.sq = 9; c.sk = 33; c.hq = 4;
    c.scale = tiny);
  E(c.gen = XV_GEN_F16MAX; c.dt = FA_F16; c.sq = 70; c.sk = 130; c.hq = 4;
    c.scale = tiny; c.causal = BR);
  E(c.gen = XV_GEN_F16MAX; c.dt = FA_BF16; c.sq = 70; c.sk = 130; c.hq = 4;
    c.scale = tiny);
  E(c.gen = XV_GEN_F16MAX; c.dt = FA_F16; c.sq = 9; c.sk = 33; c.hq = 4);
  // Every score equal: O is the mean of the visible v rows.
  E(c.gen = XV_GEN_EQUAL; c.b = 1; c.sq = 7; c.sk = 50; c.hq = 2; c.hkv = 1;
    c.d = c.dv = 8; c.wl = 20);
  E(c.gen = XV_GEN_EQUAL; c.sq = 70; c.sk = 130; c.dt = FA_F16; c.wl = 20);
  E(c.gen = XV_GEN_EQUAL; c.sq = 70; c.sk = 130; c.dt = FA_BF16; c.causal = BR);
  if (bwd) return; // (the backward's NaN cases: bwd.stress)
  // One NaN in q, k or v: the rows that see it are NaN, every other element
  // as the oracle's (a masked key contributes nothing, not even 0 * NaN).
  E(c.gen = XV_GEN_NAN_Q; c.sq = 70; c.sk = 130; c.causal = BR);
  E(c.gen = XV_GEN_NAN_Q; c.sq = 70; c.sk = 130; c.wl = 20; c.wr = 3;
    c.dt = FA_BF16);
  E(c.gen = XV_GEN_NAN_K; c.sq = 70; c.sk = 130; c.causal = BR);
  E(c.gen = XV_GEN_NAN_K; c.sq = 70; c.sk = 130; c.wl = 20; c.wr = 3;
    c.dt = FA_F16);
  E(c.gen = XV_GEN_NAN_V; c.sq = 70; c.sk = 130; c.wl = 20; c.wr = 3);
  E(c.gen = XV_GEN_NAN_V; c.sq = 70; c.sk = 130; c.causal = BR; c.dt = FA_BF16);
  // Split-KV decode: the NaN's key inside the window, then outside it.
  E(c.gen = XV_GEN_NAN_V; c.sq = 1; c.sk = 900; c.hq = 8; c.hkv = 2; c.wl = 700;
    c.wr = 0; c.dt = FA_F16; c.threads = 8);
  E(c.gen = XV_GEN_NAN_V; c.sq = 1; c.sk = 900; c.hq = 8; c.hkv = 2; c.wl = 400;
    c.wr = 0; c.dt = FA_F16; c.threads = 8);
#undef E
}

void xv_fwd_edge(xv_list *l) { edge_cases(l, 0); }

/* The same inputs through the backward: every gradient element within
   fz_tol.h's bounds (tests/stress's), which carry the forward's into dP, D
   and dS. Equal scores keep them tight; at logits of +-1e4 and f16 near
   65504 they only catch the gross (non-finite, overflowed, misplaced)
   errors. At the default scale f16 near 65504 gives logits fp32 cannot
   resolve: the gradients must only be finite (dO.v does not overflow at
   d 64). */
void xv_bwd_edge(xv_list *l) { edge_cases(l, 1); }
