// SPDX-License-Identifier: MIT
/**
 * @file flashattn.h
 * @brief flashattn: exact, tiled (FlashAttention-style) attention in C.
 *
 * The whole public API. Computes `O = softmax(scale * Q K^T + masks) V`
 * without ever materialising the seqlen_q x seqlen_k score matrix, on the best
 * backend found at run time (CPU, CUDA, HIP).
 *
 * Conventions used throughout:
 * - Every function that can fail returns an ::fa_status. On failure nothing
 *   the caller passed as output has been written, and fa_last_error() says
 *   exactly what was wrong (field name and value).
 * - Thread safety: distinct contexts may be used from distinct threads at the
 *   same time. One context must be used by one thread at a time. The backend
 *   registry is initialised once, thread-safely, on first use.
 * - Memory: every pointer a problem or a call takes (tensors, cu_seqlens,
 *   block tables, slopes, sinks, lse) lives in the context's memory space:
 *   host memory for CPU backends, device memory for GPU backends (allocate it
 *   with fa_malloc() to stay portable).
 */
#ifndef FLASHATTN_H
#define FLASHATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(FA_STATIC_DEFINE)
#define FA_API
#elif defined(_WIN32)
#ifdef FA_BUILDING_LIBRARY
#define FA_API __declspec(dllexport)
#else
#define FA_API __declspec(dllimport)
#endif
#else
#define FA_API __attribute__((visibility("default")))
#endif

/* ---- versioning and errors ------------------------------------------ */

#define FA_VERSION_MAJOR 0 /**< Incompatible API changes bump this. */
#define FA_VERSION_MINOR 1 /**< Compatible additions bump this. */
#define FA_VERSION_PATCH 0 /**< Fixes bump this. */

/** @return the run-time library version, "MAJOR.MINOR.PATCH". Static string. */
FA_API const char *fa_version(void);

/** Status of every fallible call. Numbers are stable across versions. */
typedef enum fa_status {
  FA_OK = 0,                   /**< Success. */
  FA_ERR_INVALID_ARGUMENT = 1, /**< A field is out of range or inconsistent. */
  FA_ERR_UNSUPPORTED = 2,      /**< Valid, but no backend here can run it. */
  FA_ERR_NO_DEVICE = 3,        /**< The backend or device asked for is absent. */
  FA_ERR_OUT_OF_MEMORY = 4,    /**< An allocation failed. */
  FA_ERR_BACKEND = 5           /**< A GPU runtime or library call failed. */
} fa_status;

/** @return a static English name for @p s ("invalid argument", ...). */
FA_API const char *fa_status_string(fa_status s);

/**
 * @return what exactly went wrong in the last failing call made by this
 * thread, naming the field and its value; "" if the last call succeeded.
 * Thread-local; valid until this thread's next flashattn call.
 */
FA_API const char *fa_last_error(void);

/* ---- data ----------------------------------------------------------- */

/** Element type of a tensor. Accumulation is always fp32. */
typedef enum fa_dtype {
  FA_F32 = 0,  /**< IEEE binary32. */
  FA_F16 = 1,  /**< IEEE binary16. */
  FA_BF16 = 2  /**< bfloat16 (upper half of a binary32). */
} fa_dtype;

/**
 * A strided [batch, seq, heads, dim] view. The dim axis is contiguous; the
 * other strides are in elements (not bytes), so BSHD, BHSD and packed QKV
 * layouts all work without copies. Strides must be >= 0. Varlen batches use
 * stride_batch 0 and address rows through cu_seqlens; paged K/V use
 * stride_batch as the page stride and stride_seq as the slot stride.
 */
typedef struct fa_tensor {
  void *data;           /**< First element; in the context's memory space. */
  fa_dtype dtype;       /**< Element type; q, k, v, o, do, dq... must agree. */
  int64_t stride_batch; /**< Elements between batches (or pages). */
  int64_t stride_seq;   /**< Elements between consecutive rows. */
  int64_t stride_head;  /**< Elements between heads. */
} fa_tensor;

/* ---- the problem ------------------------------------------------------ */

