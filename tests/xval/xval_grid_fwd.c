// SPDX-License-Identifier: MIT
// The forward groups of the grid: head dims, lengths, masks, features,
// GQA, layouts, varlen, paged KV, decode, plans.
#include "tensor.h"
#include "xval.h"
#include "xval_groups.h"

typedef xv_list list;

/* ---- forward groups ------------------------------------------------------ */

void xv_fwd_dims(xv_list *l) {
  // (192: the sm80 d192 tiles bound by name have no other case.)
  static const int dims[] = {1, 8, 13, 32, 64, 80, 96, 128, 160, 192, 256, 512};
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

void xv_fwd_lengths(xv_list *l) {
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

void xv_fwd_masks(xv_list *l) {
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

void xv_fwd_features(xv_list *l) {
  xcase c;
#define F(...)                                                                 \
  XV_CASE(l, c, c.hq = 4; c.hkv = 2; c.sq = 47; c.sk = 81; __VA_ARGS__)
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

void xv_fwd_gqa(xv_list *l) {
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

void xv_fwd_layout(xv_list *l) {
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

void xv_fwd_varlen(xv_list *l) {
  xcase c;
#define V(...)                                                                 \
  XV_CASE(l, c, c.varlen = 1; c.b = 5; c.sq = 40; c.sk = 70; c.hq = 4;         \
          c.hkv = 2; c.d = c.dv = 48; __VA_ARGS__)
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

void xv_fwd_paged(xv_list *l) {
  xcase c;
#define P(...)                                                                 \
  XV_CASE(l, c, c.page = 16; c.seqused = 1; c.b = 3; c.sq = 17; c.sk = 129;    \
          c.hq = 4; c.hkv = 2; __VA_ARGS__)
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
  // Chunked prefill: a few hundred new queries against a cache of 1000s
  // of keys (bottom-right causal), GQA 8:1, the page sizes of serving
  // engines, block-table entries past each sequence outside the pool. The
  // sm90 forward copies a key block as one TMA box per page (a slice of a
  // page longer than its block; sm90_paged.h); page 24 is one it declines.
  P(c.b = 2; c.sq = 300; c.sk = 1500; c.hq = 8; c.hkv = 1; c.d = c.dv = 128;
    c.page = 16; c.causal = BR; c.dt = FA_BF16; c.bad_tail = 1);
  P(c.b = 2; c.sq = 200; c.sk = 1800; c.hq = 8; c.hkv = 1; c.d = c.dv = 128;
    c.page = 64; c.causal = BR; c.dt = FA_F16; c.bad_tail = 1);
  P(c.b = 2; c.sq = 257; c.sk = 1100; c.hq = 8; c.hkv = 1; c.d = c.dv = 64;
    c.page = 64; c.causal = BR; c.dt = FA_BF16);
  P(c.b = 1; c.sq = 150; c.sk = 1200; c.hq = 8; c.hkv = 1; c.d = c.dv = 128;
    c.page = 8; c.dt = FA_BF16; c.bad_tail = 1);
  P(c.b = 2; c.sq = 200; c.sk = 1300; c.hq = 8; c.hkv = 1; c.d = c.dv = 128;
    c.page = 256; c.causal = BR; c.dt = FA_F16);
  P(c.b = 2; c.sq = 130; c.sk = 1000; c.hq = 4; c.hkv = 1; c.d = c.dv = 256;
    c.page = 128; c.causal = BR; c.dt = FA_F16; c.bad_tail = 1);
  P(c.b = 1; c.sq = 160; c.sk = 1000; c.hq = 8; c.hkv = 1; c.d = c.dv = 128;
    c.page = 16; c.causal = BR; c.wl = 300; c.sinks = 1; c.dt = FA_BF16);
  P(c.b = 1; c.sq = 100; c.sk = 900; c.hq = 8; c.hkv = 1; c.d = c.dv = 128;
    c.page = 16; c.causal = BR; c.cap = 20.0f; c.alibi = 1; c.dt = FA_F16;
    c.bad_tail = 1);
  P(c.b = 2; c.sq = 120; c.sk = 1000; c.hq = 8; c.hkv = 1; c.d = c.dv = 128;
    c.page = 24; c.causal = BR; c.dt = FA_BF16);
  P(c.b = 3; c.sq = 100; c.sk = 700; c.hq = 8; c.hkv = 1; c.d = c.dv = 128;
    c.page = 16; c.varlen = 2; c.causal = BR; c.dt = FA_BF16; c.bad_tail = 1);
#undef P
}

void xv_fwd_decode(xv_list *l) {
  xcase c;
#define D(...)                                                                 \
  XV_CASE(l, c, c.threads = 8; c.sq = 1; c.b = 2; c.hq = 8; c.hkv = 2;         \
          __VA_ARGS__)
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

void xv_fwd_plan(xv_list *l) {
  xcase c;
#define PL(...) XV_CASE(l, c, c.plan = 1; c.sq = 65; c.sk = 97; __VA_ARGS__)
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
