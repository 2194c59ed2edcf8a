// SPDX-License-Identifier: MIT
// Entry points: validate, dispatch, plan, run. A plan is made once: the
// problem's fields, the host-visible index arrays, the tensors' layout,
// then dispatch and the kernel's own plan. Each run checks that its tensors
// match that layout, validates what is host-visible (or everything, in
// checked mode), and calls the planned kernel; nothing is written before
// every check has passed, and nothing falls back.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "dtype.h"
#include "error.h"
#include "registry.h"

#define INVALID FA_ERR_INVALID_ARGUMENT

const char *fa_version(void) { return FA_VERSION_STRING; }
int fa_version_number(void) { return FA_VERSION_NUMBER; }

void fa_attention_init(fa_attention *a) {
  if (!a) return;
  memset(a, 0, sizeof *a);
  a->struct_size = sizeof *a;
  a->window_left = -1;
  a->window_right = -1;
}

struct fa_plan {
  fa_context *ctx;
  int slot; // which of the context's backends runs it
  const fa_kernel *kernel;
  fa_problem prob;
  fa_layout layout;
  fa_plan_data data;
};

static const fa_backend *slot_backend(const fa_context *ctx, int slot) {
  return fa_registry_at(ctx->idx[slot])->backend;
}

static const fa_backend *plan_backend(const struct fa_plan *p) {
  return slot_backend(p->ctx, p->slot);
}

static int host_memory(const fa_context *ctx) {
  return slot_backend(ctx, 0)->memory_space == FA_MEMORY_HOST;
}

/* ---- layouts --------------------------------------------------------- */

/* The largest power of two (<= FA_LAYOUT_MAX_ALIGN) dividing x. */
static int pow2_dividing(uint64_t x) {
  int a = 1;
  while (a < FA_LAYOUT_MAX_ALIGN && x % (uint64_t)(2 * a) == 0) a *= 2;
  return a;
}

/* The alignment class of one tensor: its address and its strides in bytes.
   An unset tensor (data NULL) does not constrain it. */
static int tensor_align(const fa_tensor *t) {
  if (!t->data) return FA_LAYOUT_MAX_ALIGN;
  const uint64_t es = fa_dtype_size(t->dtype) ? fa_dtype_size(t->dtype) : 1;
  uint64_t bits = (uint64_t)(uintptr_t)t->data;
  const int64_t st[3] = {t->stride_batch, t->stride_seq, t->stride_head};
  for (int i = 0; i < 3; i++)
    if (st[i] > 0) bits |= (uint64_t)st[i] * es;
  return bits ? pow2_dividing(bits) : FA_LAYOUT_MAX_ALIGN;
}

static void layout_finish(fa_layout *l) {
  const fa_tensor *ts[8] = {&l->q,   &l->k,  &l->v,  &l->o,
                            &l->d_o, &l->dq, &l->dk, &l->dv};
  int a = FA_LAYOUT_MAX_ALIGN;
  for (int i = 0; i < 8; i++) {
    int x = tensor_align(ts[i]);
    if (x < a) a = x;
  }
  l->align = a;
}

/* A call's tensor against the planned one: same dtype and strides, at
   least as aligned, and a descale exactly where the plan had one. */
static fa_status layout_match(const char *name, const fa_tensor *call,
                              const fa_tensor *plan, int align) {
  if (call->dtype != plan->dtype)
    return fa_fail(INVALID, "%s.dtype=%s, but the plan was made for %s", name,
                   fa_dtype_name(call->dtype), fa_dtype_name(plan->dtype));
  static const char *axis[3] = {"stride_batch", "stride_seq", "stride_head"};
  const int64_t cs[3] = {call->stride_batch, call->stride_seq,
                         call->stride_head};
  const int64_t ps[3] = {plan->stride_batch, plan->stride_seq,
                         plan->stride_head};
  for (int i = 0; i < 3; i++)
    if (cs[i] != ps[i])
      return fa_fail(INVALID,
                     "%s.%s=%lld differs from the plan's %lld (a plan runs "
                     "the layout it was made for: make one for this layout)",
                     name, axis[i], (long long)cs[i], (long long)ps[i]);
  if (!call->descale != !plan->descale ||
      call->descale_per_head != plan->descale_per_head)
    return fa_fail(
        INVALID, "%s.descale (%s) differs from the plan's (%s)", name,
        call->descale ? call->descale_per_head ? "per head" : "one value"
                      : "none",
        plan->descale ? plan->descale_per_head ? "per head" : "one value"
                      : "none");
  if (call->data && tensor_align(call) < align)
    return fa_fail(INVALID,
                   "%s.data=%p is aligned to %d bytes, less than the %d the "
                   "plan's kernel was chosen for",
                   name, call->data, tensor_align(call), align);
  return FA_OK;
}

