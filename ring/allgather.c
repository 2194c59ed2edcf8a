// SPDX-License-Identifier: MIT
// The all-gather forward (the Llama 3 approach, for models with few kv
// heads, whose K/V are small next to Q): every rank's packed K/V block goes
// around the ring once and each arriving block is copied to its global rows
// while the next one travels; then each query part makes ONE call against
// the whole sequence's K/V (explicit positions, sinks in the call), with no
// per-step merge. It costs N blocks of memory and the gather is not hidden
// under attention; the backward is the ring's (backward.c) whatever the
// forward was.
#include <stdlib.h>
#include <string.h>

#include "ring_internal.h"

// The whole sequence's K (then V): dense [batch, seqlen_k, heads_kv, dim],
// varlen packed by the global cu_seqlens_k.
static void global_views(const fa_ring *r, fa_tensor *k, fa_tensor *v) {
  const int64_t rows = r->varlen ? r->rows_k_global : r->g.seqlen_k,
                nb = r->varlen ? 1 : r->g.batch;
  memset(k, 0, sizeof *k);
  memset(v, 0, sizeof *v);
  k->data = r->kv_global;
  k->dtype = v->dtype = r->in_dt;
  k->stride_head = r->d;
  k->stride_seq = (int64_t)r->hkv * r->d;
  k->stride_batch = r->varlen ? 0 : rows * k->stride_seq;
  v->data = (char *)r->kv_global +
            (size_t)(nb * rows * k->stride_seq) * ring_dtype_size(r->in_dt);
  v->stride_head = r->dv;
  v->stride_seq = (int64_t)r->hkv * r->dv;
  v->stride_batch = r->varlen ? 0 : rows * v->stride_seq;
}

fa_status ring_allgather_make(fa_ring *r) {
  r->gather = calloc((size_t)r->N, sizeof *r->gather);
  r->ag_plan = calloc(2, sizeof *r->ag_plan);
  if (!r->gather || !r->ag_plan)
    return ring_fail(FA_ERR_OUT_OF_MEMORY, "all-gather tables: out of memory");
  for (int i = 0; i < r->N; i++)
    if (fa_malloc(r->ctx, r->kv_bytes < 64 ? 64 : r->kv_bytes, &r->gather[i]))
      return ring_fail(FA_ERR_OUT_OF_MEMORY, "all-gather block: %s",
                       fa_last_error());
  const int64_t rows = r->varlen ? r->rows_k_global : r->g.seqlen_k,
                nb = r->varlen ? 1 : r->g.batch;
  const size_t bytes = (size_t)(nb * rows * r->hkv * (r->d + r->dv)) * 4 + 4;
  if (fa_malloc(r->ctx, bytes, &r->kv_global))
    return ring_fail(FA_ERR_OUT_OF_MEMORY, "all-gather K/V: %s",
                     fa_last_error());
  for (int p = 0; p < r->q.nparts; p++) {
    const ring_part *qp = &r->q.part[p];
    fa_attention *a = &r->ag_problem[p];
    *a = r->g;
    a->positions = FA_POSITIONS_EXPLICIT;
    a->dsinks = NULL;
    a->seqlen_q = qp->maxlen;
    a->k_position = r->k_base;
    a->k_positions = NULL;
    if (r->varlen) {
      a->cu_seqlens_q = qp->cu_dev;
      a->rows_q = qp->rows;
      a->q_position = 0;
      a->q_positions = qp->pos_dev;
      a->cu_seqlens_k = r->cu_k_dev;
      a->rows_k = r->rows_k_global;
    } else {
      a->q_position = qp->pos[0];
      a->q_positions = NULL;
    }
  }
  return FA_OK;
}

void ring_allgather_free(fa_ring *r) {
  for (int p = 0; r->ag_plan && p < 2; p++) fa_plan_destroy(r->ag_plan[p]);
  for (int i = 0; r->gather && i < r->N; i++) fa_free(r->ctx, r->gather[i]);
  fa_free(r->ctx, r->kv_global);
  free(r->gather);
  free(r->ag_plan);
}

fa_status ring_allgather_plans(fa_ring *r, fa_tensor q, fa_tensor o32,
                               fa_tensor o) {
  fa_tensor kg, vg;
  global_views(r, &kg, &vg);
  for (int p = 0; p < r->q.nparts; p++) {
    fa_plan_destroy(r->ag_plan[p]);
    r->ag_plan[p] = NULL;
    const ring_part *qp = &r->q.part[p];
    if (qp->maxlen == 0) continue;
    fa_plan *check = NULL;
    fa_status s =
        fa_plan_create(r->ctx, &r->ag_problem[p], ring_part_view(q, qp), kg, vg,
                       ring_part_view(o32, qp), &r->ag_plan[p]);
    if (!s)
      s = fa_plan_create(r->ctx, &r->ag_problem[p], ring_part_view(q, qp), kg,
                         vg, ring_part_view(o, qp), &check);
    fa_plan_destroy(check);
    if (s)
      return ring_fail(s, "all-gather, query part %d: %s", p, fa_last_error());
  }
  return FA_OK;
}

