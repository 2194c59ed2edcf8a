// SPDX-License-Identifier: MIT
// The cross-validation grid, group by group. Shapes are deterministic (a
// failure names its case and reproduces); the data is drawn fresh per run.
//
// Cost model for choosing sizes: the scalar CPU kernel and the float64
// oracle each spend ~b*hq*sq*sk*(d+dv) multiply-adds per forward (about
// 2.5x that per backward), at roughly 0.5-1 GFLOP/s. Long rows (300-2048)
// appear with few heads and batch 1-2, and mostly as decode (sq = 1).
#include <string.h>

#include "tensor.h"
#include "xval.h"
#include "xval_groups.h"

#define BR FA_CAUSAL_BOTTOM_RIGHT
#define TL FA_CAUSAL_TOP_LEFT

xcase xv_default(void) {
  xcase c;
  memset(&c, 0, sizeof c);
  c.dt = FA_F32;
  c.b = 2;
  c.sq = c.sk = 64;
  c.hq = c.hkv = 2;
  c.d = c.dv = 64;
  c.wl = c.wr = -1;
  c.layout = TS_BSHD;
  return c;
}

typedef xv_list list;

void xv_add(list *l, xcase c) {
  if (l->n < l->max) l->out[l->n] = c;
  l->n++;
}

static void add(list *l, xcase c) { xv_add(l, c); }

static const fa_dtype dtypes[3] = {FA_F32, FA_F16, FA_BF16};
static fa_dtype low(int i) { return i % 2 ? FA_BF16 : FA_F16; }

/* Masks as (causal, window_left, window_right). */
typedef struct mask {
  int causal, wl, wr;
} mask;

static const mask masks[] = {
    {0, -1, -1},     // none
    {BR, -1, -1},    // causal, bottom-right (FlashAttention)
    {TL, -1, -1},    // causal, top-left (PyTorch)
    {0, 16, -1},     // window left only
    {0, -1, 8},      // window right only
    {0, 16, 8},      // both
    {BR, 32, -1},    // local causal (Mistral-style sliding window)
    {TL, 5, -1},     // local causal, top-left
    {0, 0, 0},       // the diagonal only
    {0, 1000, 1000}, // windows wider than any sequence: no mask
    {0, 0, -1},      // keys at or right of the diagonal
    {BR, 0, -1},     // causal + wl 0: the diagonal only
    {0, -1, 0},      // causal expressed as a window
};
#define NMASKS (int)(sizeof masks / sizeof masks[0])

static void set_mask(xcase *c, mask m) {
  c->causal = m.causal;
  c->wl = m.wl;
  c->wr = m.wr;
}

/* ---- forward groups ------------------------------------------------------ */

static void fwd_dims(list *l) {
  static const int dims[] = {1, 8, 13, 32, 64, 80, 96, 128, 160, 256, 512};
  static const int lens[][2] = {{17, 17}, {127, 129}, {128, 128}, {129, 127},
                                {1, 17},  {17, 1},    {33, 65}};
  const int nd = (int)(sizeof dims / sizeof dims[0]), nl = 7;
  for (int t = 0; t < 3; t++)
    for (int i = 0; i < nd; i++) {
      xcase c = xv_default();
      c.dt = dtypes[t];
      c.d = c.dv = dims[i];
      c.sq = lens[(i + t) % nl][0];
      c.sk = lens[(i + t) % nl][1];
      c.causal = (i + t) % 3 == 1 ? BR : (i + t) % 3 == 2 ? TL : 0;
      c.layout = (i + t) % 2 ? TS_BHSD : TS_BSHD;
      c.hkv = i % 2 ? 1 : 2;
      c.hdv0 = (i + t) % 4 == 0; // head_dim_v = 0 means head_dim
      add(l, c);
    }
  // head_dim_v != head_dim
  static const int dv[][2] = {{64, 32}, {32, 64},   {13, 80}, {128, 64},
                              {80, 96}, {256, 128}, {8, 1},   {1, 8}};
  for (int t = 0; t < 3; t++)
    for (int i = 0; i < 8; i++) {
      xcase c = xv_default();
      c.dt = dtypes[t];
      c.d = dv[i][0];
      c.dv = dv[i][1];
      c.sq = 37;
      c.sk = 53;
      c.causal = (i + t) % 2 ? BR : 0;
      c.hq = 4;
      c.hkv = 2;
      add(l, c);
    }
}

static void fwd_lengths(list *l) {
  static const int lens[][2] = {{1, 1},     {1, 17},    {17, 1},    {1, 128},
                                {17, 17},   {17, 129},  {129, 17},  {127, 128},
                                {128, 127}, {128, 128}, {129, 129}, {127, 300},
                                {300, 127}, {300, 300}, {511, 513}};
  const int n = (int)(sizeof lens / sizeof lens[0]);
  for (int i = 0; i < n; i++)
    for (int t = 0; t < 2; t++) {
      xcase c = xv_default();
      c.dt = t ? low(i) : FA_F32;
      c.sq = lens[i][0];
      c.sk = lens[i][1];
      c.causal = (i + t) % 3 == 1 ? BR : (i + t) % 3 == 2 ? TL : 0;
      if (c.sq >= 300 || c.sk >= 300) c.b = 1;
      if (c.sq > 300 && c.sk > 300) c.hq = c.hkv = 1;
      add(l, c);
    }
  // Genuinely long square problems.
  xcase c = xv_default();
  c.b = 1;
  c.hq = c.hkv = 1;
  c.sq = c.sk = 1000;
  c.causal = BR;
  add(l, c);
  c.sq = c.sk = 1024;
  c.causal = 0;
  c.dt = FA_F16;
  add(l, c);
}

