// SPDX-License-Identifier: MIT
// The ring forward. Step t on rank r attends r's queries to the K/V block of
// rank (r - t) mod N while the next block travels: the receive from the
// left neighbour and the send of the current block to the right one are
// posted BEFORE the step's compute and waited for after it, into the other
// of two buffers. Each visible (query part, key part) block runs its plan
// into an fp32 partial state that the merge lemma folds into the part's
// fp32 accumulator; the accumulators start as the sinks' part (LSE = sink,
// O = 0), so sinks count once whatever the steps. A local failure does not
// stop the transfers (the neighbours would wait forever): the rank keeps
// forwarding blocks and reports at the final agreement. Nor does a
// transport failure: the rank keeps posting its operations (a broken
// transport fails them at once) so that no neighbour is left waiting on it.
#include <math.h>
#include <string.h>

#include "ring_internal.h"

#define INVALID FA_ERR_INVALID_ARGUMENT

fa_status ring_check_dtypes(fa_ring *r, const fa_tensor *t,
                            const char *const *names, int n) {
  int64_t v[8];
  for (int i = 0; i < n; i++) v[i] = t[i].dtype;
  int field, who;
  int64_t lo, hi;
  fa_status s = ring_same(r->comm, v, n, &field, &lo, &hi, &who);
  if (s || field < 0) return s;
  static const char *dn[] = {"f32", "f16", "bf16"};
  return ring_fail(INVALID,
                   "rank %d: %s.dtype differs across ranks (%s on "
                   "some, %s on others)",
                   who, names[field], lo >= 0 && lo <= 2 ? dn[lo] : "?",
                   hi >= 0 && hi <= 2 ? dn[hi] : "?");
}

// Post step t's K/V transfer: receive the next block, send the current one.
fa_status ring_post_kv(fa_ring *r, int t) {
  if (t + 1 >= r->N) return FA_OK;
  fa_comm *c = r->comm;
  const int cur = t & 1, src = (r->rank - t + r->N) % r->N,
            next = (r->rank - t - 1 + r->N) % r->N;
  const int left = (r->rank - 1 + r->N) % r->N, right = (r->rank + 1) % r->N;
  const size_t in = ring_kv_block_bytes(r, next, r->in_dt),
               out = ring_kv_block_bytes(r, src, r->in_dt);
  if (c->post_recv(c->self, SLOT_KV_RECV, r->kv[cur ^ 1], in, left,
                   RING_TAG_KV) ||
      c->post_send(c->self, SLOT_KV_SEND, r->kv[cur], out, right,
                   RING_TAG_KV)) {
    return ring_transport_fail(c, "posting the K/V block");
  }
  r->stats.bytes_sent += (int64_t)out;
  return ring_start(r);
}

fa_status ring_start(fa_ring *r) {
  if (!r->comm->start) return FA_OK;
  if (r->comm->start(r->comm->self)) {
    return ring_transport_fail(r->comm, "starting the step's transfers");
  }
  return FA_OK;
}

fa_status ring_wait(fa_ring *r, int slot) {
  if (r->comm->wait(r->comm->self, slot)) {
    return ring_transport_fail(r->comm, "wait");
  }
  return FA_OK;
}

// Pack this rank's K and V into block buffer 0 (the shape that travels).
fa_status ring_pack_kv(fa_ring *r, fa_tensor k, fa_tensor v) {
  fa_tensor pk, pv;
  ring_kv_views(r, r->rank, r->kv[0], r->in_dt, &pk, &pv);
  fa_status s = ring_convert(r, 'k', r->hkv, r->d, k, pk);
  return s ? s : ring_convert(r, 'k', r->hkv, r->dv, v, pv);
}

