// SPDX-License-Identifier: MIT
// libFuzzer harness for the public API. Bytes decode into an fa_attention,
// tensor layouts, dtypes and a few deliberate defects (valid and invalid
// alike, sizes kept small); every buffer is allocated to exactly the extent
// the problem claims, between guard bands (poisoned for ASan too), and the
// harness calls fa_explain, fa_forward, fa_plan_create/fa_plan_forward,
// fa_backward and fa_merge_states on the usable CPU backends it selects.
//
// Properties (any violation aborts, so libFuzzer keeps the input):
//   - every call returns a valid status; CPU calls never report
//     FA_ERR_NO_DEVICE or FA_ERR_BACKEND;
//   - a failing call leaves every byte of every buffer as it was, and
//     fa_last_error() is non-empty and names a field;
//   - a succeeding call leaves fa_last_error() empty, inputs and guard bands
//     untouched, writes nothing outside its output views, writes every
//     element of them, and matches the float64 oracle within fz_tol.h's
//     per-element bounds (NaN exactly where the oracle has NaN);
//   - fa_plan_forward agrees with fa_forward: same status, same bits;
//   - a problem whose tensors provably overflow 64-bit offsets is refused;
//   - fa_explain is snprintf-like: right length, always NUL-terminated,
//     never writes past len.
//
// Input format: see fz_decode(). Every byte string is a valid input
// (missing bytes read as 0). Build: clang -fsanitize=fuzzer,address,
// undefined (tests/fuzz/CMakeLists.txt), or for long runs the throughput
// build, FZ_THROUGHPUT (README.md); fuzz_replay.c runs the corpus without
// libFuzzer.
//
// The parts: see fz_harness.h.
#include "fz_harness.h"
#include "ts_kernels.h"

int verbose;
// FZ_CASE: print each input's decoded case before its calls (run_fuzz.sh
// replays a failing input this way: a hang is named before it hangs).
static int show_case;

/* ---- backends ---------------------------------------------------------------
 */

static fa_context *ctxs[FZ_MAX_BACKENDS];
static const char *ctx_names[FZ_MAX_BACKENDS];
static int n_ctx;

static void add_context(const char *name) {
  for (int i = 0; i < n_ctx; i++)
    if (!strcmp(ctx_names[i], name)) return;
  if (n_ctx >= FZ_MAX_BACKENDS) return;
  if (fa_context_create_by_name(&ctxs[n_ctx], name) != FA_OK) {
    fprintf(stderr, "fuzz_api: %s listed but unusable: %s\n", name,
            fa_last_error());
    abort();
  }
  ctx_names[n_ctx] = strdup(name);
  n_ctx++;
}

/* Contexts: every usable CPU backend (dispatch picks its kernel), then every
   kernel of the cpu backend, when it has several, bound by name (a better
   kernel may shadow it for some problems). Kernel names come from
   fa_explain's lines (ts_kernels.h), for each 16- and 32-bit dtype. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  // OpenMP workers must not spin between calls on a 2-core machine.
  setenv("KMP_BLOCKTIME", "0", 0);
  setenv("OMP_WAIT_POLICY", "passive", 0);
  verbose = getenv("FZ_VERBOSE") != NULL;
  show_case = getenv("FZ_CASE") != NULL;
  int nb = fa_backend_count();
  for (int i = 0; i < nb; i++)
    if (!strncmp(fa_backend_name(i), "cpu", 3)) add_context(fa_backend_name(i));
  int n_backends = n_ctx;
  char kernels[32][64];
  int nk = 0;
  for (int t = 0; t < 3; t++) {
    char these[16][64];
    const int n = ts_kernels_accepting("cpu", (fa_dtype)t, these, 16);
    for (int i = 0; i < n && nk < 32; i++) {
      int dup = 0;
      for (int k = 0; k < nk; k++) dup |= !strcmp(kernels[k], these[i]);
      if (!dup) memcpy(kernels[nk++], these[i], 64);
    }
  }
  for (int k = 0; nk > 1 && k < nk; k++) add_context(kernels[k]);
  if (n_ctx == 0) {
    fprintf(stderr, "fuzz_api: no usable CPU backend\n");
    abort();
  }
  if (verbose || getenv("FZ_LIST")) {
    fprintf(stderr, "fuzz_api: %d backends, %d kernels:", n_backends,
            n_ctx - n_backends);
    for (int i = 0; i < n_ctx; i++) fprintf(stderr, " %s", ctx_names[i]);
    fprintf(stderr, "\n");
  }
  return 0;
}

/* ---- the case
 * ------------------------------------------------------------------------ */

