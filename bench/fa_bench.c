// SPDX-License-Identifier: MIT
// fa-bench: time flashattn on one problem shape and check it against the
// float64 oracle.
//
// It builds a plan once (fa_plan_create), prints which backend and kernel
// run it and the tiling, then times fa_plan_forward (and fa_backward with
// --bwd) over --iters runs after --warmup runs, each followed by
// fa_synchronize. FLOPs: forward 2*(d + dv) per visible (query, key) pair
// and head, i.e. 4*b*h*sq*sk*d without a mask; a causal mask with sq == sk
// counts half the matrix (FlashAttention's convention), any other mask its
// visible pairs exactly; backward counts 2.5x forward. Times are medians
// (and minima) of single calls, so TFLOPS come from the median.
//
// The check compares o and lse (and dq, dk, dv with --bwd) with the float64
// oracle of tests/support, under the error bounds tests/xval uses.
//
// --sweep repeats all that for every head dim x sequence length of
// --sweep-d and --sweep-s, one JSON object per line, for bench/plot.py.
//
// Exit status: 0 ok, 1 a check failed, 2 bad usage or a library error.
#include <flashattn.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracle.h" // tests/support: the float64 oracle
#include "tensor.h" // tests/support: dtypes, random numbers, error metrics

enum { EXIT_CHECK = 1, EXIT_USAGE = 2 };

/* Checking costs about b*h*sq*sk*d multiply-adds in double; above this the
   default is to skip it (--check forces it). */
#define AUTO_CHECK_LIMIT 2147483648.0

/* A progress line goes to stderr once a timed loop has run this long. */
#define PROGRESS_AFTER_S 2.0

/* --sweep: at most this many sequence lengths and head dims. */
#define SWEEP_MAX 32

typedef struct options {
  const char *backend; // "auto", a kind ("cpu", "cuda", "hip") or a name
  int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, head_dim_v;
  fa_dtype dtype; // inputs q, k, v
  int out;        // 1 + the outputs' dtype; 0: the inputs' (bf16 for FP8)
  int causal, window_left, window_right;
  float softcap;
  int decode, bwd, threads, iters, warmup;
  int check; // -1: when small enough, 0: never, 1: always
  int json;
  uint64_t seed;
  // --sweep: one run per (head dim, sequence length), JSON lines out.
  int sweep, n_sweep_s, n_sweep_d;
  int sweep_s[SWEEP_MAX], sweep_d[SWEEP_MAX];
} options;

static void usage(FILE *f) {
  fprintf(f, "usage: fa-bench [options]\n"
             "  --backend NAME   auto (default: the best one here), cpu, cuda, "
             "hip,\n"
             "                   a kernel (cpu.avx2.f32), cpu-<isa> (the cpu\n"
             "                   backend capped at that ISA: cpu-scalar)\n"
             "  -b N             batch (1)\n"
             "  -h N             query heads (8)\n"
             "  --hkv N          key/value heads (= query heads; fewer is "
             "GQA/MQA)\n"
             "  -s N             seqlen_q and seqlen_k (512)\n"
             "  --sq N, --sk N   seqlen_q, seqlen_k separately\n"
             "  -d N             head_dim (64)\n"
             "  --dv N           head_dim of v and o (= head_dim)\n"
             "  --dtype T        inputs: f32 (default), f16, bf16, e4m3 or "
             "e5m2\n"
             "  --out T          outputs: f32, f16 or bf16 (= --dtype; bf16 "
             "for FP8)\n"
             "  --causal         causal mask, aligned bottom-right\n"
             "  --window L,R     sliding window (-1 = unbounded side)\n"
             "  --softcap C      scores become C*tanh(s/C)\n"
             "  --decode         one query per sequence (seqlen_q = 1)\n"
             "  --bwd            time the backward pass too\n"
             "  --threads N      CPU threads (0 = OpenMP default)\n"
             "  --iters N        timed runs (10)\n"
             "  --warmup N       untimed runs first (2)\n"
             "  --check          always compare with the float64 oracle\n"
             "  --no-check       never compare (default: compare when "
             "b*h*sq*sk*d < 2^31)\n"
             "  --seed N         random inputs seed (1)\n"
             "  --json           print one JSON object instead of text\n"
             "  --sweep          run every --sweep-s length x --sweep-d head "
             "dim (with the\n"
             "                   other options), one JSON object per line "
             "(JSON Lines),\n"
             "                   progress on stderr; feeds bench/plot.py\n"
             "  --sweep-s LIST   sequence lengths (512,1024,2048,4096)\n"
             "  --sweep-d LIST   head dims (64,128)\n"
             "  --help           this text\n"
             "Exit status: 0 ok, 1 check failed, 2 usage or library error.\n");
}