static void fwd_masks(list *l) {
  static const int shapes[][2] = {{17, 129}, {129, 17}, {128, 128}, {1, 129}};
  for (int s = 0; s < 4; s++)
    for (int m = 0; m < NMASKS; m++) {
      xcase c = xv_default();
      c.dt = dtypes[(m + s) % 3];
      set_mask(&c, masks[m]);
      c.sq = shapes[s][0];
      c.sk = shapes[s][1];
      c.hq = 4;
      c.hkv = 2;
      c.d = c.dv = 32;
      add(l, c);
    }
}

static void fwd_features(list *l) {
  xcase c;
#define F(...)                                                                 \
  do {                                                                         \
    c = xv_default();                                                          \
    c.hq = 4;                                                                  \
    c.hkv = 2;                                                                 \
    c.sq = 47;                                                                 \
    c.sk = 81;                                                                 \
    __VA_ARGS__;                                                               \
    add(l, c);                                                                 \
  } while (0)
  // softcap
  F(c.cap = 2.0f);
  F(c.cap = 2.0f; c.causal = BR; c.dt = FA_F16);
  F(c.cap = 2.0f; c.causal = TL; c.dt = FA_BF16);
  F(c.cap = 50.0f);
  F(c.cap = 0.5f; c.scale = 1.0f); // scores ~N(0, 64): hard capping
  F(c.cap = 5.0f; c.scale = 1.0f; c.dt = FA_BF16);
  // ALiBi (slopes 2^(-8(h+1)/hq))
  F(c.alibi = 1; c.sq = c.sk = 64);
  F(c.alibi = 1; c.causal = BR; c.dt = FA_F16);
  F(c.alibi = 1; c.causal = BR; c.sq = 81; c.sk = 47; c.dt = FA_BF16);
  F(c.alibi = 1; c.causal = TL);
  F(c.alibi = 1; c.causal = TL; c.sq = 81; c.sk = 47);
  F(c.alibi = 1; c.wl = 32; c.wr = 8);
  F(c.alibi = 1); // non-causal, sq != sk: |i + sk - sq - j|
  // sinks
  F(c.sinks = 1);
  F(c.sinks = 1; c.causal = BR; c.sq = 81; c.sk = 47); // empty rows: lse=sink
  F(c.sinks = 1; c.seqused = 1; c.b = 4; c.dt = FA_F16);
  F(c.sinks = 1; c.causal = BR; c.dt = FA_BF16);
  F(c.sinks = 1; c.wl = 4; c.wr = 4);
  // everything at once
  F(c.cap = 3.0f; c.alibi = 1; c.sinks = 1; c.causal = BR);
  F(c.cap = 3.0f; c.alibi = 1; c.sinks = 1; c.causal = TL; c.dt = FA_F16);
  F(c.cap = 3.0f; c.alibi = 1; c.sinks = 1; c.wl = 20; c.wr = 3;
    c.dt = FA_BF16);
  // explicit scales: flat and sharp softmax
  F(c.scale = 0.3f);
  F(c.scale = 0.05f; c.dt = FA_F16);
  F(c.scale = 0.6f; c.causal = BR); // scores ~N(0, 23): big rescales
  F(c.scale = 0.6f; c.dt = FA_BF16);
  F(c.scale = -0.2f; c.causal = BR); // valid: finite
  // Near one-hot softmax: q ~ N(0, 64), scores ~ N(0, 64).
  F(c.qamp = 8.0f);
  F(c.qamp = 8.0f; c.causal = BR; c.dt = FA_F16);
  F(c.qamp = 8.0f; c.alibi = 1; c.sinks = 1; c.dt = FA_BF16);
#undef F
}

static void fwd_gqa(list *l) {
  static const int h[][2] = {{4, 4},  {8, 2},  {4, 1},  {7, 1},
                             {14, 2}, {21, 3}, {16, 4}, {6, 6}};
  for (int i = 0; i < 8; i++)
    for (int t = 0; t < 2; t++) {
      xcase c = xv_default();
      c.hq = h[i][0];
      c.hkv = h[i][1];
      c.sq = t ? 33 : 65;
      c.sk = t ? 65 : 33;
      c.d = c.dv = i % 2 ? 32 : 64;
      c.dt = t ? low(i) : FA_F32;
      c.causal = t ? BR : 0;
      c.layout = t ? TS_BHSD : TS_BSHD;
      add(l, c);
    }
}

