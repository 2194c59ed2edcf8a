// SPDX-License-Identifier: MIT
// The tiling plan (core/plan.h) as plain data: tile sizes obey the caps and
// the fast-memory budget plan.c documents, split-KV appears exactly when the
// work would leave workers idle and then takes the most splits that fit two
// whole waves of workers, the kv block range of a q block is exactly the
// blocks holding a visible key (checked by brute force against the
// header's mask formula), splits partition, and the work list enumerates
// every (batch, head, q block, split) once. With GQA packing (caps.pack_gqa)
// a tile holds block_rows query rows of each of pack_group q heads.
#include <string.h>

#include "check.h"
#include "plan.h"
#include "ts_problem.h"

static int round_up(int x, int m) { return (x + m - 1) / m * m; }
static int ceil_div(int a, int b) { return (a + b - 1) / b; }

static fa_caps make_caps(size_t mem, int workers, int align, int max_q,
                         int max_k, int max_splits) {
  fa_caps c;
  memset(&c, 0, sizeof c); // pack_gqa and any later field: off
  c.fast_mem_bytes = mem;
  c.num_workers = workers;
  c.tile_align = align;
  c.max_block_q = max_q;
  c.max_block_k = max_k;
  c.max_splits = max_splits;
  return c;
}

static int make_problem(fa_problem *p, int batch, int sq, int sk, int hq,
                        int hkv, int d, int dv, int causal, int wl, int wr) {
  fa_attention a = ts_problem(batch, sq, sk, hq, hkv, d);
  a.head_dim_v = dv;
  a.causal = causal;
  a.window_left = wl;
  a.window_right = wr;
  fa_status s = fa_problem_init(p, &a, FA_F32);
  CHECK(s == FA_OK, "problem b%d sq%d sk%d: %s", batch, sq, sk,
        fa_last_error());
  return s == FA_OK;
}

// The header's masking formula, independent of fa_visible_keys.
static int visible(const fa_problem *p, int sq, int sk, int i, int j) {
  if (j < 0 || j >= sk) return 0;
  long long diag = (long long)i + (p->top_left ? 0 : (long long)sk - sq);
  if (p->a.window_left >= 0 && j < diag - p->a.window_left) return 0;
  if (p->a.window_right >= 0 && j > diag + p->a.window_right) return 0;
  return 1;
}

// ---- tile sizes ------------------------------------------------------------

