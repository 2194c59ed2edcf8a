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
 *   host memory for the cpu backend, device memory for GPU backends (allocate
 * it with fa_malloc() to stay portable).
 * - Overlap: no output of a call may share a byte with any other party of
 *   it (an input or output tensor, lse, an index or position array, the
 *   slopes, sinks, dsinks or descales): FA_ERR_INVALID_ARGUMENT naming both.
 *   The test is on elements, not address ranges, so interleaved views are
 *   fine (q, k, v, o in one [B, S, 4, H, D] buffer; dq, dk, dv packed
 *   [B, S, 3, H, D]). Views whose strides do not nest may be refused
 *   conservatively; the message then says so. Inputs may overlap freely.
 * - Empty problems: batch 0 or seqlen_q 0 is a successful no-op (the
 *   backward still writes dk = dv = 0 when there are keys), and seqlen_k 0
 *   gives every row O = 0 and LSE = -inf (or its sink). A tensor view with
 *   no element may have a NULL data pointer.
 */
#ifndef FLASHATTN_H
#define FLASHATTN_H

#include <stddef.h>
#include <stdint.h>

#include "flashattn_version.h"

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

/* flashattn_version.h (generated) defines FA_VERSION_MAJOR, _MINOR, _PATCH,
   FA_VERSION_STRING and FA_VERSION_NUMBER (MAJOR * 10000 + MINOR * 100 +
   PATCH) for the headers a program compiles against. While the major is 0
   every minor version may break the API and the ABI: the shared library's
   SONAME carries the minor (libflashattn.so.0.2) and the CMake package and
   pkg-config file accept only the same minor. */

/** @return the run-time library version, "MAJOR.MINOR.PATCH". Static string. */
FA_API const char *fa_version(void);

/** @return the run-time FA_VERSION_NUMBER; compare it with the compile-time
 * one to detect a program running against another library build. */
FA_API int fa_version_number(void);

/** Status of every fallible call. Numbers are stable across versions. */
typedef enum fa_status {
  FA_OK = 0,                   /**< Success. */
  FA_ERR_INVALID_ARGUMENT = 1, /**< A field is out of range or inconsistent. */
  FA_ERR_UNSUPPORTED = 2,      /**< Valid, but no backend here can run it. */
  FA_ERR_NO_DEVICE = 3,     /**< The backend or device asked for is absent. */
  FA_ERR_OUT_OF_MEMORY = 4, /**< An allocation failed. */
  FA_ERR_BACKEND = 5        /**< A GPU runtime or library call failed. */
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
  FA_BF16 = 2, /**< bfloat16 (upper half of a binary32). */
  /** OCP FP8 E4M3 (inputs q, k, v only): 1 sign, 4 exponent (bias 7), 3
   * mantissa bits; subnormals down to 2^-9, largest finite 448; no
   * infinities, one NaN per sign (S.1111.111). */
  FA_E4M3 = 3,
  /** OCP FP8 E5M2 (inputs q, k, v only): 1 sign, 5 exponent (bias 15), 2
   * mantissa bits, the upper byte of an IEEE binary16: subnormals down to
   * 2^-16, largest finite 57344, infinities (S.11111.00) and NaNs
   * (S.11111.01/10/11). */
  FA_E5M2 = 4
} fa_dtype;

