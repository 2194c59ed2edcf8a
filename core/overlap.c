// SPDX-License-Identifier: MIT
// The overlap decision (overlap.h). An element of view a at byte x and one
// of view b at byte y share a byte iff x - y lies in [1 - run_a, run_b - 1]
// (run: the contiguous bytes of one element, or of the dims folded into
// it). x - y = (base_a - base_b) + sum_i j_i s_i over the dims of both
// views, b's with negated indices: the question is whether a box of
// integer points, mapped by the byte strides, meets an interval. The
// search walks the strides largest first; at each level only the indices
// whose remaining reach can still land in the interval are tried, and the
// rest's extreme points (which are attained) accept at once. For views
// whose dims nest (each stride beyond the reach of the smaller ones, which
// is how tensors are laid out), every level has at most a few candidates.
#include "overlap.h"

#include <stdio.h>

#include "error.h"

typedef struct term {
  int64_t stride; // bytes, > 0
  int64_t lo, hi; // index range, lo <= 0 <= hi
} term;

#define MAX_TERMS (2 * FA_VIEW_MAX_DIMS)

typedef struct search {
  term t[MAX_TERMS];
  int n;
  int64_t rmin[MAX_TERMS + 1], rmax[MAX_TERMS + 1]; // reach of terms k..
  int64_t gcd[MAX_TERMS + 1];                       // gcd of strides k..
  int64_t budget;
} search;

static int64_t floor_div(int64_t a, int64_t b) { // b > 0
  int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

static int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* The dims of v that are not folded into its run, as terms with index
   range [0, n-1] (sign +1) or [-(n-1), 0] (sign -1). Dims whose byte
   stride is at most the run so far tile it without gaps: folding them is
   exact. Returns the number of terms, or -1 for an empty view. */
static int view_terms(const fa_view *v, int sign, term *out, int64_t *run) {
  int64_t s[FA_VIEW_MAX_DIMS], n[FA_VIEW_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < v->ndim; i++) {
    if (v->extent[i] <= 0) return -1;
    if (v->extent[i] == 1 || v->stride[i] == 0) continue;
    s[k] = v->stride[i] * v->elem_bytes;
    n[k] = v->extent[i];
    for (int j = k; j > 0 && s[j] < s[j - 1]; j--) { // ascending strides
      int64_t ts = s[j], tn = n[j];
      s[j] = s[j - 1];
      n[j] = n[j - 1];
      s[j - 1] = ts;
      n[j - 1] = tn;
    }
    k++;
  }
  *run = v->elem_bytes;
  int first = 0;
  while (first < k && s[first] <= *run) {
    *run += (n[first] - 1) * s[first];
    first++;
  }
  int m = 0;
  for (int i = first; i < k; i++, m++) {
    out[m].stride = s[i];
    out[m].lo = sign > 0 ? 0 : -(n[i] - 1);
    out[m].hi = sign > 0 ? n[i] - 1 : 0;
  }
  return m;
}

/* Bytes from base to one past the last byte of v (v not empty). */
static int64_t view_bytes(const fa_view *v) {
  int64_t span = v->elem_bytes;
  for (int i = 0; i < v->ndim; i++)
    if (v->extent[i] > 1)
      span += (v->extent[i] - 1) * v->stride[i] * v->elem_bytes;
  return span;
}

/* Is some point of terms k.. mapped into [lo, hi]? 0 no, 1 yes, 2 out of
   budget. */
static int find_point(search *s, int k, int64_t lo, int64_t hi) {
  if (hi < s->rmin[k] || lo > s->rmax[k]) return 0;
  if ((lo <= s->rmin[k] && s->rmin[k] <= hi) ||
      (lo <= s->rmax[k] && s->rmax[k] <= hi))
    return 1;
  if (k == s->n) return 0;
  // Every point is a multiple of the strides' gcd (plus 0).
  if (floor_div(hi, s->gcd[k]) * s->gcd[k] < lo) return 0;
  const term *t = &s->t[k];
  int64_t j0 = ceil_div(lo - s->rmax[k + 1], t->stride);
  int64_t j1 = floor_div(hi - s->rmin[k + 1], t->stride);
  if (j0 < t->lo) j0 = t->lo;
  if (j1 > t->hi) j1 = t->hi;
  for (int64_t j = j0; j <= j1; j++) {
    if (--s->budget < 0) return 2;
    int r = find_point(s, k + 1, lo - j * t->stride, hi - j * t->stride);
    if (r) return r;
  }
  return 0;
}

fa_overlap fa_views_overlap_budget(const fa_view *a, const fa_view *b,
                                   int64_t budget) {
  search s;
  int64_t run_a, run_b;
  int na = view_terms(a, 1, s.t, &run_a);
  if (na < 0) return FA_DISJOINT;
  int nb = view_terms(b, -1, s.t + na, &run_b);
  if (nb < 0) return FA_DISJOINT;
  // Address ranges first: they also bound the base difference below.
  const uintptr_t a1 = a->base + (uintptr_t)view_bytes(a),
                  b1 = b->base + (uintptr_t)view_bytes(b);
  if (a1 <= b->base || b1 <= a->base) return FA_DISJOINT;
  const int64_t delta = a->base >= b->base ? (int64_t)(a->base - b->base)
                                           : -(int64_t)(b->base - a->base);
  // Largest stride first; equal strides become one term.
  s.n = 0;
  for (int i = 0; i < na + nb; i++) {
    term x = s.t[i];
    int at = 0;
    while (at < s.n && s.t[at].stride > x.stride) at++;
    if (at < s.n && s.t[at].stride == x.stride) {
      s.t[at].lo += x.lo;
      s.t[at].hi += x.hi;
      continue;
    }
    for (int j = s.n; j > at; j--) s.t[j] = s.t[j - 1];
    s.t[at] = x;
    s.n++;
  }
  s.rmin[s.n] = s.rmax[s.n] = s.gcd[s.n] = 0;
  for (int k = s.n - 1; k >= 0; k--) {
    s.rmin[k] = s.rmin[k + 1] + s.t[k].lo * s.t[k].stride;
    s.rmax[k] = s.rmax[k + 1] + s.t[k].hi * s.t[k].stride;
    s.gcd[k] = gcd64(s.t[k].stride, s.gcd[k + 1]);
  }
  if (s.n > 0) s.gcd[s.n] = s.gcd[s.n - 1]; // (unused past the last term)
  s.budget = budget;
  // x - y = delta + sum: the sum must lie in [1 - run_a, run_b - 1] - delta.
  int r = find_point(&s, 0, 1 - run_a - delta, run_b - 1 - delta);
  return r == 0 ? FA_DISJOINT : r == 1 ? FA_OVERLAP : FA_OVERLAP_UNPROVEN;
}

fa_view fa_view_array(const void *ptr, int64_t count, int64_t elem_bytes) {
  fa_view v = {(uintptr_t)ptr, elem_bytes, 1, {count}, {1}};
  return v;
}

static int views_equal(const fa_view *a, const fa_view *b) {
  if (a->base != b->base || a->elem_bytes != b->elem_bytes ||
      a->ndim != b->ndim)
    return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->extent[i] != b->extent[i] ||
        (a->extent[i] > 1 && a->stride[i] != b->stride[i]))
      return 0;
  return 1;
}

