// SPDX-License-Identifier: MIT
// backends/gpu/gpu_semantics.h -- the device view of the problem every
// kernel of the CUDA and HIP modules reads: device arrays, and the core's
// rules (core/rules.h) called with fa_gpu_params -- against the core's
// helpers, compiled as plain C on the host, with fa_gpu_params filled by the
// modules' own host code (backends/gpu/gpu_host.h): lengths, visible keys
// and their exact inverse, row offsets (dense, varlen, seqused_k, paged),
// the score transform, kv blocks, split ranges, the work order (the softmax
// is the core's own: tests/unit/test_softmax.c). Problems: a fixed grid (every
// mask x layout) and random ones (explicit positions included), planned with
// the CUDA and the HIP module's planner inputs. Device arrays the core did not
// check: the helpers' clamps keep every row, length and page inside the tensors
// and the pool. Also the CUDA module's sm80 plans (sm80_tiles.c) against its
// tile table, and every row's shared memory (stage alignment, an A100 fits
// it, decode tiles run 2 CTAs per sm90 SM).
// No GPU needed; labels cuda, hip, unit.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cuda_internal.h"
#include "sm80_tiles.h"
#include "sm90_tiles.h"
#include "gpu_host.h"
#include "gpu_semantics.h"
#include "plan.h"
#include "problem.h"
#include "softmax.h"
#include "tensor.h"

static int failures;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      if (failures++ < 20) {                                                   \
        printf("FAIL %s:%d: ", __FILE__, __LINE__);                            \
        printf(__VA_ARGS__);                                                   \
        printf("\n");                                                          \
      }                                                                        \
    }                                                                          \
  } while (0)

/* The modules' planner inputs: CUDA's (sm80_tiles.c, cuda.generic's
   blocks) on an H100-sized GPU, HIP's (hip_backend.c) on an MI300X, and a
   small budget that makes the planner split the keys. */
static fa_caps module_caps(int which, int pack) {
  fa_caps cuda;
  fa_cuda_caps(132, 128, 64, pack, &cuda);
  fa_caps hip = {(size_t)1 << 34, 2 * 304, 32, 128, 64, 128, pack, 0};
  fa_caps small = {4096, 4, 32, 128, 64, 8, pack, 0};
  return which == 0 ? cuda : which == 1 ? hip : small;
}

/* Every semantic function on problem p planned with caps. */
static void compare(const fa_problem *p, const fa_caps *caps, ts_rng *r,
                    const char *what) {
  fa_plan_data plan;
  fa_plan_compute(p, caps, &plan);
  fa_gpu_params q;
  fa_gpu_fill_problem(&q, p);
  fa_gpu_fill_plan(&q, &plan);
  fa_tensor t = {NULL, FA_BF16, 7777, 123, 17};
  fa_gpu_view v = {NULL, 7777, 123, 17};
  const int hq = p->a.heads_q, hkv = p->a.heads_kv;

  for (int b = 0; b < p->a.batch; b++) {
    int lq = fa_seq_len_q(p, b), lk = fa_seq_len_k(p, b);
    CHECK(fa_gpu_len_q(&q, b) == lq && fa_gpu_len_k(&q, b) == lk,
          "%s: lengths of sequence %d", what, b);
    int64_t shift = fa_diag_shift(p, b, lq, lk);
    CHECK(fa_gpu_shift(&q, lq, lk) == shift, "%s: shift", what);
    for (int i = 0; i < lq; i++) {
      int lo, hi, glo, ghi;
      fa_visible_keys(p, shift, i, lk, &lo, &hi);
      fa_gpu_visible(&q, i, lq, lk, &glo, &ghi);
      CHECK(lo == glo && hi == ghi, "%s: visible(b=%d, i=%d)", what, b, i);
      for (int h = 0; h < hq; h += 2)
        CHECK(fa_q_offset(p, &t, b, i, h) == fa_gpu_q_offset(&q, &v, b, i, h),
              "%s: q offset", what);
    }
    for (int j = 0; j < lk; j++) {
      int i0, i1, first = -1, last = -1;
      fa_gpu_queries_of_key(&q, j, lq, lk, &i0, &i1);
      for (int i = 0; i < lq; i++) {
        int lo, hi;
        fa_visible_keys(p, shift, i, lk, &lo, &hi);
        if (lo <= j && j < hi) {
          if (first < 0) first = i;
          last = i;
          CHECK(i >= i0 && i < i1,
                "%s: query %d sees key %d outside "
                "[%d, %d)",
                what, i, j, i0, i1);
        }
      }
      if (first >= 0)
        CHECK(i0 == first && i1 == last + 1,
              "%s: key %d: queries [%d, %d), "
              "expected [%d, %d]",
              what, j, i0, i1, first, last);
      else
        CHECK(i0 >= i1, "%s: key %d seen by none, range [%d, %d)", what, j, i0,
              i1);
      for (int h = 0; h < hkv; h++)
        CHECK(fa_k_offset(p, &t, b, j, h) == fa_gpu_k_offset(&q, &v, b, j, h),
              "%s: k offset of key %d", what, j);
      float s = (float)ts_rng_normal(r) * 4.0f;
      int i = lq ? ts_rng_int(r, 0, lq - 1) : 0;
      float x = fa_score_transform(p, s, hq - 1, i, j, shift);
      float y = fa_gpu_transform(&q, s, hq - 1, i, j, (int)shift);
      CHECK(memcmp(&x, &y, 4) == 0, "%s: transform %g vs %g", what, (double)x,
            (double)y);
    }
    for (int qb = 0; qb < plan.num_q_blocks; qb++) {
      int k0, k1, g0, g1;
      fa_plan_kv_blocks(p, &plan, shift, lq, lk, qb, &k0, &k1);
      fa_gpu_kv_blocks(&q, plan.block_rows, plan.block_k, lq, lk, qb, &g0, &g1);
      CHECK(k0 == g0 && k1 == g1, "%s: kv blocks of q block %d", what, qb);
      for (int sp = 0; sp < plan.num_splits; sp++) {
        int a0, a1, c0, c1;
        fa_plan_split_range(k0, k1, plan.num_splits, sp, &a0, &a1);
        fa_split_range(g0, g1, plan.num_splits, sp, &c0, &c1);
        CHECK(a0 == c0 && a1 == c1, "%s: split %d of q block %d", what, sp, qb);
      }
    }
  }
  for (int64_t w = 0; w < plan.num_work; w++) {
    int b, h, qb, sp, gb, gh, gqb, gsp;
    fa_plan_work_item(p, &plan, w, &b, &h, &qb, &sp);
    fa_gpu_work_item(&q, w, &gb, &gh, &gqb, &gsp);
    CHECK(b == gb && h == gh && qb == gqb && sp == gsp, "%s: work item %lld",
          what, (long long)w);
  }
}