static fa_status layout_matches(const struct fa_plan *p, const fa_layout *c) {
  // (do, as the problem checks call it)
  static const char *names[8] = {"q", "k", "v", "o", "do", "dq", "dk", "dv"};
  const fa_tensor *call[8] = {&c->q,   &c->k,  &c->v,  &c->o,
                              &c->d_o, &c->dq, &c->dk, &c->dv};
  const fa_layout *l = &p->layout;
  const fa_tensor *plan[8] = {&l->q,   &l->k,  &l->v,  &l->o,
                              &l->d_o, &l->dq, &l->dk, &l->dv};
  const int n = l->op == FA_OP_BACKWARD ? 8 : 4;
  for (int i = 0; i < n; i++) {
    fa_status s = layout_match(names[i], call[i], plan[i], l->align);
    if (s) return s;
  }
  return FA_OK;
}

/* ---- what is checked, and where ----------------------------------------
   In host memory the problem's arrays and the descales are the caller's and
   are validated on every call (cheap next to the attention). In a GPU
   memory space they are validated only in checked mode, on host copies
   made through the backend (a synchronous copy on the context's stream);
   otherwise the kernels' own bounds (clamping, see the header) keep every
   access inside the tensors. */

typedef struct host_view {
  fa_problem prob;   // the problem with host-readable arrays
  fa_tensor q, k, v; // the inputs with host-readable descales
  void *mem;         // host copies (NULL in host memory); free() it
} host_view;

static int checking(const fa_context *ctx) {
  return host_memory(ctx) || ctx->checked || fa_config_int("FA_CHECKED");
}

/* Copy n elements of size es at *field into the host buffer at *at and
   point *field there. */
static fa_status copy_field(const struct fa_plan *p, char **at,
                            const void **field, size_t n, size_t es) {
  if (!*field || !n) return FA_OK;
  const fa_backend *b = plan_backend(p);
  fa_status s = b->copy_to_host(p->ctx->state[p->slot], *at, *field, n * es);
  if (s) return s; // the backend recorded why
  *field = *at;
  *at += (n * es + 7) / 8 * 8;
  return FA_OK;
}

static fa_status host_copies(const struct fa_plan *p, host_view *h) {
  fa_attention *a = &h->prob.a;
  const size_t nb = (size_t)a->batch;
  const fa_tensor *in[3] = {&h->q, &h->k, &h->v};
  struct {
    const void **field;
    size_t n, es;
  } f[9] = {
      {(const void **)&a->cu_seqlens_q, a->cu_seqlens_q ? nb + 1 : 0, 4},
      {(const void **)&a->cu_seqlens_k, a->cu_seqlens_k ? nb + 1 : 0, 4},
      {(const void **)&a->seqused_k, a->seqused_k ? nb : 0, 4},
      {(const void **)&a->block_table,
       a->block_table ? nb * (size_t)a->max_blocks_per_seq : 0, 4},
      {(const void **)&a->q_positions, a->q_positions ? nb : 0, 8},
      {(const void **)&a->k_positions, a->k_positions ? nb : 0, 8},
  };
  for (int i = 0; i < 3; i++) {
    fa_tensor *t = (fa_tensor *)in[i];
    f[6 + i].field = (const void **)&t->descale;
    f[6 + i].n = !t->descale           ? 0
                 : t->descale_per_head ? nb * (size_t)a->heads_kv
                                       : 1;
    f[6 + i].es = 4;
  }
  size_t total = 0;
  for (int i = 0; i < 9; i++) total += (f[i].n * f[i].es + 7) / 8 * 8;
  if (!total) return FA_OK;
  h->mem = malloc(total);
  if (!h->mem)
    return fa_fail(FA_ERR_OUT_OF_MEMORY,
                   "host copies of the problem's arrays (%zu bytes): out of "
                   "memory",
                   total);
  char *at = h->mem;
  for (int i = 0; i < 9; i++) {
    fa_status s = copy_field(p, &at, f[i].field, f[i].n, f[i].es);
    if (s) return s;
  }
  return FA_OK;
}

/* Validate what can be validated here: the arrays and descales (host
   memory, or copies in checked mode), then the storage rows of varlen
   tensors. Fills p->prob.rows_q/rows_k for the tensor checks. */
