// SPDX-License-Identifier: MIT
// The validated problem (core/problem.h): defaults fa_problem_init resolves,
// the masking helper fa_visible_keys on hand-computed cases and against the
// header's formula, row addressing (dense, strided, varlen, paged) and the
// array checks that guard them.
#include <limits.h>
#include <math.h>
#include <string.h>

#include "check.h"
#include "problem.h"
#include "ts_problem.h"

static fa_attention base_problem(int sq, int sk) {
  return ts_problem(2, sq, sk, 4, 2, 16);
}

static void test_defaults(void) {
  fa_attention a = base_problem(7, 9);
  fa_problem p;
  memset(&p, 0x5a, sizeof p);
  CHECK(fa_problem_init(&p, &a, FA_F16) == FA_OK, "init: %s", fa_last_error());
  CHECK(p.a.head_dim_v == 16, "head_dim_v 0 resolved to %d", p.a.head_dim_v);
  CHECK(fabsf(p.a.scale - 0.25f) < 1e-7f, "scale 0 resolved to %g",
        (double)p.a.scale);
  CHECK(p.dtype == FA_F16, "dtype %d", (int)p.dtype);
  CHECK(p.group == 2, "group %d", p.group);
  CHECK(!p.top_left && !p.varlen_q && !p.varlen_k && !p.paged,
        "flags %d %d %d %d", p.top_left, p.varlen_q, p.varlen_k, p.paged);
  CHECK(p.a.window_left == -1 && p.a.window_right == -1, "windows %d %d",
        p.a.window_left, p.a.window_right);

  a.head_dim_v = 24;
  a.scale = 0.5f;
  a.causal = FA_CAUSAL_BOTTOM_RIGHT;
  a.window_left = 3;
  CHECK(fa_problem_init(&p, &a, FA_F32) == FA_OK, "init: %s", fa_last_error());
  CHECK(p.a.head_dim_v == 24 && p.a.scale == 0.5f, "explicit values lost");
  CHECK(p.a.window_right == 0 && p.a.window_left == 3 && !p.top_left,
        "causal bottom-right: window %d,%d top_left %d", p.a.window_left,
        p.a.window_right, p.top_left);

  a.causal = FA_CAUSAL_TOP_LEFT;
  a.window_right = 0; // allowed with causal
  CHECK(fa_problem_init(&p, &a, FA_BF16) == FA_OK, "init: %s", fa_last_error());
  CHECK(p.top_left == 1 && p.a.window_right == 0, "top-left: %d %d", p.top_left,
        p.a.window_right);

  int32_t cu_q[3] = {0, 3, 7}, cu_k[3] = {0, 5, 9}, bt[4] = {0, 1, 2, 3};
  a = base_problem(4, 5);
  a.cu_seqlens_q = cu_q;
  a.cu_seqlens_k = cu_k;
  CHECK(fa_problem_init(&p, &a, FA_F32) == FA_OK, "init: %s", fa_last_error());
  CHECK(p.varlen_q && p.varlen_k && !p.paged, "varlen flags");
  a = base_problem(4, 8);
  a.block_table = bt;
  a.page_size = 4;
  a.max_blocks_per_seq = 2;
  a.num_pages = 4;
  CHECK(fa_problem_init(&p, &a, FA_F32) == FA_OK, "init: %s", fa_last_error());
  CHECK(p.paged && !p.varlen_k, "paged flags");

  // A few rejections (the API tests cover every field).
  a = base_problem(4, 8);
  a.heads_kv = 3;
  CHECK(fa_problem_init(&p, &a, FA_F32) == FA_ERR_INVALID_ARGUMENT &&
            strstr(fa_last_error(), "heads_kv"),
        "heads 4 %% 3 accepted or unnamed: %s", fa_last_error());
  a = base_problem(4, 8);
  CHECK(fa_problem_init(&p, &a, (fa_dtype)9) == FA_ERR_INVALID_ARGUMENT,
        "dtype 9 accepted");
  CHECK(fa_problem_init(&p, NULL, FA_F32) == FA_ERR_INVALID_ARGUMENT,
        "NULL problem accepted");
}