/* A fixed grid: every mask kind x dense, varlen and paged layouts. */
static int check_grid(ts_rng *r) {
  static const int32_t cu_q[] = {0, 5, 5, 40}, cu_k[] = {0, 9, 30, 95};
  static const int32_t used[] = {7, 0, 33};
  static const int32_t table[] = {3, 1, 4, 0, 5, 2, 7, 6, 8, 9, 10, 11};
  static const float slopes[] = {0.5f, 0.25f, 0.125f, 0.0625f};
  const int causal[] = {0, FA_CAUSAL_BOTTOM_RIGHT, FA_CAUSAL_TOP_LEFT};
  const int wins[][2] = {{-1, -1}, {8, 0}, {3, 5}, {0, -1}};
  int n = 0;
  for (int c = 0; c < 3; c++)
    for (int wi = 0; wi < 4; wi++)
      for (int mode = 0; mode < 3; mode++) { // dense, varlen, paged
        fa_attention a;
        fa_attention_init(&a);
        a.batch = 3;
        a.seqlen_q = mode == 1 ? 35 : 37;
        a.seqlen_k = mode == 1 ? 65 : mode == 2 ? 33 : 130;
        a.heads_q = 4;
        a.heads_kv = 2;
        a.head_dim = 64;
        a.causal = causal[c];
        if (!c) {
          a.window_left = wins[wi][0];
          a.window_right = wins[wi][1];
        }
        a.softcap = wi == 2 ? 30.0f : 0.0f;
        a.alibi_slopes = wi == 3 ? slopes : NULL;
        if (mode == 1) {
          a.cu_seqlens_q = cu_q;
          a.cu_seqlens_k = cu_k;
          a.rows_q = cu_q[3];
          a.rows_k = cu_k[3];
        }
        if (mode == 2) {
          a.block_table = table;
          a.max_blocks_per_seq = 4;
          a.page_size = 9;
          a.num_pages = 12;
          a.seqused_k = used;
        }
        fa_problem p;
        char what[96];
        snprintf(what, sizeof what, "grid causal=%d window=%d,%d mode=%d",
                 a.causal, a.window_left, a.window_right, mode);
        if (fa_problem_init(&p, &a, FA_BF16) != FA_OK) {
          CHECK(0, "%s: problem rejected: %s", what, fa_last_error());
          continue;
        }
        p.rows_q = a.rows_q;
        p.rows_k = a.rows_k;
        for (int which = 0; which < 3; which++) {
          fa_caps caps = module_caps(which, 1);
          compare(&p, &caps, r, what);
        }
        n++;
      }
  return n;
}

