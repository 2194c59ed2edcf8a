// SPDX-License-Identifier: MIT
/**
 * @file flashattn_ring.h
 * @brief Context parallelism: one attention problem split along the
 * sequence over many ranks (CPU processes or GPUs), forward and backward.
 *
 * A layer above flashattn.h that uses nothing but the public API
 * (explicit positions, accumulating backward, LSE, fa_merge_states) and a
 * small communicator interface (::fa_comm). The core library never depends
 * on it; transports are separate libraries (flashattn_mpi.h,
 * flashattn_nccl.h) or the caller's own ::fa_comm.
 *
 * The model (docs/context-parallel.md): every rank holds a shard of the
 * queries and the same shard of the keys and values of every sequence.
 * K/V shards travel around a ring of ranks; at each of the `size` steps a
 * rank attends its queries to the block it holds (the next block's
 * transfer is posted before that compute), and merges the partial state
 * (O, LSE) into an fp32 accumulator with the merge lemma. Blocks a mask
 * hides wholly (causal, sliding windows) are skipped, not computed. The
 * backward sends dK/dV accumulators (fp32) around with the K/V; after the
 * last step they return to their owner. dQ stays local.
 *
 * Conventions: every function returns an ::fa_status; on failure nothing
 * the caller passed as output has been written and fa_ring_last_error()
 * holds the message. Every call that takes a ring is *collective*: all ranks
 * must call it with the same global problem; they all return the same
 * status and the same message, which names the rank that failed first and
 * the field. A ring is used by one thread at a time.
 */
#ifndef FLASHATTN_RING_H
#define FLASHATTN_RING_H

#include <stddef.h>
#include <stdint.h>

#include "flashattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @return what went wrong in this thread's last failing fa_ring_* or
 * fa_comm_* call ("" after a success). Thread-local. */
FA_API const char *fa_ring_last_error(void);

/* ---- the communicator interface ---------------------------------------- */

/** Request slots a transport must provide (slot numbers 0..FA_COMM_SLOTS-1);
 * at most one operation is outstanding per slot. */
#define FA_COMM_SLOTS 8

/** fa_comm.memory: where the buffers the ring hands to the transport live. */
#define FA_COMM_HOST_MEMORY 0   /**< host memory (MPI, sockets, ...) */
#define FA_COMM_DEVICE_MEMORY 1 /**< the context's device memory (NCCL) */

/**
 * A communicator: the ranks of one ring and four operations. Fill one in to
 * use your own transport (e.g. torch.distributed); the MPI and NCCL
 * libraries make one from an existing communicator. Each operation returns
 * 0 on success; any other value is a transport failure whose text
 * error(self) returns (it becomes FA_ERR_BACKEND with that text).
 * Operations on device memory are ordered on the stream of the ring's
 * context (the NCCL transport is given it at creation).
 */
typedef struct fa_comm {
  size_t struct_size; /**< sizeof(fa_comm) as the caller compiled it. */
  void *self;         /**< The transport's state, passed to every member. */
  int rank;           /**< This rank, 0 <= rank < size. */
  int size;           /**< Number of ranks (>= 1). */
  int memory;         /**< FA_COMM_HOST_MEMORY or FA_COMM_DEVICE_MEMORY. */
  /** Start sending @p bytes at @p buf to rank @p peer with @p tag; the
   * buffer stays untouched until wait(slot). */
  int (*post_send)(void *self, int slot, const void *buf, size_t bytes,
                   int peer, int tag);
  /** Start receiving exactly @p bytes from @p peer with @p tag into @p buf. */
  int (*post_recv)(void *self, int slot, void *buf, size_t bytes, int peer,
                   int tag);
  /** (optional, may be NULL) Hand every operation posted so far to the
   * network; the ring calls it after posting a step's operations and before
   * that step's compute (NCCL launches them as one group here). */
  int (*start)(void *self);
  /** Complete the operation in @p slot (a slot with none returns 0). For
   * device memory, later work on the context's stream is ordered after it;
   * the host need not block. */
  int (*wait)(void *self, int slot);
  /** In place, over all ranks: values[i] = max of every rank's values[i]
   * (host memory, 1 <= n <= 64); a collective every rank calls. */
  int (*allreduce_max)(void *self, int64_t *values, int n);
  /** Text of the last failure (static or owned by self); never NULL. */
  const char *(*error)(void *self);
  /** Release self (optional; NULL = the caller owns it). */
  void (*destroy)(void *self);
} fa_comm;

