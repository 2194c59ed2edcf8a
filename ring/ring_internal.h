// SPDX-License-Identifier: MIT
// The ring's private state, shared by its files: shard geometry (shard.c),
// collective agreement and errors (agree.c), creation (ring.c), the
// forward (forward.c) and the backward (backward.c).
#ifndef FA_RING_INTERNAL_H
#define FA_RING_INTERNAL_H

#include <stdint.h>

#include "flashattn_ring.h"

// Message tags: K/V blocks and dK/dV accumulators travel on separate tags
// so a fast rank's next message can never be taken for the current one.
#define RING_TAG_KV 1
#define RING_TAG_DKV 2
// Request slots of one step.
enum {
  SLOT_KV_RECV,
  SLOT_KV_SEND,
  SLOT_DKV_RECV,
  SLOT_DKV_SEND,
  SLOT_DKV_HOME
};

#define RING_MSG 256

// One part (one chunk of every sequence) of a rank's shard, on the query
// or the key side.
typedef struct ring_part {
  int64_t row0;    // first local row (dense: within a sequence; varlen:
                   // packed row of sequence 0's chunk)
  int64_t rows;    // dense: the chunk length; varlen: the packed rows
  int maxlen;      // the longest chunk of any sequence (dense: rows)
  int32_t *cu;     // varlen: [batch+1] chunk offsets from row0 (host)
  int64_t *pos;    // [batch] global position of each chunk's first row
  int64_t *len;    // [batch] chunk lengths (host)
  int64_t *lo;     // [batch] each chunk's first row in its sequence
  int32_t *cu_dev; // the same two arrays in the context's memory space
  int64_t *pos_dev;
  int64_t lse_off; // q side: where the part's LSE block starts
} ring_part;

// A rank's shard on one side.
typedef struct ring_shard {
  int nparts;
  ring_part part[2];
  int64_t rows; // dense: local rows per sequence; varlen: packed rows
} ring_shard;

// One (query part, key part) block of a ring step and its plans.
typedef struct ring_block {
  int qp, kp;  // parts
  int visible; // 0: a mask hides it wholly (skipped)
  fa_attention a;
  fa_plan *fwd, *bwd;
} ring_block;

// The layout of the user's tensors that the plans were made for.
typedef struct ring_layout {
  int valid;
  fa_dtype dt[8];
  int64_t st[8][3];
  unsigned align[8];
} ring_layout;

struct fa_ring {
  fa_context *ctx;
  fa_comm *comm;
  fa_attention g; // the global problem (copy)
  int N, rank, shard, varlen;
  int dkv_overlap; // backward: scratch + host add (see fa_ring_options)
  int hq, hkv, d, dv;
  fa_dtype in_dt;     // set per call
  ring_shard q;       // this rank's queries
  ring_shard *k;      // [N] every rank's keys (blocks travel)
  ring_block *blocks; // [N][4]: step t, block i at blocks[t * 4 + i]
  int dsink_block[2]; // per query part: the block index that owns dsinks
  int64_t lse_size;

  // Buffers in the context's memory space, made once.
  size_t kv_bytes, dkv_bytes;      // largest K/V block (input dtype; f32)
  void *kv[2], *dkv[2], *dkv_home; // double buffers; returned accumulators
  float *o_acc, *o_part, *lse_acc, *lse_part, *dq_acc, *zero_lse;
  float *lse_stage; // host: staging for LSE copies
  float *o32, *do32, *dsinks_acc;
  float *dkv_scratch; // host contexts: one step's dK/dV (NULL: in place)
  void *zeros;        // host: zeros for filling device buffers
  float *lse_host;    // host: the accumulators' initial LSE (sinks or -inf)
  size_t zeros_bytes;
  ring_layout fwd_layout, bwd_layout;
  int bwd_f32_outputs;

  // The all-gather strategy (allgather.c).
  int strategy;
  void **gather;     // [N] every rank's packed block
  void *kv_global;   // the whole sequence's K then V
  fa_plan **ag_plan; // [2] one plan per query part
  fa_attention ag_problem[2];
  int32_t *cu_k, *cu_k_dev; // the global cu_seqlens_k (host, context)
  int64_t rows_k_global, k_base;

  fa_ring_stats stats;
};