// Plans for every visible block; a plan per query part made (and dropped)
// with the caller's o checks its layout before anything moves.
static fa_status plans_forward(fa_ring *r, fa_tensor q, fa_tensor o32,
                               fa_tensor o) {
  for (int t = 0; t < r->N; t++) {
    const int src = (r->rank - t + r->N) % r->N;
    fa_tensor kb, vb;
    ring_kv_views(r, src, r->kv[t & 1], r->in_dt, &kb, &vb);
    for (int i = 0; i < 4; i++) {
      ring_block *blk = &r->blocks[t * 4 + i];
      if (!blk->visible) continue;
      const ring_part *qp = &r->q.part[blk->qp], *kp = &r->k[src].part[blk->kp];
      fa_status s = fa_plan_create(
          r->ctx, &blk->a, ring_part_view(q, qp), ring_part_view(kb, kp),
          ring_part_view(vb, kp), ring_part_view(o32, qp), &blk->fwd);
      if (!s && t == 0) {
        fa_plan *check = NULL;
        s = fa_plan_create(r->ctx, &blk->a, ring_part_view(q, qp),
                           ring_part_view(kb, kp), ring_part_view(vb, kp),
                           ring_part_view(o, qp), &check);
        fa_plan_destroy(check);
      }
      if (s)
        return ring_fail(s,
                         "step %d (K/V of rank %d), query part %d x key "
                         "part %d: %s",
                         t, src, blk->qp, blk->kp, fa_last_error());
    }
  }
  return FA_OK;
}

// The accumulators' initial state: O = 0 and LSE = the sink logit (or -inf).
fa_status ring_init_lse(fa_ring *r, float *dst) {
  float sinks[1024];
  const int hq = r->hq;
  if (r->g.sinks) {
    if (hq > 1024)
      return ring_fail(FA_ERR_UNSUPPORTED, "sinks with heads_q=%d > 1024", hq);
    if (fa_copy_to_host(r->ctx, sinks, r->g.sinks, sizeof(float) * (size_t)hq))
      return ring_fail(FA_ERR_BACKEND, "sinks: %s", fa_last_error());
  }
  for (int p = 0; p < r->q.nparts; p++) {
    const ring_part *pt = &r->q.part[p];
    for (int b = 0; b < r->g.batch; b++)
      for (int h = 0; h < hq; h++)
        for (int i = 0; i < pt->maxlen; i++)
          r->lse_stage[pt->lse_off + ((int64_t)b * hq + h) * pt->maxlen + i] =
              r->g.sinks && i < pt->len[b] ? sinks[h] : -INFINITY;
  }
  if (r->lse_size && fa_copy_to_device(r->ctx, dst, r->lse_stage,
                                       sizeof(float) * (size_t)r->lse_size))
    return ring_fail(FA_ERR_BACKEND, "lse init: %s", fa_last_error());
  return FA_OK;
}

static fa_status run_forward(fa_ring *r, fa_tensor q, fa_tensor k,
                             fa_tensor v) {
  fa_status s = ring_pack_kv(r, k, v);
  const fa_tensor acc = ring_acc_view(r, r->o_acc, 'q', r->hq, r->dv),
                  part = ring_acc_view(r, r->o_part, 'q', r->hq, r->dv);
  if (!s)
    s = ring_fill_zero(r, r->o_acc,
                       (size_t)(r->varlen ? 1 : r->g.batch) *
                           (size_t)(r->q.rows * r->hq * r->dv) * 4);
  if (!s) s = ring_init_lse(r, r->lse_acc);
  for (int t = 0; t < r->N; t++) {
    const int src = (r->rank - t + r->N) % r->N;
    fa_status ts = ring_post_kv(r, t);
    if (!s) s = ts;
    const double t0 = ring_now();
    fa_tensor kb, vb;
    ring_kv_views(r, src, r->kv[t & 1], r->in_dt, &kb, &vb);
    for (int i = 0; i < 4 && !s; i++) {
      ring_block *blk = &r->blocks[t * 4 + i];
      if (!blk->visible) continue;
      const ring_part *qp = &r->q.part[blk->qp], *kp = &r->k[src].part[blk->kp];
      float *lse_part = r->lse_part + qp->lse_off;
      s = fa_plan_forward(blk->fwd, ring_part_view(q, qp),
                          ring_part_view(kb, kp), ring_part_view(vb, kp),
                          ring_part_view(part, qp), lse_part);
      if (s) {
        s = ring_fail(s, "step %d block %d: %s", t, i, fa_last_error());
        break;
      }
      s = ring_merge_part(r, qp, ring_part_view(acc, qp),
                          r->lse_acc + qp->lse_off, ring_part_view(part, qp),
                          lse_part);
    }
    const double t1 = ring_now();
    if (t + 1 < r->N) {
      ts = ring_wait(r, SLOT_KV_RECV);
      if (!s) s = ts;
      ts = ring_wait(r, SLOT_KV_SEND);
      if (!s) s = ts;
    }
    r->stats.compute += t1 - t0;
    r->stats.wait += ring_now() - t1;
  }
  return s;
}