/**
 * A strided [batch, seq, heads, dim] view. The dim axis is contiguous; the
 * other strides are in elements (not bytes), so BSHD, BHSD and packed QKV
 * layouts all work without copies. Strides must be >= 0. Varlen batches use
 * stride_batch 0 and address rows through cu_seqlens; paged K/V use
 * stride_batch as the page stride and stride_seq as the slot stride.
 *
 * Dtypes: q, k and v share the *input* dtype; o, do, dq, dk and dv share
 * the *output* dtype. The two may differ (an f32 o from bf16 inputs) on the
 * kernels that say so (every CPU kernel, the GPU generic forward and the
 * GPU FP8 kernels; fa_explain tells). Accumulation is always fp32.
 *
 * FP8 (FA_E4M3, FA_E5M2) is an input dtype only: q, k and v may be FP8
 * (all three, the input dtype being shared), the output dtype is then f32,
 * f16 or bf16, and an FP8 o, do, dq, dk or dv is refused
 * (FA_ERR_INVALID_ARGUMENT naming the tensor: outputs are not FP8). LSE is
 * fp32 as always.
 *
 * Descales (inputs q, k, v only; outputs must leave descale NULL): each
 * element is decoded exactly (FP8 and 16-bit values are all exact in fp32)
 * and multiplied by its tensor's descale in fp32 before the attention, so
 * the scores are scale * (dq q).(dk k) (before softcap, ALiBi and masks)
 * and O is the softmax-weighted sum of (dv v): the descale of v applies to
 * the P.V product, never to the probabilities. A decoded value that
 * overflows fp32 after descaling becomes inf, one that underflows becomes
 * 0 or an fp32 subnormal; both then follow the non-finite rules of
 * ::fa_attention, as does a NaN code (the e4m3 pattern S.1111.111, the
 * e5m2 S.11111.xx with xx != 0), which reaches exactly the rows that see
 * it. A descale must be finite and > 0. Gradients (fa_backward) are with
 * respect to the decoded, descaled inputs (the gradient written to dq is
 * dL/d(descale_q * q), whatever q's dtype) and stored in the output dtype.
 */
typedef struct fa_tensor {
  void *data;           /**< First element; in the context's memory space. */
  fa_dtype dtype;       /**< Element type (see the dtype groups above). */
  int64_t stride_batch; /**< Elements between batches (or pages). */
  int64_t stride_seq;   /**< Elements between consecutive rows. */
  int64_t stride_head;  /**< Elements between heads. */
  /** float32 descale factors in the context's memory space, or NULL (1):
   * one value, or with descale_per_head one per (sequence, kv head) at
   * descale[b * heads_kv + h / (heads_q / heads_kv)] for q and
   * descale[b * heads_kv + h] for k and v (the FlashAttention-3 layout). */
  const float *descale;
  int descale_per_head; /**< 0: descale[0] for every element; 1: per head. */
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
 * Positions. Query row i of sequence b sits at position Pq = qpos(b) + i,
 * key row j at Pk = kpos(b) + j. By default (positions =
 * FA_POSITIONS_ALIGNED) qpos = sk - sq and kpos = 0, sq and sk being the
 * real lengths of the sequence (qpos = 0 with FA_CAUSAL_TOP_LEFT): the last
 * query faces the last key. With FA_POSITIONS_EXPLICIT the caller states
 * them: qpos(b) = q_position + q_positions[b] and kpos(b) = k_position +
 * k_positions[b] (a NULL array adds 0), so a shard of a longer sequence
 * (ring attention, chunked prefill) masks exactly as the whole would.
 * Positions only place rows for masks and ALiBi: they never address memory.
 *
 * Masking semantics (every backend agrees): query i sees key j iff
 * Pq - window_left <= Pk <= Pq + window_right (a -1 bound is unbounded;
 * causal sets window_right to 0). Scores are `s = scale * q.k`, then
 * `cap * tanh(s / cap)` if softcap > 0, then `s -= slope[h] * |Pq - Pk|`
 * with ALiBi, then the mask. A row with no visible key has O = 0 and
 * LSE = -inf (or the sink logit with sinks). A NaN or +inf sink makes every
 * row of its head NaN (O and LSE), rows with no key included, as a NaN
 * ALiBi slope does; a -inf sink weighs nothing (as no sink).
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
 * These non-finite rules hold on the CPU kernels (tests/stress). The GPU
 * tensor-core kernels (cuda.sm80.*, cuda.sm90.*, hip.cdna.*) multiply
 * whole tiles of P by V (backward: of P^T and dS^T by dO and Q, of dS by K):
 * a NaN or inf in a V row (backward: also a q, k or dO row) also reaches the
 * rows of the same tile that cannot see that key (query). Finite
 * inputs are unaffected, and K/V rows past a sequence's end (varlen,
 * seqused_k) never leak (they are masked and zeroed).
 */