static void fwd_layout(list *l) {
  static const int pads[3] = {0, 3, 16};
  for (int lay = 0; lay < 3; lay++)
    for (int p = 0; p < 3; p++) {
      xcase c = xv_default();
      c.layout = lay;
      c.pad = pads[p];
      c.dt = dtypes[(lay + p) % 3];
      c.no_lse = (lay + p) % 2;
      c.sq = 45;
      c.sk = 70;
      c.hq = 4;
      c.d = c.dv = 40;
      c.causal = p == 1 ? BR : 0;
      add(l, c);
    }
  for (int t = 0; t < 3; t++) { // packed QKV, q/k/v in one buffer
    xcase c = xv_default();
    c.layout = XV_LAYOUT_PACKED;
    c.dt = dtypes[t];
    c.sq = c.sk = 50;
    c.hq = 6;
    c.hkv = t == 2 ? 3 : 6;
    c.pad = t == 1 ? 5 : 0;
    c.causal = t ? BR : 0;
    add(l, c);
  }
  for (int lay = 0; lay < 3; lay++) { // k/v in another layout than q
    xcase c = xv_default();
    c.layout = lay;
    c.mixed = 1;
    c.pad = lay;
    c.dt = dtypes[lay];
    c.sq = 33;
    c.sk = 66;
    c.hkv = 1;
    c.causal = TL;
    add(l, c);
  }
}

static void fwd_varlen(list *l) {
  xcase c;
#define V(...)                                                                 \
  do {                                                                         \
    c = xv_default();                                                          \
    c.varlen = 1;                                                              \
    c.b = 5;                                                                   \
    c.sq = 40;                                                                 \
    c.sk = 70;                                                                 \
    c.hq = 4;                                                                  \
    c.hkv = 2;                                                                 \
    c.d = c.dv = 48;                                                           \
    __VA_ARGS__;                                                               \
    add(l, c);                                                                 \
  } while (0)
  V();
  V(c.causal = BR; c.dt = FA_F16);
  V(c.causal = TL; c.dt = FA_BF16);
  V(c.wl = 8; c.wr = 4);
  V(c.hq = 8; c.hkv = 2; c.causal = BR; c.layout = TS_BHSD);
  V(c.seqused = 1; c.causal = BR);
  V(c.alibi = 1; c.sinks = 1; c.causal = BR);
  V(c.cap = 2.0f; c.dt = FA_F16; c.layout = TS_SBHD; c.pad = 3);
  V(c.varlen = 2; c.causal = BR);
  V(c.varlen = 2; c.dt = FA_F16);
  V(c.b = 1);
  V(c.b = 3; c.sq = c.sk = 129; c.causal = BR);
  V(c.b = 2; c.sq = c.sk = 300; c.hq = c.hkv = 1; c.dt = FA_BF16;
    c.causal = BR);
  V(c.no_lse = 1; c.d = 64; c.dv = 32);
  V(c.sq = 70; c.sk = 40; c.causal = BR; c.sinks = 1);
  V(c.slack = 7); // seqlen_q/k above every real length: lse stride = max
  V(c.slack = 5; c.seqused = 1; c.causal = BR; c.dt = FA_BF16);
  V(c.varlen = 2; c.slack = 6; c.mixed = 1; c.causal = TL);
#undef V
}

static void fwd_paged(list *l) {
  xcase c;
#define P(...)                                                                 \
  do {                                                                         \
    c = xv_default();                                                          \
    c.page = 16;                                                               \
    c.seqused = 1;                                                             \
    c.b = 3;                                                                   \
    c.sq = 17;                                                                 \
    c.sk = 129;                                                                \
    c.hq = 4;                                                                  \
    c.hkv = 2;                                                                 \
    __VA_ARGS__;                                                               \
    add(l, c);                                                                 \
  } while (0)
  P(c.causal = BR);
  P(c.page = 1);
  P(c.page = 3; c.causal = BR; c.dt = FA_F16);
  P(c.page = 7; c.seqused = 0; c.causal = TL; c.dt = FA_BF16);
  P(c.hq = 8; c.hkv = 1);
  P(c.page = 3; c.varlen = 2; c.causal = BR);
  P(c.page = 64; c.sk = 50);
  P(c.page = 5; c.sinks = 1; c.alibi = 1; c.causal = BR);
  P(c.layout = TS_BHSD; c.dt = FA_F16);
  P(c.page = 3; c.wl = 20; c.wr = 2);
  P(c.sq = 1; c.sk = 300);
  P(c.page = 1; c.sq = 1; c.sk = 77; c.dt = FA_BF16);
  P(c.b = 4; c.causal = BR);
  P(c.page = 3; c.layout = TS_SBHD; c.pad = 2); // slot stride > page stride
  P(c.page = 7; c.varlen = 2; c.sinks = 1; c.dt = FA_F16);
  P(c.page = 3; c.slack = 10; c.causal = BR);
  P(c.page = 16; c.varlen = 2; c.slack = 4; c.mixed = 1);
#undef P
}

