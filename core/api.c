// SPDX-License-Identifier: MIT
// Entry points: validate, dispatch, plan, run. The order is fixed: problem
// fields, then array contents, then tensors, then dispatch; nothing is
// written before every check has passed.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "registry.h"

#define INVALID FA_ERR_INVALID_ARGUMENT

#ifndef FA_VERSION_STRING
#define FA_VERSION_STRING "0.1.0"
#endif

const char *fa_version(void) { return FA_VERSION_STRING; }

void fa_attention_init(fa_attention *a) {
  if (!a) return;
  memset(a, 0, sizeof *a);
  a->window_left = -1;
  a->window_right = -1;
}

struct fa_plan {
  fa_context *ctx;
  int slot; // which of the context's backends runs it
  const fa_kernel *kernel;
  fa_problem prob;
  fa_plan_data data;
};

static const fa_backend *plan_backend(const struct fa_plan *p) {
  return fa_registry_at(p->ctx->idx[p->slot])->backend;
}

/* The problem's arrays as the checks see them. In host memory they are the
   caller's; in a GPU memory space the core copies cu_seqlens_q/k, seqused_k
   and block_table to the host through the backend (a synchronous copy on
   the context's stream), validates the copies and checks the tensors
   against them (varlen tensor extents need the total row count). The
   backend still receives the caller's problem, with device pointers. */
typedef struct checked_arrays {
  fa_problem prob; // the problem with host-readable arrays
  int32_t *mem;    // host copies (NULL in host memory); free() it
} checked_arrays;

/* After the arrays passed their checks: the varlen storage row counts. */
static fa_status checked_rows(fa_problem *p, fa_status s) {
  if (s) return s;
  const fa_attention *a = &p->a;
  p->rows_q = a->cu_seqlens_q ? a->cu_seqlens_q[a->batch] : 0;
  p->rows_k = a->cu_seqlens_k ? a->cu_seqlens_k[a->batch] : 0;
  return FA_OK;
}

static fa_status copy_array(const struct fa_plan *p, int32_t **at,
                            const int32_t **field, size_t n) {
  if (!*field || !n) return FA_OK;
  const fa_backend *b = plan_backend(p);
  fa_status s = b->copy_to_host(p->ctx->state[p->slot], *at, *field, n * 4);
  if (s) return s; // the backend recorded why
  *field = *at;
  *at += n;
  return FA_OK;
}

static fa_status check_arrays(const struct fa_plan *p, checked_arrays *c) {
  c->prob = p->prob;
  c->mem = NULL;
  if (plan_backend(p)->memory_space == FA_MEMORY_HOST)
    return checked_rows(&c->prob, fa_problem_check_arrays(&c->prob));
  fa_attention *a = &c->prob.a;
  size_t nb = (size_t)a->batch;
  size_t n_cuq = a->cu_seqlens_q ? nb + 1 : 0;
  size_t n_cuk = a->cu_seqlens_k ? nb + 1 : 0;
  size_t n_used = a->seqused_k ? nb : 0;
  size_t n_table = a->block_table ? nb * (size_t)a->max_blocks_per_seq : 0;
  size_t total = n_cuq + n_cuk + n_used + n_table;
  if (!total) return FA_OK;
  c->mem = malloc(total * sizeof(int32_t));
  if (!c->mem)
    return fa_fail(FA_ERR_OUT_OF_MEMORY,
                   "host copies of the problem's arrays (%zu bytes): out of "
                   "memory",
                   total * sizeof(int32_t));
  int32_t *at = c->mem;
  fa_status s;
  if ((s = copy_array(p, &at, &a->cu_seqlens_q, n_cuq)) ||
      (s = copy_array(p, &at, &a->cu_seqlens_k, n_cuk)) ||
      (s = copy_array(p, &at, &a->seqused_k, n_used)) ||
      (s = copy_array(p, &at, &a->block_table, n_table)))
    return s;
  return checked_rows(&c->prob, fa_problem_check_arrays(&c->prob));
}