/* n_run: how many contexts the input runs on. */
static void setup_buffers(fz_case *c, int n_run) {
  for (int i = 0; i < NT; i++) {
    tensor_extents(c, i, c->ext[i]);
    int64_t cl =
        dtype_valid(c->t[i].dtype) ? view_claim(c->ext[i], &c->t[i]) : 1;
    c->claim[i] = cl;
    c->over[i] = cl < 0;
    c->big[i] = cl > FZ_CAP_ELEMS;
  }
  // Each tensor gets its own buffer of exactly its claim, at an
  // element-aligned offset past a 64-byte boundary.
  for (int i = 0; i < NT; i++) {
    int64_t cl = c->claim[i];
    if (cl < 0 || cl > FZ_CAP_ELEMS) cl = 1;
    size_t es = dtype_valid(c->t[i].dtype) ? dsize(c->t[i].dtype) : 4;
    buf_make(&c->tb[i], (size_t)cl * es, ((c->seed >> (i * 2)) & 3) * es);
    c->t[i].data = c->tb[i].data;
  }
  for (int i = 0; i < NT; i++) {
    int j = c->alias_of[i];
    if (j == -2)
      c->t[i].data = NULL;
    else if (j >= 0 && j != i && c->tb[j].bytes >= c->tb[i].bytes &&
             !c->big[i] && !c->over[i])
      c->t[i].data = c->tb[j].data; // fits: the library may use all of it
    else
      c->alias_of[i] = -1;
  }
  size_t lb = lse_bytes(c);
  if (lb == 0 || lb / 4 > FZ_CAP_ELEMS) {
    lb = 4;
    c->lse_big = 1;
  }
  // The work of a run bounded too, per input: a valid-looking problem of
  // 600 x 600 x 600 is skipped like one too large to hold. Units of about
  // 40 ns of this instrumented build (a 2-vCPU Zen 3, clang-14 ASan and
  // coverage: 2e7 take about a second), per context that runs:
  //   - each query-key pair's products, (d + dv) multiply-adds;
  //   - each (batch, head, q tile, k tile) at least a 16 x 16 x 16 tile
  //     product and its bookkeeping, whatever the sizes (2e4);
  //   - each row of q and of k at least its offsets, loads and checks
  //     (100: 600 batches of 600 queries and no keys took 1.5 s a context);
  //   - each element the checker compares or scans (1).
  // The contexts an input runs share one budget. With one budget per
  // context, an input selecting every context ran a full budget on each
  // (and twice: libFuzzer repeats a new input to look for leaks): 5-9 s
  // here with 3 contexts, and past libFuzzer's 30 s timeout in a CI run
  // (dd63700) on a machine with more kernels: a slow input, not a hang.
  const fa_attention *a = &c->a;
  const double dd =
      (double)a->head_dim + (a->head_dim_v ? a->head_dim_v : a->head_dim);
  const double bh = (double)a->batch * a->heads_q;
  const double kt = a->seqlen_k > 16 ? ceil(a->seqlen_k / 16.0) : 1.0;
  const double tiles = bh * ceil(a->seqlen_q / 16.0) * kt;
  double elems = 0.0;
  for (int i = 0; i < NT; i++)
    if (c->claim[i] > 0 && !c->big[i]) elems += (double)c->claim[i];
  const double rows =
      bh * a->seqlen_q + (double)a->batch * a->heads_kv * a->seqlen_k;
  const double work =
      bh * a->seqlen_q * a->seqlen_k * dd + 2e4 * tiles + 100.0 * rows + elems;
  if (!(work * n_run <= FZ_CAP_WORK)) c->lse_big = 1;
  buf_make(&c->lse, lb, 0);
  // (lse is a float *: it may alias another buffer only where a float may
  // start.)
  if (c->lse_alias >= 0 && c->tb[c->lse_alias].bytes >= lb &&
      (uintptr_t)c->tb[c->lse_alias].data % sizeof(float) == 0) {
    buf_free(&c->lse); // lse inside another tensor's buffer
    c->lse.data = c->tb[c->lse_alias].data;
  } else {
    c->lse_alias = -1;
  }
}

/* Whether a call over tensors ids may run: 0 no (a claim too large to
   hold), 1 yes, 2 yes and it must be refused (a claim overflows). */
static int call_mode(const fz_case *c, const int *ids, int n) {
  if (!c->arrays_ok) return 0;
  int over = 0, big = c->lse_big;
  for (int x = 0; x < n; x++) {
    over |= c->over[ids[x]];
    big |= c->big[ids[x]];
  }
  return over ? 2 : big ? 0 : 1;
}