// plan.c's documented budget: B_c K/V rows of (dpad + dvpad) fp32 values take
// at most half the fast memory; B_r rows of Q, O and S, (dpad + dvpad + B_c)
// fp32 values, fill what is left. Neither can go below one tile_align, so the
// budget binds only where the minimum tile fits.
static void check_tiles(const char *ctx, const fa_problem *p, const fa_caps *c,
                        const fa_plan_data *d) {
  int al = c->tile_align;
  const fa_attention *a = &p->a;
  CHECK(d->block_q >= al && d->block_q % al == 0,
        "%s: block_q %d not a positive multiple of %d", ctx, d->block_q, al);
  CHECK(d->block_k >= al && d->block_k % al == 0,
        "%s: block_k %d not a positive multiple of %d", ctx, d->block_k, al);
  CHECK(d->block_q <= c->max_block_q, "%s: block_q %d > max %d", ctx,
        d->block_q, c->max_block_q);
  CHECK(d->block_k <= c->max_block_k, "%s: block_k %d > max %d", ctx,
        d->block_k, c->max_block_k);
  int pack = d->pack_group;
  // Packing takes the largest divisor of the group whose lanes fit the
  // kernel's largest tile (whole heads of one group per tile).
  int want_pack = 1;
  if (c->pack_gqa)
    for (int g = p->group; g > 1 && want_pack == 1; g--)
      if (p->group % g == 0 && round_up(g, al) <= c->max_block_q) want_pack = g;
  CHECK(pack == want_pack, "%s: pack_group %d, want %d (pack_gqa %d, group %d)",
        ctx, pack, want_pack, c->pack_gqa, p->group);
  CHECK(d->block_rows >= 1 && d->block_rows == d->block_q / pack,
        "%s: block_rows %d for block_q %d and pack_group %d", ctx,
        d->block_rows, d->block_q, pack);
  CHECK(d->block_q <= round_up(a->seqlen_q * pack, al),
        "%s: block_q %d larger than seqlen_q %d x %d heads need", ctx,
        d->block_q, a->seqlen_q, pack);
  CHECK(d->block_k <= round_up(a->seqlen_k, al),
        "%s: block_k %d larger than seqlen_k %d needs", ctx, d->block_k,
        a->seqlen_k);
  CHECK(d->head_dim_pad == round_up(a->head_dim, al) &&
            d->head_dim_v_pad == round_up(a->head_dim_v, al),
        "%s: dims padded to %d,%d (from %d,%d, align %d)", ctx, d->head_dim_pad,
        d->head_dim_v_pad, a->head_dim, a->head_dim_v, al);
  CHECK(d->num_q_blocks == ceil_div(a->seqlen_q, d->block_rows) &&
            d->num_k_blocks == ceil_div(a->seqlen_k, d->block_k),
        "%s: %d q blocks, %d k blocks for %d/%d rows of %d/%d", ctx,
        d->num_q_blocks, d->num_k_blocks, a->seqlen_q, a->seqlen_k,
        d->block_rows, d->block_k);

  long long dd = (long long)d->head_dim_pad + d->head_dim_v_pad;
  long long kv = (long long)d->block_k * dd * 4;
  long long total = kv + (long long)d->block_q * (dd + d->block_k) * 4;
  long long mem = (long long)c->fast_mem_bytes;
  CHECK(d->block_k == al || kv <= mem / 2,
        "%s: K/V tiles %lld B exceed half of %lld B", ctx, kv, mem);
  // Packing needs at least one row of every head in a tile.
  CHECK(d->block_q <= round_up(pack, al) || total <= mem,
        "%s: tiles %lld B exceed fast memory %lld B", ctx, total, mem);
}

static void check_counts(const char *ctx, const fa_problem *p, const fa_caps *c,
                         const fa_plan_data *d) {
  const fa_attention *a = &p->a;
  CHECK(d->num_splits >= 1 && d->num_splits <= c->max_splits,
        "%s: %d splits, max %d", ctx, d->num_splits, c->max_splits);
  CHECK(d->num_splits <= d->num_k_blocks, "%s: %d splits > %d k blocks", ctx,
        d->num_splits, d->num_k_blocks);
  int64_t items = (int64_t)a->batch * a->heads_q * d->num_q_blocks;
  CHECK(a->heads_q % d->pack_group == 0, "%s: pack_group %d of %d heads", ctx,
        d->pack_group, a->heads_q);
  int64_t work = items / d->pack_group * d->num_splits;
  CHECK(d->num_work == work, "%s: num_work %lld, want %lld", ctx,
        (long long)d->num_work, (long long)work);
  // Split-KV only when the items leave workers idle; then the most splits
  // whose items still fit two whole waves of workers (a partial third wave
  // would cost as long as a whole one), unless max_splits or two kv blocks
  // per split cap them first.
  int64_t base = items / d->pack_group, two_waves = 2 * (int64_t)c->num_workers;
  int cap =
      c->max_splits < d->num_k_blocks / 2 ? c->max_splits : d->num_k_blocks / 2;
  if (cap < 1) cap = 1;
  if (base >= c->num_workers) {
    CHECK(d->num_splits == 1, "%s: %lld items for %d workers, %d splits", ctx,
          (long long)base, c->num_workers, d->num_splits);
  } else {
    CHECK(d->num_splits == 1 || base * d->num_splits <= two_waves,
          "%s: %lld items x %d splits exceed two waves of %d workers", ctx,
          (long long)base, d->num_splits, c->num_workers);
    CHECK(d->num_splits == cap || base * (d->num_splits + 1) > two_waves,
          "%s: %lld items x %d splits: %d would still fit two waves of %d "
          "workers (cap %d)",
          ctx, (long long)base, d->num_splits, d->num_splits + 1,
          c->num_workers, cap);
  }
  CHECK(d->blocks_total == items * d->num_k_blocks,
        "%s: blocks_total %lld, want %lld", ctx, (long long)d->blocks_total,
        (long long)(items * d->num_k_blocks));
  // blocks_visited: the kv ranges at the maximum lengths, summed.
  int64_t visited = 0;
  for (int qb = 0; qb < d->num_q_blocks; qb++) {
    int k0, k1;
    fa_plan_kv_blocks(p, d, fa_diag_shift(p, 0, a->seqlen_q, a->seqlen_k),
                      a->seqlen_q, a->seqlen_k, qb, &k0, &k1);
    if (k1 > k0) visited += k1 - k0;
  }
  visited *= (int64_t)a->batch * a->heads_q;
  CHECK(d->blocks_visited == visited && visited <= d->blocks_total,
        "%s: blocks_visited %lld, ranges sum to %lld (total %lld)", ctx,
        (long long)d->blocks_visited, (long long)visited,
        (long long)d->blocks_total);
}

