// SPDX-License-Identifier: MIT
// Cross-validation driver: runs every case of a group on one backend (or on
// every usable backend) and checks the library against the float64 oracle.
//
//   test_xval --backend NAME|all --group GROUP|all [--case N] [--list]
//             [--verbose] [--seed S]
//   test_xval --selftest      (the oracle against closed forms, finite
//                              differences and itself; see xval_selftest.c)
//   test_xval --list-kernels | --list-groups
//                             (the registry's backends and kernels, the
//                              grid's groups: what the build makes CTest
//                              tests of; see xval_list.c)
//
// This file is the runner (command line, groups, backends, one case); a
// case's buffers are built in xval_buffers.c from the generators of
// xval_gen.c, run and checked by xval_fwd.c / xval_bwd.c with the checks
// of xval_checks.c, the bounds of xval_bounds.c and the expectation modes
// of xval_expect.c.
//
// Per case, all of these must hold:
//   - the call returns FA_OK (FA_ERR_UNSUPPORTED makes the case a SKIP, and
//     then every output must still hold its poison: failing calls write
//     nothing);
//   - guard bands around every buffer are intact bit for bit, inputs (and
//     the problem's arrays) are unchanged, and elements of an output buffer
//     that are not part of the view (stride padding, pages the block table
//     does not name for real keys) still hold their poison; every logical
//     output element was written;
//   - no NaN/Inf where the oracle has none; a row with no visible key is
//     exactly 0 with lse -inf (or the sink logit);
//   - two error metrics against the oracle within their bounds (see
//     fwd_bound(), lse_bound(), bwd_bound() for the numbers and why):
//     relative Frobenius ||got - ref|| / ||ref|| and max-abs
//     max|got - ref| / max|ref| (the latter catches localised errors that
//     a norm over a large tensor dilutes); gradients are normalised by
//     their magnitudes (fa_oracle_backward_magnitude) instead of |ref|;
//       f32:       fixed bounds (forward 1e-5, backward 2e-5);
//       f16/bf16:  2 x the error of the naive same-precision attention
//                  (oracle.h) + 1e-3: the FlashAttention rule;
//   - fwd.plan cases: fa_plan_forward is bit-identical to fa_forward, and
//     fa_forward is bit-identical run to run.
// Inputs are N(0,1) (q scaled by qamp), drawn fresh per case from the run's
// seed (FA_TEST_SEED to reproduce), or from an edge generator (xcase.gen:
// logits of +-1e4, f16 near 65504, equal scores; group fwd.edge), whose
// cases are checked element by element within tests/fuzz/fz_tol.h's forward
// error bounds instead of the norms above (XV_EXPECT_ELEMENTWISE). Shapes,
// lengths and page shuffles depend only on the case, so "--case N" with the
// printed seed replays a failure.
// Exit status: 0 all passed, 1 a case failed, 77 (SKIP) when the backend is
// not usable here or it supports none of the group's cases.
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn.h"
#include "tensor.h"
#include "xval_list.h"
#include "xval_run.h"

void xv_case_name(const xrun *r, const xcase *c, char *buf, size_t n) {
  static const char *cz[3] = {"0", "br", "tl"};
  char lay[32], thr[256] = "";
  int tn = 0;
  if (c->threads)
    tn += snprintf(thr + tn, sizeof thr - tn, " threads=%d", c->threads);
  if (c->slack)
    tn += snprintf(thr + tn, sizeof thr - tn, " slack=%d", c->slack);
  if (c->qamp > 0.0f)
    tn += snprintf(thr + tn, sizeof thr - tn, " qamp=%g", (double)c->qamp);
  if (c->gen) {
    static const char *gz[] = {"normal", "logits+1e4", "logits-1e4", "f16max",
                               "equal",  "nan-q",      "nan-k",      "nan-v",
                               "nan-do", "inf-q",      "rising-k"};
    tn += snprintf(thr + tn, sizeof thr - tn, " gen=%s%s", gz[c->gen],
                   c->expect == XV_EXPECT_EXACT ? " exact"
                   : c->expect                  ? " elementwise"
                                                : "");
  }
  if (c->out)
    tn += snprintf(thr + tn, sizeof thr - tn, " out=%s",
                   ts_dtype_name(xv_out_dtype(c)));
  if (c->pos)
    tn += snprintf(thr + tn, sizeof thr - tn, " pos=%lld,%lld%s", c->qoff,
                   c->koff, c->pos == 2 ? "+per-seq" : "");
  if (c->descale)
    tn += snprintf(thr + tn, sizeof thr - tn, " descale=%s",
                   c->descale == 1   ? "scalar"
                   : c->descale == 2 ? "per-head"
                                     : "q1,kh,v0");
  if (c->dsinks) tn += snprintf(thr + tn, sizeof thr - tn, " dsinks");
  if (c->accum) tn += snprintf(thr + tn, sizeof thr - tn, " accumulate");
  if (c->shard)
    tn +=
        snprintf(thr + tn, sizeof thr - tn, " shard=%dx%d", c->shard, c->shard);
  if (c->plan && c->bwd) tn += snprintf(thr + tn, sizeof thr - tn, " plan");
  if (c->layout == XV_LAYOUT_PACKED)
    snprintf(lay, sizeof lay, "qkvpacked");
  else if (c->mixed)
    snprintf(lay, sizeof lay, "%s/%s/%s", ts_layout_name(c->layout),
             ts_layout_name((c->layout + 1) % 3),
             ts_layout_name((c->layout + 2) % 3));
  else
    snprintf(lay, sizeof lay, "%s", ts_layout_name(c->layout));
  snprintf(buf, n,
           "%s %s %s b%d sq%d sk%d hq%d hkv%d d%d dv%d%s causal=%s win=%d,%d "
           "cap=%g alibi=%d sink=%d scale=%g varlen=%s seqused=%d paged=%d%s "
           "layout=%s pad=%d lse=%d%s",
           r->backend, c->bwd ? "bwd" : "fwd", ts_dtype_name(c->dt), c->b,
           c->sq, c->sk, c->hq, c->hkv, c->d, c->dv, c->hdv0 ? "(0)" : "",
           cz[c->causal], c->wl, c->wr, (double)c->cap, c->alibi, c->sinks,
           (double)c->scale,
           c->varlen == 2 ? "q"
           : c->varlen    ? "1"
                          : "0",
           c->seqused, c->page, c->bad_tail ? "(bad tail)" : "", lay, c->pad,
           !c->no_lse, thr);
}