#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static int
fail_usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fa-bench: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n(fa-bench --help lists the options)\n");
  va_end(ap);
  return EXIT_USAGE;
}

static int parse_int(const char *s, long lo, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > INT_MAX) return -1;
  *out = (int)v;
  return 0;
}

/* "512,1024,...": up to SWEEP_MAX integers >= 1. Returns 0 or -1. */
static int parse_list(const char *s, int *out, int *n) {
  *n = 0;
  for (;;) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || v < 1 || v > INT_MAX || *n == SWEEP_MAX) return -1;
    out[(*n)++] = (int)v;
    if (*end == '\0') return 0;
    if (*end != ',') return -1;
    s = end + 1;
  }
}

static int same_text_nocase(const char *a, const char *b) {
  for (; *a && *b; a++, b++) {
    int x = *a >= 'A' && *a <= 'Z' ? *a - 'A' + 'a' : *a;
    int y = *b >= 'A' && *b <= 'Z' ? *b - 'A' + 'a' : *b;
    if (x != y) return 0;
  }
  return *a == *b;
}

/* Parse argv into *o. Returns 0, or an exit status (help: -1). */
static int parse_args(int argc, char **argv, options *o) {
  int s = 512, sq = -1, sk = -1;
  *o = (options){.backend = "auto",
                 .batch = 1,
                 .heads_q = 8,
                 .heads_kv = 0,
                 .head_dim = 64,
                 .dtype = FA_F32,
                 .window_left = -1,
                 .window_right = -1,
                 .threads = -1,
                 .iters = 10,
                 .warmup = 2,
                 .check = -1,
                 .seed = 1,
                 .n_sweep_s = 4,
                 .n_sweep_d = 2,
                 .sweep_s = {512, 1024, 2048, 4096},
                 .sweep_d = {64, 128}};
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *val = NULL;
    char name[32];
    // "--opt=value" or "--opt value"; flags take no value.
    const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
    size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
    if (n >= sizeof name) return fail_usage("unknown option %s", arg);
    memcpy(name, arg, n);
    name[n] = '\0';
    static const char *const flags[] = {"--causal", "--decode",   "--bwd",
                                        "--check",  "--no-check", "--json",
                                        "--help",   "--sweep"};
    int is_flag = 0;
    for (size_t f = 0; f < sizeof flags / sizeof *flags; f++)
      is_flag |= strcmp(name, flags[f]) == 0;
    if (is_flag) {
      if (eq) return fail_usage("%s takes no value", name);
    } else if (eq) {
      val = eq + 1;
    } else if (i + 1 < argc) {
      val = argv[++i];
    } else {
      return fail_usage("%s needs a value", name);
    }

    int *int_field = NULL;
    long lo = 1;
    if (!strcmp(name, "--help")) {
      usage(stdout);
      return -1;
    } else if (!strcmp(name, "--causal")) {
      o->causal = FA_CAUSAL_BOTTOM_RIGHT;
    } else if (!strcmp(name, "--decode")) {
      o->decode = 1;
    } else if (!strcmp(name, "--bwd")) {
      o->bwd = 1;
    } else if (!strcmp(name, "--check")) {
      o->check = 1;
    } else if (!strcmp(name, "--no-check")) {
      o->check = 0;
    } else if (!strcmp(name, "--json")) {
      o->json = 1;
    } else if (!strcmp(name, "--sweep")) {
      o->sweep = 1;
    } else if (!strcmp(name, "--sweep-s")) {
      if (parse_list(val, o->sweep_s, &o->n_sweep_s))
        return fail_usage("--sweep-s %s: expected up to %d integers >= 1, "
                          "comma-separated",
                          val, SWEEP_MAX);
    } else if (!strcmp(name, "--sweep-d")) {
      if (parse_list(val, o->sweep_d, &o->n_sweep_d))
        return fail_usage("--sweep-d %s: expected up to %d integers >= 1, "
                          "comma-separated",
                          val, SWEEP_MAX);
    } else if (!strcmp(name, "--backend")) {
      o->backend = val;
    } else if (!strcmp(name, "-b")) {
      int_field = &o->batch;
    } else if (!strcmp(name, "-h")) {
      int_field = &o->heads_q;
    } else if (!strcmp(name, "--hkv")) {
      int_field = &o->heads_kv;
    } else if (!strcmp(name, "-s")) {
      int_field = &s;
    } else if (!strcmp(name, "--sq")) {
      int_field = &sq;
    } else if (!strcmp(name, "--sk")) {
      int_field = &sk;
    } else if (!strcmp(name, "-d")) {
      int_field = &o->head_dim;
    } else if (!strcmp(name, "--dv")) {
      int_field = &o->head_dim_v;
    } else if (!strcmp(name, "--threads")) {
      int_field = &o->threads, lo = 0;
    } else if (!strcmp(name, "--iters")) {
      int_field = &o->iters;
    } else if (!strcmp(name, "--warmup")) {
      int_field = &o->warmup, lo = 0;
    } else if (!strcmp(name, "--dtype") || !strcmp(name, "--out")) {
      const int out = !strcmp(name, "--out");
      fa_dtype t;
      if (same_text_nocase(val, "f32") || same_text_nocase(val, "fp32"))
        t = FA_F32;
      else if (same_text_nocase(val, "f16") || same_text_nocase(val, "fp16"))
        t = FA_F16;
      else if (same_text_nocase(val, "bf16"))
        t = FA_BF16;
      else if (!out && same_text_nocase(val, "e4m3"))
        t = FA_E4M3;
      else if (!out && same_text_nocase(val, "e5m2"))
        t = FA_E5M2;
      else
        return fail_usage("%s %s: expected f32, f16 or bf16%s", name, val,
                          out ? "" : " (or e4m3, e5m2)");
      if (out)
        o->out = 1 + (int)t;
      else
        o->dtype = t;
    } else if (!strcmp(name, "--window")) {
      int l, r, used = 0;
      if (sscanf(val, "%d,%d%n", &l, &r, &used) != 2 || val[used] || l < -1 ||
          r < -1)
        return fail_usage("--window %s: expected L,R with each >= -1", val);
      o->window_left = l;
      o->window_right = r;
    } else if (!strcmp(name, "--softcap")) {
      char *end;
      o->softcap = strtof(val, &end);
      if (end == val || *end || !(o->softcap >= 0.0f))
        return fail_usage("--softcap %s: expected a number >= 0", val);
    } else if (!strcmp(name, "--seed")) {
      char *end;
      errno = 0;
      o->seed = strtoull(val, &end, 10);
      if (errno || end == val || *end)
        return fail_usage("--seed %s: expected an unsigned integer", val);
    } else {
      return fail_usage("unknown option %s", name);
    }
    if (int_field && parse_int(val, lo, int_field))
      return fail_usage("%s %s: expected an integer >= %ld", name, val, lo);
  }
  o->seqlen_q = o->decode ? 1 : sq > 0 ? sq : s;
  o->seqlen_k = sk > 0 ? sk : s;
  if (o->heads_kv == 0) o->heads_kv = o->heads_q;
  if (o->head_dim_v == 0) o->head_dim_v = o->head_dim;
  return 0;
}