static void test_tiles(void) {
  // The last two: fast memories past INT_MAX bytes (tile sizes must not
  // overflow int on the way to the kernel's maxima).
  size_t mems[] = {4096,    32768,   49152,           232448,
                   1048576, 2097152, (size_t)1 << 40, (size_t)1 << 62};
  int aligns[] = {1, 4, 8, 16, 64};
  int dims[][2] = {{16, 0},    {64, 0},  {80, 0}, {128, 0},
                   {192, 128}, {256, 0}, {7, 3},  {512, 0}};
  int lens[][2] = {{1, 1},       {1, 4096},  {128, 128},
                   {1000, 1000}, {4096, 17}, {129, 8191}};
  char ctx[256];
  for (size_t mi = 0; mi < sizeof mems / sizeof mems[0]; mi++)
    for (size_t ai = 0; ai < sizeof aligns / sizeof aligns[0]; ai++)
      for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
          int al = aligns[ai];
          int maxq = al * (1 + (int)(ut_rand64() % 16));
          int maxk = al * (1 + (int)(ut_rand64() % 16));
          fa_caps c = make_caps(mems[mi], ut_rand_int(1, 200), al, maxq, maxk,
                                ut_rand_int(1, 64));
          c.pack_gqa = ut_rand_int(0, 1);
          fa_problem p;
          int causal = ut_rand_int(0, 2);
          if (!make_problem(&p, ut_rand_int(1, 3), lens[li][0], lens[li][1], 4,
                            2, dims[di][0], dims[di][1], causal, -1, -1))
            continue;
          fa_plan_data d;
          memset(&d, 0x7f, sizeof d);
          fa_plan_compute(&p, &c, &d);
          snprintf(ctx, sizeof ctx,
                   "mem=%zu align=%d maxq=%d maxk=%d workers=%d splits<=%d "
                   "d=%d,%d sq=%d sk=%d causal=%d",
                   mems[mi], al, maxq, maxk, c.num_workers, c.max_splits,
                   p.a.head_dim, p.a.head_dim_v, p.a.seqlen_q, p.a.seqlen_k,
                   causal);
          check_tiles(ctx, &p, &c, &d);
          check_counts(ctx, &p, &c, &d);
        }
}

// ---- split-KV ------------------------------------------------------------