void xv_print_structure(const xs *s) {
  const fa_attention *a = &s->a;
  printf("    lengths q:");
  for (int b = 0; b < a->batch; b++) printf(" %d", s->lq[b]);
  printf("  k:");
  for (int b = 0; b < a->batch; b++) printf(" %d", s->lk[b]);
  if (a->cu_seqlens_k || a->block_table) {
    printf("  k storage:");
    for (int b = 0; b < a->batch; b++) printf(" %d", s->store_k[b]);
  }
  printf("\n    strides q (%" PRId64 ",%" PRId64 ",%" PRId64 ") k (%" PRId64
         ",%" PRId64 ",%" PRId64 ")",
         s->q.t.stride_batch, s->q.t.stride_seq, s->q.t.stride_head,
         s->k.t.stride_batch, s->k.t.stride_seq, s->k.t.stride_head);
  if (a->block_table)
    printf("  pages %d max_blocks_per_seq %d", a->num_pages,
           a->max_blocks_per_seq);
  printf("\n");
}

/* Classify a failed call; call it right after the call (before any other
   flashattn call clears fa_last_error()). The reason goes to why. */
int xv_fail_status(fa_status st, const char *what, msgbuf *m, char *why,
                   size_t wn) {
  snprintf(why, wn, "%s", fa_last_error());
  if (st == FA_ERR_UNSUPPORTED) return R_SKIP;
  xv_msg(m, "%s returned %s: %s", what, fa_status_string(st), why);
  return R_FAIL;
}

static int run_case(xrun *r, const xcase *c, int idx, int *counts) {
  char name[512], res[512] = "";
  xv_case_name(r, c, name, sizeof name);
  printf("[%3d] %s: ", idx, name);
  fflush(stdout);
  uint64_t struct_seed = xv_str_hash(r->group) * 31 + (uint64_t)idx;
  uint64_t data_seed = ts_case_seed(r->seed, struct_seed);
  msgbuf m;
  memset(&m, 0, sizeof m);
  xs s;
  int rc;
  double t0 = ts_now();
  // Threads only shape the plan (number of workers, kv splits); a GPU
  // context refuses them, which is fine.
  if (c->threads) fa_context_set_threads(r->ctx, c->threads);
  if (xv_xs_setup(&s, r->ctx, c, struct_seed, data_seed)) {
    xv_msg(&m, "setup failed (out of memory or upload error)");
    rc = R_FAIL;
  } else {
    rc = c->bwd ? xv_run_backward(r, &s, res, sizeof res, &m)
                : xv_run_forward(r, &s, res, sizeof res, &m);
  }
  double dt = ts_now() - t0;
  static const char *word[3] = {"PASS", "FAIL", "SKIP"};
  printf("%s %s (%.2fs)\n", word[rc], res, dt);
  if ((r->verbose || rc == R_FAIL) && s.lq) {
    // What the library planned for this problem (tiles, kv splits).
    fa_plan *plan = NULL;
    char d[512];
    if (fa_plan_create(r->ctx, &s.ad, s.q.d, s.k.d, s.v.d, s.o.d, &plan) ==
        FA_OK) {
      fa_plan_describe(plan, d, sizeof d);
      printf("    plan: %s\n", d);
    }
    fa_plan_destroy(plan);
  }
  if (rc == R_FAIL) {
    fputs(m.text, stdout);
    if (m.count > 12) printf("    ... %d more problems\n", m.count - 12);
    if (s.lq) xv_print_structure(&s);
    printf("    reproduce: FA_TEST_SEED=0x%" PRIx64
           " test_xval --backend %s --group %s --case %d\n",
           r->seed, r->backend, r->group, idx);
  } else if (r->verbose && s.lq) {
    xv_print_structure(&s);
  }
  if (c->threads) fa_context_set_threads(r->ctx, 0);
  xv_xs_free(&s);
  counts[rc]++;
  fflush(stdout);
  return rc;
}