/* ---- time ---------------------------------------------------------- */

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

typedef struct timing {
  double median_s, min_s;
} timing;

typedef fa_status (*step_fn)(void *arg);

/* Run step warmup + iters times, timing the last iters. A run that lasts
   longer than PROGRESS_AFTER_S reports its progress on stderr. */
static fa_status time_steps(const char *what, step_fn step, void *arg,
                            int warmup, int iters, timing *out) {
  double *t = malloc((size_t)iters * sizeof *t);
  if (!t) return FA_ERR_OUT_OF_MEMORY;
  int total = warmup + iters;
  double start = ts_now(), last_report = start;
  for (int i = 0; i < total; i++) {
    double t0 = ts_now();
    fa_status s = step(arg);
    double t1 = ts_now();
    if (s != FA_OK) {
      free(t);
      return s;
    }
    if (i >= warmup) t[i - warmup] = t1 - t0;
    if (t1 - start > PROGRESS_AFTER_S &&
        (t1 - last_report > PROGRESS_AFTER_S || i + 1 == total)) {
      fprintf(stderr, "fa-bench: %s: %d/%d iterations done (%.1f s)\n", what,
              i + 1, total, t1 - start);
      last_report = t1;
    }
  }
  qsort(t, (size_t)iters, sizeof *t, cmp_double);
  out->min_s = t[0];
  out->median_s =
      iters % 2 ? t[iters / 2] : 0.5 * (t[iters / 2 - 1] + t[iters / 2]);
  free(t);
  return FA_OK;
}

/* ---- buffers --------------------------------------------------------- */