/* Random problems: masks, ALiBi, softcap, layouts, GQA, sizes. */
static void check_random(ts_rng *r, int case_no) {
  int B = ts_rng_int(r, 1, 4), sq = ts_rng_int(r, 1, 300),
      sk = ts_rng_int(r, 1, 300);
  int hkv = ts_rng_int(r, 1, 3), hq = hkv * ts_rng_int(r, 1, 4);
  fa_attention a;
  fa_attention_init(&a);
  a.batch = B;
  a.seqlen_q = sq;
  a.seqlen_k = sk;
  a.heads_q = hq;
  a.heads_kv = hkv;
  a.head_dim = 64;
  int mask = ts_rng_int(r, 0, 5);
  if (mask == 1) a.causal = FA_CAUSAL_BOTTOM_RIGHT;
  if (mask == 2) a.causal = FA_CAUSAL_TOP_LEFT;
  if (mask == 3) {
    a.window_left = ts_rng_int(r, 0, 40);
    a.window_right = ts_rng_int(r, 0, 40);
  }
  if (mask == 4) {
    a.causal = ts_rng_int(r, 1, 2);
    a.window_left = ts_rng_int(r, 0, 100);
  }
  if (mask == 5) a.window_right = ts_rng_int(r, 0, 5);
  float slopes[12];
  for (int h = 0; h < 12; h++) slopes[h] = 0.1f * (float)(h + 1);
  if (ts_rng_int(r, 0, 1)) a.alibi_slopes = slopes;
  if (ts_rng_int(r, 0, 1)) a.softcap = 5.0f;
  if (ts_rng_int(r, 0, 3) == 0) { // one offset for every sequence
    a.positions = FA_POSITIONS_EXPLICIT;
    a.q_position = ts_rng_int(r, 0, 500);
    a.k_position = ts_rng_int(r, 0, 500);
  }
  int32_t cuq[5], cuk[5], used[4], table[4 * 400];
  int layout = ts_rng_int(r, 0, 3); // dense, varlen, varlen+seqused, paged
  if (layout == 1 || layout == 2) {
    cuq[0] = cuk[0] = ts_rng_int(r, 0, 7);
    for (int b = 0; b < B; b++) {
      cuq[b + 1] = cuq[b] + ts_rng_int(r, 0, sq);
      cuk[b + 1] = cuk[b] + ts_rng_int(r, 0, sk);
    }
    a.cu_seqlens_q = cuq;
    a.cu_seqlens_k = cuk;
    a.rows_q = cuq[B];
    a.rows_k = cuk[B];
    if (layout == 2) {
      for (int b = 0; b < B; b++)
        used[b] = ts_rng_int(r, 0, cuk[b + 1] - cuk[b]);
      a.seqused_k = used;
    }
  } else if (layout == 3) {
    a.page_size = ts_rng_int(r, 1, 40);
    a.max_blocks_per_seq = (sk + a.page_size - 1) / a.page_size;
    a.num_pages = 1000;
    for (int i = 0; i < B * a.max_blocks_per_seq; i++)
      table[i] = ts_rng_int(r, 0, 999);
    a.block_table = table;
    for (int b = 0; b < B; b++) used[b] = ts_rng_int(r, 0, sk);
    a.seqused_k = used;
  }
  fa_problem p;
  char what[48];
  snprintf(what, sizeof what, "random case %d", case_no);
  if (fa_problem_init(&p, &a, FA_BF16) || fa_problem_check_arrays(&p)) {
    CHECK(0, "%s: problem rejected: %s", what, fa_last_error());
    return;
  }
  p.rows_q = a.rows_q; // what the core hands a GPU kernel
  p.rows_k = a.rows_k;
  fa_caps caps = module_caps(ts_rng_int(r, 0, 2), ts_rng_int(r, 0, 1));
  compare(&p, &caps, r, what);
}

/* Device arrays nobody checked: whatever the entries, the helpers keep
   every sequence inside its tensors (rows in [0, rows_q/rows_k], at most
   seqlen_q/seqlen_k of them, seqused_k within the sequence's keys) and
   every paged offset inside the pool or -1. */