/** Causal mask aligned to the bottom-right corner (FlashAttention's). */
#define FA_CAUSAL_BOTTOM_RIGHT 1
/** Causal mask aligned to the top-left corner (PyTorch's is_causal). */
#define FA_CAUSAL_TOP_LEFT 2

/**
 * One attention problem. Initialise with fa_attention_init(), then set the
 * fields you need. Every pointer field is optional (NULL = feature off) and,
 * when set, points into the context's memory space and must stay valid
 * while a plan built from this problem is used.
 *
 * Masking semantics (every backend agrees): let sq, sk be the real lengths of
 * a sequence and `shift` = sk - sq (0 with FA_CAUSAL_TOP_LEFT). Query i sees
 * key j iff i + shift - window_left <= j <= i + shift + window_right (a -1
 * bound is unbounded; causal sets window_right to 0). Scores are
 * `s = scale * q.k`, then `cap * tanh(s / cap)` if softcap > 0, then
 * `s -= slope[h] * |i + shift - j|` with ALiBi, then the mask. A row with no
 * visible key has O = 0 and LSE = -inf (or the sink logit with sinks).
 *
 * Non-finite values (the float64 reference's rules; scores are fp32): a NaN
 * in q, k, v or dO reaches O, LSE and the gradients of exactly the rows
 * that see it (a masked key contributes nothing, not even 0 * NaN). A score
 * of +inf makes its row NaN; a score of -inf weighs 0, and a row whose
 * every visible score is -inf is NaN (not the O = 0 of a row with no key).
 * `scale` must be finite (0 = default); a scale or inputs for which
 * scale * q.k overflows fp32 (e.g. scale = FLT_MAX) are accepted, and
 * the rows whose scores overflow come out NaN or, where fp32 still
 * resolves the result (an overflow to -inf beside a finite maximum), right.
 * The backward likewise accumulates dO.v and dO.O in fp32: where those
 * overflow (16-bit inputs near their maximum), gradients may be non-finite.
 * These non-finite rules hold on the CPU backends (tests/stress). The GPU
 * tensor-core kernels (cuda.sm80.*, cuda.sm90.*, hip.cdna.*) multiply
 * whole tiles of P by V (backward: of P^T and dS^T by dO and Q): a NaN or
 * inf in a V row (backward: also a q or dO row) also reaches the rows of
 * the same tile that cannot see that key (query). Finite
 * inputs are unaffected, and K/V rows past a sequence's end (varlen,
 * seqused_k) never leak (they are masked and zeroed).
 */
typedef struct fa_attention {
  int batch;       /**< Number of sequences (>= 1). */
  int seqlen_q;    /**< Query length; the maximum one when varlen. */
  int seqlen_k;    /**< Key length; the maximum one when varlen or paged. */
  int heads_q;     /**< Query heads (>= 1). */
  int heads_kv;    /**< Key/value heads; heads_q % heads_kv == 0 (GQA/MQA):
                        query head h reads kv head h / (heads_q / heads_kv). */
  int head_dim;    /**< Dimension of q and k (>= 1). */
  int head_dim_v;  /**< Dimension of v and o; 0 means head_dim. */
  float scale;     /**< Score scale; 0 means 1/sqrt(head_dim). */
  int causal;      /**< 0, FA_CAUSAL_BOTTOM_RIGHT or FA_CAUSAL_TOP_LEFT. */
  int window_left; /**< Keys visible left of the diagonal; -1 unbounded. */
  int window_right;/**< Keys visible right of the diagonal; -1 unbounded. */
  float softcap;   /**< 0 off; else scores become cap*tanh(s/cap). */
  const float *alibi_slopes;   /**< [heads_q] ALiBi slopes, or NULL. */
  const float *sinks;          /**< [heads_q] raw sink logits, or NULL. */
  const int32_t *cu_seqlens_q; /**< [batch+1] row offsets of q/o, or NULL. */
  const int32_t *cu_seqlens_k; /**< [batch+1] row offsets of k/v, or NULL. */
  const int32_t *seqused_k;    /**< [batch] real key counts (KV cache). */
  const int32_t *block_table;  /**< [batch][max_blocks_per_seq] pages. */
  int max_blocks_per_seq;      /**< Row length of block_table. */
  int page_size;               /**< Key slots per page (>= 1) when paged. */
  /**
   * Pages in the K/V page pool (required with block_table). Added to the
   * draft API so that a block-table entry can be checked before it is
   * followed: the library never reads a page the pool does not hold.
   */
  int num_pages;
} fa_attention;