// ---- masking -------------------------------------------------------------

static fa_problem mask_problem(int sq, int sk, int causal, int wl, int wr) {
  fa_attention a = base_problem(sq, sk);
  a.causal = causal;
  a.window_left = wl;
  a.window_right = wr;
  fa_problem p;
  fa_status s = fa_problem_init(&p, &a, FA_F32);
  CHECK(s == FA_OK, "mask problem sq=%d sk=%d causal=%d w=%d,%d: %s", sq, sk,
        causal, wl, wr, fa_last_error());
  return p;
}

// Rows given as {lo, hi} pairs; an empty row is written {-1, -1}.
static void expect_rows(const char *name, const fa_problem *p, int sq, int sk,
                        const int (*want)[2]) {
  for (int i = 0; i < sq; i++) {
    int lo = -99, hi = -99;
    fa_visible_keys(p, fa_diag_shift(p, 0, sq, sk), i, sk, &lo, &hi);
    if (want[i][0] < 0) {
      CHECK(lo >= hi, "%s row %d: [%d, %d), want empty", name, i, lo, hi);
    } else {
      CHECK(lo == want[i][0] && hi == want[i][1],
            "%s row %d: [%d, %d), want [%d, %d)", name, i, lo, hi, want[i][0],
            want[i][1]);
    }
    // Documented: clipped to [0, sk) -- even an empty range.
    CHECK(0 <= lo && lo <= hi && hi <= sk,
          "%s row %d: [%d, %d) is not clipped to [0, %d]", name, i, lo, hi, sk);
  }
}

