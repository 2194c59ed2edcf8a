// SPDX-License-Identifier: MIT
// The runner's shared parts: a case's buffers (xs), the run (xrun), the
// message list, and the functions the files of test_xval share.
#ifndef FA_TESTS_XVAL_RUN_H
#define FA_TESTS_XVAL_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "flashattn.h"
#include "oracle.h"
#include "tensor.h"
#include "xval.h"

enum { R_PASS = 0, R_FAIL = 1, R_SKIP = 2 };

typedef struct msgbuf {
  char text[4096];
  size_t len;
  int count;
} msgbuf;

/* A tensor of a case: its guarded buffer, host view and device view. */
typedef struct xt {
  ts_buf *buf;
  size_t off;  /* element offset of the view's first element in buf */
  fa_tensor t; /* host view */
  fa_tensor d; /* view in the context's memory space */
  int klike;   /* rows are keys (paged / cu_seqlens_k) rather than queries */
  int heads, dim;
} xt;

enum {
  B_Q,
  B_K,
  B_V,
  B_DO,
  B_O,
  B_DQ,
  B_DK,
  B_DV,
  B_LSE,
  B_DSINKS, /* output: the sinks' gradient (fp32, [heads_q]) */
  B_CUQ,
  B_CUK,
  B_USED,
  B_TABLE,
  B_SLOPES,
  B_SINKS,
  B_QPOS, /* explicit positions: per-sequence arrays */
  B_KPOS,
  B_DSQ, /* descales of q, k, v */
  B_DSK,
  B_DSV,
  NBUF
};

typedef struct xs {
  const xcase *c;
  fa_context *ctx;
  fa_attention a;  /* arrays on the host: for the oracle and for indexing */
  fa_attention ad; /* arrays in the context's memory: for the library */
  int *lq, *lk, *store_k;
  int32_t *cuq, *cuk, *used, *table;
  float *slopes, *sinks;
  int64_t *qpos, *kpos;
  float *dsc[3]; /* descales of q, k, v (host) */
  fa_dtype dto;  /* the output dtype */
  int num_pages, mbps;
  ts_buf buf[NBUF];
#define XV_MAX_SHARD 4
  ts_buf shard_o[XV_MAX_SHARD], shard_l[XV_MAX_SHARD], shard_lse;
  uint64_t seed;             /* the case's data seed */
  unsigned char *snap[NBUF]; /* host copies of inputs, guards included */
  xt q, k, v, o, d_o, dq, dk, dv;
} xs;

/* One run: the context, the name it was bound by, the group and seed. */
typedef struct xrun {
  fa_context *ctx;
  const char *backend;
  const char *group;
  uint64_t seed;
  int verbose;
} xrun;

/* ---- xval_bounds.c: error bounds (the numbers and why: there) */
fa_dtype xv_bound_dtype(fa_dtype in, fa_dtype out);
double xv_bwd_bound(fa_dtype t, double naive_err);
double xv_bwd_max_bound(fa_dtype t, double naive_max_err);
double xv_dsinks_bound(fa_dtype t);
double xv_fwd_bound(fa_dtype t, double naive_err, double max_lse);
double xv_fwd_max_bound(fa_dtype t, double naive_max_err, double max_lse);
double xv_f32_logit_term(double max_lse);
double xv_lse_bound(fa_dtype t, double naive_err);
int xv_naive_sane(fa_dtype t, double naive_err);

/* ---- xval_checks.c: checks every case gets, and the message list */
const char *xv_buf_name(int id);
void xv_check_empty_rows(xs *s, const double *o, const double *lse, msgbuf *m);
void xv_check_err(const char *name, double err, double bound, msgbuf *m);
void xv_check_finite(const double *ref, const double *got, size_t n,
                     const char *name, msgbuf *m);
void xv_check_memory(xs *s, msgbuf *m);
void xv_check_untouched(xs *s, const int *ids, int n, msgbuf *m);
int xv_download(xs *s, const int *ids, int n);
void xv_extract(xs *s, const xt *x, const char *name, double *dense, msgbuf *m);
void xv_extract_lse(xs *s, double *dense);
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void xv_msg(msgbuf *m, const char *fmt, ...);
int xv_poison_upload(xs *s, const int *ids, int n);
unsigned char *xv_view_marks(const xs *s, const xt *x);

/* ---- xval_buffers.c: a case's problem and buffers */
size_t xv_alloc_bytes(const ts_buf *b);
int64_t xv_elem_index(const xs *s, const xt *x, int b, int r, int h);
int xv_rows_of(const xs *s, int klike, int b);
uint64_t xv_str_hash(const char *str);
void xv_xs_free(xs *s);
int xv_xs_setup(xs *s, fa_context *ctx, const xcase *c, uint64_t struct_seed,
                uint64_t data_seed);

/* ---- xval_gen.c: input generators (xcase.gen) */
void xv_fill(xs *s, xt *x, ts_rng *r, double amp);
void xv_fill_edge(xs *s, xt *x, ts_rng *r, int gen, int role);
int xv_nan_role(int gen);
void xv_place_nan(xs *s, xt *x, int role);

/* ---- xval_expect.c: expectation mode XV_EXPECT_ELEMENTWISE */
/* 1 if the plan of s's forward names a kernel containing one of names[0..n)
   in its description ("kernel=cuda.sm90.", ...). */
int xv_kernel_is(xs *s, int bwd, const char *const *names, int n);
int xv_fwd_kernel_is(xs *s, const char *const *names, int n);
int xv_check_bwd_elementwise(xs *s, double *const ref[3], double *const got[3],
                             const size_t cnt[3], char *res, size_t rn,
                             msgbuf *m);
int xv_check_elementwise(xs *s, const double *oref, const double *lref,
                         const double *ogot, double *lgot, char *res, size_t rn,
                         msgbuf *m);

/* ---- xval_fwd.c: forward checks */
int xv_run_forward(xrun *r, xs *s, char *res, size_t rn, msgbuf *m);

/* ---- xval_bwd.c: backward checks */
int xv_run_backward(xrun *r, xs *s, char *res, size_t rn, msgbuf *m);

/* ---- test_xval.c: the runner */
void xv_case_name(const xrun *r, const xcase *c, char *buf, size_t n);
int xv_fail_status(fa_status st, const char *what, msgbuf *m, char *why,
                   size_t wn);
void xv_print_structure(const xs *s);

#endif
