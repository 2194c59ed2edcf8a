// SPDX-License-Identifier: MIT
// Thread safety of the public API, made for ThreadSanitizer (and useful
// without it):
//
//   test_threads init [T]      T threads (default 8) released together make
//                              their first flashattn calls at once, racing on
//                              the registry's first-use initialisation; all
//                              must see the same backends. Must be the
//                              process's first use of the library.
//   test_threads contexts [T] [OMP]
//                              T threads (default 4), each with its own
//                              context (backends in turn) and its own data,
//                              run forward, backward, plans and merges many
//                              times at once, OMP OpenMP threads per context
//                              (default 1); every result must equal, bit for
//                              bit, the one computed alone beforehand, and
//                              each thread's fa_last_error() must stay its
//                              own while the others fail and succeed.
//
// Exit: 0 pass, 1 fail, 77 no CPU backend.
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "flashattn.h"

#define MAX_THREADS 64

/* ---- a small start barrier (pthread_barrier_t is optional in POSIX) ---- */

typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int waiting, total, open;
} gate;

static void gate_wait(gate *g) {
  pthread_mutex_lock(&g->mu);
  if (++g->waiting == g->total) {
    g->open = 1;
    pthread_cond_broadcast(&g->cv);
  }
  while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

/* ---- init: racing first use ------------------------------------------------
 */

typedef struct init_arg {
  gate *g;
  int id;
  int count;
  char names[8][32];
  char explain_head[64];
} init_arg;

static void *init_thread(void *p) {
  init_arg *a = p;
  gate_wait(a->g);
  // Each thread enters the library through a different door.
  fa_context *ctx = NULL;
  switch (a->id % 4) {
  case 0:
    a->count = fa_backend_count();
    break;
  case 1:
    if (fa_context_create(&ctx, FA_BACKEND_CPU, 0) != FA_OK)
      FAIL("thread %d: fa_context_create: %s", a->id, fa_last_error());
    a->count = fa_backend_count();
    break;
  case 2: {
    fa_attention at;
    fa_attention_init(&at);
    at.batch = at.seqlen_q = at.seqlen_k = at.heads_q = at.heads_kv = 1;
    at.head_dim = 8;
    char buf[1024];
    fa_explain(&at, FA_F32, buf, sizeof buf);
    memcpy(a->explain_head, buf, sizeof a->explain_head - 1);
    a->count = fa_backend_count();
    break;
  }
  default:
    (void)fa_backend_name(0);
    a->count = fa_backend_count();
  }
  for (int i = 0; i < a->count && i < 8; i++)
    snprintf(a->names[i], sizeof a->names[i], "%s", fa_backend_name(i));
  fa_context_destroy(ctx);
  return NULL;
}

static int run_init(int nt) {
  pthread_t th[MAX_THREADS];
  init_arg args[MAX_THREADS];
  gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, nt, 0};
  memset(args, 0, sizeof args);
  for (int i = 0; i < nt; i++) {
    args[i].g = &g;
    args[i].id = i;
    if (pthread_create(&th[i], NULL, init_thread, &args[i])) {
      FAIL("pthread_create failed");
      return 1;
    }
  }
  for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
  for (int i = 1; i < nt; i++) {
    if (args[i].count != args[0].count)
      FAIL("thread %d sees %d backends, thread 0 %d", i, args[i].count,
           args[0].count);
    for (int b = 0; b < args[0].count && b < 8; b++)
      if (strcmp(args[i].names[b], args[0].names[b]))
        FAIL("thread %d: backend %d is %s, thread 0 says %s", i, b,
             args[i].names[b], args[0].names[b]);
  }
  printf("init: %d threads raced on first use; all see %d backends:", nt,
         args[0].count);
  for (int b = 0; b < args[0].count && b < 8; b++)
    printf(" %s", args[0].names[b]);
  printf("\n");
  if (args[0].count == 0) {
    printf("SKIP: no usable backend\n");
    return 77;
  }
  return (int)atomic_load(&ut_failures) ? 1 : 0;
}

/* ---- contexts: concurrent independent work ----------------------------------
 */

enum { B = 2, SQ = 33, SK = 47, HQ = 4, HKV = 2, D = 24 };
enum { NQ = B * SQ * HQ * D, NK = B * SK * HKV * D, NL = B * HQ * SQ };