/* The outputs' dtype (o, do and the gradients): --out, else the inputs';
   FP8 inputs default to bf16 outputs (outputs are never FP8). */
static fa_dtype out_dtype(const options *o) {
  if (o->out) return (fa_dtype)(o->out - 1);
  return o->dtype == FA_E4M3 || o->dtype == FA_E5M2 ? FA_BF16 : o->dtype;
}

/* One tensor: a host copy (what the oracle reads) and the context's copy
   (what the library reads and writes), dense [batch][seq][heads][dim]. */
typedef struct buffer {
  void *host, *dev;
  size_t bytes;
  int64_t elems;
  fa_tensor t; // over dev
} buffer;

static fa_status buffer_make(fa_context *ctx, buffer *b, fa_dtype dtype,
                             int batch, int seq, int heads, int dim,
                             ts_rng *rng) {
  memset(b, 0, sizeof *b);
  b->elems = (int64_t)batch * seq * heads * dim;
  b->bytes = (size_t)b->elems * ts_dtype_size(dtype);
  b->host = malloc(b->bytes);
  if (!b->host) return FA_ERR_OUT_OF_MEMORY;
  for (int64_t i = 0; i < b->elems; i++) {
    // Uniform in [-1, 1); zeros when no rng (outputs).
    double x = rng ? 2.0 * ts_rng_uniform(rng) - 1.0 : 0.0;
    ts_store(b->host, dtype, i, x);
  }
  fa_status s = fa_malloc(ctx, b->bytes, &b->dev);
  if (s == FA_OK) s = fa_copy_to_device(ctx, b->dev, b->host, b->bytes);
  b->t = (fa_tensor){b->dev, dtype, (int64_t)seq * heads * dim,
                     (int64_t)heads * dim, dim};
  return s;
}

static void buffer_free(fa_context *ctx, buffer *b) {
  free(b->host);
  fa_free(ctx, b->dev);
}

/* The same tensor over the host copy, for the oracle. */
static fa_tensor buffer_host(const buffer *b) {
  fa_tensor t = b->t;
  t.data = b->host;
  return t;
}

static fa_status buffer_fetch(fa_context *ctx, buffer *b) {
  return fa_copy_to_host(ctx, b->host, b->dev, b->bytes);
}

/* ---- errors against the oracle ----------------------------------------- */

/* Error bounds, the ones tests/xval holds every kernel to (its comments give
   the reasons). naive: the error of a plain attention computed in the same
   precision (the FlashAttention rule for fp16/bf16). */
static double bound_forward(fa_dtype t, double naive) {
  return t == FA_F32 ? 1e-5 : 2.0 * naive + 2.0 * ts_unit_roundoff(t);
}

static double bound_lse(fa_dtype t, double naive) {
  return t == FA_F32 ? 1e-5 : 2.0 * naive + 1e-5;
}

static double bound_backward(fa_dtype t, double naive) {
  return t == FA_F32 ? 1e-4 : 2.0 * naive + 4.0 * ts_unit_roundoff(t);
}

/* Error of n library values of type t against the oracle's: relative
   Frobenius (the LSE metric for lse), +inf when NaN/Inf positions differ. */
static double error_vs_oracle(const double *ref, const void *got, fa_dtype t,
                              size_t n, int lse) {
  double *g = malloc(n * sizeof *g);
  if (!g) return NAN; // fails the check rather than passing it
  for (size_t i = 0; i < n; i++) g[i] = ts_load(got, t, (int64_t)i);
  size_t first;
  double e = ts_nonfinite_parity(ref, g, n, &first) ? INFINITY
             : lse                                  ? ts_lse_err(ref, g, n)
                                                    : ts_rel_err(ref, g, n);
  free(g);
  return e;
}

/* ---- the run ---------------------------------------------------------- */

typedef struct run {
  options opt;
  fa_attention a;
  fa_context *ctx;
  fa_plan *plan;
  buffer q, k, v, o, d_o, dq, dk, dv;
  float *lse_dev, *lse_host;
  int64_t lse_elems;
} run;

static fa_status step_forward(void *arg) {
  run *r = arg;
  fa_status s =
      fa_plan_forward(r->plan, r->q.t, r->k.t, r->v.t, r->o.t, r->lse_dev);
  return s == FA_OK ? fa_synchronize(r->ctx) : s;
}

static fa_status step_backward(void *arg) {
  run *r = arg;
  fa_status s = fa_backward(r->ctx, &r->a, r->q.t, r->k.t, r->v.t, r->o.t,
                            r->d_o.t, r->lse_dev, r->dq.t, r->dk.t, r->dv.t);
  return s == FA_OK ? fa_synchronize(r->ctx) : s;
}