/* The problem a kernel receives: the caller's (device pointers) with the
   storage row counts the checks read from the host copies. */
static fa_problem kernel_problem(const struct fa_plan *p,
                                 const checked_arrays *c) {
  fa_problem k = p->prob;
  k.rows_q = c->prob.rows_q;
  k.rows_k = c->prob.rows_k;
  return k;
}

static fa_status plan_build(fa_context *ctx, const fa_attention *a,
                            fa_dtype dtype, int need_backward,
                            struct fa_plan *p) {
  if (!ctx) return fa_fail(INVALID, "ctx is NULL");
  fa_status s = fa_problem_init(&p->prob, a, dtype);
  if (s) return s;
  p->ctx = ctx;
  s = fa_dispatch(ctx, &p->prob, need_backward, &p->slot, &p->kernel);
  if (s) return s;
  fa_caps caps = {0};
  plan_backend(p)->capabilities(ctx->state[p->slot], &caps);
  if (need_backward) caps.pack_gqa = 0; // backward tiles are one head each
  fa_plan_compute(&p->prob, &caps, &p->data);
  if (fa_log_dispatch()) {
    char d[256];
    fa_plan_data_describe(&p->data, d, sizeof d);
    fa_log("  plan: %s", d);
  }
  return FA_OK;
}

static fa_status plan_run_forward(struct fa_plan *p, fa_tensor q, fa_tensor k,
                                  fa_tensor v, fa_tensor o, float *lse) {
  checked_arrays c;
  fa_status s = check_arrays(p, &c);
  if (!s) s = fa_problem_check_forward(&c.prob, &q, &k, &v, &o, lse);
  free(c.mem);
  if (s) return s;
  fa_fwd_args args = {q, k, v, o, lse};
  fa_problem kp = kernel_problem(p, &c);
  return p->kernel->forward(p->ctx->state[p->slot], &kp, &p->data, &args);
}

fa_status fa_forward(fa_context *ctx, const fa_attention *a, fa_tensor q,
                     fa_tensor k, fa_tensor v, fa_tensor o, float *lse) {
  fa_clear_error();
  struct fa_plan p;
  fa_status s = plan_build(ctx, a, q.dtype, 0, &p);
  if (s) return s;
  return plan_run_forward(&p, q, k, v, o, lse);
}

fa_status fa_backward(fa_context *ctx, const fa_attention *a, fa_tensor q,
                      fa_tensor k, fa_tensor v, fa_tensor o, fa_tensor d_o,
                      const float *lse, fa_tensor dq, fa_tensor dk,
                      fa_tensor dv) {
  fa_clear_error();
  struct fa_plan p;
  fa_status s = plan_build(ctx, a, q.dtype, 1, &p);
  if (s) return s;
  checked_arrays c;
  s = check_arrays(&p, &c);
  if (!s)
    s = fa_problem_check_backward(&c.prob, &q, &k, &v, &o, &d_o, lse, &dq,
                                  &dk, &dv);
  free(c.mem);
  if (s) return s;
  fa_bwd_args args = {q, k, v, o, d_o, lse, dq, dk, dv};
  fa_problem kp = kernel_problem(&p, &c);
  return p.kernel->backward(ctx->state[p.slot], &kp, &p.data, &args);
}

fa_status fa_plan_create(fa_context *ctx, const fa_attention *a,
                         fa_dtype dtype, fa_plan **plan) {
  fa_clear_error();
  if (!plan) return fa_fail(INVALID, "plan (the output pointer) is NULL");
  struct fa_plan p;
  fa_status s = plan_build(ctx, a, dtype, 0, &p);
  if (s) return s;
  checked_arrays c;
  s = check_arrays(&p, &c);
  free(c.mem);
  if (s) return s;
  struct fa_plan *h = malloc(sizeof *h);
  if (!h) return fa_fail(FA_ERR_OUT_OF_MEMORY, "plan allocation failed");
  *h = p;
  *plan = h;
  return FA_OK;
}

