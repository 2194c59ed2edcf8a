// SPDX-License-Identifier: MIT
// Ring creation: the collective check that every rank holds the same global
// problem, this rank's geometry and every step's blocks, and every buffer
// the ring will ever use (nothing is allocated per step or per call).
#define _POSIX_C_SOURCE 200809L // clock_gettime
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ring_internal.h"

#define INVALID FA_ERR_INVALID_ARGUMENT

double ring_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void fa_ring_options_init(fa_ring_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->shard = FA_SHARD_CONTIGUOUS;
}

void fa_comm_destroy(fa_comm *comm) {
  if (!comm) return;
  if (comm->destroy) comm->destroy(comm->self);
  free(comm);
}

// Checks one rank can make alone; the caller agrees on the result.
static fa_status check_local(const fa_attention *g, const fa_ring_options *o) {
  if (!g) return ring_fail(INVALID, "global problem is NULL");
  if (g->struct_size != sizeof(fa_attention))
    return ring_fail(INVALID,
                     "global.struct_size=%zu, expected %zu (use "
                     "fa_attention_init)",
                     g->struct_size, sizeof(fa_attention));
  if (o && o->struct_size != sizeof(fa_ring_options))
    return ring_fail(INVALID,
                     "options.struct_size=%zu, expected %zu (use "
                     "fa_ring_options_init)",
                     o->struct_size, sizeof(fa_ring_options));
  if (o && o->strategy != FA_RING_STRATEGY_RING &&
      o->strategy != FA_RING_STRATEGY_ALLGATHER)
    return ring_fail(INVALID,
                     "options.strategy=%d must be "
                     "FA_RING_STRATEGY_RING or FA_RING_STRATEGY_ALLGATHER",
                     o->strategy);
  if (o && o->shard != FA_SHARD_CONTIGUOUS && o->shard != FA_SHARD_ZIGZAG)
    return ring_fail(INVALID,
                     "options.shard=%d must be FA_SHARD_CONTIGUOUS "
                     "or FA_SHARD_ZIGZAG",
                     o->shard);
  if (g->batch < 1)
    return ring_fail(INVALID, "global.batch=%d must be >= 1", g->batch);
  if (g->heads_q < 1 || g->heads_kv < 1 || g->head_dim < 1 || g->head_dim_v < 0)
    return ring_fail(INVALID,
                     "global heads_q=%d, heads_kv=%d, head_dim=%d, "
                     "head_dim_v=%d must be >= 1",
                     g->heads_q, g->heads_kv, g->head_dim, g->head_dim_v);
  if (g->block_table || g->seqused_k)
    return ring_fail(FA_ERR_UNSUPPORTED,
                     "global.%s: paged or cached K/V "
                     "cannot be sharded by the ring",
                     g->block_table ? "block_table" : "seqused_k");
  if (g->q_positions || g->k_positions)
    return ring_fail(FA_ERR_UNSUPPORTED,
                     "global.%s: per-sequence position "
                     "arrays are not supported by the ring (use q_position / "
                     "k_position)",
                     g->q_positions ? "q_positions" : "k_positions");
  if ((g->cu_seqlens_q == NULL) != (g->cu_seqlens_k == NULL))
    return ring_fail(INVALID,
                     "global.cu_seqlens_%s is NULL while the other "
                     "is set (varlen needs both)",
                     g->cu_seqlens_q ? "k" : "q");
  if (g->seqlen_q < 0 || g->seqlen_k < 0)
    return ring_fail(INVALID, "global seqlen_q=%d, seqlen_k=%d must be >= 0",
                     g->seqlen_q, g->seqlen_k);
  for (int side = 0; side < 2 && g->cu_seqlens_q; side++) {
    const int32_t *cu = side ? g->cu_seqlens_k : g->cu_seqlens_q;
    const int lim = side ? g->seqlen_k : g->seqlen_q;
    if (cu[0] != 0)
      return ring_fail(INVALID, "global.cu_seqlens_%c[0]=%d must be 0",
                       side ? 'k' : 'q', cu[0]);
    for (int b = 0; b < g->batch; b++)
      if (cu[b + 1] < cu[b] || cu[b + 1] - cu[b] > lim)
        return ring_fail(INVALID,
                         "global.cu_seqlens_%c[%d]=%d: lengths must "
                         "be in [0, seqlen_%c=%d]",
                         side ? 'k' : 'q', b + 1, cu[b + 1], side ? 'k' : 'q',
                         lim);
  }
  return FA_OK;
}