/* ---- main
 * -------------------------------------------------------------------- */

static void usage(void) {
  fprintf(stderr,
          "usage: test_xval --backend NAME|all --group GROUP|all [--case N] "
          "[--list] [--verbose] [--seed S]\n       test_xval --selftest   "
          "(checks the oracle itself; no backend)\n       test_xval "
          "--list-kernels | --list-groups   (what the tests are made of)\n"
          "groups:");
  for (int i = 0; xv_group_name(i); i++)
    fprintf(stderr, " %s", xv_group_name(i));
  fprintf(stderr, "\nFA_TEST_SEED=S fixes the data seed.\n");
}

static int run_group(xrun *r, const char *group, int only, int list,
                     int *counts) {
  static xcase cases[XV_MAX_CASES];
  int n = xv_group_cases(group, cases, XV_MAX_CASES);
  if (n < 0 || n > XV_MAX_CASES) {
    fprintf(stderr, "test_xval: unknown group \"%s\"\n", group);
    usage();
    return -1;
  }
  r->group = group;
  for (int i = 0; i < n; i++) {
    if (only >= 0 && i != only) continue;
    if (list) {
      char name[512];
      xv_case_name(r, &cases[i], name, sizeof name);
      printf("[%3d] %s\n", i, name);
      continue;
    }
    run_case(r, &cases[i], i, counts);
  }
  return 0;
}

static int run_backend(xrun *r, const char *group, int only, int list,
                       int *counts) {
  fa_status st = fa_context_create_by_name(&r->ctx, r->backend);
  if (st) {
    printf("SKIP: backend %s is not usable here: %s (%s)\n", r->backend,
           fa_status_string(st), fa_last_error());
    return 1;
  }
  int rc = 0;
  if (strcmp(group, "all") == 0) {
    for (int g = 0; xv_group_name(g) && rc == 0; g++)
      rc = run_group(r, xv_group_name(g), only, list, counts);
  } else {
    rc = run_group(r, group, only, list, counts);
  }
  fa_context_destroy(r->ctx);
  r->ctx = NULL;
  return rc < 0 ? -1 : 0;
}

int main(int argc, char **argv) {
  const char *backend = NULL, *group = NULL;
  int only = -1, list = 0, verbose = 0;
  uint64_t seed = ts_seed_base();
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--backend") && i + 1 < argc)
      backend = argv[++i];
    else if (!strcmp(argv[i], "--group") && i + 1 < argc)
      group = argv[++i];
    else if (!strcmp(argv[i], "--case") && i + 1 < argc)
      only = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
      seed = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--list"))
      list = 1;
    else if (!strcmp(argv[i], "--selftest"))
      return xv_selftest() ? 1 : 0;
    else if (!strcmp(argv[i], "--list-kernels"))
      return xv_list_kernels(stdout);
    else if (!strcmp(argv[i], "--list-groups"))
      return xv_list_groups(stdout);
    else if (!strcmp(argv[i], "--verbose") || !strcmp(argv[i], "-v"))
      verbose = 1;
    else {
      usage();
      return 2;
    }
  }
  if (!backend || !group) {
    usage();
    return 2;
  }
  printf("test_xval %s: backend %s, group %s, seed 0x%" PRIx64 "%s\n",
         fa_version(), backend, group, seed,
         ts_seed_from_env() ? " (FA_TEST_SEED)" : "");
  int counts[3] = {0, 0, 0}, unusable = 0;
  double t0 = ts_now();
  xrun r = {NULL, backend, NULL, seed, verbose};
  if (strcmp(backend, "all") == 0) {
    int nb = fa_backend_count();
    for (int i = 0; i < nb; i++) {
      r.backend = fa_backend_name(i);
      int rc = run_backend(&r, group, only, list, counts);
      if (rc < 0) return 2;
      if (rc > 0) { // listed as usable, yet no context: a library bug
        printf("FAIL: fa_backend_name(%d) = %s is listed as usable but "
               "fa_context_create_by_name failed\n",
               i, r.backend);
        unusable++;
      }
    }
    if (nb == 0) printf("SKIP: no usable backend\n");
  } else {
    int rc = run_backend(&r, group, only, list, counts);
    if (rc < 0) return 2;
  }
  if (list) return 0;
  printf("%s %s: %d passed, %d failed, %d skipped (unsupported) in %.1fs; "
         "seed 0x%" PRIx64 "\n",
         backend, group, counts[R_PASS], counts[R_FAIL], counts[R_SKIP],
         ts_now() - t0, seed);
  if (counts[R_FAIL] || unusable) {
    printf("FAILED: rerun with FA_TEST_SEED=0x%" PRIx64 " to reproduce\n",
           seed);
    return 1;
  }
  if (counts[R_PASS] == 0) {
    printf("SKIP: nothing ran (backend unusable or every case unsupported)\n");
    return TS_SKIP;
  }
  return 0;
}
