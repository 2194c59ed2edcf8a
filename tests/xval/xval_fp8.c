// SPDX-License-Identifier: MIT
// The FP8 groups: e4m3 and e5m2 inputs with and without descales, every
// output dtype, through the forward (both tile paths), decode over an FP8
// KV cache (paged, split-KV) and the backward. Each case names its output
// dtype (out = 1 + dtype) and its descales; the data is N(0, 1) divided by
// the descale before encoding, so codes span the format's range.
#include "tensor.h"
#include "xval.h"
#include "xval_groups.h"

#define OUT(t) ((t) + 1)

void xv_fwd_fp8(xv_list *l) {
  xcase c;
#define F(...) XV_CASE(l, c, c.dt = FA_E4M3; c.out = OUT(FA_F32); __VA_ARGS__)
  F();
  F(c.out = OUT(FA_BF16); c.descale = 1; c.causal = BR; c.hq = 4);
  F(c.dt = FA_E5M2; c.out = OUT(FA_F16); c.descale = 2; c.sq = 65; c.sk = 97;
    c.hq = 4; c.wl = 16; c.wr = 4);
  F(c.dt = FA_E5M2; c.descale = 1; c.b = 4; c.varlen = 1; c.seqused = 1;
    c.causal = BR);
  F(c.out = OUT(FA_F16); c.descale = 2; c.hq = 4; c.cap = 4.0f; c.alibi = 1;
    c.sinks = 1);
  F(c.out = OUT(FA_BF16); c.layout = TS_BHSD; c.mixed = 1; c.pad = 3);
  F(c.b = 1; c.sq = 200; c.sk = 300; c.d = c.dv = 128; c.causal = BR;
    c.descale = 1);
  F(c.dt = FA_E5M2; c.out = OUT(FA_BF16); c.layout = XV_LAYOUT_PACKED;
    c.hkv = 1; c.hq = 2; c.descale = 1);
  F(c.d = 80; c.dv = 48; c.descale = 2; c.hq = 4; c.hkv = 1); // odd tails
  F(c.dt = FA_E5M2; c.d = 33; c.dv = 17; c.sq = 17; c.sk = 129);
  F(c.dt = FA_E5M2; c.qamp = 8.0f; c.sk = 300; c.descale = 1); // sharp
  F(c.out = OUT(FA_BF16); c.plan = 1; c.sq = 65; c.sk = 97; c.descale = 2;
    c.hq = 4);
  // Head dim 128, the FP8 tensor-core kernels' shape: partial
  // tiles of queries and keys, GQA, varlen with seqused_k, a window, each
  // output dtype.
  F(c.d = c.dv = 128; c.out = OUT(FA_BF16); c.sq = 300; c.sk = 517; c.hq = 4;
    c.descale = 2);
  F(c.d = c.dv = 128; c.out = OUT(FA_F16); c.b = 3; c.varlen = 1; c.seqused = 1;
    c.causal = BR; c.hq = 8; c.hkv = 2; c.descale = 1);
  F(c.d = c.dv = 128; c.b = 1; c.sq = c.sk = 1000; c.causal = TL;
    c.descale = 1);
  F(c.d = c.dv = 128; c.out = OUT(FA_BF16); c.sq = 129; c.sk = 640; c.hq = 8;
    c.hkv = 1; c.wl = 100; c.wr = 0; c.descale = 2; c.sinks = 1);
  F(c.dt = FA_E5M2; c.d = c.dv = 128; c.out = OUT(FA_BF16); c.sq = 257;
    c.sk = 389; c.hq = 4; c.causal = BR; c.descale = 2);
  F(c.dt = FA_E5M2; c.d = c.dv = 128; c.b = 3; c.varlen = 1; c.seqused = 1;
    c.hq = 4; c.hkv = 4; c.descale = 1);
  // The other head dims of the sm80 FP8 tiles (96: padded rows, 192 and
  // 256: 16-row warps), partial tiles, each output dtype; split-KV and a
  // softcap on the way.
  F(c.d = c.dv = 96; c.out = OUT(FA_F16); c.sq = 70; c.sk = 150; c.hq = 4;
    c.causal = BR; c.descale = 2);
  F(c.dt = FA_E5M2; c.d = c.dv = 192; c.sq = 80; c.sk = 130; c.descale = 1;
    c.cap = 4.0f);
  // (Each of the two FP8 dtypes at d96 and d192 too: the sm80 tiles bound
  // by name had none, and their .all tests skipped on the H200.)
  F(c.dt = FA_E5M2; c.d = c.dv = 96; c.sq = 130; c.sk = 70; c.hq = 4; c.hkv = 2;
    c.causal = TL; c.descale = 1);
  F(c.d = c.dv = 192; c.out = OUT(FA_BF16); c.sq = 65; c.sk = 300; c.hq = 4;
    c.hkv = 1; c.causal = BR; c.descale = 2);
  F(c.d = c.dv = 256; c.out = OUT(FA_BF16); c.sq = 70; c.sk = 100; c.hq = 4;
    c.hkv = 1; c.descale = 2);
  F(c.dt = FA_E5M2; c.d = c.dv = 256; c.b = 1; c.sq = 20; c.sk = 700;
    c.descale = 2; c.sinks = 1);
  // Logits of ~1e7 (scale 2^20): base-2 references past 2^23, where the
  // sm90 FP8 kernel leaves the fused exponent for the separately rounded
  // one and scales P by 2^8 with a multiply (sm90_items.cuh exp_rows).
  // Checked element by element (fz_tol.h): such logits are past fp32's
  // resolution of the differences that matter.
  F(c.d = c.dv = 128; c.out = OUT(FA_BF16); c.sq = 130; c.sk = 300; c.hq = 4;
    c.hkv = 2; c.descale = 1; c.scale = 1048576.0f;
    c.expect = XV_EXPECT_ELEMENTWISE);
#undef F
}