/** Free a communicator made by a transport library (calls destroy and frees
 * the struct). NULL is a no-op. Never frees the MPI_Comm or ncclComm_t it
 * was made from. */
FA_API void fa_comm_destroy(fa_comm *comm);

/* ---- shards -------------------------------------------------------------- */

/** Shard layouts (fa_ring_options.shard). With C chunks of a sequence of
 * length L, chunk c holds global rows [L*c/C, L*(c+1)/C). */
#define FA_SHARD_CONTIGUOUS 0 /**< C = size; rank r holds chunk r. */
/** C = 2 * size; rank r holds chunks r and 2*size-1-r (in that order): every
 * rank gets the same share of causal work. */
#define FA_SHARD_ZIGZAG 1

/** How the ring runs. Initialise with fa_ring_options_init(). */
typedef struct fa_ring_options {
  size_t struct_size; /**< Set by fa_ring_options_init(). */
  int shard;          /**< FA_SHARD_CONTIGUOUS (default) or FA_SHARD_ZIGZAG. */
  /** Backward, 0 (default): on host memory (CPU contexts) each step's dK/dV
   * go to a scratch and are added to the arriving accumulator afterwards,
   * so the accumulator's transfer hides under the step's compute; device
   * contexts accumulate in place. 1: in place everywhere (the accumulator
   * must arrive before the step computes; its transfer is exposed). Both
   * are deterministic. */
  int dkv_in_place;
  /** FA_RING_STRATEGY_RING (default) or FA_RING_STRATEGY_ALLGATHER. */
  int strategy;
} fa_ring_options;

/** Forward strategies (fa_ring_options.strategy); fa_ring_describe() says
 * which runs. The backward is always the ring's. */
#define FA_RING_STRATEGY_RING 0 /**< K/V blocks travel, one merge per step */
/** Every K/V block is gathered first (the Llama 3 approach, for few kv
 * heads): one call per query part against the whole sequence, no merges;
 * N blocks of memory, and the gather is not hidden under compute. */
#define FA_RING_STRATEGY_ALLGATHER 1

/** Defaults: struct_size set, contiguous shards. NULL is a no-op. */
FA_API void fa_ring_options_init(fa_ring_options *o);

/** Opaque ring: the global problem, this rank's shard geometry, the plans
 * of every ring step and the double buffers, all made once. */
typedef struct fa_ring fa_ring;

/**
 * Create a ring for the WHOLE problem @p global (collective). @p global
 * describes the full sequences exactly as one process would pass them to
 * fa_forward(): batch, global seqlen_q/seqlen_k, heads, masks (causal in
 * either alignment, windows, softcap, ALiBi slopes, sinks), GQA, explicit
 * positions of the whole sequence if wanted, and for varlen batches the
 * GLOBAL cu_seqlens_q / cu_seqlens_k in host memory (every rank passes the
 * same). Paged K/V, seqused_k and descales are refused. Pointers (slopes,
 * sinks, dsinks, position arrays) are in the context's memory space, must
 * stay valid while the ring is used, and are read when the ring runs.
 *
 * Every rank holds its shard of q (and o, dO, dq) and of k, v (dk, dv):
 * dense batches as [batch, local rows, heads, dim] views; varlen batches as
 * packed rows (stride_batch 0), part by part: first part 0 of every
 * sequence in batch order, then (zigzag) part 1 of every sequence.
 * fa_ring_local_rows() and fa_ring_local_row() give the geometry.
 *
 * The ring checks collectively that every rank passed the same global
 * problem and shard layout (a difference fails on every rank, naming the
 * field and the ranks) and keeps references to @p ctx and @p comm, which
 * must outlive it. Nothing travels yet.
 */
