// SPDX-License-Identifier: MIT
// The CPU kernels' OpenMP driver, compiled once at baseline flags for every
// ISA: threads over the plan's work items, the workspace carved into
// per-thread tiles and call-wide scratch, the merge of splits, the error
// path. The work items themselves are the ISA's (fa_cpu_isa_ops, from
// isa_<isa>.c): kernels are single threaded on their thread's tiles (the
// BLIS framework/micro-kernel split).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_detect.h"
#include "cpu_finalize.h"
#include "cpu_internal.h"
#include "cpu_work.h"
#include "error.h"
#include "fa_cpu_built.h" // FA_CPU_IF_<isa>
#include "softmax.h"

/* Merge the splits of one (b, heads, q block), lane by lane, in split
   order. */
static void fwd_merge(const fa_problem *p, const fa_plan_data *plan,
                      const fa_fwd_args *args, const cpu_partials *part,
                      float *acc, int64_t w0) {
  int b, h0, qb, split;
  fa_plan_work_item(p, plan, w0, &b, &h0, &qb, &split);
  const int sq = fa_seq_len_q(p, b), bq = plan->block_q, dv = p->a.head_dim_v;
  const int pk = plan->pack_group, row0 = qb * plan->block_rows;
  if (row0 >= sq) return;
  const int npos = sq - row0 < plan->block_rows ? sq - row0 : plan->block_rows;
  for (int r = 0; r < npos * pk; r++) {
    float m = -INFINITY, l = 0.0f;
    memset(acc, 0, sizeof(float) * (size_t)dv);
    for (int sp = 0; sp < plan->num_splits; sp++) {
      const float *pml = part->ml + ((size_t)(w0 + sp) * bq + r) * 2;
      const float *po = part->o + ((size_t)(w0 + sp) * bq + r) * dv;
      fa_softmax_merge(&m, &l, acc, pml[0], pml[1], po, dv);
    }
    const int h = h0 + r % pk, sk = fa_seq_len_k(p, b);
    float lse, inv = finalize(p, m, l, h, row0 + r / pk,
                              fa_diag_shift(p, b, sq, sk), sk, &lse);
    store_row(p, args, b, h, row0 + r / pk, acc, inv, lse);
  }
}