static void check_clamps(ts_rng *r) {
  for (int n = 0; n < 2000; n++) {
    fa_gpu_params q;
    memset(&q, 0, sizeof q);
    int32_t cq[5], ck[5], used[4], table[4 * 8];
    q.batch = ts_rng_int(r, 1, 4);
    q.seqlen_q = ts_rng_int(r, 1, 100);
    q.seqlen_k = ts_rng_int(r, 1, 100);
    q.heads_q = q.heads_kv = q.group = 1;
    const int32_t wild[] = {INT32_MIN, -1,  0,   1,       50,
                            99,        100, 101, 1 << 30, INT32_MAX};
    for (int i = 0; i < 5; i++) {
      cq[i] = ts_rng_int(r, 0, 1) ? wild[ts_rng_int(r, 0, 9)]
                                  : ts_rng_int(r, 0, 300);
      ck[i] = ts_rng_int(r, 0, 1) ? wild[ts_rng_int(r, 0, 9)]
                                  : ts_rng_int(r, 0, 300);
    }
    for (int i = 0; i < 4; i++) used[i] = wild[ts_rng_int(r, 0, 9)];
    for (int i = 0; i < 32; i++)
      table[i] = ts_rng_int(r, 0, 1) ? wild[ts_rng_int(r, 0, 9)]
                                     : ts_rng_int(r, 0, 20);
    int mode = ts_rng_int(r, 0, 1); // varlen, paged
    if (mode == 0) {
      q.varlen_q = q.varlen_k = 1;
      q.cu_seqlens_q = cq;
      q.cu_seqlens_k = ck;
      q.rows_q = ts_rng_int(r, 0, 300);
      q.rows_k = ts_rng_int(r, 0, 300);
    } else {
      q.paged = 1;
      q.page_size = 16;
      q.max_blocks_per_seq = 8;
      q.seqlen_k = ts_rng_int(r, 1, 128);
      q.block_table = table;
      q.num_pages = 20;
    }
    if (ts_rng_int(r, 0, 1)) q.seqused_k = used;
    fa_gpu_view v = {NULL, 16 * 3, 3, 1}; // pages of 16 slots x 3
    for (int b = 0; b < q.batch; b++) {
      int lq = fa_gpu_len_q(&q, b), lk = fa_gpu_len_k(&q, b);
      int sk = fa_gpu_storage_k(&q, b);
      int64_t q0 = fa_gpu_start_q(&q, b), k0 = fa_gpu_start_k(&q, b);
      CHECK(lq >= 0 && lq <= q.seqlen_q && lk >= 0 && lk <= sk &&
                sk <= q.seqlen_k,
            "clamp %d: lengths %d %d %d", n, lq, lk, sk);
      if (mode == 0)
        CHECK(q0 >= 0 && q0 + lq <= q.rows_q && k0 >= 0 && k0 + sk <= q.rows_k,
              "clamp %d: rows [%lld, +%d) of %lld, [%lld, +%d) of %lld", n,
              (long long)q0, lq, (long long)q.rows_q, (long long)k0, sk,
              (long long)q.rows_k);
      else
        for (int j = 0; j < lk; j++) {
          int64_t off = fa_gpu_k_offset(&q, &v, b, j, 0);
          CHECK(off == -1 || (off >= 0 && off < 20 * 16 * 3),
                "clamp %d: paged offset %lld outside the pool", n,
                (long long)off);
        }
    }
  }
}

/* The sm80 plans (sm80_tiles.c): the tile's blocks, the core's counts. */
static void check_tiles(void) {
  for (int decode = 0; decode < 2; decode++)
    for (int i = 0; i < (decode ? fa_cuda_num_decode_tiles : fa_cuda_num_tiles);
         i++) {
      const fa_cuda_tile *t =
          decode ? &fa_cuda_decode_tiles[i] : &fa_cuda_tiles[i];
      CHECK(fa_cuda_tile_of(decode, t->head_dim) == t, "tile_of d%d",
            t->head_dim);
      for (int sq = 1; sq <= 4096; sq *= 8) {
        fa_attention a;
        fa_attention_init(&a);
        a.batch = 2;
        a.seqlen_q = sq;
        a.seqlen_k = 4096;
        a.heads_q = 8;
        a.heads_kv = 2;
        a.head_dim = t->head_dim;
        fa_problem p;
        CHECK(fa_problem_init(&p, &a, FA_BF16) == FA_OK, "tile d%d: problem",
              t->head_dim);
        fa_plan_data plan;
        fa_cuda_sm80_plan(&p, t, 132, &plan);
        CHECK(plan.block_q == t->block_q && plan.block_k == t->block_k,
              "tile d%d sq %d: plan %dx%d, the table %dx%d", t->head_dim, sq,
              plan.block_q, plan.block_k, t->block_q, t->block_k);
        CHECK(plan.block_rows * plan.pack_group <= t->block_q &&
                  (plan.num_q_blocks == 1 ||
                   plan.block_rows * plan.pack_group == t->block_q),
              "tile d%d sq %d: %d rows x %d heads in %d lanes", t->head_dim, sq,
              plan.block_rows, plan.pack_group, t->block_q);
      }
      CHECK(t->block_q == 16 * t->m_tiles * t->warps,
            "tile d%d: block_q != 16 * m_tiles * warps", t->head_dim);
      printf("%s d%-3d: %3d x %2d, %d warps x %d m-tiles, Q in %s, %d "
             "stages, %6d bytes smem: plans match\n",
             decode ? "decode tile" : "tile", t->head_dim, t->block_q,
             t->block_k, t->warps, t->m_tiles,
             t->q_in_regs ? "registers" : "smem", t->stages, t->smem_bytes);
    }
  for (int i = 0; i < fa_cuda_num_sm90_tiles; i++)
    CHECK(fa_cuda_sm90_tile_of(fa_cuda_sm90_tiles[i].head_dim) ==
              &fa_cuda_sm90_tiles[i],
          "sm90 tile_of");
}