typedef struct fa_attention {
  /** sizeof(fa_attention) as the caller compiled it; set by
   * fa_attention_init(). A problem from a program built against another
   * version's header is refused (FA_ERR_INVALID_ARGUMENT naming struct_size),
   * never misread. */
  size_t struct_size;
  int batch;        /**< Number of sequences (>= 0; 0 is a no-op). */
  int seqlen_q;     /**< Query length; the maximum one when varlen (>= 0). */
  int seqlen_k;     /**< Key length; the maximum one when varlen or paged
                         (>= 0; 0: every row sees no key). */
  int heads_q;      /**< Query heads (>= 1). */
  int heads_kv;     /**< Key/value heads; heads_q % heads_kv == 0 (GQA/MQA):
                         query head h reads kv head h / (heads_q / heads_kv). */
  int head_dim;     /**< Dimension of q and k (>= 1). */
  int head_dim_v;   /**< Dimension of v and o; 0 means head_dim. */
  float scale;      /**< Score scale; 0 means 1/sqrt(head_dim). */
  int causal;       /**< 0, FA_CAUSAL_BOTTOM_RIGHT or FA_CAUSAL_TOP_LEFT. */
  int window_left;  /**< Keys visible left of the diagonal; -1 unbounded. */
  int window_right; /**< Keys visible right of the diagonal; -1 unbounded. */
  float softcap;    /**< 0 off; else scores become cap*tanh(s/cap). */
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
  /**
   * Storage rows of varlen tensors: cu_seqlens_q[batch] rows of q, o, do,
   * dq and cu_seqlens_k[batch] rows of k, v, dk, dv. GPU contexts need them
   * with cu_seqlens (the library reads no device array on the hot path);
   * on CPU contexts 0 means "read cu_seqlens". When set they must equal the
   * arrays' last entries (checked where the arrays are host-visible).
   */
  int64_t rows_q, rows_k;

  /* ---- positions (see above) ---- */
  int positions;      /**< FA_POSITIONS_ALIGNED (0) or FA_POSITIONS_EXPLICIT. */
  int64_t q_position; /**< Explicit: position of query row 0. */
  int64_t k_position; /**< Explicit: position of key row 0. */
  const int64_t *q_positions; /**< Explicit: [batch] added per sequence. */
  const int64_t *k_positions; /**< Explicit: [batch] added per sequence. */

  /* ---- backward only (fa_forward ignores these) ---- */
  /**
   * FA_BACKWARD_OVERWRITE (0): fa_backward writes dq, dk, dv (and dsinks).
   * FA_BACKWARD_ACCUMULATE: it adds the gradients to what they hold: each
   * element becomes round(old + g), old read and g computed in fp32, one
   * rounding to the tensor's dtype (so a bf16 accumulator loses what bf16
   * loses at every step; accumulate in f32 tensors for exact sums).
   */
  int backward_mode;
  /**
   * [heads_q] fp32 output: the gradient of the loss with respect to sinks,
   * written by fa_backward when both sinks and dsinks are set (NULL: not
   * computed). dsinks[h] = -sum over rows of exp(sink[h] - lse) * (dO . O).
   */
  float *dsinks;
} fa_attention;

/** fa_attention.positions values. */
#define FA_POSITIONS_ALIGNED 0
#define FA_POSITIONS_EXPLICIT 1
/** |q_position|, |k_position| and the per-sequence entries stay below this. */
#define FA_POSITION_LIMIT ((int64_t)1 << 40)

/** fa_attention.backward_mode values. */
#define FA_BACKWARD_OVERWRITE 0
#define FA_BACKWARD_ACCUMULATE 1

/**
 * Set @p a to the defaults: struct_size = sizeof(fa_attention), every other
 * field 0 / NULL except window_left and window_right, which become -1
 * (unbounded). Does nothing if @p a is NULL.
 */
FA_API void fa_attention_init(fa_attention *a);

/* ---- where it runs ------------------------------------------------------ */

/** Which family of backends a context uses. */
typedef enum fa_backend_kind {
  FA_BACKEND_AUTO = 0, /**< The best backend available on this machine. */
  FA_BACKEND_CPU = 1,  /**< The CPU backend (every ISA the CPU has). */
  FA_BACKEND_CUDA = 2, /**< An NVIDIA GPU through the CUDA module. */
  FA_BACKEND_HIP = 3   /**< An AMD GPU through the HIP module. */
} fa_backend_kind;

/** Opaque execution context: a memory space, threads or a stream, scratch. */
typedef struct fa_context fa_context;