static void free_case(fz_case *c) {
  for (int i = 0; i < NT; i++) {
    buf_free(&c->tb[i]);
    free(c->marks[i]);
    c->marks[i] = NULL;
  }
  for (int i = 0; i < 2 * FZ_MAX_PARTS; i++) {
    free(c->m_data[i]);
    c->m_data[i] = NULL;
  }
  for (int i = 0; i < NA; i++) {
    buf_free(&c->abuf[i]);
    free(c->arr[i]);
  }
  buf_free(&c->lse);
}

/* fa_explain: snprintf semantics in a guarded buffer of a fuzzed size. */
static void run_explain(fz_case *c, fz_in *in) {
  size_t len = u8(in) * 8;
  size_t need = fa_explain(&c->a, c->dtype, NULL, 0);
  if (fa_last_error()[0]) die("fa_explain left fa_last_error() set");
  fz_buf b;
  buf_make(&b, len ? len : 1, 0);
  memset(b.data, 0x77, b.bytes);
  size_t got = fa_explain(&c->a, c->dtype, (char *)b.data, len);
  if (got != need) die("fa_explain returned %zu, then %zu", need, got);
  if (!guards_ok(&b)) die("fa_explain wrote outside its buffer");
  if (len) {
    size_t sl = strnlen((char *)b.data, len);
    if (sl == len) die("fa_explain left the text unterminated (len %zu)", len);
    if (sl != (need < len ? need : len - 1))
      die("fa_explain wrote %zu characters, needs %zu, len %zu", sl, need, len);
  } else if (b.data[0] != 0x77) {
    die("fa_explain wrote with len 0");
  }
  if (need == 0) die("fa_explain returned an empty text");
  buf_free(&b);
}

/* The problem's scalar fields and arrays by the rules of flashattn.h,
   restated independently of core/: 1 if valid. Only a valid problem's
   arrays are followed to place data (and the library must refuse any
   other). */
static int problem_sane(const fz_case *c) {
  const fa_attention *a = &c->a;
  if (!c->arrays_ok) return 0;
  // (0 batches, queries or keys: an empty problem, valid)
  if (a->batch < 0 || a->seqlen_q < 0 || a->seqlen_k < 0 || a->heads_q < 1 ||
      a->heads_kv < 1 || a->heads_q % a->heads_kv || a->head_dim < 1 ||
      a->head_dim_v < 0)
    return 0;
  const int32_t *cq = a->cu_seqlens_q, *ck = a->cu_seqlens_k;
  if (!cq && !ck && !a->seqused_k && !a->block_table) return 1;
  for (int b = 0; b < a->batch; b++) {
    if (cq && (cq[0] < 0 || (int64_t)cq[b + 1] - cq[b] < 0 ||
               (int64_t)cq[b + 1] - cq[b] > a->seqlen_q))
      return 0;
    if (ck && (ck[0] < 0 || (int64_t)ck[b + 1] - ck[b] < 0 ||
               (int64_t)ck[b + 1] - ck[b] > a->seqlen_k))
      return 0;
  }
  if (a->block_table) {
    if (a->page_size < 1 || a->max_blocks_per_seq < 1 || a->num_pages < 1 ||
        (int64_t)a->max_blocks_per_seq * a->page_size < a->seqlen_k || ck)
      return 0;
  }
  for (int b = 0; b < a->batch; b++) {
    int store = ck ? ck[b + 1] - ck[b] : a->seqlen_k;
    int len = store;
    if (a->seqused_k) {
      if (a->seqused_k[b] < 0 || a->seqused_k[b] > store) return 0;
      len = a->seqused_k[b];
    }
    if (a->block_table)
      for (int64_t i = 0; i < ((int64_t)len + a->page_size - 1) / a->page_size;
           i++) {
        int32_t pg = a->block_table[(int64_t)b * a->max_blocks_per_seq + i];
        if (pg < 0 || pg >= a->num_pages) return 0;
      }
  }
  return 1;
}

static const int all_ids[NT] = {T_Q, T_K, T_V, T_O, T_DO, T_DQ, T_DK, T_DV};
static const int fwd_ids[4] = {T_Q, T_K, T_V, T_O};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!n_ctx) LLVMFuzzerInitialize(NULL, NULL);
  fz_in in = {data, size, 0};
#ifdef FZ_GUARD_PAGES
  uint32_t sb = 0; // the case's seed bytes (see fz_decode), mixed
  for (size_t i = 3; i < 7 && i < size; i++)
    sb |= (uint32_t)data[i] << 8 * (i - 3);
  side_bits = (sb ^ 0x9e3779b9u) * 0x85ebca6bu;
  side_bits ^= side_bits >> 13;