// ---- errors and agreement (agree.c) ----
// Exported from libflashattn-ring for its transports only (not in any
// installed header): they report through fa_ring_last_error() too.
#define RING_SHARED __attribute__((visibility("default")))
RING_SHARED fa_status ring_fail(fa_status s, const char *fmt, ...);
RING_SHARED void ring_clear_error(void);
const char *ring_error_text(void);
// Collective: every rank passes its local status (and its message on
// failure); all return the failure of the lowest failing rank, with the
// message "rank R: ..." set on every rank. A transport failure is
// FA_ERR_BACKEND with the transport's text.
fa_status ring_agree(fa_comm *c, fa_status local, const char *msg);
// Collective: *field = -1 where every rank passed the same values, else
// the first differing index, its min and max over ranks in lo, hi and in
// *rank the lowest rank not holding the max.
fa_status ring_same(fa_comm *c, const int64_t *values, int n, int *field,
                    int64_t *lo, int64_t *hi, int *rank);
fa_status ring_transport_fail(fa_comm *c, const char *what);

// ---- geometry (shard.c) ----
size_t ring_dtype_size(fa_dtype t);
int ring_len_q(const fa_attention *g, int b);
int ring_len_k(const fa_attention *g, int b);
// Fill shard of rank r on side 'q' or 'k'; host arrays only.
fa_status ring_shard_make(const fa_attention *g, int N, int shard, int r,
                          int side, ring_shard *s);
void ring_shard_free(fa_context *ctx, ring_shard *s);
fa_status ring_shard_upload(fa_context *ctx, int batch, ring_shard *s);
// 1 if some query of part qp sees some key of part kp (a's masks).
int ring_part_visible(const fa_attention *g, int batch, const ring_part *q,
                      const ring_part *k);
// A view of part p of a local tensor (dense or varlen rows).
fa_tensor ring_part_view(fa_tensor t, const ring_part *p);
// The sub-problem of query part q against key part k.
void ring_block_problem(const fa_attention *g, int varlen, const ring_part *q,
                        const ring_part *k, fa_attention *a);
// Views of the K and V (or dK, dV) halves of a packed block of rank src.
void ring_kv_views(const fa_ring *r, int src, void *buf, fa_dtype dt,
                   fa_tensor *k, fa_tensor *v);
size_t ring_kv_block_bytes(const fa_ring *r, int src, fa_dtype dt);
// A dense fp32 [.., rows, heads, dim] accumulator view of a local tensor.
fa_tensor ring_acc_view(const fa_ring *r, float *base, int rows_side, int heads,
                        int dim);

// ---- copies through the public API (copy.c) ----
// dst = src elementwise (dtype conversion, any strides) over the local
// shard of side 'q' or 'k' with @p heads and @p dim, through
// fa_merge_states with one part.
fa_status ring_convert(fa_ring *r, int side, int heads, int dim, fa_tensor src,
                       fa_tensor dst);
fa_status ring_fill_zero(fa_ring *r, void *dst, size_t bytes);
// Merge a block's partial state into a part's accumulator.
fa_status ring_merge_part(fa_ring *r, const ring_part *qp, fa_tensor acc,
                          float *lse_acc, fa_tensor part, float *lse_part);

// ---- plans (plans.c) ----
fa_status ring_layout_check(fa_ring *r, ring_layout *cached, const fa_tensor *t,
                            int n, int *changed);
void ring_plans_drop(fa_ring *r, int backward);

double ring_now(void);

// ---- the all-gather strategy (allgather.c) ----
fa_status ring_allgather_make(fa_ring *r);
void ring_allgather_free(fa_ring *r);
fa_status ring_allgather_plans(fa_ring *r, fa_tensor q, fa_tensor o32,
                               fa_tensor o);
fa_status ring_allgather_forward(fa_ring *r, fa_tensor q, fa_tensor k,
                                 fa_tensor v);

// ---- steps shared by the forward and the backward (forward.c) ----
fa_status ring_check_dtypes(fa_ring *r, const fa_tensor *t,
                            const char *const *names, int n);
fa_status ring_post_kv(fa_ring *r, int t);
fa_status ring_wait(fa_ring *r, int slot);
// Hand the posted operations to the network (fa_comm.start, optional).
fa_status ring_start(fa_ring *r);
fa_status ring_pack_kv(fa_ring *r, fa_tensor k, fa_tensor v);
fa_status ring_init_lse(fa_ring *r, float *dst);
void ring_stats_begin(fa_ring *r);

#endif