/* Forward FLOPs, by the convention in the file comment. */
static double forward_flops(const run *r) {
  const fa_attention *a = &r->a;
  double pairs;
  if (a->causal && a->window_left < 0 && a->seqlen_q == a->seqlen_k) {
    pairs = 0.5 * a->seqlen_q * (double)a->seqlen_k;
  } else {
    pairs = 0.0; // every sequence has the same lengths: count one
    for (int i = 0; i < a->seqlen_q; i++)
      pairs += fa_oracle_visible_count(a, 0, i);
  }
  return 2.0 * (a->head_dim + r->opt.head_dim_v) * pairs * a->batch *
         a->heads_q;
}

static int lib_error(const char *what, fa_status s) {
  fprintf(stderr, "fa-bench: %s: %s: %s\n", what, fa_status_string(s),
          fa_last_error());
  return EXIT_USAGE;
}

/* Text between "key=" and the next space in s, into out. */
static void describe_field(const char *s, const char *key, char *out,
                           size_t len) {
  const char *p = strstr(s, key);
  size_t n = 0;
  if (p) {
    p += strlen(key);
    while (p[n] && p[n] != ' ') n++;
  }
  if (n >= len) n = len - 1;
  memcpy(out, p ? p : "", n);
  out[n] = '\0';
}

static void json_string(const char *s) {
  putchar('"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c < 0x20)
      printf("\\u%04x", c);
    else
      putchar(c);
  }
  putchar('"');
}

/* JSON has no inf or nan: those become null. */
static void json_number(double x) {
  if (isfinite(x))
    printf("%.6g", x);
  else
    printf("null");
}

/* The check against the oracle: per output, its error and its bound. */
enum { OUT_O, OUT_LSE, OUT_DQ, OUT_DK, OUT_DV, NUM_OUTPUTS };
static const char *const output_names[NUM_OUTPUTS] = {"o", "lse", "dq", "dk",
                                                      "dv"};

typedef struct check {
  int done, pass;
  int count; // outputs checked: 2 forward, 5 with --bwd
  double err[NUM_OUTPUTS], bound[NUM_OUTPUTS];
} check;

static fa_status compute_check(run *r, check *c) {
  const fa_attention *a = &r->a;
  // The rule of the output precision: FP8 inputs decode exactly.
  fa_dtype t = out_dtype(&r->opt);
  int low = t != FA_F32, bwd = r->opt.bwd;
  buffer *buf[NUM_OUTPUTS] = {&r->o, NULL, &r->dq, &r->dk, &r->dv};
  double *ref[NUM_OUTPUTS] = {NULL};
  float *naive[NUM_OUTPUTS] = {NULL};
  size_t n[NUM_OUTPUTS];
  fa_status s = FA_OK;
  c->count = bwd ? NUM_OUTPUTS : OUT_DQ;
  for (int i = 0; i < c->count; i++) {
    n[i] = (size_t)(buf[i] ? buf[i]->elems : r->lse_elems);
    ref[i] = malloc(n[i] * sizeof **ref);
    if (low) naive[i] = malloc(n[i] * sizeof **naive);
    if (!ref[i] || (low && !naive[i])) s = FA_ERR_OUT_OF_MEMORY;
  }
  fa_tensor q = buffer_host(&r->q), k = buffer_host(&r->k),
            v = buffer_host(&r->v), d_o = buffer_host(&r->d_o);
  if (s == FA_OK && (fa_oracle_forward(a, q, k, v, ref[OUT_O], ref[OUT_LSE]) ||
                     (bwd && fa_oracle_backward(a, q, k, v, d_o, ref[OUT_DQ],
                                                ref[OUT_DK], ref[OUT_DV])) ||
                     (low && fa_naive_forward_out(a, q, k, v, t, naive[OUT_O],
                                                  naive[OUT_LSE])) ||
                     (low && bwd &&
                      fa_naive_backward(a, q, k, v, d_o, naive[OUT_DQ],
                                        naive[OUT_DK], naive[OUT_DV]))))
    s = FA_ERR_INVALID_ARGUMENT; // the oracle said why on stderr
  if (s == FA_OK)
    s = fa_copy_to_host(r->ctx, r->lse_host, r->lse_dev,
                        (size_t)r->lse_elems * sizeof(float));
  for (int i = 0; i < c->count && s == FA_OK; i++)
    if (buf[i]) s = buffer_fetch(r->ctx, buf[i]);

  c->pass = 1;
  for (int i = 0; i < c->count && s == FA_OK; i++) {
    int is_lse = i == OUT_LSE;
    const void *got = is_lse ? (const void *)r->lse_host : buf[i]->host;
    double naive_err = 0.0;
    if (low)
      naive_err = is_lse ? ts_lse_err_f(ref[i], naive[i], n[i])
                         : ts_rel_err_f(ref[i], naive[i], n[i]);
    c->err[i] = error_vs_oracle(ref[i], got, is_lse ? FA_F32 : t, n[i], is_lse);
    c->bound[i] = i == OUT_O     ? bound_forward(t, naive_err)
                  : i == OUT_LSE ? bound_lse(t, naive_err)
                                 : bound_backward(t, naive_err);
    c->pass &= c->err[i] <= c->bound[i];
  }
  c->done = s == FA_OK;
  for (int i = 0; i < NUM_OUTPUTS; i++) {
    free(ref[i]);
    free(naive[i]);
  }
  return s;
}

