// SPDX-License-Identifier: MIT
// What a file of xval groups needs from the grid (xval_grid.c): the case
// list and the groups defined outside it.
#ifndef FA_TESTS_XVAL_GROUPS_H
#define FA_TESTS_XVAL_GROUPS_H

#include "xval.h"

typedef struct xv_list {
  xcase *out;
  int n, max;
} xv_list;

/* Append c (counted even past max, so the caller learns the size). */
void xv_add(xv_list *l, xcase c);

/* xval_fp8.c */
void xv_fwd_fp8(xv_list *l);
void xv_fwd_fp8_decode(xv_list *l);
void xv_bwd_fp8(xv_list *l);

/* xval_stress.c */
void xv_fwd_stress(xv_list *l);
void xv_bwd_stress(xv_list *l);
void xv_fwd_longrow(xv_list *l);

#endif
