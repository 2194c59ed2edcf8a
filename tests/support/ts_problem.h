// SPDX-License-Identifier: MIT
// The tests' problem builder: an fa_attention with the shape set and every
// feature off, always made through fa_attention_init (which owns the
// defaults, and any field a later API version adds), and dense tensor
// views. Header-only, like check.h, for tests that link only the library.
#ifndef FA_TESTS_TS_PROBLEM_H
#define FA_TESTS_TS_PROBLEM_H

#include <stdint.h>

#include "flashattn.h"

#if defined(__GNUC__)
#define TS_PROBLEM_UNUSED __attribute__((unused))
#else
#define TS_PROBLEM_UNUSED
#endif

/* batch sequences of sq queries and sk keys, hq query heads over hkv kv
   heads, head dim d (head_dim_v 0: the same); no mask, default scale. Set
   the rest on the result. */
TS_PROBLEM_UNUSED static fa_attention ts_problem(int batch, int sq, int sk,
                                                 int hq, int hkv, int d) {
  fa_attention a;
  fa_attention_init(&a);
  a.batch = batch;
  a.seqlen_q = sq;
  a.seqlen_k = sk;
  a.heads_q = hq;
  a.heads_kv = hkv;
  a.head_dim = d;
  return a;
}

/* A dense BSHD view [.., seq, heads, dim] of type t at data. */
TS_PROBLEM_UNUSED static fa_tensor ts_bshd(void *data, fa_dtype t, int seq,
                                           int heads, int dim) {
  fa_tensor v = {0};
  v.data = data;
  v.dtype = t;
  v.stride_head = dim;
  v.stride_seq = (int64_t)heads * dim;
  v.stride_batch = (int64_t)seq * heads * dim;
  return v;
}

#endif