static const char *party_name(const fa_party *p, char *buf, size_t len) {
  if (p->index < 0) return p->name;
  (void)snprintf(buf, len, "%s[%d]", p->name, p->index);
  return buf;
}

static fa_status refuse(const fa_party *out, const fa_party *other,
                        fa_overlap how) {
  char a[48], b[48];
  const char *na = party_name(out, a, sizeof a),
             *nb = party_name(other, b, sizeof b);
  if (out->alias_class && out->alias_class == other->alias_class)
    return fa_fail(FA_ERR_INVALID_ARGUMENT,
                   "%s overlaps %s in memory without being the same view "
                   "(in place, an output must have the same data, dtype "
                   "and strides as the input it replaces)",
                   na, nb);
  if (how == FA_OVERLAP)
    return fa_fail(FA_ERR_INVALID_ARGUMENT,
                   "%s overlaps %s in memory (an element of each shares a "
                   "byte)",
                   na, nb);
  return fa_fail(FA_ERR_INVALID_ARGUMENT,
                 "%s may overlap %s in memory: their address ranges meet and "
                 "the overlap check could not prove their elements disjoint "
                 "within %d steps, so it refuses conservatively (use "
                 "separate buffers, or layouts whose strides nest)",
                 na, nb, FA_OVERLAP_BUDGET);
}

fa_status fa_parties_check(const fa_party *parties, int n) {
  for (int i = 0; i < n; i++) {
    const fa_party *out = &parties[i];
    if (!out->output || !out->view.base) continue;
    for (int j = 0; j < n; j++) {
      const fa_party *other = &parties[j];
      // (output pairs once each)
      if (j == i || !other->view.base || (other->output && j < i)) continue;
      if (out->alias_class && out->alias_class == other->alias_class &&
          !other->output && views_equal(&out->view, &other->view))
        continue;
      fa_overlap how = fa_views_overlap(&out->view, &other->view);
      if (how != FA_DISJOINT) return refuse(out, other, how);
    }
  }
  return FA_OK;
}