static void test_visible_hand(void) {
  {
    fa_problem p = mask_problem(3, 5, 0, -1, -1);
    const int w[3][2] = {{0, 5}, {0, 5}, {0, 5}};
    expect_rows("no mask", &p, 3, 5, w);
  }
  {
    fa_problem p = mask_problem(3, 5, FA_CAUSAL_BOTTOM_RIGHT, -1, -1);
    const int w[3][2] = {{0, 3}, {0, 4}, {0, 5}};
    expect_rows("bottom-right sq<sk", &p, 3, 5, w);
  }
  {
    fa_problem p = mask_problem(5, 3, FA_CAUSAL_BOTTOM_RIGHT, -1, -1);
    const int w[5][2] = {{-1, -1}, {-1, -1}, {0, 1}, {0, 2}, {0, 3}};
    expect_rows("bottom-right sq>sk", &p, 5, 3, w);
  }
  {
    fa_problem p = mask_problem(3, 5, FA_CAUSAL_TOP_LEFT, -1, -1);
    const int w[3][2] = {{0, 1}, {0, 2}, {0, 3}};
    expect_rows("top-left sq<sk", &p, 3, 5, w);
  }
  {
    fa_problem p = mask_problem(5, 3, FA_CAUSAL_TOP_LEFT, -1, -1);
    const int w[5][2] = {{0, 1}, {0, 2}, {0, 3}, {0, 3}, {0, 3}};
    expect_rows("top-left sq>sk", &p, 5, 3, w);
  }
  {
    fa_problem p = mask_problem(5, 5, 0, 1, 1);
    const int w[5][2] = {{0, 2}, {0, 3}, {1, 4}, {2, 5}, {3, 5}};
    expect_rows("window 1,1", &p, 5, 5, w);
  }
  {
    // Bottom-right, shift 2: row i's diagonal is key i + 2.
    fa_problem p = mask_problem(4, 6, FA_CAUSAL_BOTTOM_RIGHT, 2, -1);
    const int w[4][2] = {{0, 3}, {1, 4}, {2, 5}, {3, 6}};
    expect_rows("causal + window_left 2", &p, 4, 6, w);
  }
  {
    fa_problem p = mask_problem(4, 4, 0, 0, 0);
    const int w[4][2] = {{0, 1}, {1, 2}, {2, 3}, {3, 4}};
    expect_rows("window 0,0", &p, 4, 4, w);
  }
  {
    fa_problem p = mask_problem(5, 5, 0, -1, 2);
    const int w[5][2] = {{0, 3}, {0, 4}, {0, 5}, {0, 5}, {0, 5}};
    expect_rows("window -1,2", &p, 5, 5, w);
  }
  {
    fa_problem p = mask_problem(5, 5, 0, 1, -1);
    const int w[5][2] = {{0, 5}, {0, 5}, {1, 5}, {2, 5}, {3, 5}};
    expect_rows("window 1,-1", &p, 5, 5, w);
  }
  {
    // Non-causal window, bottom-right diagonal with sq > sk (shift -3).
    fa_problem p = mask_problem(6, 3, 0, 1, 1);
    const int w[6][2] = {{-1, -1}, {-1, -1}, {0, 1}, {0, 2}, {0, 3}, {1, 3}};
    expect_rows("window 1,1 sq>sk", &p, 6, 3, w);
  }
  {
    // Top-left with a left window and more queries than keys: the last rows
    // fall off the right end of the keys entirely.
    fa_problem p = mask_problem(6, 3, FA_CAUSAL_TOP_LEFT, 1, -1);
    const int w[6][2] = {{0, 1}, {0, 2}, {1, 3}, {2, 3}, {-1, -1}, {-1, -1}};
    expect_rows("top-left + window_left 1 sq>sk", &p, 6, 3, w);
  }
  {
    // Windows near INT_MAX must not overflow.
    fa_problem p = mask_problem(3, 4, 0, INT_MAX, INT_MAX);
    const int w[3][2] = {{0, 4}, {0, 4}, {0, 4}};
    expect_rows("windows INT_MAX", &p, 3, 4, w);
  }
  {
    // A sequence with no keys (seqused_k = 0).
    fa_problem p = mask_problem(3, 4, FA_CAUSAL_BOTTOM_RIGHT, -1, -1);
    const int w[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};
    expect_rows("no keys", &p, 3, 0, w);
  }
  fa_problem br = mask_problem(3, 5, 1, -1, -1);
  fa_problem tl = mask_problem(3, 5, 2, -1, -1);
  CHECK(fa_diag_shift(&br, 0, 3, 5) == 2 && fa_diag_shift(&br, 0, 7, 2) == -5,
        "bottom-right shift %lld %lld", (long long)fa_diag_shift(&br, 0, 3, 5),
        (long long)fa_diag_shift(&br, 0, 7, 2));
  CHECK(fa_diag_shift(&tl, 0, 3, 5) == 0 && fa_diag_shift(&tl, 0, 7, 2) == 0,
        "top-left shift %lld %lld", (long long)fa_diag_shift(&tl, 0, 3, 5),
        (long long)fa_diag_shift(&tl, 0, 7, 2));
}

// The header's formula, written out: visible iff
// i + shift - wl <= j <= i + shift + wr (unbounded for -1), 0 <= j < sk.
static int header_visible(int causal, int wl, int wr, int sq, int sk, int i,
                          int j) {
  if (j < 0 || j >= sk) return 0;
  long long shift = causal == FA_CAUSAL_TOP_LEFT ? 0 : (long long)sk - sq;
  if (causal) wr = 0;
  long long diag = i + shift;
  if (wl >= 0 && j < diag - wl) return 0;
  if (wr >= 0 && j > diag + wr) return 0;
  return 1;
}