static void test_splits(void) {
  fa_caps c = make_caps(262144, 64, 8, 128, 128, 32);
  fa_problem p;
  fa_plan_data d;
  // Decode: one query row, a long cache, few heads: the (b, h, q block)
  // items alone would leave most workers idle.
  make_problem(&p, 1, 1, 32768, 4, 1, 128, 0, 0, -1, -1);
  fa_plan_compute(&p, &c, &d);
  CHECK(d.num_splits > 1, "decode: %d splits", d.num_splits);
  check_counts("decode", &p, &c, &d);
  make_problem(&p, 2, 1, 4096, 2, 2, 64, 0, FA_CAUSAL_BOTTOM_RIGHT, -1, -1);
  fa_plan_compute(&p, &c, &d);
  CHECK(d.num_splits > 1, "causal decode: %d splits", d.num_splits);
  check_counts("causal decode", &p, &c, &d);

  // The same decode problem without split-KV in the caps.
  fa_caps c1 = c;
  c1.max_splits = 1;
  make_problem(&p, 1, 1, 32768, 4, 1, 128, 0, 0, -1, -1);
  fa_plan_compute(&p, &c1, &d);
  CHECK(d.num_splits == 1, "max_splits 1: %d splits", d.num_splits);
  fa_caps c3 = c;
  c3.max_splits = 3;
  fa_plan_compute(&p, &c3, &d);
  CHECK(d.num_splits >= 1 && d.num_splits <= 3, "max_splits 3: %d splits",
        d.num_splits);

  // Long queries fill the workers on their own: no split.
  make_problem(&p, 1, 8192, 8192, 8, 8, 128, 0, 0, -1, -1);
  fa_plan_compute(&p, &c, &d);
  CHECK(d.num_splits == 1, "long queries: %d splits", d.num_splits);
  make_problem(&p, 4, 2048, 2048, 16, 4, 64, 0, FA_CAUSAL_BOTTOM_RIGHT, -1, -1);
  fa_plan_compute(&p, &c, &d);
  CHECK(d.num_splits == 1, "long causal queries: %d splits", d.num_splits);

  // Whole waves: bench_sdpa's decode shape (b8, 32 q heads packed 4 to a
  // kv head, d128, kv 32k) on an H200's 264 CUDA workers is 64 items. 8
  // splits make 512 items, 1.94 waves; 9 (the ceiling of 528 / 64, as the
  // planner once chose) made 576, a third wave 18% full that took as long
  // as a whole one.
  fa_caps ch = make_caps(232448, 264, 16, 128, 64, 128);
  ch.pack_gqa = 1;
  make_problem(&p, 8, 1, 32768, 32, 8, 128, 0, 0, -1, -1);
  fa_plan_compute(&p, &ch, &d);
  CHECK(d.pack_group == 4 && d.num_splits == 8 && d.num_work == 512,
        "h200 decode: pack %d, %d splits, %lld items (want 4, 8, 512)",
        d.pack_group, d.num_splits, (long long)d.num_work);
  check_counts("h200 decode", &p, &ch, &d);

  // Short keys: never more splits than kv blocks.
  make_problem(&p, 1, 1, 9, 1, 1, 64, 0, 0, -1, -1);
  fa_plan_compute(&p, &c, &d);
  CHECK(d.num_splits <= d.num_k_blocks, "%d splits of %d blocks", d.num_splits,
        d.num_k_blocks);

  // Random problems: bounds always hold.
  for (int rep = 0; rep < 2000; rep++) {
    fa_caps cr =
        make_caps((size_t)ut_rand_int(2048, 1 << 21), ut_rand_int(1, 256),
                  1 << ut_rand_int(0, 4), 0, 0, ut_rand_int(1, 128));
    cr.max_block_q = cr.tile_align * ut_rand_int(1, 16);
    cr.max_block_k = cr.tile_align * ut_rand_int(1, 16);
    cr.pack_gqa = ut_rand_int(0, 1);
    int hkv = ut_rand_int(1, 4);
    if (!make_problem(&p, ut_rand_int(1, 4), ut_rand_int(1, 300),
                      ut_rand_int(1, 5000), hkv * ut_rand_int(1, 4), hkv,
                      ut_rand_int(1, 200), 0, ut_rand_int(0, 2), -1, -1))
      continue;
    fa_plan_compute(&p, &cr, &d);
    check_tiles("random", &p, &cr, &d);
    check_counts("random", &p, &cr, &d);
  }
}

// ---- kv block ranges -------------------------------------------------------

