// SPDX-License-Identifier: MIT
// Cross-validation cases: one struct holds every parameter of a case, and
// the grid (xval_grid.c) lists the cases of each named group.
#ifndef FA_TESTS_XVAL_H
#define FA_TESTS_XVAL_H

#include "flashattn.h"

/* Layout of k/v relative to q: the same, or the next one (mixed views). */
#define XV_LAYOUT_PACKED 3 /* q, k, v in one [b][s][hq+2hkv][d] buffer */

/* Input generators (xcase.gen): the edge numerics of tests/stress as
   inputs every backend gets. */
enum {
  XV_GEN_NORMAL = 0, /* N(0, 1), q scaled by qamp */
  XV_GEN_LOGITS_POS, /* integer q, k near +-sqrt(1e4 / d): with scale 1
                        every score is exactly ~+1e4 in fp32 */
  XV_GEN_LOGITS_NEG, /* the same with k negated: scores ~-1e4 */
  XV_GEN_F16MAX,     /* q, k, v within 2% of +-65504, random signs */
  XV_GEN_EQUAL,      /* q = 0: every score 0, O the mean of the visible v */
  XV_GEN_NAN_Q,      /* N(0, 1) with one NaN in q (row sq/2 of sequence 0) */
  XV_GEN_NAN_K,      /* ... in k (key sk/3 of sequence 0) */
  XV_GEN_NAN_V,      /* ... in v (key sk/3 of sequence 0) */
  XV_GEN_NAN_DO,     /* ... in dO (row sq/2 of sequence 0; backward) */
  XV_GEN_INF_Q,      /* N(0, 1) with k > 0 in dimension 0, and q's
                        dimension 0 -inf in row sq/2 of head 0 (every score
                        of that row -inf: NaN, unlike a row with no key) and
                        +inf in row sq/3 of the last head (NaN) */
  XV_GEN_RISING_K    /* N(0, 1) with k rows x3 from key sk/2 and x8 from
                        key 3sk/4: every row's maximum jumps from one kv
                        block to a later one, by a little and by a lot (a
                        kernel that keeps a running reference must take
                        the new one) */
};

/* What a case's result must satisfy (xcase.expect). */
enum {
  XV_EXPECT_RULE = 0,   /* norms vs the oracle: f32 fixed bounds, 16-bit the
                           FlashAttention rule (2x a naive same-precision
                           attention) */
  XV_EXPECT_ELEMENTWISE /* every element within the forward error analysis
                           of tests/fuzz/fz_tol.h (a norm ratio means
                           little on such inputs, and the naive 16-bit
                           attention overflows on them); NaN exactly where
                           the oracle's is, except where flashattn.h lets
                           a tensor-core kernel spread a NaN of v over its
                           tile */
  ,
  XV_EXPECT_EXACT /* XV_EXPECT_ELEMENTWISE, and o equal to the oracle's
                     bit for bit (every row sees one key: O = v) */
};

typedef struct xcase {
  int bwd; /* 0 forward, 1 backward */
  fa_dtype dt;
  int b, sq, sk; /* batch, (max) query and key lengths */
  int hq, hkv, d, dv;
  int hdv0;         /* pass head_dim_v = 0 (dv must equal d) */
  int causal;       /* 0, FA_CAUSAL_BOTTOM_RIGHT, FA_CAUSAL_TOP_LEFT */
  int wl, wr;       /* window; -1 unbounded */
  float cap;        /* softcap, 0 off */
  float scale;      /* 0 = default 1/sqrt(d) */
  int alibi, sinks; /* 0/1 */
  int varlen;       /* 0 dense; 1 cu_seqlens q and k; 2 cu_seqlens q only */
  int seqused;      /* 1: seqused_k set (lengths <= storage, some 0) */
  int page;         /* page size of a paged KV cache; 0 = not paged */
  int bad_tail;     /* paged: block-table entries past each sequence's keys
                       lie outside [0, num_pages) (legal: nothing may follow
                       them), instead of naming decoy pages of NaN */
  int layout;       /* ts_layout, or XV_LAYOUT_PACKED */
  int mixed;        /* k/v (dk/dv) in the next layout from q's, o/do/dq in
                       the one after */
  int pad;          /* extra elements in every stride */
  int no_lse;       /* forward with lse = NULL */
  int slack;        /* the maxima seqlen_q/seqlen_k exceed every real length
                       by this much (varlen, seqused_k) */
  float qamp;       /* q ~ N(0, qamp^2); 0 means 1. Large: sharp softmax */
  int plan;         /* forward: also check fa_plan_forward bits and
                       determinism; backward: fa_plan_create_backward +
                       fa_plan_backward bit-identical to fa_backward */
  int out;          /* 0: o, do and the gradients in dt; else 1 + their
                       dtype (FP8 inputs need one: outputs are not FP8) */
  int descale;      /* descales: 0 none; 1 one value each for q, k, v; 2 per
                       (sequence, kv head) each; 3 q one value, k per head,
                       v none */
  int threads;      /* fa_context_set_threads for this case (CPU); 0 = the
                       default. Decode cases use 8 so the planner sees more
                       workers than work items and splits the keys
                       (split-KV) whatever the host's core count. */
  int gen;          /* XV_GEN_*: how q, k and v are drawn */
  int expect;       /* XV_EXPECT_*: how the result is checked */
  /* ---- the 0.2 API ---- */
  int pos; /* 0 aligned; 1 FA_POSITIONS_EXPLICIT with q_position =
              qoff, k_position = koff; 2 also per-sequence arrays
              (random, negative ones included) */
  long long qoff, koff;
  int accum;  /* backward: then FA_BACKWARD_ACCUMULATE into random
                 accumulators (f32: bit-equal to old + the overwrite
                 result; 16-bit: within one rounding) */
  int dsinks; /* backward with sinks: dsinks against the oracle */
  int shard;  /* forward (dense): cut q and k into shard chunks each,
                 run every chunk pair with its explicit positions and
                 combine them with fa_merge_states */
} xcase;

/* The output dtype of a case. */
static inline fa_dtype xv_out_dtype(const xcase *c) {
  return c->out ? (fa_dtype)(c->out - 1) : c->dt;
}

/* A case with every field at its default: forward f32, b2 sq64 sk64 hq2 hkv2
   d64 dv64, no mask, bshd, dense. */
xcase xv_default(void);

/* The most cases a group may have (the runner's case array). */
#define XV_MAX_CASES 1024

/* The name of group i (0, 1, ...), NULL past the last. */
const char *xv_group_name(int i);

/* Fill up to max cases of group `name`; returns the number of cases, or -1
   if the group does not exist. */
int xv_group_cases(const char *name, xcase *out, int max);

/* Self-test of the oracle and the naive attention (no backend involved).
   Returns the number of failures. */
int xv_selftest(void);

#endif