static int count_skipped(const fa_ring *r) {
  int n = 0;
  for (int t = 0; t < r->N; t++) {
    const int src = (r->rank - t + r->N) % r->N;
    for (int qp = 0; qp < r->q.nparts; qp++)
      for (int kp = 0; kp < r->k[src].nparts; kp++)
        n += !r->blocks[t * 4 + qp * 2 + kp].visible;
  }
  return n;
}

void ring_stats_begin(fa_ring *r) {
  memset(&r->stats, 0, sizeof r->stats);
  r->stats.steps = r->N;
  r->stats.skipped = count_skipped(r);
}

fa_status fa_ring_forward(fa_ring *r, fa_tensor q, fa_tensor k, fa_tensor v,
                          fa_tensor o, float *lse) {
  ring_clear_error();
  if (!r) return ring_fail(INVALID, "ring is NULL");
  const double t_start = ring_now();
  ring_stats_begin(r);
  static const char *const names[] = {"q", "k", "v", "o"};
  const fa_tensor ts[4] = {q, k, v, o};
  // 1. Agree on dtypes and on every block's plan before anything moves.
  fa_status s = ring_check_dtypes(r, ts, names, 4);
  if (!s && (q.dtype != k.dtype || q.dtype != v.dtype))
    s = ring_fail(INVALID, "k.dtype and v.dtype must equal q.dtype");
  int changed = 0;
  if (!s) {
    r->in_dt = q.dtype;
    ring_layout_check(r, &r->fwd_layout, ts, 4, &changed);
    if (changed) {
      ring_plans_drop(r, 0);
      const fa_tensor o32 = ring_acc_view(r, r->o_acc, 'q', r->hq, r->dv);
      s = r->strategy == FA_RING_STRATEGY_ALLGATHER
              ? ring_allgather_plans(r, q, o32, o)
              : plans_forward(
                    r, q, ring_acc_view(r, r->o_part, 'q', r->hq, r->dv), o);
      if (s) r->fwd_layout.valid = 0, ring_plans_drop(r, 0);
    }
  }
  if (!s && o.data == NULL) s = ring_fail(INVALID, "o.data is NULL");
  if ((s = ring_agree(r->comm, s, ring_error_text()))) return s;
  // 2. The ring (or the gather).
  if (r->strategy == FA_RING_STRATEGY_ALLGATHER) {
    s = ring_init_lse(r, r->lse_acc); // the padding of varlen parts
    fa_status gs = ring_allgather_forward(r, q, k, v);
    if (!s) s = gs;
  } else {
    s = run_forward(r, q, k, v);
  }
  if ((s = ring_agree(r->comm, s, ring_error_text()))) return s;
  // 3. Every rank succeeded: write o (one rounding) and lse.
  s = ring_convert(r, 'q', r->hq, r->dv,
                   ring_acc_view(r, r->o_acc, 'q', r->hq, r->dv), o);
  if (!s && lse && r->lse_size) {
    const size_t b = sizeof(float) * (size_t)r->lse_size;
    if (fa_copy_to_host(r->ctx, r->lse_stage, r->lse_acc, b) ||
        fa_copy_to_device(r->ctx, lse, r->lse_stage, b))
      s = ring_fail(FA_ERR_BACKEND, "lse: %s", fa_last_error());
  }
  s = ring_agree(r->comm, s, ring_error_text());
  r->stats.total = ring_now() - t_start;
  return s;
}