static fa_status check_problem_data(struct fa_plan *p, const fa_tensor *q,
                                    const fa_tensor *k, const fa_tensor *v) {
  fa_problem *pr = &p->prob;
  const fa_attention *a = &pr->a;
  // The flags decide how many descales there are: valid before any read.
  fa_status fs;
  if ((fs = fa_tensor_check_descale_flags("q", q)) ||
      (fs = fa_tensor_check_descale_flags("k", k)) ||
      (fs = fa_tensor_check_descale_flags("v", v)))
    return fs;
  if (!checking(p->ctx)) {
    if ((pr->varlen_q && a->rows_q < 1) || (pr->varlen_k && a->rows_k < 1))
      return fa_fail(INVALID,
                     "%s=0 with cu_seqlens on a GPU context: set rows_q / "
                     "rows_k to the storage rows (cu_seqlens[batch]); the "
                     "library does not read device arrays on the hot path",
                     pr->varlen_q && a->rows_q < 1 ? "rows_q" : "rows_k");
    pr->rows_q = a->rows_q;
    pr->rows_k = a->rows_k;
    return FA_OK;
  }
  host_view h = {*pr, *q, *k, *v, NULL};
  fa_status s = host_memory(p->ctx) ? FA_OK : host_copies(p, &h);
  if (!s) s = fa_problem_check_arrays(&h.prob);
  if (!s) s = fa_problem_check_descales(&h.prob, &h.q, &h.k, &h.v);
  if (!s) {
    pr->rows_q = pr->varlen_q ? h.prob.a.cu_seqlens_q[a->batch] : 0;
    pr->rows_k = pr->varlen_k ? h.prob.a.cu_seqlens_k[a->batch] : 0;
  }
  free(h.mem);
  return s;
}

static fa_status check_tensors(struct fa_plan *p, const fa_layout *l,
                               const float *lse) {
  if (l->op == FA_OP_BACKWARD)
    return fa_problem_check_backward(&p->prob, &l->q, &l->k, &l->v, &l->o,
                                     &l->d_o, lse, &l->dq, &l->dk, &l->dv);
  return fa_problem_check_forward(&p->prob, &l->q, &l->k, &l->v, &l->o, lse);
}

/* ---- plans -------------------------------------------------------------- */

/* The kernel this thread's last plan run called (fa_last_kernel_run). */
static _Thread_local const fa_kernel *last_kernel_run;

const fa_kernel *fa_last_kernel_run(void) { return last_kernel_run; }

static fa_status plan_build(fa_context *ctx, const fa_attention *a,
                            const fa_layout *layout, struct fa_plan *p) {
  last_kernel_run = NULL; // (every entry point builds or runs a plan)
  if (!ctx) return fa_fail(INVALID, "ctx is NULL");
  fa_status s = fa_problem_init(&p->prob, a, layout->q.dtype);
  if (s) return s;
  p->ctx = ctx;
  p->slot = 0;
  p->layout = *layout;
  p->prob.dtype_out = layout->o.dtype;
  p->prob.descaled =
      layout->q.descale || layout->k.descale || layout->v.descale;
  // Tensors first (with the array checks they need), so that a kernel's
  // admission sees only valid layouts. The plan's LSE is not known yet:
  // each run checks it.
  if ((s = check_problem_data(p, &layout->q, &layout->k, &layout->v)) ||
      (s = check_tensors(p, layout, NULL)))
    return s;
  if ((s = fa_dispatch(ctx, &p->prob, &p->layout, &p->slot, &p->kernel)))
    return s;
  const fa_kernel_query q = {&p->prob, &p->layout, ctx->state[p->slot]};
  if ((s = p->kernel->plan(&q, &p->data))) return s;
  if (fa_log_dispatch()) {
    char d[384];
    fa_plan_data_describe(&p->data, d, sizeof d);
    fa_log("  plan: %s %s: %s", plan_backend(p)->name, p->kernel->name, d);
  }
  return FA_OK;
}

/* An empty problem writes no tensor; an overwriting backward still owes
   dsinks its value, 0 (a copy through the backend: device memory too). */
static fa_status empty_backward_sinks(const struct fa_plan *p) {
  const fa_attention *a = &p->prob.a;
  if (p->layout.op != FA_OP_BACKWARD || !a->dsinks || !a->sinks ||
      a->backward_mode != FA_BACKWARD_OVERWRITE)
    return FA_OK;
  float *zeros = calloc((size_t)a->heads_q, sizeof(float));
  if (!zeros)
    return fa_fail(FA_ERR_OUT_OF_MEMORY, "dsinks of an empty problem: out "
                                         "of memory");
  fa_status s =
      plan_backend(p)->copy_to_device(p->ctx->state[p->slot], a->dsinks, zeros,
                                      (size_t)a->heads_q * sizeof(float));
  free(zeros);
  return s;
}