/**
 * Create a context of @p kind on @p device (GPU ordinal; 0 for CPU: another
 * device is FA_ERR_NO_DEVICE). With FA_BACKEND_AUTO, the switch
 * FA_BACKEND=name (see docs/configuration.md) binds every such context as
 * fa_context_create_by_name() binds that name (a backend, "cpu-<isa>" or a
 * kernel). Within the chosen memory space,
 * each problem runs on the best-ranked backend that supports it.
 * @return FA_OK, FA_ERR_NO_DEVICE (kind or device absent; see
 * fa_last_error()), FA_ERR_INVALID_ARGUMENT or FA_ERR_OUT_OF_MEMORY.
 * Destroy with fa_context_destroy().
 */
FA_API fa_status fa_context_create(fa_context **ctx, fa_backend_kind kind,
                                   int device);

/**
 * Create a context bound to exactly one backend, by its runtime's name
 * ("cpu", "cuda", "hip"; see fa_backend_name()), or to exactly one kernel,
 * by the kernel name that fa_explain() and fa_plan_describe() print,
 * <runtime>.<isa or arch>[.<dtype>][.d<N>] ("cpu.avx2.f32",
 * "cpu.amxbf16.bf16", "cuda.sm90.bf16.d128"), for triage and for testing
 * kernels a better one would shadow. "cpu-<isa>" (cpu-scalar, cpu-avx2,
 * cpu-avx512, cpu-neon) binds the cpu backend capped at that ISA: its
 * kernels of that ISA and below. A problem that backend (or kernel) cannot
 * run fails with FA_ERR_UNSUPPORTED and the kernel's reason: never a
 * fallback. A name that cannot run here (an ISA this CPU lacks) is
 * FA_ERR_NO_DEVICE saying why; an unknown one lists the names there are.
 * A GPU backend or kernel name may end in ":N" to pick device N
 * ("cuda.sm90.bf16.d128:1"); without it the context uses device 0.
 */
FA_API fa_status fa_context_create_by_name(fa_context **ctx, const char *name);

/** Free a context and its scratch memory. NULL is a no-op. */
FA_API void fa_context_destroy(fa_context *ctx);

/**
 * @return the name of the backend the context is bound to ("cpu", also for
 * a context bound to one of its kernels or capped by "cpu-<isa>"),
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

/**
 * Checked mode (on GPU contexts): every call copies the problem's index
 * arrays (cu_seqlens, seqused_k, block_table, positions) and descales to
 * the host and validates them before launching, synchronising the stream;
 * a bad entry fails with FA_ERR_INVALID_ARGUMENT naming it. Off by default:
 * unchecked GPU kernels still never read or write outside the tensors and
 * the page pool whatever the entries say (a block-table entry outside
 * [0, num_pages) reads as a page of zeros; lengths are clamped to seqlen_q,
 * seqlen_k and rows_q/rows_k), but their results are then unspecified.
 * The switch FA_CHECKED=1 turns it on for every context. CPU contexts always
 * validate (their arrays are host memory); @p on is accepted and ignored.
 */
FA_API fa_status fa_context_set_checked(fa_context *ctx, int on);

/** @return how many backends are compiled in and usable on this machine. */
FA_API int fa_backend_count(void);

/** @return the name of usable backend @p i (0 = best ranked), NULL if out of
 * range. Static string. */
FA_API const char *fa_backend_name(int i);

/**
 * Explain dispatch for problem @p a with inputs (and outputs) in @p dtype
 * (FP8 inputs: bf16 outputs):
 * one line per backend compiled in, saying whether it is available here,
 * which of its kernels would run and why each other was skipped, assuming
 * contiguous BSHD tensors on device 0 (a plan made with the real tensors is
 * the authority: fa_plan_describe()). The contents of the problem's arrays
 * are not read (they may be device memory). Writes at most @p len bytes,
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
 * heads_q, head_dim_v]. q, k, v share the input dtype; o has the output
 * dtype (see ::fa_tensor). o must not overlap itself, nor (with lse) any
 * other party of the call (see Overlap at the top).
 * @param lse [batch][heads_q][seqlen_q] fp32 natural-log log-sum-exp, or NULL.
 * Deterministic run to run. On a GPU context, asynchronous on its stream.
 * Equivalent to fa_plan_create() + fa_plan_forward() + fa_plan_destroy().
 */
