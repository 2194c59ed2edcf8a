// SPDX-License-Identifier: MIT
// The overlap decision against brute force: small random views (up to 4
// dims, strides 0..12 elements, 1-, 2- and 4-byte elements, bases a few
// bytes apart) are painted byte by byte and compared; with the default
// budget every answer must be exact, with a budget of 0..3 steps every
// proven answer must still be right. Then the packed layouts the API
// promises to accept, at real sizes, and their one-off neighbours.
#include <string.h>

#include "check.h"
#include "overlap.h"

enum { SPACE = 1024 };

static fa_view random_view(uintptr_t origin) {
  static const int64_t sizes[3] = {1, 2, 4};
  fa_view v;
  memset(&v, 0, sizeof v);
  v.elem_bytes = sizes[ut_rand_int(0, 2)];
  v.base = origin + (uintptr_t)(ut_rand_int(0, 40) *
                                (ut_rand_int(0, 3) ? v.elem_bytes : 1));
  v.ndim = ut_rand_int(1, 4);
  for (int i = 0; i < v.ndim; i++) {
    v.extent[i] = ut_rand_int(ut_rand_int(0, 30) ? 1 : 0, 4);
    v.stride[i] = ut_rand_int(0, 4) ? ut_rand_int(0, 12) : ut_rand_int(0, 2);
  }
  return v;
}

/* Paint the bytes of v (origin-relative) into map; 0 if out of space. */
static int paint(const fa_view *v, uintptr_t origin, unsigned char *map) {
  int64_t n[4] = {1, 1, 1, 1}, s[4] = {0, 0, 0, 0};
  for (int i = 0; i < v->ndim; i++) {
    n[i] = v->extent[i];
    s[i] = v->stride[i];
  }
  for (int64_t a = 0; a < n[0]; a++)
    for (int64_t b = 0; b < n[1]; b++)
      for (int64_t c = 0; c < n[2]; c++)
        for (int64_t d = 0; d < n[3]; d++) {
          int64_t off =
              (int64_t)(v->base - origin) +
              (a * s[0] + b * s[1] + c * s[2] + d * s[3]) * v->elem_bytes;
          for (int64_t e = 0; e < v->elem_bytes; e++) {
            if (off + e >= SPACE) return 0;
            map[off + e] = 1;
          }
        }
  return 1;
}

static void test_random_against_brute_force(void) {
  static unsigned char ma[SPACE], mb[SPACE];
  const uintptr_t origin = 4096; // any address: only differences matter
  long exact = 0, overlapping = 0;
  for (int it = 0; it < 200000; it++) {
    fa_view a = random_view(origin), b = random_view(origin);
    memset(ma, 0, sizeof ma);
    memset(mb, 0, sizeof mb);
    if (!paint(&a, origin, ma) || !paint(&b, origin, mb)) continue;
    int truth = 0;
    for (int i = 0; i < SPACE; i++) truth |= ma[i] & mb[i];
    overlapping += truth;
    fa_overlap got = fa_views_overlap(&a, &b);
    CHECK(got == (truth ? FA_OVERLAP : FA_DISJOINT),
          "case %d: got %d, brute force says %s (a: base +%d, %d dims; b: "
          "base +%d, %d dims)",
          it, (int)got, truth ? "overlap" : "disjoint", (int)(a.base - origin),
          a.ndim, (int)(b.base - origin), b.ndim);
    CHECK(fa_views_overlap(&b, &a) == got, "case %d: not symmetric", it);
    exact++;
    // A tiny budget may give up, never lie.
    fa_overlap cheap = fa_views_overlap_budget(&a, &b, ut_rand_int(0, 3));
    CHECK(cheap == FA_OVERLAP_UNPROVEN ||
              cheap == (truth ? FA_OVERLAP : FA_DISJOINT),
          "case %d: budget-limited answer %d is wrong", it, (int)cheap);
  }
  CHECK(exact > 100000 && overlapping > exact / 10 &&
            overlapping < exact * 9 / 10,
        "random views: %ld compared, %ld overlapping (a poor mix)", exact,
        overlapping);
}

/* A [batch, seq, heads, dim] view of a buffer of elem-byte elements. */
static fa_view bshd(uintptr_t base, int64_t es, int64_t b, int64_t s, int64_t h,
                    int64_t d, int64_t sb, int64_t ss, int64_t sh) {
  fa_view v = {base, es, 4, {b, s, h, d}, {sb, ss, sh, 1}};
  return v;
}