static fa_status plan_run(struct fa_plan *p, const fa_layout *call,
                          float *lse_out, const float *lse_in) {
  last_kernel_run = NULL;
  fa_status s = layout_matches(p, call);
  if (s) return s;
  const fa_attention *a = &p->prob.a;
  // No query row: the forward writes nothing, and so does the backward
  // unless there are keys (their gradients are then 0).
  const int no_rows = fa_problem_empty(&p->prob);
  if (call->op == FA_OP_BACKWARD && !lse_in && !no_rows)
    return fa_fail(INVALID,
                   "lse is NULL: backward needs the LSE forward produced");
  if ((s = check_problem_data(p, &call->q, &call->k, &call->v)) ||
      (s = check_tensors(p, call,
                         call->op == FA_OP_BACKWARD ? lse_in : lse_out)))
    return s;
  if (no_rows &&
      (call->op == FA_OP_FORWARD || a->batch == 0 || a->seqlen_k == 0))
    return empty_backward_sinks(p);
  void *state = p->ctx->state[p->slot];
  last_kernel_run = p->kernel; // the one entry point called below
  if (call->op == FA_OP_BACKWARD) {
    fa_bwd_args args = {call->q,   call->k,         call->v,  call->o,
                        call->d_o, lse_in,          call->dq, call->dk,
                        call->dv,  p->prob.a.dsinks};
    return p->kernel->backward(state, &p->prob, &p->data, &args);
  }
  fa_fwd_args args = {call->q, call->k, call->v, call->o, lse_out};
  return p->kernel->forward(state, &p->prob, &p->data, &args);
}

static fa_layout forward_layout(fa_tensor q, fa_tensor k, fa_tensor v,
                                fa_tensor o) {
  fa_layout l;
  memset(&l, 0, sizeof l);
  l.op = FA_OP_FORWARD;
  l.q = q;
  l.k = k;
  l.v = v;
  l.o = o;
  layout_finish(&l);
  return l;
}

static fa_layout backward_layout(fa_tensor q, fa_tensor k, fa_tensor v,
                                 fa_tensor o, fa_tensor d_o, fa_tensor dq,
                                 fa_tensor dk, fa_tensor dv) {
  fa_layout l = forward_layout(q, k, v, o);
  l.op = FA_OP_BACKWARD;
  l.d_o = d_o;
  l.dq = dq;
  l.dk = dk;
  l.dv = dv;
  layout_finish(&l);
  return l;
}

fa_status fa_forward(fa_context *ctx, const fa_attention *a, fa_tensor q,
                     fa_tensor k, fa_tensor v, fa_tensor o, float *lse) {
  fa_clear_error();
  struct fa_plan p;
  const fa_layout l = forward_layout(q, k, v, o);
  fa_status s = plan_build(ctx, a, &l, &p);
  if (s) return s;
  return plan_run(&p, &l, lse, NULL);
}

fa_status fa_backward(fa_context *ctx, const fa_attention *a, fa_tensor q,
                      fa_tensor k, fa_tensor v, fa_tensor o, fa_tensor d_o,
                      const float *lse, fa_tensor dq, fa_tensor dk,
                      fa_tensor dv) {
  fa_clear_error();
  struct fa_plan p;
  const fa_layout l = backward_layout(q, k, v, o, d_o, dq, dk, dv);
  fa_status s = plan_build(ctx, a, &l, &p);
  if (s) return s;
  return plan_run(&p, &l, NULL, lse);
}

static fa_status plan_keep(const struct fa_plan *p, fa_plan **out) {
  struct fa_plan *h = malloc(sizeof *h);
  if (!h) return fa_fail(FA_ERR_OUT_OF_MEMORY, "plan allocation failed");
  *h = *p;
  *out = h;
  return FA_OK;
}

fa_status fa_plan_create(fa_context *ctx, const fa_attention *a, fa_tensor q,
                         fa_tensor k, fa_tensor v, fa_tensor o,
                         fa_plan **plan) {
  fa_clear_error();
  if (!plan) return fa_fail(INVALID, "plan (the output pointer) is NULL");
  struct fa_plan p;
  const fa_layout l = forward_layout(q, k, v, o);
  fa_status s = plan_build(ctx, a, &l, &p);
  return s ? s : plan_keep(&p, plan);
}

fa_status fa_plan_create_backward(fa_context *ctx, const fa_attention *a,
                                  fa_tensor q, fa_tensor k, fa_tensor v,
                                  fa_tensor o, fa_tensor d_o, fa_tensor dq,
                                  fa_tensor dk, fa_tensor dv, fa_plan **plan) {
  fa_clear_error();
  if (!plan) return fa_fail(INVALID, "plan (the output pointer) is NULL");
  struct fa_plan p;
  const fa_layout l = backward_layout(q, k, v, o, d_o, dq, dk, dv);
  fa_status s = plan_build(ctx, a, &l, &p);
  return s ? s : plan_keep(&p, plan);
}