#endif
  static fz_case c;
  fz_decode(&c, &in);
  // One context per input (cheap), every context when the selector is 7.
  int first = 0, last = n_ctx - 1;
  if (c.backend_sel != 7) first = last = (int)c.backend_sel % n_ctx;
  setup_buffers(&c, last - first + 1);
  if (c.ops & 0x10) run_explain(&c, &in);
  const int fwd_mode = call_mode(&c, fwd_ids, 4);
  const int bwd_mode = call_mode(&c, all_ids, NT);
  const int sane = problem_sane(&c);
  if (show_case) {
    fz_run shown = {&c, NULL, first == last ? ctx_names[first] : "every"};
    report_case(&shown, sane ? "case (valid)" : "case (invalid)");
    fprintf(stderr, "  ops 0x%x lse_big %d\n", c.ops, c.lse_big);
  }
  if (sane && !c.lse_big) { // (bounded work only: see setup_buffers)
    ts_rng r;
    ts_rng_seed(&r, c.seed);
    const int ins[4] = {T_Q, T_K, T_V, T_DO};
    for (int x = 0; x < 4; x++) {
      int i = ins[x];
      if (c.t[i].data == c.tb[i].data && dtype_valid(c.t[i].dtype) &&
          c.claim[i] > 0 && !c.big[i])
        fill_input(&c, i, &r);
    }
  }
  dense fwd, bwd_ref;
  memset(&fwd, 0, sizeof fwd);
  memset(&bwd_ref, 0, sizeof bwd_ref);
  for (int bi = first; bi <= last; bi++) {
    fz_run run = {&c, ctxs[bi], ctx_names[bi]};
    if (fa_context_set_threads(run.ctx, (int)c.threads) != FA_OK)
      die("fa_context_set_threads(%u) failed", c.threads);
    if (!fwd_mode) {
      // Too large to allocate: only what reads no tensor.
      if ((c.ops & 0x08) && c.arrays_ok) {
        fa_plan *p = NULL;
        fa_status s = fa_plan_create(run.ctx, &c.a, c.t[T_Q], c.t[T_K],
                                     c.t[T_V], c.t[T_O], &p);
        check_status(s, "fa_plan_create", run.backend);
        fa_plan_destroy(p);
      }
      if (c.ops & 0x04) run_merge(&run, &in);
      continue;
    }
    if (!(c.ops & 0x0f)) continue;
    saved sv;
    memset(&sv, 0, sizeof sv);
    poison_outputs(&c, fwd_outs, 1, 1);
    sv.ob = buf_of(&c, T_O);
    sv.lb = lse_ptr(&c) ? lse_buf(&c) : NULL;
    save_buf(sv.ob, &sv.o_pre);
    save_buf(sv.lb, &sv.l_pre);
    c.must_fail = fwd_mode == 2;
    fa_status fs = call_forward(&run);
    char fmsg[512];
    snprintf(fmsg, sizeof fmsg, "%s", fa_last_error());
    save_buf(sv.ob, &sv.o_post);
    save_buf(sv.lb, &sv.l_post);
    int checked = 0;
    if (fs == FA_OK && !sane) {
      report_case(&run, "fa_forward");
      die("fa_forward accepted a problem whose fields or arrays break the "
          "rules of flashattn.h");
    }
    if (fs == FA_OK) {
      if (!fwd.o) oracle_forward(&c, &fwd); // once per input
      check_forward(&run, &fwd);
      checked = 1;
    }
    if (c.ops & 0x08) run_plan(&run, fs, fmsg, &sv);
    if (sv.ob) memcpy(sv.ob->data, sv.o_post, sv.ob->bytes);
    if (sv.lb) memcpy(sv.lb->data, sv.l_post, sv.lb->bytes);
    c.must_fail = bwd_mode == 2;
    if ((c.ops & 0x02) && bwd_mode) run_backward(&run, &fwd, &bwd_ref, checked);
    if (c.ops & 0x04) run_merge(&run, &in);
    saved_free(&sv);
    // With aliasing, a forward may write o or lse into a buffer the
    // backward reads (do): the gradients' oracle is then per context.
    int aliased = c.lse_alias >= 0;
    for (int i = 0; i < NT; i++) aliased |= c.alias_of[i] >= 0;
    if (aliased) dense_free(&bwd_ref);
  }
  dense_free(&fwd);
  dense_free(&bwd_ref);
  free_case(&c);
  return 0;
}
