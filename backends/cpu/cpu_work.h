// SPDX-License-Identifier: MIT
// What the CPU driver (cpu_driver.c, compiled once at baseline flags) and
// each ISA's kernel body (cpu_kernels.h, compiled per ISA) share: the
// per-thread tile layout, the call's shared scratch, and the table of work
// functions through which an ISA's translation unit offers its kernels.
#ifndef FA_CPU_WORK_H
#define FA_CPU_WORK_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* Per-thread working tiles, in floats. bq is a multiple of FA_VW so the
   query axis of transposed tiles is whole vectors. */
typedef struct cpu_tiles {
  int bq, bk, ld, ldv; // ld/ldv: row pitch of d / dv wide tiles
  // Row pitch of the transposed q-side tiles (qt, dot): bq and 16 floats,
  // so that a column panel the GEMM streams spreads over every L1 set (at
  // 512 bytes a panel of 128 rows uses half of them, past their ways).
  int ldqt;
  size_t qt, q, dot, d_o, k, v, s, g, dp, acc, accv, m, l, mu, qr, row, p2;
  size_t kt, vt;
  size_t fo, fc, fml; // forward, long rows: the folded state (fold_state)
  size_t vis; // 2 * bq ints: each lane's visible keys of the tile, [lo, hi)
  size_t total;
} cpu_tiles;

/* The splits' partial states, which the driver merges. */
typedef struct cpu_partials {
  float *ml; // [num_work][block_q][2]: (m, l) of each split
  float *o;  // [num_work][block_q][head_dim_v]
} cpu_partials;

/* bf16 K and V in the layouts the tile products read, packed once per call
   for every (batch, kv head) rather than once per (q block, kv block): K
   rows as stored, padded to ldk2 pairs; V as pairs of consecutive keys.
   Keys past a sequence's length, up to rows (whole 32-key tiles past the
   last block), are zero, so any tile a product reads is finite. */
typedef struct cpu_kvpack {
  uint32_t *k, *v; // [batch][heads_kv][rows][ldk2], [..][rows / 2][ldv2]
  int rows, ldk2, ldv2;
  int64_t items; // pack work items: (batch, kv head, kv block)
  // The fp32 step's pack instead: K and V rows widened to fp32 floats,
  // [batch][heads_kv][rows][ldk2] and [..][rows][ldv2], items (batch, kv
  // block) (cpu_step_f32.h).
  int fp32;
} cpu_kvpack;

typedef struct cpu_bwd {
  const fa_problem *p;
  const fa_plan_data *plan;
  const fa_bwd_args *args;
  cpu_tiles t;
  float *delta; // D, [batch][heads_q][seqlen_q]
  // Paged: compact index of each referenced page (-1: none), and the
  // floats of one kv head's fp32 dK/dV rows over those pages.
  const int32_t *page_slot;
  size_t page_floats;
  float *sink_part; // dsinks: each (batch, head)'s share, [batch][heads_q]
  float *pack;      // bwd_pack_plan's floats (NULL: none)
  // Every Q and dO row widened once (pass 1) and every K and V row once
  // (pass 2), dense at the tiles' pitches, for the passes after: NULL when
  // the problem is past FA_CPU_PACK_MAX_FLOATS or an ISA's pack took the
  // call (each pass copies its tiles).
  float *q_rows, *do_rows; // [batch][heads_q][seqlen_q][q_ld], [..][do_ld]
  float *k_rows, *v_rows;  // [batch][heads_kv][num_k_blocks * block_k][ld..]
  // Q and dO rows are the B operand of pass 2's dV and dK products: 16
  // floats past the tiles' pitch, a column panel spreads over every L1 set.
  int q_ld, do_ld;
  // dQ accumulated in pass 2 (cpu_bwd_dq.c plans it; dq_ranges 0: pass 3
  // recomputes S and dP for it instead). A unit is what one pass-2 item
  // owns, (batch, kv head), or a kv head when paged; its kv blocks are cut
  // into dq_ranges ranges, each adding dS.K into fp32 blocks of its own,
  // one a (sequence when paged, head of the group, q block) of the unit,
  // which pass 3 sums in range order. A block is dq_block floats: rows at
  // the tiles' pitch ld, or where the ISA's pack runs the blocks
  // (dq_transposed: AMX) dQ^T, [round32(ld)][round32(bq)]. dq_wave units
  // at a time hold blocks (the passes run wave by wave), so dq_part is
  // dq_ranges * dq_wave * dq_unit_blocks blocks.
  float *dq_part;
  const int *dq_bounds; // [batch][dq_ranges + 1]: each range's kv blocks
  int dq_ranges, dq_transposed;
  int64_t dq_wave, dq_unit_blocks;
  size_t dq_block;
} cpu_bwd;