fa_status fa_plan_forward(fa_plan *p, fa_tensor q, fa_tensor k, fa_tensor v,
                          fa_tensor o, float *lse) {
  fa_clear_error();
  if (!p) return fa_fail(INVALID, "plan is NULL");
  if (p->layout.op != FA_OP_FORWARD)
    return fa_fail(INVALID, "the plan is a backward plan: run it with "
                            "fa_plan_backward()");
  const fa_layout l = forward_layout(q, k, v, o);
  return plan_run(p, &l, lse, NULL);
}

fa_status fa_plan_backward(fa_plan *p, fa_tensor q, fa_tensor k, fa_tensor v,
                           fa_tensor o, fa_tensor d_o, const float *lse,
                           fa_tensor dq, fa_tensor dk, fa_tensor dv) {
  fa_clear_error();
  if (!p) return fa_fail(INVALID, "plan is NULL");
  if (p->layout.op != FA_OP_BACKWARD)
    return fa_fail(INVALID, "the plan is a forward plan: make one with "
                            "fa_plan_create_backward()");
  const fa_layout l = backward_layout(q, k, v, o, d_o, dq, dk, dv);
  return plan_run(p, &l, NULL, lse);
}

size_t fa_plan_describe(const fa_plan *p, char *buf, size_t len) {
  char tiles[384];
  if (!p) return (size_t)snprintf(buf, len, "(null plan)");
  fa_plan_data_describe(&p->data, tiles, sizeof tiles);
  int n = snprintf(buf, len, "backend=%s kernel=%s op=%s align=%d %s",
                   plan_backend(p)->name, p->kernel->name,
                   p->layout.op == FA_OP_BACKWARD ? "backward" : "forward",
                   p->layout.align, tiles);
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
  char desc[512];
  fa_problem_describe(&p, desc, sizeof desc);
  text_add(&t, "problem: %s\n", desc);

  int idx[FA_MAX_BACKENDS], n = 0;
  fa_binding forced;
  if (fa_select_backends(FA_BACKEND_AUTO, 0, idx, &n, &forced))
    text_add(&t, "auto: %s\n", fa_last_error());
  const fa_kernel_query q = {&p, NULL, NULL};
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
    // The backend's choice: its best-scoring accepting kernel.
    const fa_kernel *best = NULL;
    int best_score = 0;
    const int taken_before = taken; // by a better backend
    // What FA_BACKEND binds: an alias's tail of the kernels, or one kernel.
    const int first = forced.idx == i ? forced.first_kernel : 0;
    const fa_kernel *only = forced.idx == i ? forced.kernel : NULL;
    for (int k = first; k < b->num_kernels; k++) {
      const fa_kernel *kr = &b->kernels[k];
      if ((only && kr != only) || !kr->supports(&q, NULL, 0)) continue;
      int sc = kr->score ? kr->score(&q) : 0;
      if (!best || sc > best_score) {
        best = kr;
        best_score = sc;
      }
    }
    for (int k = 0; k < b->num_kernels; k++) {
      const fa_kernel *kr = &b->kernels[k];
      char why[256] = "";
      if (!kr->supports(&q, why, sizeof why)) {
        text_add(&t, "%s %s: skipped: %s\n", b->name, kr->name, why);
      } else if (!in_auto || k < first || (only && kr != only)) {
        text_add(&t, "%s %s: supports it, but %s\n", b->name, kr->name,
                 forced.idx >= 0
                     ? "FA_BACKEND leaves it out"
                     : "AUTO uses another memory space (create the context "
                       "by name to use it)");
      } else if (taken_before || kr != best) {
        text_add(&t, "%s %s: supports it, but %s is taken\n", b->name, kr->name,
                 taken_before ? "a better backend's kernel" : best->name);
      } else {
        fa_plan_data d;
        char tiles[384];
        if (kr->plan(&q, &d)) {
          text_add(&t, "%s %s: would be taken, but its plan fails: %s\n",
                   b->name, kr->name, fa_last_error());
          continue;
        }
        fa_plan_data_describe(&d, tiles, sizeof tiles);
        text_add(&t, "%s %s: taken (%s)\n", b->name, kr->name, tiles);
        taken = 1;
      }
    }
  }
  if (!taken) text_add(&t, "no backend here can run this problem\n");
  fa_clear_error();
  return t.used;
}