static void test_visible_random(void) {
  for (int rep = 0; rep < 3000; rep++) {
    int sq = ut_rand_int(1, 40), sk = ut_rand_int(1, 40);
    int causal = ut_rand_int(0, 2);
    int wl = ut_rand_int(-1, 12),
        wr = causal ? ut_rand_int(-1, 0) : ut_rand_int(-1, 12);
    fa_problem p = mask_problem(sq, sk, causal, wl, wr);
    int sk_real = ut_rand_int(0, sk); // seqused_k-like shorter length
    for (int i = 0; i < sq; i++) {
      int lo, hi;
      fa_visible_keys(&p, fa_diag_shift(&p, 0, sq, sk_real), i, sk_real, &lo,
                      &hi);
      CHECK(0 <= lo && lo <= hi && hi <= sk_real,
            "sq=%d sk=%d causal=%d w=%d,%d row %d: [%d, %d) not in [0, %d]", sq,
            sk_real, causal, wl, wr, i, lo, hi, sk_real);
      for (int j = -1; j <= sk_real; j++) {
        int want = header_visible(causal, wl, wr, sq, sk_real, i, j);
        int got = j >= lo && j < hi;
        CHECK(got == want,
              "sq=%d sk=%d causal=%d w=%d,%d: row %d key %d visible=%d, "
              "header says %d",
              sq, sk_real, causal, wl, wr, i, j, got, want);
      }
    }
  }
}

// ---- addressing ----------------------------------------------------------

