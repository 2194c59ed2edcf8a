// SPDX-License-Identifier: MIT
// The groups of the 0.2 API: explicit positions, shards merged, descales,
// output dtypes, FA_BACKWARD_ACCUMULATE, dsinks, backward plans.
#include "tensor.h"
#include "xval.h"
#include "xval_groups.h"

typedef xv_list list;

/* ---- the 0.2 API: positions, shards, descales, output dtypes,
   accumulation, dsinks, backward plans ---------------------------------- */

/* Explicit positions: q/k offsets (negative ones, ones that empty rows, and
   2^39-sized ones with a small shift), per-sequence arrays with varlen,
   with causal, windows, ALiBi, softcap, sinks, seqused and paged KV. */
static void positions_cases(list *l, int bwd) {
  xcase c;
#define PS(...)                                                                \
  XV_CASE(l, c, c.bwd = bwd; c.pos = 1; c.hq = 4; c.hkv = 2; c.sq = 37;        \
          c.sk = 61; c.d = c.dv = 32; __VA_ARGS__)
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

void xv_fwd_positions(xv_list *l) { positions_cases(l, 0); }
void xv_bwd_positions(xv_list *l) { positions_cases(l, 1); }

/* One sequence cut into q and k chunks, merged (see shard_forward in
   test_xval.c); sq != sk, aligned and explicit positions, masks, ALiBi,
   softcap, descales, GQA, 16-bit inputs (the parts are f32). */
void xv_fwd_shard(xv_list *l) {
  xcase c;
#define SH(...)                                                                \
  XV_CASE(l, c, c.shard = 3; c.hq = 4; c.hkv = 2; c.sq = 70; c.sk = 90;        \
          c.d = c.dv = 32; __VA_ARGS__)
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
  XV_CASE(l, c, c.bwd = bwd; c.descale = 1; c.hq = 4; c.hkv = 2; c.sq = 41;    \
          c.sk = 59; c.d = c.dv = 32; __VA_ARGS__)
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

void xv_fwd_descale(xv_list *l) { descale_cases(l, 0); }
void xv_bwd_descale(xv_list *l) { descale_cases(l, 1); }

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

void xv_fwd_outdtype(xv_list *l) { outdtype_cases(l, 0); }
void xv_bwd_outdtype(xv_list *l) { outdtype_cases(l, 1); }

/* FA_BACKWARD_ACCUMULATE into f32 and 16-bit accumulators. */
void xv_bwd_accumulate(xv_list *l) {
  xcase c;
#define AC(...)                                                                \
  XV_CASE(l, c, c.bwd = 1; c.accum = 1; c.hq = 4; c.hkv = 2; c.sq = 40;        \
          c.sk = 56; c.d = c.dv = 32; __VA_ARGS__)
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
void xv_bwd_dsinks(xv_list *l) {
  xcase c;
#define SK(...)                                                                \
  XV_CASE(l, c, c.bwd = 1; c.sinks = 1; c.dsinks = 1; c.hq = 4; c.hkv = 2;     \
          c.sq = 40; c.sk = 56; c.d = c.dv = 32; __VA_ARGS__)
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
void xv_bwd_plan(xv_list *l) {
  xcase c;
#define BP(...)                                                                \
  XV_CASE(l, c, c.bwd = 1; c.plan = 1; c.sq = 45; c.sk = 63; c.d = c.dv = 32;  \
          __VA_ARGS__)
  BP();
  BP(c.causal = BR; c.dt = FA_F16);
  BP(c.varlen = 1; c.b = 4; c.dt = FA_BF16; c.causal = BR);
  BP(c.page = 16; c.seqused = 1; c.b = 3);
  BP(c.hq = 8; c.hkv = 2; c.layout = TS_BHSD; c.wl = 9; c.wr = 9);
  BP(c.sinks = 1; c.dsinks = 1; c.alibi = 1; c.cap = 4.0f);
  BP(c.descale = 2; c.pos = 2; c.b = 3; c.causal = BR; c.dt = FA_BF16);
  BP(c.out = 1 + FA_F32; c.dt = FA_F16; c.causal = BR);
  // 11 kv blocks of one kv head: the CPU's dQ in 11 ranges.
  BP(c.sq = 300; c.sk = 700; c.hq = 2; c.hkv = 1; c.causal = BR);
#undef BP
}