/* The fp32 dQ of pass 2 for call c, whose problem, plan and tiles are
   set: fills c's dq_ranges (0: none, pass 3 recomputes), dq_wave,
   dq_unit_blocks, dq_block, and *bounds (malloc'd, the caller frees it;
   NULL with dq_ranges 0); returns the floats dq_part needs, or
   SIZE_MAX when bounds could not be allocated. The choice depends on the
   problem and the cap, never on the thread count, so the result's bits
   do not either. */
size_t fa_cpu_dq_plan(cpu_bwd *c, int **bounds);

/* Most floats the fp32 row packs of one call may take (256 MiB); past it
   the kernels copy each tile's rows as they go (-DFA_CPU_PACK_MAX_FLOATS=0
   builds that path for every problem, to test it). */
#ifndef FA_CPU_PACK_MAX_FLOATS
#define FA_CPU_PACK_MAX_FLOATS ((size_t)1 << 26)
#endif

/* One ISA's work functions (fa_cpu_ops_<isa>, defined by isa_<isa>.c). The
   driver owns threads, workspace, the merge of splits and the error path;
   these run one work item on the calling thread's tiles. */
typedef struct fa_cpu_isa_ops {
  /* Where the tiles of a thread live (bwd: the backward's). */
  cpu_tiles (*tiles)(const fa_plan_data *plan, int bwd);
  /* The forward's K/V pack: fills kv (items 0: none) and returns its
     floats; then item i of it, once kv's k and v point at them. */
  size_t (*kvpack_plan)(const fa_problem *p, const fa_plan_data *plan,
                        cpu_kvpack *kv);
  void (*kvpack_item)(const fa_problem *p, const fa_plan_data *plan,
                      const fa_fwd_args *args, const cpu_kvpack *kv, int64_t i);
  /* Forward work item w on the tiles ws (layout t). */
  void (*fwd_item)(const fa_problem *p, const fa_plan_data *plan,
                   const fa_fwd_args *args, const cpu_tiles *t, float *ws,
                   int64_t w, cpu_partials *part, const cpu_kvpack *kv);
  /* Run by each thread after its forward items (a tile step's end). */
  void (*thread_done)(void);
  /* The backward's passes: D and the dsinks share of (b, h); dK/dV item i
     (pacc: the thread's page accumulator when paged); dQ item i. */
  void (*bwd_delta)(const cpu_bwd *c, float *ws, int b, int h);
  void (*bwd_kv_item)(const cpu_bwd *c, float *ws, float *pacc, int64_t i);
  void (*bwd_q_item)(const cpu_bwd *c, float *ws, int64_t i);
  /* Optional (NULL: none): operands packed once per call before the
     passes, into c->pack: the floats and items (*items) it needs, and
     item i on the thread's tiles ws. */
  size_t (*bwd_pack_plan)(const cpu_bwd *c, int64_t *items);
  void (*bwd_pack_item)(const cpu_bwd *c, float *ws, int64_t i);
} fa_cpu_isa_ops;

fa_status fa_cpu_drive_forward(const fa_cpu_isa_ops *ops, void *state,
                               const fa_problem *p, const fa_plan_data *plan,
                               const fa_fwd_args *args);
fa_status fa_cpu_drive_backward(const fa_cpu_isa_ops *ops, void *state,
                                const fa_problem *p, const fa_plan_data *plan,
                                const fa_bwd_args *args);
#endif
