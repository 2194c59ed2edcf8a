// SPDX-License-Identifier: MIT
// The tiling plan. Tile sizes come from the fast memory a worker has; block
// skipping from the mask geometry; kv splits from how many workers the
// problem would otherwise leave idle.
#include "plan.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* In 64 bits: lengths near INT_MAX are valid and must not overflow. */
static int64_t round_up(int64_t x, int m) { return (x + m - 1) / m * m; }

/* Largest power-of-two multiple of align that is <= limit (>= align), and
   never past INT_MAX: a caps' fast memory may be any size_t. */
static int pow2_tile(int align, int64_t limit) {
  int t = align;
  while (t <= INT_MAX / 2 && (int64_t)t * 2 <= limit) t *= 2;
  return t;
}

/* a * b for a, b >= 0, saturating at INT64_MAX: the counts of a plan for
   a problem no memory could hold (fa_explain and fa_plan_create accept
   those) must not overflow; such a plan never runs, since its tensors fail
   validation. */
static int64_t mul_sat(int64_t a, int64_t b) {
  return a && b > INT64_MAX / a ? INT64_MAX : a * b;
}

static int ceil_div(int a, int b) { return (int)(((int64_t)a + b - 1) / b); }

void fa_plan_compute(const fa_problem *p, const fa_caps *caps,
                     fa_plan_data *out) {
  memset(out, 0, sizeof *out);
  const fa_attention *a = &p->a;
  int align = caps->tile_align > 0 ? caps->tile_align : 1;
  int dpad = (int)round_up(a->head_dim, align),
      dvpad = (int)round_up(a->head_dim_v, align);
  int64_t mem = (int64_t)caps->fast_mem_bytes;

  // GQA packing: the q heads that share a kv head become lanes of one tile,
  // so each K/V block is loaded once for all of them (decode reads K/V once
  // instead of `group` times). Lanes are (row, head), head fastest.
  // Decode-sized problems (every head of a sequence fits max_small_lanes)
  // put all heads in one tile: the K/V rows of all kv heads, adjacent in
  // BSHD layouts and paged caches, are then streamed once, in order.
  // Otherwise a tile holds whole heads of one group and never more lanes
  // than the kernel's largest tile: the largest divisor of the group that
  // fits.
  int pack = 1;
  if (caps->pack_gqa && caps->max_small_lanes > 0 && a->heads_q > 1 &&
      (int64_t)a->seqlen_q * a->heads_q <= caps->max_small_lanes &&
      round_up(a->heads_q, align) <= caps->max_block_q)
    pack = a->heads_q;
  else if (caps->pack_gqa)
    // (g > max_block_q never fits: starting there keeps a group of 2^31
    // heads, which fa_explain accepts, from a 2^31-step search.)
    for (int g = p->group < caps->max_block_q ? p->group : caps->max_block_q;
         g > 1 && pack == 1; g--)
      if (p->group % g == 0 && round_up(g, align) <= caps->max_block_q)
        pack = g;
  const int kv_tiles = pack > p->group ? pack / p->group : 1;

  // B_c: the K and V tiles (fp32 working copies, one per kv head of the
  // tile) take half the fast memory, leaving the rest for Q, S and O.
  int64_t kv_row = (int64_t)(dpad + dvpad) * 4 * kv_tiles;
  int bk = pow2_tile(align, mem / 2 / kv_row);
  if (bk > caps->max_block_k) bk = pow2_tile(align, caps->max_block_k);
  if (bk > round_up(a->seqlen_k, align))
    bk = pow2_tile(align, round_up(a->seqlen_k, align));
  // B_r: Q tile + O accumulator + S row block fill what B_c left.
  int64_t q_row = (int64_t)(dpad + dvpad + bk) * 4;
  int64_t left = mem - (int64_t)bk * kv_row;
  int bq = pow2_tile(align, left / q_row);
  if (bq > caps->max_block_q) bq = pow2_tile(align, caps->max_block_q);
  int64_t lanes = (int64_t)a->seqlen_q * pack;
  if (bq > lanes) bq = pow2_tile(align, round_up(lanes, align));
  if (bq < pack) bq = (int)round_up(pack, align); // one row of each head

  out->block_q = bq;
  out->block_k = bk;
  out->pack_group = pack;
  out->kv_heads_per_tile = kv_tiles;
  out->block_rows = bq / pack;
  out->head_dim_pad = dpad;
  out->head_dim_v_pad = dvpad;
  out->num_q_blocks = ceil_div(a->seqlen_q, out->block_rows);
  out->num_k_blocks = ceil_div(a->seqlen_k, bk);

  // Split-KV only when the (batch, head, q block) items cannot keep every
  // worker busy: aim for at most two items per worker, each split keeping
  // at least two kv blocks so the merge stays cheap next to the work it
  // saves. Rounded down, not up: equal split-KV items run in waves of
  // num_workers, and a last wave that is mostly empty takes as long as a
  // full one (base 64 on 264 workers: 9 splits = 576 items, a third wave
  // 18% full; 8 splits = 512 items, two waves, the second 94% full).
  int64_t base =
      mul_sat(mul_sat(a->batch, a->heads_q / pack), out->num_q_blocks);
  int splits = 1;
  int max_splits = caps->max_splits > 1 ? caps->max_splits : 1;
  if (base > 0 && base < caps->num_workers && max_splits > 1) {
    int64_t want = 2 * (int64_t)caps->num_workers / base;
    int64_t most = out->num_k_blocks / 2;
    if (want > most) want = most;
    if (want > max_splits) want = max_splits;
    if (want > 1) splits = (int)want;
  }
  out->num_splits = splits;
  out->num_work = mul_sat(base, splits);

  out->blocks_total = mul_sat(mul_sat(base, pack), out->num_k_blocks);
  // The count walks every q block: past 2^20 of them (seqlen_q near
  // INT_MAX, which fa_explain and fa_plan_create accept) it would take
  // seconds, so such plans report the upper bound instead.
  if (out->num_q_blocks > (1 << 20)) {
    out->blocks_visited = out->blocks_total;
    return;
  }
  int64_t visited = 0;
  const int64_t shift = fa_plan_shift(p);
  for (int qb = 0; qb < out->num_q_blocks; qb++) {
    int kb0, kb1;
    fa_plan_kv_blocks(p, out, shift, a->seqlen_q, a->seqlen_k, qb, &kb0, &kb1);
    if (kb1 > kb0) visited += kb1 - kb0;
  }
  out->blocks_visited = mul_sat(mul_sat(visited, a->batch), a->heads_q);
}