static int64_t bits_of(float x) {
  int32_t b;
  memcpy(&b, &x, sizeof b);
  return b;
}

static int64_t cu_digest(const int32_t *cu, int n) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; cu && i <= n; i++)
    h = (h ^ (uint32_t)cu[i]) * 1099511628211ull;
  return (int64_t)(h >> 1);
}

// Every rank must describe the same whole problem.
static fa_status check_same(fa_comm *c, const fa_attention *g, int shard,
                            int strategy) {
  static const char *names[] = {"batch",
                                "seqlen_q",
                                "seqlen_k",
                                "heads_q",
                                "heads_kv",
                                "head_dim",
                                "head_dim_v",
                                "scale",
                                "causal",
                                "window_left",
                                "window_right",
                                "softcap",
                                "alibi_slopes (set or not)",
                                "sinks (set or not)",
                                "dsinks (set or not)",
                                "cu_seqlens_q",
                                "cu_seqlens_k",
                                "positions",
                                "q_position",
                                "k_position",
                                "backward_mode",
                                "options.shard",
                                "communicator size",
                                "options.strategy"};
  const int64_t v[] = {g->batch,
                       g->seqlen_q,
                       g->seqlen_k,
                       g->heads_q,
                       g->heads_kv,
                       g->head_dim,
                       g->head_dim_v,
                       bits_of(g->scale),
                       g->causal,
                       g->window_left,
                       g->window_right,
                       bits_of(g->softcap),
                       g->alibi_slopes != NULL,
                       g->sinks != NULL,
                       g->dsinks != NULL,
                       cu_digest(g->cu_seqlens_q, g->batch),
                       cu_digest(g->cu_seqlens_k, g->batch),
                       g->positions,
                       g->q_position,
                       g->k_position,
                       g->backward_mode,
                       shard,
                       c->size,
                       strategy};
  const int n = (int)(sizeof v / sizeof v[0]);
  int field, who;
  int64_t lo, hi;
  fa_status s = ring_same(c, v, n, &field, &lo, &hi, &who);
  if (s || field < 0) return s;
  return ring_fail(INVALID,
                   "rank %d: global.%s differs across ranks: %lld "
                   "on some, %lld on others (every rank must pass the same "
                   "global problem)",
                   who, names[field], (long long)lo, (long long)hi);
}

static fa_status alloc_buf(fa_ring *r, size_t bytes, void **p) {
  if (fa_malloc(r->ctx, bytes < 64 ? 64 : bytes, p))
    return ring_fail(FA_ERR_OUT_OF_MEMORY, "ring buffer of %zu bytes: %s",
                     bytes, fa_last_error());
  return FA_OK;
}