static void print_text(const run *r, const char *backend, const char *kernel,
                       const char *plan, double flops, const timing *fwd,
                       const timing *bwd, const check *c,
                       const char *check_note) {
  const options *o = &r->opt;
  printf("flashattn %s\n", fa_version());
  printf("backend   %s\nkernel    %s\nplan      %s\n", backend, kernel, plan);
  printf("problem   b=%d hq=%d hkv=%d sq=%d sk=%d d=%d dv=%d %s", o->batch,
         o->heads_q, o->heads_kv, o->seqlen_q, o->seqlen_k, o->head_dim,
         o->head_dim_v, ts_dtype_name(o->dtype));
  if (out_dtype(o) != o->dtype) printf("->%s", ts_dtype_name(out_dtype(o)));
  if (o->causal) printf(" causal");
  if (o->window_left >= 0 || o->window_right >= 0)
    printf(" window=%d,%d", o->window_left, o->window_right);
  if (o->softcap > 0.0f) printf(" softcap=%g", o->softcap);
  if (o->threads >= 0) printf(" threads=%d", o->threads);
  printf("\n");
  printf("forward   median %.3f ms  min %.3f ms  %.4g TFLOPS  (%.4g GFLOP, "
         "%d iters, %d warmup)\n",
         1e3 * fwd->median_s, 1e3 * fwd->min_s, flops / fwd->median_s * 1e-12,
         flops * 1e-9, o->iters, o->warmup);
  if (bwd)
    printf("backward  median %.3f ms  min %.3f ms  %.4g TFLOPS  (%.4g GFLOP "
           "= 2.5x forward)\n",
           1e3 * bwd->median_s, 1e3 * bwd->min_s,
           2.5 * flops / bwd->median_s * 1e-12, 2.5 * flops * 1e-9);
  if (!c->done) {
    printf("check     skipped: %s\n", check_note);
    return;
  }
  printf("check     error vs float64 oracle (bound):");
  for (int i = 0; i < c->count; i++)
    printf(" %s %.3g (%.3g)", output_names[i], c->err[i], c->bound[i]);
  printf(": %s\n", c->pass ? "PASS" : "FAIL");
}

static void print_json(const run *r, const char *backend, const char *kernel,
                       const char *plan, double flops, const timing *fwd,
                       const timing *bwd, const check *c,
                       const char *check_note) {
  const options *o = &r->opt;
  printf("{\"version\": ");
  json_string(fa_version());
  printf(", \"backend\": ");
  json_string(backend);
  printf(", \"kernel\": ");
  json_string(kernel);
  printf(", \"plan\": ");
  json_string(plan);
  printf(", \"batch\": %d, \"heads_q\": %d, \"heads_kv\": %d, "
         "\"seqlen_q\": %d, \"seqlen_k\": %d, \"head_dim\": %d, "
         "\"head_dim_v\": %d, \"dtype\": \"%s\", \"out\": \"%s\", "
         "\"causal\": %s, "
         "\"window\": [%d, %d], \"softcap\": %g, \"threads\": %d, "
         "\"iters\": %d, \"warmup\": %d",
         o->batch, o->heads_q, o->heads_kv, o->seqlen_q, o->seqlen_k,
         o->head_dim, o->head_dim_v, ts_dtype_name(o->dtype),
         ts_dtype_name(out_dtype(o)), o->causal ? "true" : "false",
         o->window_left, o->window_right, (double)o->softcap, o->threads,
         o->iters, o->warmup);
  printf(", \"fwd_flops\": %.6g, \"fwd_ms_median\": %.6g, "
         "\"fwd_ms_min\": %.6g, \"fwd_tflops\": %.6g",
         flops, 1e3 * fwd->median_s, 1e3 * fwd->min_s,
         flops / fwd->median_s * 1e-12);
  if (bwd)
    printf(", \"bwd_flops\": %.6g, \"bwd_ms_median\": %.6g, "
           "\"bwd_ms_min\": %.6g, \"bwd_tflops\": %.6g",
           2.5 * flops, 1e3 * bwd->median_s, 1e3 * bwd->min_s,
           2.5 * flops / bwd->median_s * 1e-12);
  if (!c->done) {
    printf(", \"check\": null, \"check_note\": ");
    json_string(check_note);
  } else {
    printf(", \"check\": {");
    for (int i = 0; i < c->count; i++) {
      printf("\"%s\": {\"err\": ", output_names[i]);
      json_number(c->err[i]);
      printf(", \"bound\": ");
      json_number(c->bound[i]);
      printf("}, ");
    }
    printf("\"pass\": %s}", c->pass ? "true" : "false");
  }
  printf("}\n");
}