/**
 * Set @p a to the defaults: every field 0 / NULL except window_left and
 * window_right, which become -1 (unbounded). Does nothing if @p a is NULL.
 */
FA_API void fa_attention_init(fa_attention *a);

/* ---- where it runs ------------------------------------------------------ */

/** Which family of backends a context uses. */
typedef enum fa_backend_kind {
  FA_BACKEND_AUTO = 0, /**< The best backend available on this machine. */
  FA_BACKEND_CPU = 1,  /**< Any CPU backend (best ISA the CPU has). */
  FA_BACKEND_CUDA = 2, /**< An NVIDIA GPU through the CUDA module. */
  FA_BACKEND_HIP = 3   /**< An AMD GPU through the HIP module. */
} fa_backend_kind;

/** Opaque execution context: a memory space, threads or a stream, scratch. */
typedef struct fa_context fa_context;

/**
 * Create a context of @p kind on @p device (GPU ordinal; 0 for CPU).
 * With FA_BACKEND_AUTO, the environment variable FLASHATTN_BACKEND=name
 * forces one backend for the whole program. Within the chosen memory space,
 * each problem runs on the best-ranked backend that supports it.
 * @return FA_OK, FA_ERR_NO_DEVICE (kind or device absent; see
 * fa_last_error()), FA_ERR_INVALID_ARGUMENT or FA_ERR_OUT_OF_MEMORY.
 * Destroy with fa_context_destroy().
 */
FA_API fa_status fa_context_create(fa_context **ctx, fa_backend_kind kind,
                                   int device);

/**
 * Create a context bound to exactly one backend, by name ("cpu-scalar",
 * "cpu-avx512", "cuda-sm90", ...; see fa_backend_name()), or to exactly one
 * kernel, by the kernel name that fa_explain() and fa_plan_describe() print
 * ("cpu.avx512"), for triage and for testing kernels a better one would
 * shadow. A problem that backend (or kernel) cannot run fails with
 * FA_ERR_UNSUPPORTED: never a fallback.
 */
FA_API fa_status fa_context_create_by_name(fa_context **ctx, const char *name);

/** Free a context and its scratch memory. NULL is a no-op. */
FA_API void fa_context_destroy(fa_context *ctx);

/**
 * @return the name of the backend the context is bound to ("cpu-scalar"),
 * or for an AUTO/CPU context the best of its memory space. Static string;
 * "" for NULL.
 */
FA_API const char *fa_context_backend(const fa_context *ctx);

/**
 * Run later calls on @p stream (cudaStream_t / hipStream_t; NULL = default
 * stream). GPU calls are asynchronous with respect to the host on that
 * stream. CPU contexts accept only NULL (FA_ERR_UNSUPPORTED otherwise).
 */
FA_API fa_status fa_context_set_stream(fa_context *ctx, void *stream);

/**
 * Use @p n threads for later CPU calls (0 = the OpenMP default, usually one
 * per core). @return FA_ERR_INVALID_ARGUMENT if n < 0, FA_ERR_UNSUPPORTED
 * for a GPU context.
 */
FA_API fa_status fa_context_set_threads(fa_context *ctx, int n);

/** @return how many backends are compiled in and usable on this machine. */
FA_API int fa_backend_count(void);

/** @return the name of usable backend @p i (0 = best ranked), NULL if out of
 * range. Static string. */
FA_API const char *fa_backend_name(int i);

/**
 * Explain dispatch for problem @p a in @p dtype: one line per backend compiled
 * in, saying whether it is available here, which of its kernels would run
 * and why each other was skipped. The contents of the problem's arrays are
 * not read (they may be device memory). Writes at most @p len bytes,
 * NUL-terminated, to @p buf (may be NULL when len is 0).
 * @return the length the full text needs, excluding the NUL, as snprintf.
 */
FA_API size_t fa_explain(const fa_attention *a, fa_dtype dtype, char *buf,
                         size_t len);

/* ---- memory in the context's space ---------------------------------- */