static void test_offsets(void) {
  enum { SQ = 7, H = 3, D = 8 };
  fa_attention a = base_problem(SQ, 9);
  a.heads_q = H;
  a.heads_kv = 1;
  a.head_dim = D;
  fa_problem p;
  CHECK(fa_problem_init(&p, &a, FA_F32) == FA_OK, "init: %s", fa_last_error());

  // BSHD and BHSD views, plus a padded one.
  fa_tensor bshd = {NULL, FA_F32, SQ * H * D, H * D, D};
  fa_tensor bhsd = {NULL, FA_F32, H * SQ * D, D, SQ * D};
  fa_tensor pad = {NULL, FA_F32, 1000, 100, 10};
  for (int b = 0; b < 2; b++)
    for (int i = 0; i < SQ; i++)
      for (int h = 0; h < H; h++) {
        CHECK(fa_q_offset(&p, &bshd, b, i, h) ==
                  (int64_t)b * SQ * H * D + i * H * D + h * D,
              "bshd q offset b%d i%d h%d", b, i, h);
        CHECK(fa_q_offset(&p, &bhsd, b, i, h) ==
                  (int64_t)b * H * SQ * D + h * SQ * D + i * D,
              "bhsd q offset b%d i%d h%d", b, i, h);
        CHECK(fa_k_offset(&p, &pad, b, i, h) == b * 1000 + i * 100 + h * 10,
              "padded k offset b%d j%d h%d", b, i, h);
      }

  // Offsets beyond 32 bits.
  fa_tensor huge = {NULL, FA_F32, 3000000000LL, 2000000000LL, 1500000000LL};
  CHECK(fa_q_offset(&p, &huge, 1, 2, 2) ==
            3000000000LL + 4000000000LL + 3000000000LL,
        "64-bit q offset %lld", (long long)fa_q_offset(&p, &huge, 1, 2, 2));
  CHECK(fa_k_offset(&p, &huge, 1, 2, 2) ==
            3000000000LL + 4000000000LL + 3000000000LL,
        "64-bit k offset %lld", (long long)fa_k_offset(&p, &huge, 1, 2, 2));

  // Varlen: rows follow cu_seqlens, the batch stride is ignored.
  int32_t cu_q[4] = {0, 3, 7, 8}, cu_k[4] = {0, 5, 5, 11};
  int32_t used[3] = {4, 0, 2};
  a = base_problem(4, 6);
  a.batch = 3;
  a.heads_q = H;
  a.heads_kv = 1;
  a.head_dim = D;
  a.cu_seqlens_q = cu_q;
  a.cu_seqlens_k = cu_k;
  CHECK(fa_problem_init(&p, &a, FA_F32) == FA_OK, "init: %s", fa_last_error());
  CHECK(fa_problem_check_arrays(&p) == FA_OK, "arrays: %s", fa_last_error());
  p.rows_q = cu_q[3]; // as the core fills them after the checks
  p.rows_k = cu_k[3];
  fa_tensor packed = {NULL, FA_F32, 0, H * D, D};
  CHECK(fa_q_offset(&p, &packed, 1, 2, 1) == (3 + 2) * H * D + D,
        "varlen q offset %lld", (long long)fa_q_offset(&p, &packed, 1, 2, 1));
  CHECK(fa_k_offset(&p, &packed, 2, 4, 0) == (5 + 4) * H * D,
        "varlen k offset %lld", (long long)fa_k_offset(&p, &packed, 2, 4, 0));
  fa_tensor nonzero_batch = {NULL, FA_F32, 99999, H * D, D};
  CHECK(fa_q_offset(&p, &nonzero_batch, 2, 0, 0) == 7 * H * D,
        "varlen q offset used the batch stride");
  CHECK(fa_seq_len_q(&p, 0) == 3 && fa_seq_len_q(&p, 1) == 4 &&
            fa_seq_len_q(&p, 2) == 1,
        "varlen q lengths");
  CHECK(fa_seq_len_k(&p, 0) == 5 && fa_seq_len_k(&p, 1) == 0 &&
            fa_seq_len_k(&p, 2) == 6,
        "varlen k lengths");
  a.seqused_k = used; // takes precedence over cu_seqlens_k differences
  CHECK(fa_problem_init(&p, &a, FA_F32) == FA_OK, "init: %s", fa_last_error());
  CHECK(fa_problem_check_arrays(&p) == FA_OK, "arrays: %s", fa_last_error());
  p.rows_q = cu_q[3];
  p.rows_k = cu_k[3];
  CHECK(fa_seq_len_k(&p, 0) == 4 && fa_seq_len_k(&p, 1) == 0 &&
            fa_seq_len_k(&p, 2) == 2,
        "seqused_k lengths %d %d %d", fa_seq_len_k(&p, 0), fa_seq_len_k(&p, 1),
        fa_seq_len_k(&p, 2));

  // Paged: key j of sequence b is slot j % page_size of page
  // block_table[b][j / page_size]; the batch stride is the page stride.
  int32_t table[2][3] = {{2, 0, 5}, {1, 3, -7}}; // -7: past b=1's keys
  int32_t used_paged[2] = {10, 7};
  a = base_problem(3, 10);
  a.heads_q = H;
  a.heads_kv = 1;
  a.head_dim = D;
  a.block_table = &table[0][0];
  a.max_blocks_per_seq = 3;
  a.page_size = 4;
  a.num_pages = 6;
  a.seqused_k = used_paged;
  CHECK(fa_problem_init(&p, &a, FA_F32) == FA_OK, "init: %s", fa_last_error());
  CHECK(fa_problem_check_arrays(&p) == FA_OK,
        "an entry past a sequence's keys must not be checked: %s",
        fa_last_error());
  fa_tensor pool = {NULL, FA_F32, 4 * H * D + 16, H * D, D};
  for (int b = 0; b < 2; b++)
    for (int j = 0; j < used_paged[b]; j++) {
      int64_t want =
          (int64_t)table[b][j / 4] * pool.stride_batch + (j % 4) * H * D + D;
      CHECK(fa_k_offset(&p, &pool, b, j, 1) == want,
            "paged offset b%d j%d: %lld, want %lld", b, j,
            (long long)fa_k_offset(&p, &pool, b, j, 1), (long long)want);
    }
  // q rows of a paged problem stay dense.
  CHECK(fa_q_offset(&p, &bshd, 1, 2, 1) == SQ * H * D + 2 * H * D + D,
        "paged q offset");
  used_paged[1] = 9; // now b=1 needs the -7 entry
  CHECK(fa_problem_check_arrays(&p) == FA_ERR_INVALID_ARGUMENT &&
            strstr(fa_last_error(), "block_table"),
        "entry -7 accepted: %s", fa_last_error());
  used_paged[1] = 7;
  table[0][1] = 6; // == num_pages
  CHECK(fa_problem_check_arrays(&p) == FA_ERR_INVALID_ARGUMENT &&
            strstr(fa_last_error(), "block_table"),
        "entry 6 of 6 pages accepted: %s", fa_last_error());
  table[0][1] = 0;
  used_paged[0] = 11; // > seqlen_k
  CHECK(fa_problem_check_arrays(&p) == FA_ERR_INVALID_ARGUMENT &&
            strstr(fa_last_error(), "seqused_k"),
        "seqused_k 11 > 10 accepted: %s", fa_last_error());
  used_paged[0] = -1;
  CHECK(fa_problem_check_arrays(&p) == FA_ERR_INVALID_ARGUMENT &&
            strstr(fa_last_error(), "seqused_k"),
        "seqused_k -1 accepted: %s", fa_last_error());
}