static void fwd_decode(list *l) {
  xcase c;
#define D(...)                                                                 \
  do {                                                                         \
    c = xv_default();                                                          \
    c.threads = 8;                                                             \
    c.sq = 1;                                                                  \
    c.b = 2;                                                                   \
    c.hq = 8;                                                                  \
    c.hkv = 2;                                                                 \
    __VA_ARGS__;                                                               \
    add(l, c);                                                                 \
  } while (0)
  D(c.b = 1; c.sk = 1000; c.hkv = 1; c.d = c.dv = 128);
  D(c.sk = 777; c.dt = FA_F16);
  D(c.b = 4; c.sk = 300; c.hq = c.hkv = 4; c.seqused = 1; c.dt = FA_BF16);
  D(c.b = 1; c.sk = 2048; c.hq = 2; c.hkv = 1);
  D(c.b = 3; c.sk = 1000; c.page = 16; c.seqused = 1);
  D(c.sk = 513; c.wl = 128; c.causal = BR);
  D(c.sk = 600; c.sinks = 1; c.alibi = 1; c.dt = FA_F16);
  D(c.sq = 4; c.sk = 900; c.causal = BR); // speculative decoding
  D(c.sq = 4; c.sk = 900; c.causal = TL; c.dt = FA_BF16);
  D(c.sk = 1000; c.cap = 30.0f; c.d = c.dv = 80);
  D(c.sk = 999; c.hq = 7; c.hkv = 1; c.d = c.dv = 96; c.page = 3;
    c.dt = FA_BF16);
  D(c.sk = 1; c.b = 1);
  D(c.b = 8; c.sk = 400; c.hq = 2; c.hkv = 1; c.d = c.dv = 32; c.no_lse = 1);
  D(c.b = 1; c.sk = 1000; c.d = c.dv = 256; c.hq = 4; c.dt = FA_F16);
  // Split-KV edge cases: a sequence with no keys (its splits are all
  // empty) and sinks on top; a narrow window that leaves whole splits
  // masked; speculative rows with a sliding window.
  D(c.b = 3; c.hq = 4; c.hkv = 1; c.sk = 1000; c.seqused = 1);
  D(c.b = 3; c.hq = 4; c.hkv = 1; c.sk = 1000; c.seqused = 1; c.sinks = 1;
    c.dt = FA_F16);
  D(c.b = 1; c.hq = 2; c.hkv = 1; c.sk = 2000; c.wl = 100; c.causal = BR);
  D(c.b = 1; c.hq = 4; c.hkv = 1; c.sq = 3; c.sk = 1500; c.wl = 50; c.wr = 1;
    c.dt = FA_BF16);
  D(c.b = 1; c.hq = 4; c.hkv = 1; c.sk = 4096; c.page = 16; c.seqused = 1);
  D(c.b = 1; c.hq = 4; c.hkv = 1; c.sk = 1500; c.qamp = 8.0f); // sharp
  D(c.b = 1; c.hq = 4; c.hkv = 1; c.sk = 1500; c.qamp = 8.0f; c.dt = FA_BF16);
#undef D
}

static void fwd_plan(list *l) {
  xcase c;
#define PL(...)                                                                \
  do {                                                                         \
    c = xv_default();                                                          \
    c.plan = 1;                                                                \
    c.sq = 65;                                                                 \
    c.sk = 97;                                                                 \
    __VA_ARGS__;                                                               \
    add(l, c);                                                                 \
  } while (0)
  PL();
  PL(c.causal = BR; c.dt = FA_F16);
  PL(c.varlen = 1; c.b = 4; c.dt = FA_BF16; c.causal = BR);
  PL(c.page = 16; c.seqused = 1; c.b = 3);
  PL(c.sq = 1; c.sk = 1000; c.hq = 8; c.hkv = 1; c.threads = 8); // split-KV
  PL(c.wl = 16; c.wr = 4);
  PL(c.hq = 8; c.hkv = 2; c.dt = FA_BF16; c.layout = TS_BHSD);
  PL(c.sinks = 1; c.alibi = 1; c.cap = 4.0f; c.dt = FA_F16);
  PL(c.no_lse = 1; c.causal = TL);
  PL(c.b = 1; c.sq = c.sk = 300; c.causal = BR);
#undef PL
}

/* ---- backward groups ----------------------------------------------------- */