static fa_status open_context(const char *backend, fa_context **ctx) {
  static const struct {
    const char *name;
    fa_backend_kind kind;
  } kinds[] = {{"auto", FA_BACKEND_AUTO},
               {"cpu", FA_BACKEND_CPU},
               {"cuda", FA_BACKEND_CUDA},
               {"hip", FA_BACKEND_HIP}};
  for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
    if (same_text_nocase(backend, kinds[i].name))
      return fa_context_create(ctx, kinds[i].kind, 0);
  return fa_context_create_by_name(ctx, backend);
}

static int bench(run *r) {
  options *o = &r->opt;
  fa_status s = open_context(o->backend, &r->ctx);
  if (s != FA_OK) {
    lib_error("opening the backend", s);
    fprintf(stderr, "backends usable here:");
    for (int i = 0; i < fa_backend_count(); i++)
      fprintf(stderr, " %s", fa_backend_name(i));
    fprintf(stderr, "\n");
    return EXIT_USAGE;
  }
  if (o->threads >= 0 &&
      (s = fa_context_set_threads(r->ctx, o->threads)) != FA_OK)
    return lib_error("--threads", s);

  fa_attention *a = &r->a;
  fa_attention_init(a);
  a->batch = o->batch;
  a->seqlen_q = o->seqlen_q;
  a->seqlen_k = o->seqlen_k;
  a->heads_q = o->heads_q;
  a->heads_kv = o->heads_kv;
  a->head_dim = o->head_dim;
  a->head_dim_v = o->head_dim_v;
  a->causal = o->causal;
  a->window_left = o->window_left;
  a->window_right = o->window_right;
  a->softcap = o->softcap;

  ts_rng rng;
  ts_rng_seed(&rng, o->seed);
  r->lse_elems = (int64_t)o->batch * o->heads_q * o->seqlen_q;
  size_t lse_bytes = (size_t)r->lse_elems * sizeof(float);
  r->lse_host = malloc(lse_bytes);
  void *lse_dev = NULL;
  s = r->lse_host ? fa_malloc(r->ctx, lse_bytes, &lse_dev)
                  : FA_ERR_OUT_OF_MEMORY;
  r->lse_dev = lse_dev;
  // Inputs are random (in this order, for --seed), outputs zero.
  const struct {
    buffer *b;
    int seq, heads, dim, random;
  } tensors[] = {
      {&r->q, o->seqlen_q, o->heads_q, o->head_dim, 1},
      {&r->k, o->seqlen_k, o->heads_kv, o->head_dim, 1},
      {&r->v, o->seqlen_k, o->heads_kv, o->head_dim_v, 1},
      {&r->o, o->seqlen_q, o->heads_q, o->head_dim_v, 0},
      // backward only:
      {&r->d_o, o->seqlen_q, o->heads_q, o->head_dim_v, 1},
      {&r->dq, o->seqlen_q, o->heads_q, o->head_dim, 0},
      {&r->dk, o->seqlen_k, o->heads_kv, o->head_dim, 0},
      {&r->dv, o->seqlen_k, o->heads_kv, o->head_dim_v, 0},
  };
  int count = o->bwd ? 8 : 4;
  for (int i = 0; i < count && s == FA_OK; i++)
    s = buffer_make(r->ctx, tensors[i].b, i < 3 ? o->dtype : out_dtype(o),
                    o->batch, tensors[i].seq, tensors[i].heads, tensors[i].dim,
                    tensors[i].random ? &rng : NULL);
  if (s) return lib_error("allocating the tensors", s);
  // The plan is made for these tensors' layout (dispatch decides once).
  if ((s = fa_plan_create(r->ctx, a, r->q.t, r->k.t, r->v.t, r->o.t,
                          &r->plan)) != FA_OK) {
    lib_error("planning", s);
    size_t n = fa_explain(a, o->dtype, NULL, 0);
    char *why = malloc(n + 1);
    if (why) {
      fa_explain(a, o->dtype, why, n + 1);
      fprintf(stderr, "fa_explain:\n%s", why);
      free(why);
    }
    return EXIT_USAGE;
  }
  size_t plan_len = fa_plan_describe(r->plan, NULL, 0);
  char *plan = malloc(plan_len + 1);
  if (!plan) return lib_error("describing the plan", FA_ERR_OUT_OF_MEMORY);
  fa_plan_describe(r->plan, plan, plan_len + 1);
  char backend[64], kernel[64];
  describe_field(plan, "backend=", backend, sizeof backend);
  describe_field(plan, "kernel=", kernel, sizeof kernel);
  if (!backend[0])
    snprintf(backend, sizeof backend, "%s", fa_context_backend(r->ctx));

  double flops = forward_flops(r);
  timing fwd, bwd;
  if ((s = time_steps("forward", step_forward, r, o->warmup, o->iters, &fwd))) {
    free(plan);
    return lib_error("forward", s);
  }
  // The last forward left o and lse in place: backward reads them.
  if (o->bwd && (s = time_steps("backward", step_backward, r, o->warmup,
                                o->iters, &bwd))) {
    free(plan);
    return lib_error("backward", s);
  }

  check c = {0};
  const char *check_note = "--no-check";
  double work =
      (double)o->batch * o->heads_q * o->seqlen_q * o->seqlen_k * o->head_dim;
  if (o->check == 1 || (o->check < 0 && work < AUTO_CHECK_LIMIT)) {
    if (work >= 1e9)
      fprintf(stderr, "fa-bench: checking against the float64 oracle...\n");
    if ((s = compute_check(r, &c))) {
      free(plan);
      return lib_error("checking", s);
    }
  } else if (o->check < 0) {
    check_note = "b*h*sq*sk*d >= 2^31 makes the float64 oracle slow (--check "
                 "forces it)";
  }

  if (o->json)
    print_json(r, backend, kernel, plan, flops, &fwd, o->bwd ? &bwd : NULL, &c,
               check_note);
  else
    print_text(r, backend, kernel, plan, flops, &fwd, o->bwd ? &bwd : NULL, &c,
               check_note);
  free(plan);
  return c.done && !c.pass ? EXIT_CHECK : 0;
}