static void test_cu_seqlens_checks(void) {
  int32_t cu[4] = {0, 3, 2, 5};
  fa_attention a = base_problem(4, 4);
  a.batch = 3;
  a.cu_seqlens_q = cu;
  fa_problem p;
  CHECK(fa_problem_init(&p, &a, FA_F32) == FA_OK, "init: %s", fa_last_error());
  CHECK(fa_problem_check_arrays(&p) == FA_ERR_INVALID_ARGUMENT &&
            strstr(fa_last_error(), "cu_seqlens_q"),
        "non-monotonic cu_seqlens_q accepted: %s", fa_last_error());
  cu[2] = 3;
  cu[3] = 8; // a sequence of 5 > seqlen_q 4
  CHECK(fa_problem_check_arrays(&p) == FA_ERR_INVALID_ARGUMENT &&
            strstr(fa_last_error(), "cu_seqlens_q"),
        "sequence longer than seqlen_q accepted: %s", fa_last_error());
  cu[3] = 7;
  CHECK(fa_problem_check_arrays(&p) == FA_OK, "valid cu_seqlens_q: %s",
        fa_last_error());
  cu[0] = -1;
  CHECK(fa_problem_check_arrays(&p) == FA_ERR_INVALID_ARGUMENT,
        "cu_seqlens_q[0] = -1 accepted");
}

static void test_score_transform(void) {
  float slopes[4] = {0.5f, 0.25f, 0.0f, 1.0f};
  fa_attention a = base_problem(4, 6);
  fa_problem p;
  CHECK(fa_problem_init(&p, &a, FA_F32) == FA_OK, "init");
  CHECK(fa_score_transform(&p, 3.5f, 0, 1, 2, 2) == 3.5f, "identity");
  a.softcap = 2.0f;
  CHECK(fa_problem_init(&p, &a, FA_F32) == FA_OK, "init");
  float s = fa_score_transform(&p, 3.0f, 0, 0, 0, 0);
  CHECK(fabs(s - 2.0 * tanh(1.5)) < 1e-6, "softcap: %g", (double)s);
  a.alibi_slopes = slopes;
  CHECK(fa_problem_init(&p, &a, FA_F32) == FA_OK, "init");
  // h=1, i=1, shift 2, j=7: |1 + 2 - 7| = 4 -> -0.25*4 after the cap.
  s = fa_score_transform(&p, 3.0f, 1, 1, 7, 2);
  CHECK(fabs(s - (2.0 * tanh(1.5) - 1.0)) < 1e-6, "softcap then alibi: %g",
        (double)s);
  a.softcap = 0.0f;
  CHECK(fa_problem_init(&p, &a, FA_F32) == FA_OK, "init");
  s = fa_score_transform(&p, 1.0f, 3, 4, 1, 2); // |4 + 2 - 1| = 5
  CHECK(s == -4.0f, "alibi: %g", (double)s);
}

int main(void) {
  test_defaults();
  test_visible_hand();
  test_visible_random();
  test_offsets();
  test_cu_seqlens_checks();
  test_score_transform();
  return ut_finish("test_problem");
}