/** Allocate @p bytes (> 0) in the context's memory space, 64-byte aligned. */
FA_API fa_status fa_malloc(fa_context *ctx, size_t bytes, void **ptr);
/** Free memory from fa_malloc(). NULL is a no-op. */
FA_API fa_status fa_free(fa_context *ctx, void *ptr);
/** Copy host memory to the context's memory space (synchronous). */
FA_API fa_status fa_copy_to_device(fa_context *ctx, void *dst, const void *src,
                                   size_t bytes);
/** Copy from the context's memory space to host memory (synchronous). */
FA_API fa_status fa_copy_to_host(fa_context *ctx, void *dst, const void *src,
                                 size_t bytes);
/** Wait for every call issued on the context to finish. */
FA_API fa_status fa_synchronize(fa_context *ctx);

/* ---- compute ----------------------------------------------------------- */

/**
 * Forward attention: o = softmax(scores) v for every (batch, head, row).
 * q: [batch, seqlen_q, heads_q, head_dim]; k: [.., seqlen_k, heads_kv,
 * head_dim]; v: [.., seqlen_k, heads_kv, head_dim_v]; o: [.., seqlen_q,
 * heads_q, head_dim_v]. All four share one dtype. o must not overlap itself.
 * @param lse [batch][heads_q][seqlen_q] fp32 natural-log log-sum-exp, or NULL.
 * Deterministic run to run. On a GPU context, asynchronous on its stream.
 */
FA_API fa_status fa_forward(fa_context *ctx, const fa_attention *a,
                            fa_tensor q, fa_tensor k, fa_tensor v, fa_tensor o,
                            float *lse);

/**
 * Backward attention from the o and lse that fa_forward() produced.
 * Writes dq (shaped as q), dk (as k) and dv (as v); with GQA the gradients of
 * the query heads sharing a kv head are summed. Sinks are treated as
 * constants (no gradient is produced for them).
 */
FA_API fa_status fa_backward(fa_context *ctx, const fa_attention *a,
                             fa_tensor q, fa_tensor k, fa_tensor v, fa_tensor o,
                             fa_tensor d_o, const float *lse, fa_tensor dq,
                             fa_tensor dk, fa_tensor dv);

/**
 * The merge lemma: combine @p n partial attention results computed over
 * disjoint key sets into the result over their union. o_parts[i] is
 * [batch, seqlen, heads, head_dim]; lse_parts[i] is [batch][heads][seqlen]
 * fp32. A part whose lse is -inf contributes nothing. @p lse may be NULL.
 * In place is allowed: @p o may be exactly one of the parts (same pointer,
 * dtype and strides) and @p lse exactly one of lse_parts; any other overlap
 * is FA_ERR_INVALID_ARGUMENT.
 */
FA_API fa_status fa_merge_states(fa_context *ctx, int n,
                                 const fa_tensor *o_parts,
                                 const float *const *lse_parts, int batch,
                                 int seqlen, int heads, int head_dim,
                                 fa_tensor o, float *lse);

/* ---- plans: the tiling decision, made once per shape ------------------ */

/** Opaque plan: a validated problem, the chosen kernel and its tiling. */
typedef struct fa_plan fa_plan;

/**
 * Validate @p a for @p dtype, choose the kernel and compute the tiling once.
 * The plan keeps a copy of @p a (its array pointers must stay valid) and a
 * reference to @p ctx (which must outlive the plan).
 */
FA_API fa_status fa_plan_create(fa_context *ctx, const fa_attention *a,
                                fa_dtype dtype, fa_plan **plan);

/** Run the planned forward; bit-identical to fa_forward() on the same data. */
FA_API fa_status fa_plan_forward(fa_plan *p, fa_tensor q, fa_tensor k,
                                 fa_tensor v, fa_tensor o, float *lse);

/**
 * Describe the plan (backend, kernel, tiles, kv splits, work items, blocks
 * skipped) as text, snprintf-style. @return the full length needed.
 */
FA_API size_t fa_plan_describe(const fa_plan *p, char *buf, size_t len);

/** Free a plan. NULL is a no-op. */
FA_API void fa_plan_destroy(fa_plan *p);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_H */