static void bwd_dims(list *l) {
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

static void bwd_lengths(list *l) {
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

static void bwd_masks(list *l) {
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

static void bwd_features(list *l) {
  xcase c;
#define F(...)                                                                 \
  do {                                                                         \
    c = xv_default();                                                          \
    c.bwd = 1;                                                                 \
    c.hq = 4;                                                                  \
    c.hkv = 2;                                                                 \
    c.sq = 40;                                                                 \
    c.sk = 56;                                                                 \
    c.d = c.dv = 32;                                                           \
    __VA_ARGS__;                                                               \
    add(l, c);                                                                 \
  } while (0)
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

static void bwd_gqa(list *l) {
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

static void bwd_varlen(list *l) {
  xcase c;
#define V(...)                                                                 \
  do {                                                                         \
    c = xv_default();                                                          \
    c.bwd = 1;                                                                 \
    c.varlen = 1;                                                              \
    c.b = 5;                                                                   \
    c.sq = 40;                                                                 \
    c.sk = 60;                                                                 \
    c.hq = 4;                                                                  \
    c.hkv = 2;                                                                 \
    c.d = c.dv = 32;                                                           \
    __VA_ARGS__;                                                               \
    add(l, c);                                                                 \
  } while (0)
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

static void bwd_paged(list *l) {
  xcase c;
#define P(...)                                                                 \
  do {                                                                         \
    c = xv_default();                                                          \
    c.bwd = 1;                                                                 \
    c.page = 16;                                                               \
    c.seqused = 1;                                                             \
    c.b = 3;                                                                   \
    c.sq = 17;                                                                 \
    c.sk = 70;                                                                 \
    c.d = c.dv = 32;                                                           \
    __VA_ARGS__;                                                               \
    add(l, c);                                                                 \
  } while (0)
  P();
  P(c.page = 3; c.causal = BR; c.dt = FA_F16);
  P(c.page = 1; c.seqused = 0);
  P(c.page = 7; c.hq = 4; c.hkv = 1; c.dt = FA_BF16; c.causal = BR);
  P(c.page = 5; c.varlen = 2; c.causal = BR);
  P(c.page = 3; c.slack = 8; c.mixed = 1; c.dt = FA_F16);
#undef P
}

static void bwd_layout(list *l) {
  xcase c;
#define L(...)                                                                 \
  do {                                                                         \
    c = xv_default();                                                          \
    c.bwd = 1;                                                                 \
    c.sq = 40;                                                                 \
    c.sk = 56;                                                                 \
    c.hq = 4;                                                                  \
    c.d = c.dv = 32;                                                           \
    __VA_ARGS__;                                                               \
    add(l, c);                                                                 \
  } while (0)
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
static void fwd_tensor_core(list *l) {
  xcase c;
#define T(...)                                                                 \
  do {                                                                         \
    c = xv_default();                                                          \
    c.d = c.dv = 128;                                                          \
    c.dt = FA_BF16;                                                            \
    __VA_ARGS__;                                                               \
    add(l, c);                                                                 \
  } while (0)
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

static void bwd_tensor_core(list *l) {
  xcase c;
#define T(...)                                                                 \
  do {                                                                         \
    c = xv_default();                                                          \
    c.bwd = 1;                                                                 \
    c.d = c.dv = 128;                                                          \
    c.dt = FA_BF16;                                                            \
    c.hq = 4;                                                                  \
    c.hkv = 2;                                                                 \
    __VA_ARGS__;                                                               \
    add(l, c);                                                                 \
  } while (0)
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
  do {                                                                         \
    c = xv_default();                                                          \
    c.bwd = bwd;                                                               \
    c.expect = XV_EXPECT_ELEMENTWISE;                                          \
    __VA_ARGS__;                                                               \
    add(l, c);                                                                 \
  } while (0)
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

static void fwd_edge(list *l) { edge_cases(l, 0); }

/* The same inputs through the backward: every gradient element within
   fz_tol.h's bounds (tests/stress's), which carry the forward's into dP, D
   and dS. Equal scores keep them tight; at logits of +-1e4 and f16 near
   65504 they only catch the gross (non-finite, overflowed, misplaced)
   errors. At the default scale f16 near 65504 gives logits fp32 cannot
   resolve: the gradients must only be finite (dO.v does not overflow at
   d 64). */
static void bwd_edge(list *l) { edge_cases(l, 1); }

/* ---- the 0.2 API: positions, shards, descales, output dtypes,
   accumulation, dsinks, backward plans ---------------------------------- */

/* Explicit positions: q/k offsets (negative ones, ones that empty rows, and
   2^39-sized ones with a small shift), per-sequence arrays with varlen,
   with causal, windows, ALiBi, softcap, sinks, seqused and paged KV. */
static void positions_cases(list *l, int bwd) {
  xcase c;
#define PS(...)                                                                \
  do {                                                                         \
    c = xv_default();                                                          \
    c.bwd = bwd;                                                               \
    c.pos = 1;                                                                 \
    c.hq = 4;                                                                  \
    c.hkv = 2;                                                                 \
    c.sq = 37;                                                                 \
    c.sk = 61;                                                                 \
    c.d = c.dv = 32;                                                           \
    __VA_ARGS__;                                                               \
    add(l, c);                                                                 \
  } while (0)
  PS(c.qoff = 24; c.koff = 0; c.causal = BR); // = the aligned default
  PS(c.qoff = 0; c.koff = 0; c.causal = BR);  // = top-left
  PS(c.qoff = 10; c.koff = 25; c.causal = BR; c.dt = FA_F16);
  PS(c.qoff = -17; c.koff = 5; c.causal = TL; c.dt = FA_BF16); // empty rows
  PS(c.qoff = 100; c.koff = -3; c.causal = BR); // every key visible
  PS(c.qoff = -100; c.koff = 0; c.causal = BR); // no key visible
  PS(c.qoff = 30; c.koff = 7; c.wl = 9; c.wr = 4);
  PS(c.qoff = -5; c.koff = -20; c.wl = 12; c.causal = BR; c.dt = FA_BF16);
  PS(c.qoff = 13; c.koff = 40; c.alibi = 1);
  PS(c.qoff = 50; c.koff = 2; c.alibi = 1; c.causal = BR; c.dt = FA_F16);
  PS(c.qoff = 8; c.koff = 0; c.cap = 3.0f; c.sinks = 1; c.causal = BR);
  PS(c.qoff = ((long long)1 << 39) + 20; c.koff = (long long)1 << 39;
     c.causal = BR; c.alibi = 1);
  PS(c.qoff = -((long long)1 << 39); c.koff = -((long long)1 << 39) - 7;
     c.wl = 16; c.wr = 3; c.dt = FA_BF16);
  // The extremes: |shift| = 2^41 - 2 (every key left of the diagonal, or
  // right of it), masks computed in 64 bits.
  {
    const long long m = ((long long)1 << 40) - 1;
    PS(c.qoff = m; c.koff = -m; c.causal = BR);              // all visible
    PS(c.qoff = m; c.koff = -m; c.wl = 5; c.dt = FA_F16);    // none
    PS(c.qoff = -m; c.koff = m; c.causal = BR; c.sinks = 1); // none
    PS(c.qoff = -m; c.koff = m; c.wr = 3; c.dt = FA_BF16);   // none
  }
  // Per-sequence arrays (random in [-40, 60] / [-40, 40]) with varlen.
  PS(c.pos = 2; c.varlen = 1; c.b = 5; c.causal = BR);
  PS(c.pos = 2; c.varlen = 1; c.b = 4; c.qoff = 7; c.koff = -9; c.wl = 10;
     c.wr = 2; c.dt = FA_F16);
  PS(c.pos = 2; c.varlen = 1; c.b = 4; c.alibi = 1; c.causal = BR;
     c.dt = FA_BF16);
  PS(c.pos = 2; c.varlen = 2; c.b = 3; c.causal = BR; c.seqused = 1);
  PS(c.pos = 2; c.b = 3; c.causal = BR; c.sinks = 1); // dense, per sequence
  PS(c.pos = 2; c.page = 7; c.seqused = 1; c.b = 3; c.causal = BR;
     c.dt = FA_F16);
  PS(c.pos = 2; c.page = 3; c.b = 3; c.wl = 20; c.alibi = 1);
  PS(c.qoff = 3; c.koff = 1; c.hq = 8; c.hkv = 1; c.causal = BR;
     c.layout = TS_BHSD);
  if (!bwd) {
    PS(c.qoff = 990; c.koff = 0; c.sq = 1; c.sk = 1000; c.hq = 8; c.hkv = 1;
       c.threads = 8; c.wl = 300; c.causal = BR); // decode, split-KV
    PS(c.qoff = 500; c.koff = 0; c.sq = 4; c.sk = 900; c.hq = 8; c.threads = 8;
       c.causal = BR; c.dt = FA_BF16); // mid-cache queries
  }
#undef PS
}

static void fwd_positions(list *l) { positions_cases(l, 0); }
static void bwd_positions(list *l) { positions_cases(l, 1); }

/* One sequence cut into q and k chunks, merged (see shard_forward in
   test_xval.c); sq != sk, aligned and explicit positions, masks, ALiBi,
   softcap, descales, GQA, 16-bit inputs (the parts are f32). */
static void fwd_shard(list *l) {
  xcase c;
#define SH(...)                                                                \
  do {                                                                         \
    c = xv_default();                                                          \
    c.shard = 3;                                                               \
    c.hq = 4;                                                                  \
    c.hkv = 2;                                                                 \
    c.sq = 70;                                                                 \
    c.sk = 90;                                                                 \
    c.d = c.dv = 32;                                                           \
    __VA_ARGS__;                                                               \
    add(l, c);                                                                 \
  } while (0)
  SH();
  SH(c.causal = BR);
  SH(c.causal = TL; c.dt = FA_BF16);
  SH(c.causal = BR; c.sq = c.sk = 96; c.shard = 4; c.dt = FA_F16);
  SH(c.shard = 2; c.wl = 20; c.wr = 5);
  SH(c.causal = BR; c.wl = 15; c.dt = FA_BF16);
  SH(c.alibi = 1; c.causal = BR);
  SH(c.alibi = 1; c.cap = 4.0f; c.dt = FA_F16);
  SH(c.pos = 1; c.qoff = 1000; c.koff = 990; c.causal = BR);
  SH(c.pos = 1; c.qoff = -30; c.koff = 0; c.causal = BR; c.wl = 30; c.alibi = 1;
     c.dt = FA_BF16);
  SH(c.pos = 2; c.b = 3; c.causal = BR);
  SH(c.descale = 2; c.causal = BR; c.dt = FA_F16);
  SH(c.out = 1 + FA_BF16; c.causal = BR); // f32 in, bf16 out
  SH(c.hq = 8; c.hkv = 1; c.sq = 40; c.sk = 200; c.causal = BR;
     c.layout = TS_BHSD);
  SH(c.sq = 1; c.sk = 300; c.shard = 1; c.causal = BR); // one part
  SH(c.sq = 3; c.sk = 300; c.causal = BR; c.qamp = 4.0f);
#undef SH
}

/* Descales: one value, per (batch, kv head), mixed; forward and
   backward. */
static void descale_cases(list *l, int bwd) {
  xcase c;
#define DS(...)                                                                \
  do {                                                                         \
    c = xv_default();                                                          \
    c.bwd = bwd;                                                               \
    c.descale = 1;                                                             \
    c.hq = 4;                                                                  \
    c.hkv = 2;                                                                 \
    c.sq = 41;                                                                 \
    c.sk = 59;                                                                 \
    c.d = c.dv = 32;                                                           \
    __VA_ARGS__;                                                               \
    add(l, c);                                                                 \
  } while (0)
  for (int t = 0; t < 3; t++)
    for (int k = 1; k <= 3; k++)
      DS(c.dt = dtypes[t]; c.descale = k; c.causal = (t + k) % 2 ? BR : 0);
  DS(c.descale = 2; c.hq = 8; c.hkv = 2; c.b = 3; c.causal = BR;
     c.dt = FA_BF16); // q's entry is per kv head of its group
  DS(c.descale = 2; c.varlen = 1; c.b = 4; c.causal = BR; c.dt = FA_F16);
  DS(c.descale = 3; c.page = 5; c.seqused = 1; c.b = 3; c.dt = FA_BF16);
  DS(c.descale = 2; c.cap = 3.0f; c.alibi = 1; c.sinks = 1; c.causal = BR);
  DS(c.descale = 1; c.out = 1 + FA_F32; c.dt = FA_BF16; c.causal = TL);
  DS(c.descale = 2; c.pos = 2; c.b = 3; c.causal = BR; c.dt = FA_F16);
  if (bwd) {
    DS(c.descale = 2; c.sinks = 1; c.dsinks = 1; c.dt = FA_BF16);
  } else {
    DS(c.descale = 2; c.sq = 1; c.sk = 700; c.hq = 8; c.threads = 8;
       c.dt = FA_BF16); // decode, split-KV
  }
#undef DS
}

static void fwd_descale(list *l) { descale_cases(l, 0); }
static void bwd_descale(list *l) { descale_cases(l, 1); }

/* Output dtype != input dtype: every pair, with masks, varlen, paged. */
static void outdtype_cases(list *l, int bwd) {
  int n = 0;
  for (int ti = 0; ti < 3; ti++)
    for (int to = 0; to < 3; to++) {
      if (ti == to) continue;
      xcase c = xv_default();
      c.bwd = bwd;
      c.dt = dtypes[ti];
      c.out = 1 + dtypes[to];
      c.hq = 4;
      c.hkv = 2;
      c.sq = 45;
      c.sk = 67;
      c.d = c.dv = 32;
      c.causal = n % 3 == 1 ? BR : n % 3 == 2 ? TL : 0;
      add(l, c);
      c.causal = BR;
      if (n % 2) {
        c.varlen = 1;
        c.b = 4;
      } else {
        c.page = 7;
        c.seqused = 1;
        c.b = 3;
      }
      c.layout = n % 2 ? TS_BHSD : TS_BSHD;
      c.sinks = n % 3 == 0;
      add(l, c);
      n++;
    }
  xcase c = xv_default();
  c.bwd = bwd;
  c.dt = FA_BF16;
  c.out = 1 + FA_F32;
  c.d = c.dv = 128;
  c.sq = 130;
  c.sk = 150;
  c.causal = BR;
  add(l, c);
}

static void fwd_outdtype(list *l) { outdtype_cases(l, 0); }
static void bwd_outdtype(list *l) { outdtype_cases(l, 1); }

/* FA_BACKWARD_ACCUMULATE into f32 and 16-bit accumulators. */
static void bwd_accumulate(list *l) {
  xcase c;
#define AC(...)                                                                \
  do {                                                                         \
    c = xv_default();                                                          \
    c.bwd = 1;                                                                 \
    c.accum = 1;                                                               \
    c.hq = 4;                                                                  \
    c.hkv = 2;                                                                 \
    c.sq = 40;                                                                 \
    c.sk = 56;                                                                 \
    c.d = c.dv = 32;                                                           \
    __VA_ARGS__;                                                               \
    add(l, c);                                                                 \
  } while (0)
  AC();
  AC(c.causal = BR; c.dt = FA_F16);
  AC(c.causal = TL; c.dt = FA_BF16);
  AC(c.dt = FA_BF16; c.out = 1 + FA_F32; c.causal = BR); // f32 accumulators
  AC(c.dt = FA_F16; c.out = 1 + FA_F32);
  AC(c.hq = 8; c.hkv = 1; c.causal = BR);
  AC(c.varlen = 1; c.b = 4; c.causal = BR; c.seqused = 1);
  AC(c.page = 5; c.seqused = 1; c.b = 3; c.dt = FA_F16);
  AC(c.page = 3; c.b = 3; c.causal = BR);
  AC(c.sinks = 1; c.dsinks = 1; c.causal = BR);
  AC(c.sinks = 1; c.dsinks = 1; c.dt = FA_BF16; c.pos = 1; c.qoff = 30;
     c.koff = 10; c.causal = BR);
  AC(c.descale = 2; c.layout = TS_BHSD; c.pad = 3);
  AC(c.plan = 1; c.wl = 10; c.wr = 3);
#undef AC
}

/* dsinks against the oracle, with empty rows, masks, varlen, GQA. */
static void bwd_dsinks(list *l) {
  xcase c;
#define SK(...)                                                                \
  do {                                                                         \
    c = xv_default();                                                          \
    c.bwd = 1;                                                                 \
    c.sinks = 1;                                                               \
    c.dsinks = 1;                                                              \
    c.hq = 4;                                                                  \
    c.hkv = 2;                                                                 \
    c.sq = 40;                                                                 \
    c.sk = 56;                                                                 \
    c.d = c.dv = 32;                                                           \
    __VA_ARGS__;                                                               \
    add(l, c);                                                                 \
  } while (0)
  SK();
  SK(c.causal = BR; c.dt = FA_F16);
  SK(c.causal = BR; c.sq = 56; c.sk = 40; c.dt = FA_BF16); // empty rows
  SK(c.wl = 5; c.wr = 2);
  SK(c.hq = 8; c.hkv = 1; c.alibi = 1; c.cap = 2.0f);
  SK(c.varlen = 1; c.b = 5; c.causal = BR);
  SK(c.seqused = 1; c.b = 4; c.dt = FA_F16);
  SK(c.page = 7; c.seqused = 1; c.b = 3; c.causal = BR);
  SK(c.out = 1 + FA_F32; c.dt = FA_BF16; c.causal = TL);
  SK(c.qamp = 4.0f; c.causal = BR);
  SK(c.b = 1; c.hq = 2; c.hkv = 1; c.sq = 200; c.sk = 260; c.causal = BR);
#undef SK
}

/* Backward plans: bit-identical to fa_backward, twice. */
static void bwd_plan(list *l) {
  xcase c;
#define BP(...)                                                                \
  do {                                                                         \
    c = xv_default();                                                          \
    c.bwd = 1;                                                                 \
    c.plan = 1;                                                                \
    c.sq = 45;                                                                 \
    c.sk = 63;                                                                 \
    c.d = c.dv = 32;                                                           \
    __VA_ARGS__;                                                               \
    add(l, c);                                                                 \
  } while (0)
  BP();
  BP(c.causal = BR; c.dt = FA_F16);
  BP(c.varlen = 1; c.b = 4; c.dt = FA_BF16; c.causal = BR);
  BP(c.page = 16; c.seqused = 1; c.b = 3);
  BP(c.hq = 8; c.hkv = 2; c.layout = TS_BHSD; c.wl = 9; c.wr = 9);
  BP(c.sinks = 1; c.dsinks = 1; c.alibi = 1; c.cap = 4.0f);
  BP(c.descale = 2; c.pos = 2; c.b = 3; c.causal = BR; c.dt = FA_BF16);
  BP(c.out = 1 + FA_F32; c.dt = FA_F16; c.causal = BR);
#undef BP
}

/* Every group, in the order "--group all" runs them: the one list that
   --list-groups prints and the build makes tests of. */
static const struct {
  const char *name;
  void (*fn)(list *);
} groups[] = {
    {"fwd.dims", fwd_dims},
    {"fwd.lengths", fwd_lengths},
    {"fwd.masks", fwd_masks},
    {"fwd.features", fwd_features},
    {"fwd.gqa", fwd_gqa},
    {"fwd.layout", fwd_layout},
    {"fwd.varlen", fwd_varlen},
    {"fwd.paged", fwd_paged},
    {"fwd.decode", fwd_decode},
    {"fwd.plan", fwd_plan},
    {"bwd.dims", bwd_dims},
    {"bwd.lengths", bwd_lengths},
    {"bwd.masks", bwd_masks},
    {"bwd.features", bwd_features},
    {"bwd.gqa", bwd_gqa},
    {"bwd.varlen", bwd_varlen},
    {"bwd.paged", bwd_paged},
    {"bwd.layout", bwd_layout},
    {"fwd.tensor-core", fwd_tensor_core},
    {"bwd.tensor-core", bwd_tensor_core},
    {"fwd.edge", fwd_edge},
    {"bwd.edge", bwd_edge},
    {"fwd.fp8", xv_fwd_fp8},
    {"fwd.fp8-decode", xv_fwd_fp8_decode},
    {"bwd.fp8", xv_bwd_fp8},
    {"fwd.positions", fwd_positions},
    {"bwd.positions", bwd_positions},
    {"fwd.shard", fwd_shard},
    {"fwd.descale", fwd_descale},
    {"bwd.descale", bwd_descale},
    {"fwd.outdtype", fwd_outdtype},
    {"bwd.outdtype", bwd_outdtype},
    {"bwd.accumulate", bwd_accumulate},
    {"bwd.dsinks", bwd_dsinks},
    {"bwd.plan", bwd_plan},
    {"fwd.stress", xv_fwd_stress},
    {"bwd.stress", xv_bwd_stress},
    {"fwd.longrow", xv_fwd_longrow},
};
#define NGROUPS (int)(sizeof groups / sizeof groups[0])

const char *xv_group_name(int i) {
  return i >= 0 && i < NGROUPS ? groups[i].name : NULL;
}

int xv_group_cases(const char *name, xcase *out, int max) {
  for (int i = 0; i < NGROUPS; i++)
    if (strcmp(groups[i].name, name) == 0) {
      list l = {out, 0, max};
      groups[i].fn(&l);
      return l.n;
    }
  return -1;
}