// For every q block of a (sq, sk) sequence: [k0, k1) must be exactly the
// blocks that hold at least one key visible to at least one of its rows.
static void check_kv_ranges(const fa_problem *p, const fa_plan_data *d, int sq,
                            int sk, const char *ctx) {
  int bq = d->block_rows, bk = d->block_k; // rows per q block
  for (int qb = 0; qb < ceil_div(sq, bq); qb++) {
    int first = -1, last = -1; // visible keys of the block, by brute force
    for (int i = qb * bq; i < sq && i < (qb + 1) * bq; i++)
      for (int j = 0; j < sk; j++)
        if (visible(p, sq, sk, i, j)) {
          if (first < 0 || j < first) first = j;
          if (j > last) last = j;
        }
    int k0 = -77, k1 = -77;
    fa_plan_kv_blocks(p, d, fa_diag_shift(p, 0, sq, sk), sq, sk, qb, &k0, &k1);
    if (first < 0) {
      CHECK(k0 >= k1, "%s sq=%d sk=%d qb=%d: no visible key, blocks [%d,%d)",
            ctx, sq, sk, qb, k0, k1);
      continue;
    }
    CHECK(k0 == first / bk && k1 == last / bk + 1,
          "%s sq=%d sk=%d bq=%d bk=%d qb=%d: blocks [%d,%d), visible keys "
          "%d..%d need [%d,%d)",
          ctx, sq, sk, bq, bk, qb, k0, k1, first, last, first / bk,
          last / bk + 1);
    CHECK(k0 >= 0 && k1 <= ceil_div(sk, bk),
          "%s sq=%d sk=%d qb=%d: blocks [%d,%d) outside [0,%d)", ctx, sq, sk,
          qb, k0, k1, ceil_div(sk, bk));
  }
  // A q block past the sequence's rows visits nothing.
  int k0 = -77, k1 = -77;
  fa_plan_kv_blocks(p, d, fa_diag_shift(p, 0, sq, sk), sq, sk, ceil_div(sq, bq),
                    &k0, &k1);
  CHECK(k0 >= k1, "%s: q block past sq=%d visits [%d,%d)", ctx, sq, k0, k1);
}

static void test_kv_blocks(void) {
  char ctx[160];
  for (int rep = 0; rep < 4000; rep++) {
    int sq = ut_rand_int(1, 150), sk = ut_rand_int(1, 150);
    if (rep % 4 == 0) sq = ut_rand_int(1, 4); // decode-like
    int causal = ut_rand_int(0, 2);
    int wl = ut_rand_int(0, 3) ? ut_rand_int(-1, 40) : -1;
    int wr = causal ? ut_rand_int(-1, 0) : ut_rand_int(-1, 40);
    fa_problem p;
    int g = ut_rand_int(1, 4);
    if (!make_problem(&p, 1, sq, sk, g, 1, 32, 0, causal, wl, wr)) continue;
    int al = 1 << ut_rand_int(0, 4);
    fa_caps c = make_caps((size_t)ut_rand_int(1024, 65536), 8, al,
                          al * ut_rand_int(1, 8), al * ut_rand_int(1, 8), 8);
    c.pack_gqa = ut_rand_int(0, 1);
    fa_plan_data d;
    fa_plan_compute(&p, &c, &d);
    snprintf(ctx, sizeof ctx, "causal=%d w=%d,%d", causal, wl, wr);
    check_kv_ranges(&p, &d, sq, sk, ctx);
    // Varlen / KV cache: a sequence shorter than the maxima, same plan.
    int sq_b = ut_rand_int(1, sq), sk_b = ut_rand_int(0, sk);
    check_kv_ranges(&p, &d, sq_b, sk_b, ctx);
  }
  // A causal square problem skips about half of the blocks.
  fa_problem p;
  make_problem(&p, 1, 1024, 1024, 1, 1, 64, 0, 1, -1, -1);
  fa_caps c = make_caps(65536, 8, 16, 64, 64, 1);
  fa_plan_data d;
  fa_plan_compute(&p, &c, &d);
  CHECK(d.blocks_visited < d.blocks_total * 6 / 10 &&
            d.blocks_visited > d.blocks_total * 4 / 10,
        "causal 1024^2: visited %lld of %lld", (long long)d.blocks_visited,
        (long long)d.blocks_total);
  make_problem(&p, 1, 1024, 1024, 1, 1, 64, 0, 0, -1, -1);
  fa_plan_compute(&p, &c, &d);
  CHECK(d.blocks_visited == d.blocks_total, "no mask: visited %lld of %lld",
        (long long)d.blocks_visited, (long long)d.blocks_total);
}

// ---- splits of a range, work items ------------------------------------

