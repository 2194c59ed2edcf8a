// SPDX-License-Identifier: MIT
// The plan of the backward's fp32 dQ, accumulated in pass 2 instead of
// recomputed in a pass 3 (cpu_backward.h runs it; compiled once at baseline
// flags). Pass 2 then runs 5 tile products a (q block, kv block) pair where
// the recompute ran 7, for fp32 rows of dQ that pass 2's items own and pass
// 3 sums: no atomics, and a fixed order of every sum, so the bits depend on
// neither the threads nor their schedule.
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "config.h"
#include "cpu_work.h"
#include "plan.h"
#include "problem.h"

/* Most floats the partial dQ rows may take (256 MiB). The switch
   FA_CPU_BWD_DQ_BYTES replaces it (0: pass 3 recomputes dQ for every
   problem, which tests that path). Past it, the units run in waves that fit;
   a unit too large for it alone recomputes. */
#ifndef FA_CPU_DQ_MAX_FLOATS
#define FA_CPU_DQ_MAX_FLOATS ((size_t)1 << 26)
#endif

/* Pass-2 items the ranges aim for: each range is an item, and dynamic
   scheduling balances 32 items over up to ~8 threads. More ranges add a
   partial dQ each (memory, and pass 3 reads each), so fewer units than
   this get more ranges and more units one. */
#define FA_CPU_DQ_ITEMS 32

static size_t dq_cap_floats(void) {
  const char *v = fa_config_string("FA_CPU_BWD_DQ_BYTES");
  if (!v) return FA_CPU_DQ_MAX_FLOATS;
  const long bytes = fa_config_int("FA_CPU_BWD_DQ_BYTES");
  return bytes > 0 ? (size_t)bytes / sizeof(float) : 0;
}

/* Cut sequence b's kv blocks into r ranges of about equal work, the (q
   block, kv block) pairs each visits: bounds[0..r], bounds[0] = 0 and
   bounds[r] = its block count. w: scratch of at least num_k_blocks + 1. */
static void cut_ranges(const cpu_bwd *c, int b, int r, int *w, int *bounds) {
  const fa_problem *p = c->p;
  const int sq = fa_seq_len_q(p, b), sk = fa_seq_len_k(p, b);
  const int bq = c->t.bq, bk = c->t.bk;
  const int nkb = (sk + bk - 1) / bk, nqb = (sq + bq - 1) / bq;
  const int64_t shift = fa_diag_shift(p, b, sq, sk);
  for (int kb = 0; kb <= nkb; kb++) w[kb] = 0;
  for (int qb = 0; qb < nqb; qb++) { // each q block's kv blocks, +1 -1
    int kb0, kb1;
    fa_plan_kv_blocks(p, c->plan, shift, sq, sk, qb, &kb0, &kb1);
    if (kb0 >= kb1) continue;
    w[kb0]++;
    w[kb1]--;
  }
  int64_t total = 0;
  for (int kb = 0; kb < nkb; kb++) {
    if (kb > 0) w[kb] += w[kb - 1];
    total += w[kb];
  }
  // Range x starts at the first block whose pairs before it reach x/r of
  // the total.
  int64_t before = 0;
  int kb = 0;
  bounds[0] = 0;
  for (int x = 1; x < r; x++) {
    while (kb < nkb && before * r < total * x) before += w[kb++];
    bounds[x] = kb;
  }
  bounds[r] = nkb;
}

size_t fa_cpu_dq_plan(cpu_bwd *c, int **bounds) {
  const fa_problem *p = c->p;
  const int B = p->a.batch;
  *bounds = NULL;
  c->dq_ranges = 0;
  c->dq_wave = c->dq_unit_blocks = 0;
  c->dq_block = 0;
  const int64_t units = p->paged ? p->a.heads_kv : (int64_t)B * p->a.heads_kv;
  const int64_t unit_blocks =
      (int64_t)(p->paged ? B : 1) * p->group * c->plan->num_q_blocks;
  // Either layout of a block fits in whole 32-float tiles of both sides.
  const size_t block = (size_t)(c->t.bq + 31) / 32 * 32 *
                       ((size_t)(c->t.ld + 31) / 32 * 32),
               unit_floats = (size_t)unit_blocks * block;
  int nkb = 0; // the most kv blocks of a sequence
  for (int b = 0; b < B; b++) {
    const int n = (fa_seq_len_k(p, b) + c->t.bk - 1) / c->t.bk;
    if (n > nkb) nkb = n;
  }
  if (units <= 0 || unit_floats == 0 || nkb <= 0) return 0;
  const size_t cap = dq_cap_floats();
  // Paged units share pages between sequences: one range, one wave.
  int64_t ranges = p->paged ? 1 : (FA_CPU_DQ_ITEMS + units - 1) / units;
  if (ranges > nkb) ranges = nkb;
  if ((size_t)ranges * unit_floats > cap) ranges = (int64_t)(cap / unit_floats);
  if (ranges < 1) return 0;
  int64_t wave = (int64_t)(cap / ((size_t)ranges * unit_floats));
  if (wave > units) wave = units;
  if (p->paged && wave < units) return 0;
  int *w = malloc(sizeof(int) * ((size_t)B * (ranges + 1) + nkb + 1));
  if (!w) return SIZE_MAX;
  int *scratch = w + (size_t)B * (ranges + 1);
  for (int b = 0; b < B; b++)
    cut_ranges(c, b, (int)ranges, scratch, w + (size_t)b * (ranges + 1));
  *bounds = w;
  c->dq_ranges = (int)ranges;
  c->dq_wave = wave;
  c->dq_unit_blocks = unit_blocks;
  c->dq_block = block;
  return (size_t)ranges * wave * unit_floats;
}