// Copy the packed block of rank src to its global rows.
static fa_status place_block(fa_ring *r, int src, void *block) {
  fa_tensor kb, vb, kg, vg;
  ring_kv_views(r, src, block, r->in_dt, &kb, &vb);
  global_views(r, &kg, &vg);
  const float *zero = r->zero_lse;
  for (int p = 0; p < r->k[src].nparts; p++) {
    const ring_part *kp = &r->k[src].part[p];
    for (int b = 0; b < (r->varlen ? r->g.batch : 1); b++) {
      const int64_t len = r->varlen ? kp->len[b] : kp->maxlen;
      if (len == 0) continue;
      const int64_t from = kp->row0 + (r->varlen ? kp->cu[b] : 0),
                    to = r->varlen ? r->cu_k[b] + kp->lo[b] : kp->lo[0];
      for (int half = 0; half < 2; half++) {
        fa_tensor s = half ? vb : kb, d = half ? vg : kg;
        const size_t es = ring_dtype_size(r->in_dt);
        s.data = (char *)s.data + (size_t)(from * s.stride_seq) * es;
        d.data = (char *)d.data + (size_t)(to * d.stride_seq) * es;
        fa_status st =
            fa_merge_states(r->ctx, 1, &s, &zero, r->varlen ? 1 : r->g.batch,
                            (int)len, r->hkv, half ? r->dv : r->d, d, NULL);
        if (st) return ring_fail(st, "all-gather copy: %s", fa_last_error());
      }
    }
  }
  return FA_OK;
}

fa_status ring_allgather_forward(fa_ring *r, fa_tensor q, fa_tensor k,
                                 fa_tensor v) {
  fa_comm *c = r->comm;
  fa_tensor pk, pv;
  ring_kv_views(r, r->rank, r->gather[r->rank], r->in_dt, &pk, &pv);
  fa_status s = ring_convert(r, 'k', r->hkv, r->d, k, pk), ts;
  if (!s) s = ring_convert(r, 'k', r->hkv, r->dv, v, pv);
  if (!s) s = place_block(r, r->rank, r->gather[r->rank]);
  const int left = (r->rank - 1 + r->N) % r->N, right = (r->rank + 1) % r->N;
  for (int t = 0; t + 1 < r->N; t++) {
    const int out = (r->rank - t + r->N) % r->N,
              in = (r->rank - t - 1 + r->N) % r->N;
    const double t0 = ring_now();
    if (c->post_recv(c->self, SLOT_KV_RECV, r->gather[in],
                     ring_kv_block_bytes(r, in, r->in_dt), left, RING_TAG_KV) ||
        c->post_send(c->self, SLOT_KV_SEND, r->gather[out],
                     ring_kv_block_bytes(r, out, r->in_dt), right,
                     RING_TAG_KV)) {
      if (!s) s = ring_transport_fail(c, "posting an all-gather block");
    } else {
      r->stats.bytes_sent += (int64_t)ring_kv_block_bytes(r, out, r->in_dt);
    }
    if ((ts = ring_start(r)) && !s) s = ts;
    if ((ts = ring_wait(r, SLOT_KV_RECV)) && !s) s = ts;
    if ((ts = ring_wait(r, SLOT_KV_SEND)) && !s) s = ts;
    const double t1 = ring_now();
    if (!s) s = place_block(r, in, r->gather[in]);
    r->stats.wait += t1 - t0;
    r->stats.compute += ring_now() - t1;
  }
  const double t2 = ring_now();
  fa_tensor kg, vg;
  global_views(r, &kg, &vg);
  const fa_tensor acc = ring_acc_view(r, r->o_acc, 'q', r->hq, r->dv);
  for (int p = 0; p < r->q.nparts && !s; p++) {
    const ring_part *qp = &r->q.part[p];
    if (!r->ag_plan[p]) continue;
    s = fa_plan_forward(r->ag_plan[p], ring_part_view(q, qp), kg, vg,
                        ring_part_view(acc, qp), r->lse_acc + qp->lse_off);
    if (s)
      s = ring_fail(s, "all-gather, query part %d: %s", p, fa_last_error());
  }
  r->stats.compute += ring_now() - t2;
  return s;
}
