// SPDX-License-Identifier: MIT
// What a file of xval groups needs from the grid (xval_grid.c): the case
// list and the groups defined outside it.
#ifndef FA_TESTS_XVAL_GROUPS_H
#define FA_TESTS_XVAL_GROUPS_H

#include "tensor.h"
#include "xval.h"

typedef struct xv_list {
  xcase *out;
  int n, max;
} xv_list;

/* Append c (counted even past max, so the caller learns the size). */
void xv_add(xv_list *l, xcase c);

/* ---- what the group files share */

/* Append one case to l: the defaults, then the statements given (a group
   defines its own macro over this one with its presets); c is the
   caller's xcase. */
#define XV_CASE(l, c, ...)                                                     \
  do {                                                                         \
    (c) = xv_default();                                                        \
    __VA_ARGS__;                                                               \
    xv_add((l), (c));                                                          \
  } while (0)

#define BR FA_CAUSAL_BOTTOM_RIGHT
#define TL FA_CAUSAL_TOP_LEFT

static inline void add(xv_list *l, xcase c) { xv_add(l, c); }

static const fa_dtype dtypes[3] = {FA_F32, FA_F16, FA_BF16};
static inline fa_dtype low(int i) { return i % 2 ? FA_BF16 : FA_F16; }

/* Masks as (causal, window_left, window_right). */
typedef struct mask {
  int causal, wl, wr;
} mask;

static const mask masks[] = {
    {0, -1, -1},     // none
    {BR, -1, -1},    // causal, bottom-right (FlashAttention)
    {TL, -1, -1},    // causal, top-left (PyTorch)
    {0, 16, -1},     // window left only
    {0, -1, 8},      // window right only
    {0, 16, 8},      // both
    {BR, 32, -1},    // local causal (Mistral-style sliding window)
    {TL, 5, -1},     // local causal, top-left
    {0, 0, 0},       // the diagonal only
    {0, 1000, 1000}, // windows wider than any sequence: no mask
    {0, 0, -1},      // keys at or right of the diagonal
    {BR, 0, -1},     // causal + wl 0: the diagonal only
    {0, -1, 0},      // causal expressed as a window
};
#define NMASKS (int)(sizeof masks / sizeof masks[0])

static inline void set_mask(xcase *c, mask m) {
  c->causal = m.causal;
  c->wl = m.wl;
  c->wr = m.wr;
}

/* xval_grid_fwd.c: shapes, lengths, masks, features, layouts, varlen,
   paged, decode, plans, through the forward */
void xv_fwd_dims(xv_list *l);
void xv_fwd_lengths(xv_list *l);
void xv_fwd_masks(xv_list *l);
void xv_fwd_features(xv_list *l);
void xv_fwd_gqa(xv_list *l);
void xv_fwd_layout(xv_list *l);
void xv_fwd_varlen(xv_list *l);
void xv_fwd_paged(xv_list *l);
void xv_fwd_decode(xv_list *l);
void xv_fwd_plan(xv_list *l);

/* xval_grid_bwd.c: the same through the backward; the tensor-core shapes;
   the edge numerics */
void xv_bwd_dims(xv_list *l);
void xv_bwd_lengths(xv_list *l);
void xv_bwd_masks(xv_list *l);
void xv_bwd_features(xv_list *l);
void xv_bwd_gqa(xv_list *l);
void xv_bwd_varlen(xv_list *l);
void xv_bwd_paged(xv_list *l);
void xv_bwd_layout(xv_list *l);
void xv_fwd_tensor_core(xv_list *l);
void xv_bwd_tensor_core(xv_list *l);
void xv_fwd_edge(xv_list *l);
void xv_bwd_edge(xv_list *l);

/* xval_grid_api.c: positions, shards, descales, output dtypes,
   accumulate, dsinks, backward plans */
void xv_fwd_positions(xv_list *l);
void xv_bwd_positions(xv_list *l);
void xv_fwd_shard(xv_list *l);
void xv_fwd_descale(xv_list *l);
void xv_bwd_descale(xv_list *l);
void xv_fwd_outdtype(xv_list *l);
void xv_bwd_outdtype(xv_list *l);
void xv_bwd_accumulate(xv_list *l);
void xv_bwd_dsinks(xv_list *l);
void xv_bwd_plan(xv_list *l);

/* xval_fp8.c */
void xv_fwd_fp8(xv_list *l);
void xv_fwd_fp8_decode(xv_list *l);
void xv_bwd_fp8(xv_list *l);

/* xval_stress.c */
void xv_fwd_stress(xv_list *l);
void xv_bwd_stress(xv_list *l);
void xv_fwd_longrow(xv_list *l);

#endif