int64_t fa_plan_shift(const fa_problem *p) {
  if (p->explicit_positions) return p->a.q_position - p->a.k_position;
  return p->top_left ? 0 : (int64_t)p->a.seqlen_k - p->a.seqlen_q;
}

void fa_plan_kv_blocks(const fa_problem *p, const fa_plan_data *plan,
                       int64_t shift, int sq, int sk, int qb, int *kb_begin,
                       int *kb_end) {
  fa_kv_block_range(qb, plan->block_rows, plan->block_k, sq, sk, shift,
                    p->a.window_left, p->a.window_right, kb_begin, kb_end);
}

void fa_plan_split_range(int begin, int end, int num_splits, int split,
                         int *s_begin, int *s_end) {
  fa_split_range(begin, end, num_splits, split, s_begin, s_end);
}

void fa_plan_work_item(const fa_problem *p, const fa_plan_data *plan, int64_t w,
                       int *b, int *h, int *qb, int *split) {
  fa_work_item_of(w, p->a.batch, p->a.heads_q, plan->pack_group,
                  plan->num_q_blocks, plan->num_splits,
                  fa_window_grows(p->a.window_left, p->a.window_right), b, h,
                  qb, split);
}

size_t fa_plan_data_describe(const fa_plan_data *plan, char *buf, size_t len) {
  double skipped =
      plan->blocks_total
          ? 100.0 * (double)(plan->blocks_total - plan->blocks_visited) /
                (double)plan->blocks_total
          : 0.0;
  int n =
      snprintf(buf, len,
               "block_q=%d (%d rows x %d heads) block_k=%d "
               "head_dim_pad=%d head_dim_v_pad=%d "
               "q_blocks=%d k_blocks=%d kv_splits=%d work_items=%lld "
               "blocks_visited=%lld/%lld (%.1f%% skipped) "
               "workspace=%zu",
               plan->block_q, plan->block_rows, plan->pack_group, plan->block_k,
               plan->head_dim_pad, plan->head_dim_v_pad, plan->num_q_blocks,
               plan->num_k_blocks, plan->num_splits, (long long)plan->num_work,
               (long long)plan->blocks_visited, (long long)plan->blocks_total,
               skipped, plan->workspace_bytes);
  return n < 0 ? 0 : (size_t)n;
}