static fa_status build(fa_ring *r) {
  const fa_attention *g = &r->g;
  fa_status s;
  if ((s = ring_shard_make(g, r->N, r->shard, r->rank, 'q', &r->q))) return s;
  r->k = calloc((size_t)r->N, sizeof *r->k);
  r->blocks = calloc((size_t)r->N * 4, sizeof *r->blocks);
  if (!r->k || !r->blocks)
    return ring_fail(FA_ERR_OUT_OF_MEMORY, "ring tables: out of memory");
  for (int src = 0; src < r->N; src++)
    if ((s = ring_shard_make(g, r->N, r->shard, src, 'k', &r->k[src])))
      return s;
  if (r->varlen) {
    if ((s = ring_shard_upload(r->ctx, g->batch, &r->q))) return s;
    for (int src = 0; src < r->N; src++)
      if ((s = ring_shard_upload(r->ctx, g->batch, &r->k[src]))) return s;
  }
  int64_t off = 0;
  for (int p = 0; p < r->q.nparts; p++) {
    r->q.part[p].lse_off = off;
    off += (int64_t)g->batch * r->hq * r->q.part[p].maxlen;
  }
  r->lse_size = off;
  r->dsink_block[0] = r->dsink_block[1] = -1;
  for (int t = 0; t < r->N; t++) {
    const int src = (r->rank - t + r->N) % r->N;
    for (int qp = 0; qp < r->q.nparts; qp++)
      for (int kp = 0; kp < r->k[src].nparts; kp++) {
        ring_block *blk = &r->blocks[t * 4 + qp * 2 + kp];
        const ring_part *q = &r->q.part[qp], *k = &r->k[src].part[kp];
        blk->qp = qp;
        blk->kp = kp;
        blk->visible = q->maxlen > 0 && k->maxlen > 0 &&
                       ring_part_visible(g, g->batch, q, k);
        ring_block_problem(g, r->varlen, q, k, &blk->a);
        if (blk->visible && r->dsink_block[qp] < 0)
          r->dsink_block[qp] = t * 4 + qp * 2 + kp;
      }
  }
  // Buffers, sized for the largest block of any rank (fp32 bounds every
  // input dtype, so one ring serves calls of any dtype).
  const int64_t nb = r->varlen ? 1 : g->batch;
  for (int src = 0; src < r->N; src++) {
    size_t b = ring_kv_block_bytes(r, src, FA_F32);
    if (b > r->kv_bytes) r->kv_bytes = b;
  }
  r->dkv_bytes = r->kv_bytes;
  const size_t qo = (size_t)(nb * r->q.rows * r->hq * r->dv) * 4,
               qd = (size_t)(nb * r->q.rows * r->hq * r->d) * 4,
               lse = (size_t)r->lse_size * 4 + 4;
  size_t zl = (size_t)(nb * r->q.rows * r->hq);
  for (int src = 0; src < r->N; src++) // every block is copied somewhere
    if ((size_t)(nb * r->k[src].rows * r->hkv) > zl)
      zl = (size_t)(nb * r->k[src].rows * r->hkv);
  zl = zl * 4 + 4;
  r->zeros_bytes = r->kv_bytes;
  const size_t sizes[] = {qo, qd, lse, zl};
  for (int i = 0; i < 4; i++)
    if (sizes[i] > r->zeros_bytes) r->zeros_bytes = sizes[i];
  r->zeros = calloc(1, r->zeros_bytes);
  r->lse_stage = malloc(lse);
  if (!r->zeros || !r->lse_stage)
    return ring_fail(FA_ERR_OUT_OF_MEMORY, "ring host buffers: out of memory");
  void **dev[] = {&r->kv[0],
                  &r->kv[1],
                  &r->dkv[0],
                  &r->dkv[1],
                  &r->dkv_home,
                  (void **)&r->o_acc,
                  (void **)&r->o_part,
                  (void **)&r->lse_acc,
                  (void **)&r->lse_part,
                  (void **)&r->dq_acc,
                  (void **)&r->o32,
                  (void **)&r->do32,
                  (void **)&r->zero_lse,
                  (void **)&r->dsinks_acc};
  const size_t bytes[] = {r->kv_bytes,  r->kv_bytes,
                          r->dkv_bytes, r->dkv_bytes,
                          r->dkv_bytes, qo,
                          qo,           lse,
                          lse,          qd,
                          qo,           qo,
                          zl,           (size_t)r->hq * 4};
  for (size_t i = 0; i < sizeof bytes / sizeof bytes[0]; i++)
    if ((s = alloc_buf(r, bytes[i], dev[i]))) return s;
  if (r->dkv_overlap &&
      (s = alloc_buf(r, r->dkv_bytes, (void **)&r->dkv_scratch)))
    return s;
  if ((s = ring_fill_zero(r, r->zero_lse, zl))) return s;
  if (r->strategy != FA_RING_STRATEGY_ALLGATHER) return FA_OK;
  if (r->varlen) {
    const size_t cu_b = sizeof(int32_t) * ((size_t)g->batch + 1);
    r->cu_k = malloc(cu_b);
    if (!r->cu_k) return ring_fail(FA_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(r->cu_k, g->cu_seqlens_k, cu_b);
    r->rows_k_global = r->cu_k[g->batch];
    if ((s = alloc_buf(r, cu_b, (void **)&r->cu_k_dev))) return s;
    if (fa_copy_to_device(r->ctx, r->cu_k_dev, r->cu_k, cu_b))
      return ring_fail(FA_ERR_BACKEND, "cu_seqlens_k: %s", fa_last_error());
  }
  r->k_base = g->positions == FA_POSITIONS_EXPLICIT ? g->k_position : 0;
  return ring_allgather_make(r);
}

fa_status fa_ring_create(fa_ring **out, fa_context *ctx, fa_comm *comm,
                         const fa_attention *global,
                         const fa_ring_options *options) {
  ring_clear_error();
  if (out) *out = NULL;
  // Without a usable communicator nothing can be agreed: local errors.
  if (!comm) return ring_fail(INVALID, "comm is NULL");
  if (comm->struct_size != sizeof(fa_comm))
    return ring_fail(INVALID, "comm.struct_size=%zu, expected %zu",
                     comm->struct_size, sizeof(fa_comm));
  if (!comm->post_send || !comm->post_recv || !comm->wait ||
      !comm->allreduce_max)
    return ring_fail(INVALID, "comm: post_send, post_recv, wait and "
                              "allreduce_max must all be set");
  if (comm->size < 1 || comm->rank < 0 || comm->rank >= comm->size)
    return ring_fail(INVALID, "comm: rank=%d, size=%d out of range", comm->rank,
                     comm->size);
  fa_status s = !out   ? ring_fail(INVALID, "ring (output pointer) is NULL")
                : !ctx ? ring_fail(INVALID, "ctx is NULL")
                       : check_local(global, options);
  if ((s = ring_agree(comm, s, ring_error_text()))) return s;
  const int shard = options ? options->shard : FA_SHARD_CONTIGUOUS;
  // Every rank reaches the same verdict; agreeing gives them one message.
  if ((s = check_same(comm, global, shard,
                      options ? options->strategy : FA_RING_STRATEGY_RING)))
    return ring_agree(comm, s, ring_error_text());

  fa_ring *r = calloc(1, sizeof *r);
  if (r) {
    r->ctx = ctx;
    r->comm = comm;
    r->g = *global;
    r->N = comm->size;
    r->rank = comm->rank;
    r->shard = shard;
    r->strategy = options ? options->strategy : FA_RING_STRATEGY_RING;
    // The overlapped backward adds on the host: CPU contexts only.
    r->dkv_overlap = !(options && options->dkv_in_place) &&
                     strncmp(fa_context_backend(ctx), "cpu", 3) == 0;
    r->varlen = global->cu_seqlens_q != NULL;
    r->hq = global->heads_q;
    r->hkv = global->heads_kv;
    r->d = global->head_dim;
    r->dv = global->head_dim_v ? global->head_dim_v : global->head_dim;
    s = build(r);
    // The caller's host arrays are not kept: the blocks carry their own.
    r->g.cu_seqlens_q = r->g.cu_seqlens_k = NULL;
  } else {
    s = ring_fail(FA_ERR_OUT_OF_MEMORY, "ring: out of memory");
  }
  if ((s = ring_agree(comm, s, ring_error_text()))) {
    fa_ring_destroy(r);
    return s;
  }
  *out = r;
  return FA_OK;
}

void ring_plans_drop(fa_ring *r, int backward) {
  for (int i = 0; r->blocks && i < r->N * 4; i++) {
    fa_plan **p = backward ? &r->blocks[i].bwd : &r->blocks[i].fwd;
    fa_plan_destroy(*p);
    *p = NULL;
  }
}

void fa_ring_destroy(fa_ring *r) {
  if (!r) return;
  ring_plans_drop(r, 0);
  ring_plans_drop(r, 1);
  ring_allgather_free(r);
  free(r->cu_k);
  fa_free(r->ctx, r->cu_k_dev);
  ring_shard_free(r->ctx, &r->q);
  for (int i = 0; r->k && i < r->N; i++) ring_shard_free(r->ctx, &r->k[i]);
  void *dev[] = {r->kv[0],    r->kv[1],      r->dkv[0],     r->dkv[1],
                 r->dkv_home, r->o_acc,      r->o_part,     r->lse_acc,
                 r->lse_part, r->dq_acc,     r->o32,        r->do32,
                 r->zero_lse, r->dsinks_acc, r->dkv_scratch};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
    fa_free(r->ctx, dev[i]);
  free(r->k);
  free(r->blocks);
  free(r->zeros);
  free(r->lse_stage);
  free(r);
}

// 1 if the tensors have the cached layout (dtype, strides, alignment);
// else the cache takes the new layout and *changed is set.
fa_status ring_layout_check(fa_ring *r, ring_layout *cached, const fa_tensor *t,
                            int n, int *changed) {
  ring_layout now;
  memset(&now, 0, sizeof now);
  now.valid = 1;
  for (int i = 0; i < n; i++) {
    now.dt[i] = t[i].dtype;
    now.st[i][0] = t[i].stride_batch;
    now.st[i][1] = t[i].stride_seq;
    now.st[i][2] = t[i].stride_head;
    uintptr_t a = (uintptr_t)t[i].data;
    now.align[i] =
        a ? (unsigned)((a & (~a + 1)) > 64 ? 64 : (a & (~a + 1))) : 64;
  }
  *changed = memcmp(&now, cached, sizeof now) != 0;
  *cached = now;
  return FA_OK;
}

int64_t fa_ring_local_rows(const fa_ring *r, int which) {
  if (!r || (which != 'q' && which != 'k')) return -1;
  return which == 'q' ? r->q.rows : r->k[r->rank].rows;
}

int64_t fa_ring_local_row(const fa_ring *r, int which, int b, int64_t row) {
  if (!r || (which != 'q' && which != 'k') || b < 0 || b >= r->g.batch)
    return -1;
  const ring_shard *s = which == 'q' ? &r->q : &r->k[r->rank];
  for (int p = 0; p < s->nparts; p++) {
    const ring_part *pt = &s->part[p];
    if (row >= pt->lo[b] && row < pt->lo[b] + pt->len[b])
      return pt->row0 + (r->varlen ? pt->cu[b] : 0) + row - pt->lo[b];
  }
  return -1;
}

size_t fa_ring_lse_size(const fa_ring *r) {
  return r ? (size_t)r->lse_size : 0;
}

int64_t fa_ring_lse_index(const fa_ring *r, int b, int h, int64_t local_row) {
  if (!r || b < 0 || b >= r->g.batch || h < 0 || h >= r->hq) return -1;
  for (int p = 0; p < r->q.nparts; p++) {
    const ring_part *pt = &r->q.part[p];
    const int64_t first = pt->row0 + (r->varlen ? pt->cu[b] : 0);
    if (local_row >= first && local_row < first + pt->len[b])
      return pt->lse_off + ((int64_t)b * r->hq + h) * pt->maxlen +
             (local_row - first);
  }
  return -1;
}

fa_status fa_ring_get_stats(const fa_ring *r, fa_ring_stats *st) {
  ring_clear_error();
  if (!r || !st) return ring_fail(INVALID, "ring or stats is NULL");
  *st = r->stats;
  return FA_OK;
}

size_t fa_ring_describe(const fa_ring *r, char *buf, size_t len) {
  char tmp[4096];
  size_t n = 0;
#define PUT(...)                                                               \
  do {                                                                         \
    int w_ =                                                                   \
        snprintf(tmp + n, n < sizeof tmp ? sizeof tmp - n : 0, __VA_ARGS__);   \
    if (w_ > 0) n += (size_t)w_;                                               \
  } while (0)
  if (!r) {
    PUT("ring: NULL");
  } else {
    PUT("ring: rank %d of %d, %s shards (%d part%s per rank), %s, "
        "%lld local query rows, %lld local key rows\n",
        r->rank, r->N, r->shard == FA_SHARD_ZIGZAG ? "zigzag" : "contiguous",
        r->q.nparts, r->q.nparts > 1 ? "s" : "", r->varlen ? "varlen" : "dense",
        (long long)r->q.rows, (long long)r->k[r->rank].rows);
    if (r->strategy == FA_RING_STRATEGY_ALLGATHER)
      PUT("strategy (forward): all-gather: every rank's K/V block (up to "
          "%zu bytes, fp32) around the ring once, each copied to its global "
          "rows while the next travels, then one call per query part "
          "against the whole sequence (no merges); chosen by "
          "fa_ring_options.strategy\n",
          r->kv_bytes);
    PUT("strategy%s: ring of %d steps; K/V blocks of up to %zu bytes (fp32) "
        "double-buffered, the next block posted before each step's compute; "
        "partial states merged in fp32; backward dK/dV travel with K/V and "
        "return to their owner\n",
        r->strategy == FA_RING_STRATEGY_ALLGATHER ? " (backward)" : "", r->N,
        r->kv_bytes);
    for (int t = 0; t < r->N && t < 32; t++) { // 32 lines fit in tmp
      const int src = (r->rank - t + r->N) % r->N;
      int vis = 0, skip = 0;
      for (int qp = 0; qp < r->q.nparts; qp++)
        for (int kp = 0; kp < r->k[src].nparts; kp++)
          r->blocks[t * 4 + qp * 2 + kp].visible ? vis++ : skip++;
      PUT("step %d: K/V of rank %d: %d block%s computed, %d skipped (masked)\n",
          t, src, vis, vis == 1 ? "" : "s", skip);
    }
    if (r->N > 32) PUT("... %d more steps\n", r->N - 32);
  }
#undef PUT
  if (n >= sizeof tmp) n = sizeof tmp - 1;
  if (buf && len) {
    size_t c = n < len - 1 ? n : len - 1;
    memcpy(buf, tmp, c);
    buf[c] = '\0';
  }
  return n;
}