static int thread_id(void) {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

fa_status fa_cpu_drive_forward(const fa_cpu_isa_ops *ops, void *state,
                               const fa_problem *p, const fa_plan_data *plan,
                               const fa_fwd_args *args) {
  fa_cpu_state *st = state;
  const cpu_tiles t = ops->tiles(plan, 0);
  int nt = fa_cpu_threads(st);
  if ((int64_t)nt > plan->num_work) nt = (int)plan->num_work;
  if (nt < 1) nt = 1;
  const int dv = p->a.head_dim_v, splits = plan->num_splits;
  const int64_t nwork = plan->num_work;
  size_t ml_floats = splits > 1 ? (size_t)nwork * plan->block_q * 2 : 0;
  size_t po_floats = splits > 1 ? (size_t)nwork * plan->block_q * dv : 0;
  size_t acc_pitch = ((size_t)dv + 15) / 16 * 16;
  size_t merge_floats = splits > 1 ? (size_t)nt * acc_pitch : 0;
  cpu_kvpack kv; // the bf16 step's K/V (none without it)
  const size_t kv_floats = ops->kvpack_plan(p, plan, &kv);
  float *ws = fa_cpu_workspace(st, sizeof(float) *
                                       (t.total * nt + ml_floats + po_floats +
                                        merge_floats + kv_floats));
  if (!ws) return FA_ERR_OUT_OF_MEMORY;
  kv.k = (uint32_t *)(ws + t.total * nt + ml_floats + po_floats + merge_floats);
  kv.v = kv.k + (size_t)p->a.batch * p->a.heads_kv * kv.rows * kv.ldk2;
  cpu_partials part = {ws + t.total * nt, ws + t.total * nt + ml_floats};
  float *merge_acc = part.o + po_floats;
  // Whether FP8 decode rows take vdpbf16ps is measured (a ~1 ms rate probe)
  // at the first call: here, on one thread, not in the workers, where
  // probes racing on shared cores could measure each other.
  if (fa_dtype_is_fp8(p->dtype)) {
    FA_CPU_IF_avx512bf16((void)fa_cpu_fp8_dp_pays());
  }

#pragma omp parallel num_threads(nt)
  {
    const int tid = thread_id();
    float *mine = ws + t.total * (size_t)tid;
    if (kv.items) {
#pragma omp for schedule(dynamic, 1)
      for (int64_t i = 0; i < kv.items; i++)
        ops->kvpack_item(p, plan, args, &kv, i);
      // (implicit barrier: K and V are packed)
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < nwork; w++)
      ops->fwd_item(p, plan, args, &t, mine, w, &part, &kv);
    ops->thread_done(); // the thread's tiles are free again
    if (splits > 1) {
      float *acc = merge_acc + acc_pitch * (size_t)tid;
#pragma omp for schedule(dynamic, 1)
      for (int64_t w = 0; w < nwork; w += splits)
        fwd_merge(p, plan, args, &part, acc, w);
    }
  }
  return FA_OK;
}

/* ---- backward: the passes of cpu_backward.h -------------------------- */

/* dsinks[h] from the (batch, head) shares, summed in batch order so the
   result does not depend on the threads. */
static void store_dsinks(const cpu_bwd *c) {
  const fa_problem *p = c->p;
  for (int h = 0; h < p->a.heads_q; h++) {
    float sum = 0.0f;
    for (int b = 0; b < p->a.batch; b++)
      sum += c->sink_part[(int64_t)b * p->a.heads_q + h];
    if (p->a.backward_mode == FA_BACKWARD_ACCUMULATE)
      c->args->dsinks[h] += sum;
    else
      c->args->dsinks[h] = sum;
  }
}

fa_status fa_cpu_drive_backward(const fa_cpu_isa_ops *ops, void *state,
                                const fa_problem *p, const fa_plan_data *plan,
                                const fa_bwd_args *args) {
  fa_cpu_state *st = state;
  cpu_bwd c = {p, plan, args, ops->tiles(plan, 1), NULL, NULL, 0, NULL};
  const int B = p->a.batch, HQ = p->a.heads_q, HK = p->a.heads_kv;
  const int nkb = plan->num_k_blocks, nqb = plan->num_q_blocks;
  int nt = fa_cpu_threads(st);
  if (nt < 1) nt = 1;
  size_t delta_floats = ((size_t)B * HQ * p->a.seqlen_q + 15) / 16 * 16;
  const int want_dsinks = args->dsinks && p->a.sinks;
  const size_t sink_floats = want_dsinks ? ((size_t)B * HQ + 15) / 16 * 16 : 0;
  size_t row_floats = 2 * (((size_t)p->a.head_dim_v + 15) / 16 * 16);
  size_t tile_floats = c.t.total > row_floats ? c.t.total : row_floats;
  int32_t *page_slot = NULL;
  if (p->paged) {
    // Compact ids of the pages the batch references, in first-use order.
    const int ps = p->a.page_size;
    page_slot = malloc(sizeof(int32_t) * (size_t)p->a.num_pages);
    if (!page_slot) return FA_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < p->a.num_pages; i++) page_slot[i] = -1;
    size_t n_ref = 0;
    for (int b = 0; b < B; b++) {
      const int32_t *bt =
          p->a.block_table + (int64_t)b * p->a.max_blocks_per_seq;
      for (int blk = 0; (int64_t)blk * ps < fa_seq_len_k(p, b); blk++)
        if (page_slot[bt[blk]] < 0) page_slot[bt[blk]] = (int32_t)n_ref++;
    }
    c.page_slot = page_slot;
    c.page_floats =
        (n_ref * (size_t)ps * ((size_t)p->a.head_dim + p->a.head_dim_v) + 15) /
        16 * 16;
  }
  size_t per_thread = tile_floats + c.page_floats;
  int64_t n_pack = 0; // an ISA's operands packed once per call (pass 0)
  const size_t pack_floats =
      ops->bwd_pack_plan ? ops->bwd_pack_plan(&c, &n_pack) : 0;
  // Without such a pack, the fp32 rows of the body's passes (cpu_bwd);
  // with one, the ISA's blocks skip the passes that would fill them.
  c.q_ld = c.t.ld + 16;
  c.do_ld = c.t.ldv + 16;
  const size_t q_floats = (size_t)B * HQ * p->a.seqlen_q * c.q_ld,
               do_floats = (size_t)B * HQ * p->a.seqlen_q * c.do_ld,
               k_floats = (size_t)B * HK * nkb * c.t.bk * c.t.ld,
               v_floats = (size_t)B * HK * nkb * c.t.bk * c.t.ldv;
  size_t rows_floats = q_floats + do_floats + k_floats + v_floats;
  if (pack_floats || rows_floats > FA_CPU_PACK_MAX_FLOATS) rows_floats = 0;
  // dQ in pass 2, in the layout of the ISA's blocks where its pack runs
  // them (AMX: dQ^T).
  int *dq_bounds = NULL;
  const size_t dq_floats = fa_cpu_dq_plan(&c, &dq_bounds);
  c.dq_transposed = pack_floats != 0;
  float *ws =
      dq_floats == SIZE_MAX
          ? NULL
          : fa_cpu_workspace(st, sizeof(float) *
                                     (delta_floats + sink_floats + pack_floats +
                                      dq_floats + per_thread * (size_t)nt +
                                      rows_floats));
  if (!ws) {
    free(page_slot);
    free(dq_bounds);
    return FA_ERR_OUT_OF_MEMORY;
  }
  c.delta = ws;
  c.sink_part = want_dsinks ? ws + delta_floats : NULL;
  c.pack = pack_floats ? ws + delta_floats + sink_floats : NULL;
  if (dq_floats) {
    c.dq_part = ws + delta_floats + sink_floats + pack_floats;
    c.dq_bounds = dq_bounds;
  }
  float *tiles = ws + delta_floats + sink_floats + pack_floats + dq_floats;
  if (rows_floats) {
    c.q_rows = tiles + per_thread * (size_t)nt;
    c.do_rows = c.q_rows + q_floats;
    c.k_rows = c.do_rows + do_floats;
    c.v_rows = c.k_rows + k_floats;
  }
  const int64_t n_bh = (int64_t)B * HQ;
  const int64_t n_q = (int64_t)B * HQ * nqb;
  // Pass 2's and 3's items, wave by wave: with dQ in pass 2 a wave is
  // dq_wave units (a unit's items, and its q heads' dQ items, adjacent);
  // without, one wave of every item.
  const int64_t units = p->paged ? HK : (int64_t)B * HK;
  const int64_t wave = c.dq_part ? c.dq_wave : units;
  const int64_t kv_per_unit = p->paged    ? 1
                              : c.dq_part ? c.dq_ranges
                                          : (int64_t)nkb;
  const int64_t q_per_unit =
      p->paged ? (int64_t)B * p->group * nqb : (int64_t)p->group * nqb;

#pragma omp parallel num_threads(nt)
  {
    float *mine = tiles + per_thread * (size_t)thread_id();
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n_pack; i++) ops->bwd_pack_item(&c, mine, i);
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n_bh; i++)
      ops->bwd_delta(&c, mine, (int)(i / HQ), (int)(i % HQ));
    // (implicit barrier: every D is ready)
    for (int64_t u0 = 0; u0 < units; u0 += wave) {
      const int64_t u1 = units - u0 < wave ? units : u0 + wave;
#pragma omp for schedule(dynamic, 1)
      for (int64_t i = u0 * kv_per_unit; i < u1 * kv_per_unit; i++)
        ops->bwd_kv_item(&c, mine, mine + tile_floats, i);
        // (implicit barrier: the wave's dQ blocks are complete)
#pragma omp for schedule(dynamic, 1)
      for (int64_t i = p->paged ? 0 : u0 * q_per_unit;
           i < (p->paged ? n_q : u1 * q_per_unit); i++)
        ops->bwd_q_item(&c, mine, i);
    }
  }
  free(page_slot);
  free(dq_bounds);
  if (want_dsinks) store_dsinks(&c);
  return FA_OK;
}