static void test_split_range(void) {
  for (int rep = 0; rep < 20000; rep++) {
    int begin = ut_rand_int(0, 50), end = begin + ut_rand_int(-3, 60);
    int n = ut_rand_int(1, 24);
    int expect = begin, lo = 1 << 30, hi = -1;
    int len = end > begin ? end - begin : 0;
    for (int s = 0; s < n; s++) {
      int s0 = -1, s1 = -1;
      fa_plan_split_range(begin, end, n, s, &s0, &s1);
      int sz = s1 - s0;
      if (len == 0) {
        CHECK(s0 >= s1, "empty [%d,%d) split %d/%d is [%d,%d)", begin, end, s,
              n, s0, s1);
        continue;
      }
      CHECK(s0 == expect && s1 >= s0,
            "[%d,%d) split %d/%d is [%d,%d), expected to start at %d", begin,
            end, s, n, s0, s1, expect);
      expect = s1;
      if (sz < lo) lo = sz;
      if (sz > hi) hi = sz;
    }
    if (len) {
      CHECK(expect == end, "[%d,%d) in %d splits ends at %d", begin, end, n,
            expect);
      CHECK(hi - lo <= 1, "[%d,%d) in %d splits: sizes %d..%d", begin, end, n,
            lo, hi);
    }
  }
}

static void test_work_items(void) {
  for (int rep = 0; rep < 300; rep++) {
    int hkv = ut_rand_int(1, 3);
    int causal = ut_rand_int(0, 2);
    fa_problem p;
    if (!make_problem(&p, ut_rand_int(1, 3), ut_rand_int(1, 300),
                      ut_rand_int(1, 3000), hkv * ut_rand_int(1, 3), hkv, 64, 0,
                      causal, -1, -1))
      continue;
    fa_caps c = make_caps((size_t)ut_rand_int(8192, 131072),
                          ut_rand_int(1, 300), 16, 64, 128, ut_rand_int(1, 16));
    c.pack_gqa = ut_rand_int(0, 1);
    fa_plan_data d;
    fa_plan_compute(&p, &c, &d);
    // With packing an item covers pack_group heads; h is the first of them.
    int P = d.pack_group;
    int B = p.a.batch, H = p.a.heads_q / P, Q = d.num_q_blocks,
        S = d.num_splits;
    size_t n = (size_t)B * H * Q * S;
    CHECK((int64_t)n == d.num_work, "num_work %lld, want %zu",
          (long long)d.num_work, n);
    unsigned char *seen = calloc(n, 1);
    int prev_len = 1 << 30, prev_key = -1, prev_split = -1;
    for (int64_t w = 0; w < d.num_work; w++) {
      int b = -1, h = -1, qb = -1, sp = -1;
      fa_plan_work_item(&p, &d, w, &b, &h, &qb, &sp);
      int ok = b >= 0 && b < B && h >= 0 && h % P == 0 && h / P < H &&
               qb >= 0 && qb < Q && sp >= 0 && sp < S;
      CHECK(ok, "item %lld = (%d,%d,%d,%d) out of range (%d,%d,%d,%d)",
            (long long)w, b, h, qb, sp, B, H * P, Q, S);
      if (!ok) continue;
      h /= P;
      size_t id = (((size_t)b * H + h) * Q + qb) * S + sp;
      CHECK(!seen[id], "item (%d,%d,%d,%d) enumerated twice", b, h, qb, sp);
      seen[id] = 1;
      // Splits innermost: the splits of one (b, h, q block) are adjacent.
      int key = (b * H + h) * Q + qb;
      if (sp > 0)
        CHECK(key == prev_key && sp == prev_split + 1,
              "split %d of (%d,%d,%d) not right after split %d", sp, b, h, qb,
              sp - 1);
      prev_key = key;
      prev_split = sp;
      // Causal: the longest q blocks come first.
      if (causal && sp == 0) {
        int k0, k1;
        fa_plan_kv_blocks(&p, &d, fa_plan_shift(&p), p.a.seqlen_q, p.a.seqlen_k,
                          qb, &k0, &k1);
        int len = k1 > k0 ? k1 - k0 : 0;
        CHECK(len <= prev_len,
              "causal=%d: item %lld (q block %d, %d kv blocks) after one "
              "with %d",
              causal, (long long)w, qb, len, prev_len);
        prev_len = len;
      }
    }
    size_t missing = 0;
    for (size_t i = 0; i < n; i++) missing += !seen[i];
    CHECK(missing == 0, "%zu work items never enumerated", missing);
    free(seen);
  }
}