static void test_packed_layouts(void) {
  const uintptr_t buf = (uintptr_t)1 << 40;
  // q, k, v, o in one [B, S, 4, H, D] fp32 buffer, at a size where
  // enumeration would be hopeless (2^33 elements).
  const int64_t B = 8, S = 1 << 20, H = 16, D = 64;
  const int64_t ss = 4 * H * D, sb = S * ss;
  fa_view part[4];
  for (int i = 0; i < 4; i++)
    part[i] = bshd(buf + (uintptr_t)(i * H * D * 4), 4, B, S, H, D, sb, ss, D);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++)
      CHECK(fa_views_overlap(&part[i], &part[j]) ==
                (i == j ? FA_OVERLAP : FA_DISJOINT),
            "[B,S,4,H,D] parts %d and %d", i, j);
  // One element too far: o's last head reaches into the next row's q.
  fa_view wide = part[3];
  wide.extent[2] = H + 1;
  CHECK(fa_views_overlap(&wide, &part[0]) == FA_OVERLAP,
        "o with one head too many must meet the next row's q");
  CHECK(fa_views_overlap(&wide, &part[1]) == FA_DISJOINT,
        "o with one head too many still misses k");
  // One byte off: a 2-byte shift of o's base makes it straddle k and o.
  fa_view shifted = part[2];
  shifted.base += 2;
  CHECK(fa_views_overlap(&shifted, &part[3]) == FA_OVERLAP,
        "v shifted by 2 bytes meets o");

  // Packed GQA [B, S, HQ + 2 HKV, D] bf16: q heads, then k, then v heads.
  const int64_t HQ = 32, HKV = 4, row = (HQ + 2 * HKV) * D;
  fa_view q = bshd(buf, 2, B, S, HQ, D, S * row, row, D),
          k = bshd(buf + (uintptr_t)(HQ * D * 2), 2, B, S, HKV, D, S * row, row,
                   D),
          v = bshd(buf + (uintptr_t)((HQ + HKV) * D * 2), 2, B, S, HKV, D,
                   S * row, row, D);
  CHECK(fa_views_overlap(&q, &k) == FA_DISJOINT, "GQA-packed q, k");
  CHECK(fa_views_overlap(&k, &v) == FA_DISJOINT, "GQA-packed k, v");
  CHECK(fa_views_overlap(&q, &v) == FA_DISJOINT, "GQA-packed q, v");

  // Merge parts interleaved per row in one buffer, o elsewhere-in-the-row:
  // [B, S, P, H, D] with P = 5 (4 parts, then o).
  const int64_t P = 5, prow = P * H * D;
  fa_view mp[5];
  for (int i = 0; i < P; i++)
    mp[i] = bshd(buf + (uintptr_t)(i * H * D * 4), 4, 2, 4096, H, D,
                 4096 * prow, prow, D);
  for (int i = 0; i < 4; i++)
    CHECK(fa_views_overlap(&mp[4], &mp[i]) == FA_DISJOINT,
          "interleaved merge o vs part %d", i);

  // Heads-major (BHSD) o against a BSHD q in the same buffer: the ranges
  // meet and the elements do too.
  fa_view bhsd = bshd(buf, 4, B, S, H, D, S * H * D, D, S * D);
  fa_view q4 = bshd(buf, 4, B, S, H, D, S * H * D, H * D, D);
  CHECK(fa_views_overlap(&bhsd, &q4) == FA_OVERLAP, "BHSD vs BSHD");

  // A 1-D array (an lse, a cu_seqlens) inside a row gap vs across a row.
  fa_view gap =
      fa_view_array((const void *)(buf + (uintptr_t)(H * D * 4)), H * D, 4);
  fa_view across =
      fa_view_array((const void *)(buf + (uintptr_t)(H * D * 4)), H * D + 1, 4);
  fa_view q_only = bshd(buf, 4, B, S, H, D, sb, 2 * H * D, D);
  CHECK(fa_views_overlap(&gap, &q_only) == FA_DISJOINT,
        "array in the gap between q rows");
  CHECK(fa_views_overlap(&across, &q_only) == FA_OVERLAP,
        "array one element longer than the gap");
  fa_view empty = gap;
  empty.extent[0] = 0;
  CHECK(fa_views_overlap(&empty, &q_only) == FA_DISJOINT, "empty view");
}

static void test_unproven_is_reported(void) {
  // Strides 7 and 11 bytes (1-byte elements) do not nest: with a budget
  // of 1 the search cannot settle a pair that meets only deep inside.
  fa_view a = {1 << 20, 1, 2, {200, 200}, {7, 11}};
  fa_view b = {(1 << 20) + 1000, 1, 1, {1}, {1}};
  fa_overlap full = fa_views_overlap_budget(&a, &b, 1 << 20);
  CHECK(full == FA_OVERLAP, "7i + 11j = 1000 has a solution: %d", (int)full);
  fa_overlap cheap = fa_views_overlap_budget(&a, &b, 1);
  CHECK(cheap == FA_OVERLAP_UNPROVEN || cheap == FA_OVERLAP,
        "a budget of 1 step: %d", (int)cheap);
  fa_party parties[2] = {{"o", -1, a, 1, 0}, {"sinks", -1, b, 0, 0}};
  fa_status s = fa_parties_check(parties, 2);
  CHECK(s == FA_ERR_INVALID_ARGUMENT, "o over sinks accepted");
  fa_party alias[2] = {{"o", -1, a, 1, 1}, {"o_parts", 3, a, 0, 1}};
  CHECK(fa_parties_check(alias, 2) == FA_OK, "exact in-place alias refused");
  alias[0].view.stride[1] = 12;
  CHECK(fa_parties_check(alias, 2) == FA_ERR_INVALID_ARGUMENT,
        "in-place alias with other strides accepted");
}

int main(void) {
  test_random_against_brute_force();
  test_packed_layouts();
  test_unproven_is_reported();
  return ut_finish("test_overlap");
}