FA_API fa_status fa_forward(fa_context *ctx, const fa_attention *a, fa_tensor q,
                            fa_tensor k, fa_tensor v, fa_tensor o, float *lse);

/**
 * Backward attention from the o and lse that fa_forward() produced.
 * Writes dq (shaped as q), dk (as k) and dv (as v), or adds to them with
 * a->backward_mode = FA_BACKWARD_ACCUMULATE; with GQA the gradients of the
 * query heads sharing a kv head are summed. d_o, dq, dk, dv have o's dtype.
 * With sinks and a->dsinks set, the sinks' gradient goes to a->dsinks.
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
 * element size and strides) and @p lse exactly one of lse_parts; any other
 * overlap of o or lse with a part or a part's lse is FA_ERR_INVALID_ARGUMENT
 * (interleaved parts, disjoint element by element, are fine). batch 0 or
 * seqlen 0 is a no-op.
 */
FA_API fa_status fa_merge_states(fa_context *ctx, int n,
                                 const fa_tensor *o_parts,
                                 const float *const *lse_parts, int batch,
                                 int seqlen, int heads, int head_dim,
                                 fa_tensor o, float *lse);

/* ---- plans: dispatch and tiling decided once, run many times --------- */

/** Opaque plan: a validated problem, the chosen kernel, its tiling, and the
 * tensor layout it was made for. */
typedef struct fa_plan fa_plan;

/**
 * Validate @p a, choose the kernel for the layout of @p q, @p k, @p v, @p o
 * (dtypes, strides and the alignment of data and strides: the data pointers
 * are looked at, never read or kept) and compute the tiling, once. The plan
 * keeps a copy of @p a (its array pointers must stay valid) and a reference
 * to @p ctx (which must outlive the plan).
 *
 * Later fa_plan_forward() calls run that kernel with no dispatch and, on GPU
 * contexts, no host work beyond the launch: no host-device copy, no
 * synchronisation. Their tensors must have the plan's dtypes and strides and
 * be at least as aligned; any other call fails with FA_ERR_INVALID_ARGUMENT
 * saying which tensor differs. Nothing ever falls back to another kernel.
 * Host-visible index arrays (CPU contexts) are validated here and on every
 * call; device-resident ones only in checked mode (fa_context_set_checked).
 */
FA_API fa_status fa_plan_create(fa_context *ctx, const fa_attention *a,
                                fa_tensor q, fa_tensor k, fa_tensor v,
                                fa_tensor o, fa_plan **plan);

/** Run the planned forward; bit-identical to fa_forward() on the same data. */
FA_API fa_status fa_plan_forward(fa_plan *p, fa_tensor q, fa_tensor k,
                                 fa_tensor v, fa_tensor o, float *lse);

/**
 * A backward plan: as fa_plan_create() for the layout of the backward's
 * tensors (the gradients' accumulators, the D = rowsum(dO * O) pre-pass and
 * the kernel chosen once).
 */
FA_API fa_status fa_plan_create_backward(fa_context *ctx, const fa_attention *a,
                                         fa_tensor q, fa_tensor k, fa_tensor v,
                                         fa_tensor o, fa_tensor d_o,
                                         fa_tensor dq, fa_tensor dk,
                                         fa_tensor dv, fa_plan **plan);

/** Run a backward plan; bit-identical to fa_backward() on the same data. */
FA_API fa_status fa_plan_backward(fa_plan *p, fa_tensor q, fa_tensor k,
                                  fa_tensor v, fa_tensor o, fa_tensor d_o,
                                  const float *lse, fa_tensor dq, fa_tensor dk,
                                  fa_tensor dv);

/**
 * Describe the plan (backend, kernel, operation, tiles, kv splits, work
 * items, blocks skipped, workspace) as text, snprintf-style. The kernel
 * named is the kernel every call of the plan runs. @return the full length.
 */
FA_API size_t fa_plan_describe(const fa_plan *p, char *buf, size_t len);

/** Free a plan. NULL is a no-op. */
FA_API void fa_plan_destroy(fa_plan *p);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_H */