typedef struct work {
  const char *backend;
  int omp, iters, id;
  uint64_t seed;
  gate *g;
  // inputs
  float q[NQ], k[NK], v[NK], d_o[NQ];
  // expected results, computed alone
  float o_ref[NQ], l_ref[NL], dq_ref[NQ], dk_ref[NK], dv_ref[NK], m_ref[NQ];
  // outputs
  float o[NQ], l[NL], dq[NQ], dk[NK], dv[NK], m[NQ], ml[NL];
} work;

static fa_tensor bshd(float *p, int s, int h) {
  fa_tensor t = {p, FA_F32, (int64_t)s * h * D, (int64_t)h * D, D};
  return t;
}

static void problem(fa_attention *a, int id) {
  fa_attention_init(a);
  a->batch = B;
  a->seqlen_q = SQ;
  a->seqlen_k = SK;
  a->heads_q = HQ;
  a->heads_kv = HKV;
  a->head_dim = D;
  a->causal = id % 3 == 1 ? FA_CAUSAL_BOTTOM_RIGHT : 0;
  a->window_left = id % 3 == 2 ? 9 : -1;
}

static float rnd(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((int)(*s >> 40) % 2001 - 1000) / 1000.0f;
}

/* Forward, backward, a plan and a merge of two halves; 0 or the failing
   step. */
static const char *compute(fa_context *ctx, work *w, float *o, float *l,
                           float *dq, float *dk, float *dv, float *m,
                           float *ml) {
  fa_attention a;
  problem(&a, w->id);
  fa_tensor tq = bshd(w->q, SQ, HQ), tk = bshd(w->k, SK, HKV),
            tv = bshd(w->v, SK, HKV), to = bshd(o, SQ, HQ);
  if (fa_forward(ctx, &a, tq, tk, tv, to, l)) return "fa_forward";
  if (fa_backward(ctx, &a, tq, tk, tv, to, bshd(w->d_o, SQ, HQ), l,
                  bshd(dq, SQ, HQ), bshd(dk, SK, HKV), bshd(dv, SK, HKV)))
    return "fa_backward";
  fa_plan *plan = NULL;
  if (fa_plan_create(ctx, &a, tq, tk, tv, to, &plan)) return "fa_plan_create";
  fa_status s = fa_plan_forward(plan, tq, tk, tv, bshd(m, SQ, HQ), ml);
  fa_plan_destroy(plan);
  if (s) return "fa_plan_forward";
  if (memcmp(m, o, sizeof(float) * NQ)) return "plan != forward";
  // Merge o with itself at equal weights: o again (in place, into m).
  const float *lp[2] = {l, l};
  fa_tensor parts[2] = {to, bshd(m, SQ, HQ)};
  if (fa_merge_states(ctx, 2, parts, lp, B, SQ, HQ, D, bshd(m, SQ, HQ), ml))
    return "fa_merge_states";
  return NULL;
}

static void *contexts_thread(void *p) {
  work *w = p;
  fa_context *ctx = NULL;
  if (fa_context_create_by_name(&ctx, w->backend) != FA_OK) {
    FAIL("thread %d: context %s: %s", w->id, w->backend, fa_last_error());
    return NULL;
  }
  fa_context_set_threads(ctx, w->omp);
  gate_wait(w->g);
  char want[64];
  snprintf(want, sizeof want, "batch=-%d", 1000 + w->id);
  for (int it = 0; it < w->iters; it++) {
    // A failure of this thread's own, then work, then its message checked:
    // other threads' calls in between must not have touched it.
    fa_attention bad;
    problem(&bad, w->id);
    bad.batch = -(1000 + w->id);
    fa_tensor tq = bshd(w->q, SQ, HQ);
    if (fa_forward(ctx, &bad, tq, tq, tq, bshd(w->o, SQ, HQ), NULL) !=
        FA_ERR_INVALID_ARGUMENT)
      FAIL("thread %d: a negative batch was accepted", w->id);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", fa_last_error());
    if (!strstr(msg, want))
      FAIL("thread %d: fa_last_error() = \"%s\", expected %s", w->id, msg,
           want);
    memset(w->o, 0xff, sizeof w->o);
    const char *step =
        compute(ctx, w, w->o, w->l, w->dq, w->dk, w->dv, w->m, w->ml);
    if (step) {
      FAIL("thread %d (%s) iteration %d: %s failed: %s", w->id, w->backend, it,
           step, fa_last_error());
      break;
    }
    if (fa_last_error()[0])
      FAIL("thread %d: fa_last_error() = \"%s\" after a success", w->id,
           fa_last_error());
    if (memcmp(w->o, w->o_ref, sizeof w->o) ||
        memcmp(w->l, w->l_ref, sizeof w->l) ||
        memcmp(w->dq, w->dq_ref, sizeof w->dq) ||
        memcmp(w->dk, w->dk_ref, sizeof w->dk) ||
        memcmp(w->dv, w->dv_ref, sizeof w->dv) ||
        memcmp(w->m, w->m_ref, sizeof w->m)) {
      FAIL("thread %d (%s) iteration %d: results differ from the ones "
           "computed alone",
           w->id, w->backend, it);
      break;
    }
  }
  fa_context_destroy(ctx);
  return NULL;
}