/* Decode over an FP8 KV cache: one query row (or a few, speculative) per
   sequence, GQA heads packed, keys split across 8 workers. */
void xv_fwd_fp8_decode(xv_list *l) {
  xcase c;
#define D(...)                                                                 \
  XV_CASE(l, c, c.dt = FA_E4M3; c.out = OUT(FA_BF16); c.threads = 8; c.sq = 1; \
          c.b = 3; c.hq = 8; c.hkv = 2; c.page = 16; c.seqused = 1;            \
          c.descale = 2; __VA_ARGS__)
  D(c.sk = 1000);
  D(c.dt = FA_E5M2; c.out = OUT(FA_F16); c.page = 3; c.sk = 777; c.descale = 1);
  D(c.out = OUT(FA_F32); c.page = 1; c.d = c.dv = 128; c.hkv = 1; c.sk = 500);
  D(c.b = 1; c.page = 0; c.seqused = 0; c.sk = 2048; c.d = c.dv = 128);
  D(c.dt = FA_E5M2; c.out = OUT(FA_F32); c.sq = 4; c.sk = 900; c.causal = BR);
  D(c.out = OUT(FA_F16); c.sk = 600; c.sinks = 1; c.alibi = 1; c.wl = 128;
    c.causal = BR);
  D(c.b = 2; c.hq = 32; c.hkv = 8; c.d = c.dv = 128; c.sk = 333; c.page = 64);
  D(c.plan = 1; c.sk = 1000; c.page = 7);
  D(c.dt = FA_E5M2; c.out = OUT(FA_BF16); c.b = 1; c.hq = 4; c.hkv = 1;
    c.sk = 1500; c.qamp = 8.0f; c.descale = 0);
  // Head dims that are whole vectors on some ISAs only (36: NEON's 4; 40:
  // AVX2's 8), or on none (33): the tile path reads those rows.
  D(c.d = c.dv = 36; c.sk = 700);
  D(c.dt = FA_E5M2; c.d = c.dv = 40; c.sk = 700; c.page = 5);
  D(c.d = 33; c.dv = 17; c.sk = 400; c.out = OUT(FA_F32));
#undef D
}

void xv_bwd_fp8(xv_list *l) {
  xcase c;
#define B(...)                                                                 \
  XV_CASE(l, c, c.bwd = 1; c.dt = FA_E4M3; c.out = OUT(FA_F32); c.sq = 40;     \
          c.sk = 56; c.d = c.dv = 32; c.descale = 1; __VA_ARGS__)
  B();
  B(c.out = OUT(FA_BF16); c.causal = BR; c.hq = 4; c.descale = 2);
  B(c.dt = FA_E5M2; c.out = OUT(FA_F16); c.page = 7; c.seqused = 1; c.b = 3;
    c.sq = 17; c.sk = 70);
  B(c.dt = FA_E5M2; c.b = 4; c.varlen = 1; c.causal = BR; c.descale = 0);
  B(c.d = c.dv = 64; c.sq = 130; c.sk = 70; c.wl = 20; c.wr = 20; c.cap = 4.0f;
    c.descale = 2; c.hq = 4);
  B(c.out = OUT(FA_BF16); c.d = 40; c.dv = 24; c.hq = 4; c.hkv = 1;
    c.sinks = 1);
#undef B
}