fa_status fa_plan_forward(fa_plan *p, fa_tensor q, fa_tensor k, fa_tensor v,
                          fa_tensor o, float *lse) {
  fa_clear_error();
  if (!p) return fa_fail(INVALID, "plan is NULL");
  return plan_run_forward(p, q, k, v, o, lse);
}

size_t fa_plan_describe(const fa_plan *p, char *buf, size_t len) {
  char tiles[256];
  if (!p) return (size_t)snprintf(buf, len, "(null plan)");
  fa_plan_data_describe(&p->data, tiles, sizeof tiles);
  int n = snprintf(buf, len, "backend=%s kernel=%s %s", plan_backend(p)->name,
                   p->kernel->name, tiles);
  return n < 0 ? 0 : (size_t)n;
}

void fa_plan_destroy(fa_plan *p) { free(p); }

/* snprintf into a growing text that tolerates buf == NULL / small len. */
typedef struct text {
  char *buf;
  size_t len, used;
} text;

static void text_add(text *t, const char *fmt, ...) FA_PRINTF(2, 3);
static void text_add(text *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = t->used < t->len ? t->len - t->used : 0;
  int n = vsnprintf(room ? t->buf + t->used : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0) t->used += (size_t)n;
}

size_t fa_explain(const fa_attention *a, fa_dtype dtype, char *buf,
                  size_t len) {
  fa_clear_error();
  text t = {buf, buf ? len : 0, 0};
  if (t.len) buf[0] = '\0';
  fa_problem p;
  if (fa_problem_init(&p, a, dtype)) {
    text_add(&t, "invalid problem: %s\n", fa_last_error());
    fa_clear_error(); // explaining is not failing
    return t.used;
  }
  char desc[384];
  fa_problem_describe(&p, desc, sizeof desc);
  text_add(&t, "problem: %s\n", desc);

  int idx[FA_MAX_BACKENDS], n = 0, forced = 0;
  if (fa_select_backends(FA_BACKEND_AUTO, 0, idx, &n, &forced))
    text_add(&t, "auto: %s\n", fa_last_error());
  int taken = 0;
  for (int i = 0; i < fa_registry_size(); i++) {
    const fa_registry_entry *e = fa_registry_at(i);
    const fa_backend *b = e->backend;
    if (!e->usable) {
      text_add(&t, "%s: unavailable: %s\n", b->name, e->why);
      continue;
    }
    int in_auto = 0;
    for (int j = 0; j < n; j++) in_auto |= idx[j] == i;
    for (int k = 0; k < b->num_kernels; k++) {
      char why[192] = "";
      int ok = b->kernels[k].supports(&p, why, sizeof why);
      if (!ok) {
        text_add(&t, "%s %s: skipped: %s\n", b->name, b->kernels[k].name, why);
      } else if (!in_auto) {
        text_add(&t, "%s %s: supports it, but %s\n", b->name,
                 b->kernels[k].name,
                 forced ? "FLASHATTN_BACKEND forces another backend"
                        : "AUTO uses another memory space (create the context "
                          "by name to use it)");
      } else if (taken) {
        text_add(&t, "%s %s: supports it, but a better kernel is taken\n",
                 b->name, b->kernels[k].name);
      } else {
        fa_caps caps = {0};
        fa_plan_data d;
        char tiles[256];
        b->capabilities(NULL, &caps);
        fa_plan_compute(&p, &caps, &d);
        fa_plan_data_describe(&d, tiles, sizeof tiles);
        text_add(&t, "%s %s: taken (%s)\n", b->name, b->kernels[k].name,
                 tiles);
        taken = 1;
      }
    }
  }
  if (!taken) text_add(&t, "no backend here can run this problem\n");
  fa_clear_error();
  return t.used;
}