FA_API fa_status fa_ring_create(fa_ring **ring, fa_context *ctx, fa_comm *comm,
                                const fa_attention *global,
                                const fa_ring_options *options);

/** Free a ring (local, not collective). NULL is a no-op. */
FA_API void fa_ring_destroy(fa_ring *ring);

/**
 * This rank's rows: @p which is 'q' (q, o, dO, dq) or 'k' (k, v, dk, dv).
 * @return the local seqlen (dense: rows per sequence) or, for varlen, the
 * number of packed local rows; -1 for a bad argument.
 */
FA_API int64_t fa_ring_local_rows(const fa_ring *ring, int which);

/**
 * Where global row @p row of sequence @p b lives: @return its local row on
 * this rank (dense: the row within the sequence's [local rows] view;
 * varlen: the packed row), or -1 when another rank holds it.
 */
FA_API int64_t fa_ring_local_row(const fa_ring *ring, int which, int b,
                                 int64_t row);

/**
 * The LSE of a ring is laid out part by part: part p (0, or 0 and 1 with
 * zigzag) is a [batch][heads_q][part_rows_p] block, part_rows_p being the
 * longest part p of any sequence; entries past a varlen sequence's part
 * length are -inf. @return the number of floats of that array.
 */
FA_API size_t fa_ring_lse_size(const fa_ring *ring);

/** @return the index in the ring's LSE array of (sequence @p b, head @p h,
 * local row @p local_row as fa_ring_local_row() gives it), -1 if none. */
FA_API int64_t fa_ring_lse_index(const fa_ring *ring, int b, int h,
                                 int64_t local_row);

/**
 * Ring forward (collective). q, k, v, o are this rank's shards (input dtype
 * for q, k, v; output dtype for o, as fa_forward()); lse (may be NULL) gets
 * the global LSE of this rank's query rows in the ring's layout. Partial
 * states are merged in fp32 whatever the dtypes; o is rounded once.
 * Tensors' dtypes and layouts are checked on every rank before any data
 * moves. Deterministic run to run.
 */
FA_API fa_status fa_ring_forward(fa_ring *ring, fa_tensor q, fa_tensor k,
                                 fa_tensor v, fa_tensor o, float *lse);

/**
 * Ring backward (collective) from the o and lse that fa_ring_forward()
 * produced. Writes dq (local), dk and dv (this rank's K/V shard, summed over
 * every rank's queries as the accumulators travel the ring and return), or
 * adds to them with global->backward_mode = FA_BACKWARD_ACCUMULATE, with one
 * rounding per call (sums in fp32). Every sum is taken in ring order, so
 * the result is deterministic whenever the kernels are (the CPU ones are).
 * With sinks and global->dsinks, dsinks gets THIS rank's share of the
 * sinks' gradient (sum it over ranks as any replicated parameter's).
 */
FA_API fa_status fa_ring_backward(fa_ring *ring, fa_tensor q, fa_tensor k,
                                  fa_tensor v, fa_tensor o, fa_tensor d_o,
                                  const float *lse, fa_tensor dq, fa_tensor dk,
                                  fa_tensor dv);

/** Timings of the last forward or backward on this rank, in seconds. */
typedef struct fa_ring_stats {
  int steps;          /**< Ring steps (= size). */
  int skipped;        /**< Blocks (query part x key part) a mask hid wholly. */
  double compute;     /**< Attention and merges, summed over steps. */
  double wait;        /**< Exposed wait: time blocked in wait() after the
                           step's compute, summed over steps. */
  double total;       /**< The whole call. */
  int64_t bytes_sent; /**< Bytes this rank posted. */
} fa_ring_stats;

/** Copy the last call's timings. */
FA_API fa_status fa_ring_get_stats(const fa_ring *ring, fa_ring_stats *stats);

/**
 * Describe the strategy (shards, steps, blocks computed and skipped per
 * step on this rank, buffers, bytes per step), fa_explain-style.
 * @return the full length, as snprintf.
 */
FA_API size_t fa_ring_describe(const fa_ring *ring, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_RING_H */
