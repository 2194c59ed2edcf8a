// SPDX-License-Identifier: MIT
// The ring backward. K/V blocks travel as in the forward; with each block
// travels its fp32 dK/dV accumulator. At step t rank r adds its queries'
// gradient contributions to the accumulator it holds (the blocks' plans run
// in FA_BACKWARD_ACCUMULATE mode against the GLOBAL o and lse, so each
// block's P = exp(S - lse) is already normalised) and passes it right;
// after step N-1 the accumulator has met every rank and its last hop
// brings it home. dQ accumulates locally in fp32. Sums are taken in ring
// order and rounded once into the caller's tensors: deterministic.
#include <string.h>

#include "ring_internal.h"

#define INVALID FA_ERR_INVALID_ARGUMENT

// The block's problem; the first visible block of each query part also
// carries the sinks, so their gradient is taken exactly once per row.
static fa_attention block_problem(const fa_ring *r, int idx) {
  fa_attention a = r->blocks[idx].a;
  if (r->g.sinks && r->g.dsinks && r->dsink_block[r->blocks[idx].qp] == idx) {
    a.sinks = r->g.sinks;
    a.dsinks = r->dsinks_acc;
  }
  return a;
}

// Plans for every visible block, and one plan per query part made (and
// dropped) with the caller's own tensors, so that their layouts are
// checked on every rank before anything moves or is written.
static fa_status plans_backward(fa_ring *r, const fa_tensor *u) {
  const fa_tensor o32 = ring_acc_view(r, r->o32, 'q', r->hq, r->dv),
                  do32 = ring_acc_view(r, r->do32, 'q', r->hq, r->dv),
                  dq32 = ring_acc_view(r, r->dq_acc, 'q', r->hq, r->d);
  for (int t = 0; t < r->N; t++) {
    const int src = (r->rank - t + r->N) % r->N;
    fa_tensor kb, vb, dkb, dvb;
    ring_kv_views(r, src, r->kv[t & 1], r->in_dt, &kb, &vb);
    // The dK/dV buffer the step will run with (plans keep its alignment).
    ring_kv_views(r, src,
                  r->dkv_scratch ? (void *)r->dkv_scratch : r->dkv[t & 1],
                  FA_F32, &dkb, &dvb);
    for (int i = 0; i < 4; i++) {
      ring_block *blk = &r->blocks[t * 4 + i];
      if (!blk->visible) continue;
      const ring_part *qp = &r->q.part[blk->qp], *kp = &r->k[src].part[blk->kp];
      fa_attention a = block_problem(r, t * 4 + i);
      fa_status s = fa_plan_create_backward(
          r->ctx, &a, ring_part_view(u[0], qp), ring_part_view(kb, kp),
          ring_part_view(vb, kp), ring_part_view(o32, qp),
          ring_part_view(do32, qp), ring_part_view(dq32, qp),
          ring_part_view(dkb, kp), ring_part_view(dvb, kp), &blk->bwd);
      if (!s && t == 0) {
        fa_plan *check = NULL;
        a.sinks = a.dsinks = NULL;
        s = fa_plan_create_backward(
            r->ctx, &a, ring_part_view(u[0], qp), ring_part_view(u[1], kp),
            ring_part_view(u[2], kp), ring_part_view(u[3], qp),
            ring_part_view(u[4], qp), ring_part_view(u[5], qp),
            ring_part_view(u[6], kp), ring_part_view(u[7], kp), &check);
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

static fa_status start_accumulators(fa_ring *r, const fa_tensor *u) {
  const int acc = r->g.backward_mode == FA_BACKWARD_ACCUMULATE;
  const size_t nb = r->varlen ? 1 : (size_t)r->g.batch;
  fa_tensor dkb, dvb;
  ring_kv_views(r, r->rank, r->dkv[0], FA_F32, &dkb, &dvb);
  const fa_tensor dq32 = ring_acc_view(r, r->dq_acc, 'q', r->hq, r->d);
  fa_status s = ring_convert(r, 'q', r->hq, r->dv, u[3],
                             ring_acc_view(r, r->o32, 'q', r->hq, r->dv));
  if (!s)
    s = ring_convert(r, 'q', r->hq, r->dv, u[4],
                     ring_acc_view(r, r->do32, 'q', r->hq, r->dv));
  if (!s && acc) s = ring_convert(r, 'q', r->hq, r->d, u[5], dq32);
  if (!s && acc) s = ring_convert(r, 'k', r->hkv, r->d, u[6], dkb);
  if (!s && acc) s = ring_convert(r, 'k', r->hkv, r->dv, u[7], dvb);
  if (!s && !acc)
    s = ring_fill_zero(r, r->dq_acc,
                       nb * (size_t)(r->q.rows * r->hq * r->d) * 4);
  if (!s && !acc)
    s = ring_fill_zero(r, r->dkv[0], ring_kv_block_bytes(r, r->rank, FA_F32));
  if (!s) s = ring_fill_zero(r, r->dsinks_acc, sizeof(float) * (size_t)r->hq);
  return s;
}

// Add one step's dK/dV contributions to the block's visiting accumulator:
// run every visible block of step t with its dK/dV views in @p dkv.
static fa_status backward_step(fa_ring *r, const fa_tensor *u, const float *lse,
                               int t, void *dkv) {
  const int src = (r->rank - t + r->N) % r->N;
  const fa_tensor o32 = ring_acc_view(r, r->o32, 'q', r->hq, r->dv),
                  do32 = ring_acc_view(r, r->do32, 'q', r->hq, r->dv),
                  dq32 = ring_acc_view(r, r->dq_acc, 'q', r->hq, r->d);
  fa_tensor kb, vb, dkb, dvb;
  ring_kv_views(r, src, r->kv[t & 1], r->in_dt, &kb, &vb);
  ring_kv_views(r, src, dkv, FA_F32, &dkb, &dvb);
  for (int i = 0; i < 4; i++) {
    ring_block *blk = &r->blocks[t * 4 + i];
    if (!blk->visible) continue;
    const ring_part *qp = &r->q.part[blk->qp], *kp = &r->k[src].part[blk->kp];
    fa_status s = fa_plan_backward(
        blk->bwd, ring_part_view(u[0], qp), ring_part_view(kb, kp),
        ring_part_view(vb, kp), ring_part_view(o32, qp),
        ring_part_view(do32, qp), lse + qp->lse_off, ring_part_view(dq32, qp),
        ring_part_view(dkb, kp), ring_part_view(dvb, kp));
    if (s) return ring_fail(s, "step %d block %d: %s", t, i, fa_last_error());
  }
  return FA_OK;
}

static fa_status post_dkv(fa_ring *r, int send, int slot, void *buf, int src) {
  fa_comm *c = r->comm;
  const size_t bytes = ring_kv_block_bytes(r, src, FA_F32);
  const int peer = send ? (r->rank + 1) % r->N : (r->rank - 1 + r->N) % r->N;
  if (send ? c->post_send(c->self, slot, buf, bytes, peer, RING_TAG_DKV)
           : c->post_recv(c->self, slot, buf, bytes, peer, RING_TAG_DKV))
    return ring_transport_fail(c, send ? "posting the dK/dV send"
                                       : "posting the dK/dV receive");
  if (send) r->stats.bytes_sent += (int64_t)bytes;
  return FA_OK;
}

// Any memory space: each step accumulates in place into the accumulator
// that arrived during the previous step, so its transfer (posted after the
// neighbour's compute) is exposed in lock step.
static fa_status run_backward_inplace(fa_ring *r, const fa_tensor *u,
                                      const float *lse, fa_status s) {
  for (int t = 0; t < r->N; t++) {
    const int cur = t & 1;
    fa_status ts = ring_post_kv(r, t);
    if (!s) s = ts;
    // The accumulator of the next step's block (at the last step: our own,
    // home from its tour). It is started together with our own
    // accumulator's send after the compute: a transport that runs
    // operations in order (NCCL) would otherwise queue every rank's send
    // behind a receive that waits for it.
    const int nsrc = (r->rank - t - 1 + r->N) % r->N;
    void *in = t + 1 < r->N ? r->dkv[cur ^ 1] : r->dkv_home;
    if (r->N > 1 && (ts = post_dkv(r, 0, SLOT_DKV_RECV, in, nsrc)) && !s)
      s = ts;
    const double t0 = ring_now();
    if (!s) s = backward_step(r, u, lse, t, r->dkv[cur]);
    const double t1 = ring_now();
    if (r->N > 1) {
      const int src = (r->rank - t + r->N) % r->N;
      if ((ts = post_dkv(r, 1, SLOT_DKV_SEND, r->dkv[cur], src)) && !s) s = ts;
      if ((ts = ring_start(r)) && !s) s = ts;
    }
    const double t2 = ring_now();
    if (r->N > 1) {
      const int slots[] = {SLOT_KV_RECV, SLOT_KV_SEND, SLOT_DKV_RECV,
                           SLOT_DKV_SEND};
      for (int i = t + 1 < r->N ? 0 : 2; i < 4; i++)
        if ((ts = ring_wait(r, slots[i])) && !s) s = ts;
    }
    r->stats.compute += t1 - t0;
    r->stats.wait += ring_now() - t2;
  }
  return s;
}

// Host memory: each step's contributions go to a zeroed scratch while the
// block's accumulator travels in from the left (the neighbour sent it at
// the end of ITS previous step, so it arrives during this step's compute);
// then the scratch is added to it, in fp32, and it moves on. Same sums,
// same order at every run: deterministic.
static fa_status run_backward_overlap(fa_ring *r, const fa_tensor *u,
                                      const float *lse, fa_status s) {
  fa_status ts;
  for (int t = 0; t < r->N; t++) {
    const int cur = t & 1, src = (r->rank - t + r->N) % r->N;
    if ((ts = ring_post_kv(r, t)) && !s) s = ts;
    if (t > 0 && (ts = post_dkv(r, 0, SLOT_DKV_RECV, r->dkv[cur], src)) && !s)
      s = ts;
    if (t == r->N - 1 && r->N > 1 &&
        (ts = post_dkv(r, 0, SLOT_DKV_HOME, r->dkv_home, r->rank)) && !s)
      s = ts;
    const size_t bytes = ring_kv_block_bytes(r, src, FA_F32);
    const double t0 = ring_now();
    memset(r->dkv_scratch, 0, bytes);
    if (!s) s = backward_step(r, u, lse, t, r->dkv_scratch);
    const double t1 = ring_now();
    if (t > 0 && (ts = ring_wait(r, SLOT_DKV_RECV)) && !s) s = ts;
    const double t2 = ring_now();
    float *acc = r->dkv[cur];
    const float *add = r->dkv_scratch;
    for (size_t i = 0; i < bytes / sizeof(float); i++) acc[i] += add[i];
    const double t3 = ring_now();
    if (r->N > 1) {
      // The previous send (from the other buffer) must be done before a
      // new one takes its slot and before that buffer receives again.
      if ((ts = ring_wait(r, SLOT_DKV_SEND)) && !s) s = ts;
      if ((ts = post_dkv(r, 1, SLOT_DKV_SEND, acc, src)) && !s) s = ts;
      if ((ts = ring_wait(r, SLOT_KV_RECV)) && !s) s = ts;
      if ((ts = ring_wait(r, SLOT_KV_SEND)) && !s) s = ts;
    }
    r->stats.compute += (t1 - t0) + (t3 - t2);
    r->stats.wait += (t2 - t1) + (ring_now() - t3);
  }
  if (r->N > 1) {
    const double t4 = ring_now();
    if ((ts = ring_wait(r, SLOT_DKV_SEND)) && !s) s = ts;
    if ((ts = ring_wait(r, SLOT_DKV_HOME)) && !s) s = ts;
    r->stats.wait += ring_now() - t4;
  }
  return s;
}

static fa_status run_backward(fa_ring *r, const fa_tensor *u,
                              const float *lse) {
  fa_status s = ring_pack_kv(r, u[1], u[2]);
  if (!s) s = start_accumulators(r, u);
  return r->dkv_scratch ? run_backward_overlap(r, u, lse, s)
                        : run_backward_inplace(r, u, lse, s);
}

static fa_status store_backward(fa_ring *r, const fa_tensor *u) {
  fa_tensor dkb, dvb;
  ring_kv_views(r, r->rank, r->N > 1 ? r->dkv_home : r->dkv[0], FA_F32, &dkb,
                &dvb);
  fa_status s = ring_convert(
      r, 'q', r->hq, r->d, ring_acc_view(r, r->dq_acc, 'q', r->hq, r->d), u[5]);
  if (!s) s = ring_convert(r, 'k', r->hkv, r->d, dkb, u[6]);
  if (!s) s = ring_convert(r, 'k', r->hkv, r->dv, dvb, u[7]);
  if (!s && r->g.sinks && r->g.dsinks) {
    float mine[1024], old[1024];
    const size_t b = sizeof(float) * (size_t)r->hq;
    if (r->hq > 1024)
      return ring_fail(FA_ERR_UNSUPPORTED, "dsinks with heads_q > 1024");
    if (fa_copy_to_host(r->ctx, mine, r->dsinks_acc, b) ||
        (r->g.backward_mode == FA_BACKWARD_ACCUMULATE &&
         fa_copy_to_host(r->ctx, old, r->g.dsinks, b)))
      return ring_fail(FA_ERR_BACKEND, "dsinks: %s", fa_last_error());
    if (r->g.backward_mode == FA_BACKWARD_ACCUMULATE)
      for (int h = 0; h < r->hq; h++) mine[h] += old[h];
    if (fa_copy_to_device(r->ctx, r->g.dsinks, mine, b))
      return ring_fail(FA_ERR_BACKEND, "dsinks: %s", fa_last_error());
  }
  return s;
}

fa_status fa_ring_backward(fa_ring *r, fa_tensor q, fa_tensor k, fa_tensor v,
                           fa_tensor o, fa_tensor d_o, const float *lse,
                           fa_tensor dq, fa_tensor dk, fa_tensor dv) {
  ring_clear_error();
  if (!r) return ring_fail(INVALID, "ring is NULL");
  const double t_start = ring_now();
  ring_stats_begin(r);
  static const char *const names[] = {"q",   "k",  "v",  "o",
                                      "d_o", "dq", "dk", "dv"};
  const fa_tensor u[8] = {q, k, v, o, d_o, dq, dk, dv};
  fa_status s = ring_check_dtypes(r, u, names, 8);
  if (!s && (q.dtype != k.dtype || q.dtype != v.dtype))
    s = ring_fail(INVALID, "k.dtype and v.dtype must equal q.dtype");
  if (!s && !lse && r->lse_size)
    s = ring_fail(INVALID, "lse is NULL (pass fa_ring_forward's lse)");
  if (!s) {
    int changed = 0;
    r->in_dt = q.dtype;
    ring_layout_check(r, &r->bwd_layout, u, 8, &changed);
    if (changed) {
      ring_plans_drop(r, 1);
      s = plans_backward(r, u);
      if (s) r->bwd_layout.valid = 0, ring_plans_drop(r, 1);
    }
  }
  if ((s = ring_agree(r->comm, s, ring_error_text()))) return s;
  s = run_backward(r, u, lse);
  if ((s = ring_agree(r->comm, s, ring_error_text()))) return s;
  s = store_backward(r, u);
  s = ring_agree(r->comm, s, ring_error_text());
  r->stats.total = ring_now() - t_start;
  return s;
}