// GQA packing: the heads that share a kv head share a tile.
static void test_packing(void) {
  fa_problem p;
  fa_plan_data d;
  // Decode with 8 q heads per kv head: one tile holds all 8.
  make_problem(&p, 1, 1, 4096, 32, 4, 128, 0, 0, -1, -1);
  fa_caps c = make_caps(262144, 64, 8, 128, 128, 32);
  c.pack_gqa = 1;
  fa_plan_compute(&p, &c, &d);
  CHECK(d.pack_group == 8 && d.block_rows >= 1 && d.num_q_blocks == 1,
        "decode 32:4 packed: pack %d rows %d q blocks %d", d.pack_group,
        d.block_rows, d.num_q_blocks);
  check_tiles("decode packed", &p, &c, &d);
  check_counts("decode packed", &p, &c, &d);
  c.pack_gqa = 0;
  fa_plan_compute(&p, &c, &d);
  CHECK(d.pack_group == 1 && d.block_rows == d.block_q,
        "pack_gqa off: pack %d rows %d block_q %d", d.pack_group, d.block_rows,
        d.block_q);
  // MHA: nothing to pack.
  make_problem(&p, 1, 100, 100, 4, 4, 64, 0, 0, -1, -1);
  c.pack_gqa = 1;
  fa_plan_compute(&p, &c, &d);
  CHECK(d.pack_group == 1, "MHA packed into %d", d.pack_group);
  // A group larger than the largest tile the kernel takes: B_r must still
  // respect max_block_q (pack fewer heads, or none).
  make_problem(&p, 1, 3, 64, 16, 1, 32, 0, 0, -1, -1);
  c = make_caps(65536, 8, 1, 8, 64, 4);
  c.pack_gqa = 1;
  fa_plan_compute(&p, &c, &d);
  CHECK(d.block_q <= c.max_block_q,
        "group 16, max_block_q 8: block_q %d (pack %d)", d.block_q,
        d.pack_group);
  check_counts("group > max_block_q", &p, &c, &d);
}

static void test_describe(void) {
  fa_problem p;
  make_problem(&p, 2, 100, 300, 4, 4, 64, 0, 1, -1, -1);
  fa_caps c = make_caps(65536, 4, 16, 64, 64, 4);
  fa_plan_data d;
  fa_plan_compute(&p, &c, &d);
  char buf[512];
  size_t n = fa_plan_data_describe(&d, buf, sizeof buf);
  CHECK(n == strlen(buf) && n > 0, "describe returned %zu for %zu chars", n,
        strlen(buf));
  char want[64];
  snprintf(want, sizeof want, "%d", d.block_q);
  CHECK(strstr(buf, want) != NULL, "block_q %d missing from '%s'", d.block_q,
        buf);
  snprintf(want, sizeof want, "%d", d.block_k);
  CHECK(strstr(buf, want) != NULL, "block_k %d missing from '%s'", d.block_k,
        buf);
  snprintf(want, sizeof want, "%d", d.num_splits);
  CHECK(strstr(buf, "split") != NULL && strstr(buf, want) != NULL,
        "splits missing from '%s'", buf);
  // snprintf contract: NULL/0 gives the length; truncation NUL-terminates.
  CHECK(fa_plan_data_describe(&d, NULL, 0) == n, "length query %zu != %zu",
        fa_plan_data_describe(&d, NULL, 0), n);
  char small[8];
  memset(small, 'x', sizeof small);
  CHECK(fa_plan_data_describe(&d, small, sizeof small) == n &&
            small[7] == '\0' && strncmp(small, buf, 7) == 0,
        "truncated describe '%.8s'", small);
  printf("plan: %s\n", buf);
}

int main(void) {
  test_tiles();
  test_splits();
  test_kv_blocks();
  test_split_range();
  test_work_items();
  test_packing();
  test_describe();
  return ut_finish("test_plan");
}