static int run_contexts(int nt, int omp) {
  int nb = fa_backend_count();
  const char *cpu[16];
  int ncpu = 0;
  for (int i = 0; i < nb && ncpu < 16; i++)
    if (!strncmp(fa_backend_name(i), "cpu", 3))
      cpu[ncpu++] = fa_backend_name(i);
  if (!ncpu) {
    printf("SKIP: no CPU backend\n");
    return 77;
  }
  gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, nt, 0};
  work *w = calloc((size_t)nt, sizeof *w);
  pthread_t th[MAX_THREADS];
  if (!w) return 1;
  for (int i = 0; i < nt; i++) {
    w[i].backend = cpu[i % ncpu];
    w[i].omp = omp;
    w[i].iters = 6;
    w[i].id = i;
    w[i].g = &g;
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
    for (int x = 0; x < NQ; x++) w[i].q[x] = rnd(&s);
    for (int x = 0; x < NK; x++) w[i].k[x] = rnd(&s);
    for (int x = 0; x < NK; x++) w[i].v[x] = rnd(&s);
    for (int x = 0; x < NQ; x++) w[i].d_o[x] = rnd(&s);
    // The reference: the same calls on a fresh context, alone.
    fa_context *ctx = NULL;
    if (fa_context_create_by_name(&ctx, w[i].backend) != FA_OK) {
      FAIL("context %s: %s", w[i].backend, fa_last_error());
      free(w);
      return 1;
    }
    fa_context_set_threads(ctx, omp);
    const char *step = compute(ctx, &w[i], w[i].o_ref, w[i].l_ref, w[i].dq_ref,
                               w[i].dk_ref, w[i].dv_ref, w[i].m_ref, w[i].ml);
    fa_context_destroy(ctx);
    if (step) {
      FAIL("reference for thread %d on %s: %s failed: %s", i, w[i].backend,
           step, fa_last_error());
      free(w);
      return 1;
    }
  }
  for (int i = 0; i < nt; i++)
    if (pthread_create(&th[i], NULL, contexts_thread, &w[i])) {
      FAIL("pthread_create failed");
      nt = i;
      break;
    }
  for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
  printf("contexts: %d threads x %d iterations, %d OpenMP thread(s) per "
         "context, backends:",
         nt, w[0].iters, omp);
  for (int i = 0; i < ncpu; i++) printf(" %s", cpu[i]);
  printf("; %d failures\n", (int)atomic_load(&ut_failures));
  free(w);
  return (int)atomic_load(&ut_failures) ? 1 : 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  int nt = argc > 2 ? atoi(argv[2]) : 0;
  if (!strcmp(mode, "init"))
    return run_init(nt > 0 && nt <= MAX_THREADS ? nt : 8);
  if (!strcmp(mode, "contexts"))
    return run_contexts(nt > 0 && nt <= MAX_THREADS ? nt : 4,
                        argc > 3 ? atoi(argv[3]) : 1);
  fprintf(stderr, "usage: test_threads init [THREADS] | contexts [THREADS] "
                  "[OMP_THREADS]\n");
  return 2;
}