/* One benchmark run with options @p o, everything it allocated freed. */
static int bench_once(const options *o) {
  run r;
  memset(&r, 0, sizeof r);
  r.opt = *o;
  int status = bench(&r);
  buffer *all[] = {&r.q, &r.k, &r.v, &r.o, &r.d_o, &r.dq, &r.dk, &r.dv};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    buffer_free(r.ctx, all[i]);
  free(r.lse_host);
  fa_free(r.ctx, r.lse_dev);
  fa_plan_destroy(r.plan);
  fa_context_destroy(r.ctx);
  return status;
}

/* --sweep: every head dim x sequence length, one JSON line each (a failed
   run prints its error on stderr and the sweep goes on). Exit status: the
   worst of the runs' (a library error, 2, over a failed check, 1). */
static int sweep(const options *base) {
  int worst = 0, total = base->n_sweep_s * base->n_sweep_d, done = 0;
  for (int i = 0; i < base->n_sweep_d; i++) {
    for (int j = 0; j < base->n_sweep_s; j++) {
      options o = *base;
      o.json = 1;
      o.head_dim = o.head_dim_v = base->sweep_d[i];
      o.seqlen_k = base->sweep_s[j];
      o.seqlen_q = base->decode ? 1 : base->sweep_s[j];
      fprintf(stderr, "fa-bench: sweep %d/%d: d=%d s=%d\n", ++done, total,
              o.head_dim, o.seqlen_k);
      int status = bench_once(&o);
      fflush(stdout);
      if (status > worst) worst = status;
    }
  }
  return worst;
}

int main(int argc, char **argv) {
  options o;
  int status = parse_args(argc, argv, &o);
  if (status) return status < 0 ? 0 : status;
  return o.sweep ? sweep(&o) : bench_once(&o);
}