/* Shared memory of a tile row: its layout's constraints, and how many CTAs
   fit on an SM (1 KB per CTA reserved by the driver). */
static int ctas_per_sm(const fa_cuda_tile *t, int sm_bytes) {
  return sm_bytes / (t->smem_bytes + 1024);
}
static void check_smem(const fa_cuda_tile *t, const char *kind) {
  CHECK(t->stages >= 2, "%s d%d: %d stages", kind, t->head_dim, t->stages);
  if (t->stages < 2) return;
  // Rows: Q, then `stages` of K and of V (sm80_fwd.cuh).
  int rows = t->block_q + 2 * t->stages * t->block_k;
  int pitch_bytes = t->smem_bytes / rows;
  CHECK(t->smem_bytes % rows == 0 && pitch_bytes >= 2 * t->head_dim,
        "%s d%d: %d bytes of smem are no %d rows of the head dim", kind,
        t->head_dim, t->smem_bytes, rows);
  // sm80_fwd.cuh's swizzle needs every stage base 1024-byte aligned.
  CHECK(t->block_q * pitch_bytes % 1024 == 0 &&
            t->block_k * pitch_bytes % 1024 == 0,
        "%s d%d: stage bases not 1024-byte aligned", kind, t->head_dim);
  CHECK(t->smem_bytes <= 163 * 1024,
        "%s d%d: %d bytes of smem exceed an A100's 163 KB", kind, t->head_dim,
        t->smem_bytes);
}

/* Every row's smem; decode tiles: the planner's splits fill whole waves of
   num_workers = 2 CTAs per SM (cuda_backend.c), so at least 2 must fit on
   an sm90 SM (228 KB); fewer would run each wave in two. */
static void check_tile_smem(void) {
  for (int i = 0; i < fa_cuda_num_tiles; i++)
    check_smem(&fa_cuda_tiles[i], "tile");
  for (int i = 0; i < fa_cuda_num_decode_tiles; i++) {
    const fa_cuda_tile *t = &fa_cuda_decode_tiles[i];
    check_smem(t, "decode tile");
    CHECK(t->block_q == 16 * t->m_tiles * t->warps,
          "decode tile d%d: block_q != 16 * m_tiles * warps", t->head_dim);
    CHECK(ctas_per_sm(t, 228 * 1024) >= 2,
          "decode tile d%d: %d bytes of smem leave %d CTA(s) per sm90 SM",
          t->head_dim, t->smem_bytes, ctas_per_sm(t, 228 * 1024));
    printf("decode tile d%-3d: %2d x %2d, %d stages, %6d bytes smem: %d "
           "CTAs per sm90 SM, %d per sm80 SM\n",
           t->head_dim, t->block_q, t->block_k, t->stages, t->smem_bytes,
           ctas_per_sm(t, 228 * 1024), ctas_per_sm(t, 164 * 1024));
  }
}

int main(void) {
  uint64_t seed = ts_seed_base();
  ts_rng r;
  ts_rng_seed(&r, seed);
  printf("test_gpu_mirror: seed 0x%llx\n", (unsigned long long)seed);
  int n = check_grid(&r);
  for (int c = 0; c < 400; c++) check_random(&r, c);
  check_clamps(&r);
  check_tiles();
  check_tile_smem();
  if (failures) {
    printf("%d checks failed (FA_TEST_SEED=0x%llx reproduces)\n", failures,
           (unsigned long long)seed);
    return 1;
  }
  printf("gpu_semantics.h agrees with the core on %d grid and 400 random "
         "problems\n",
         n);
  return 0;
}
