// SPDX-License-Identifier: MIT
// backends/cuda/sm90/sm90_paged.h -- how the sm90 forward's producer cuts a key
// block of a paged K/V cache into TMA boxes -- on the host, as plain C:
//   - the page sizes it accepts for each sm90 tile are exactly those whose
//     boxes tile every block, each box inside one page and starting on an
//     8-row swizzle atom (checked box by box, not by the rule's formula);
//   - the page and slot of each box address the same rows as
//     fa_seq_k_offset (core/seq_rows.h, the one every kernel uses), on
//     random block tables with entries outside the pool: such an entry, and
//     a box past the sequence, give the coordinate num_pages (the copy
//     engine fills zeros), and a box past the sequence reads no entry.
// No GPU needed; labels cuda, unit.
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gpu_params.h"
#include "seq_rows.h"
#include "sm90_paged.h"
#include "sm90_tiles.h"
#include "tensor.h"

/* Whether every block of bn keys over pages of ps slots is whole boxes of
   min(ps, bn) rows, each inside one page and 8-row aligned, for the first
   blocks of a sequence (the pattern repeats after lcm(ps, bn) keys). */
static int boxes_tile_blocks(int ps, int bn) {
  const int rows = ps < bn ? ps : bn;
  if (bn % rows || rows % 8) return 0;
  for (int key = 0; key < 64 * bn + 8 * ps; key += rows) {
    const int slot = key % ps;
    if (slot + rows > ps || slot % 8) return 0;
  }
  return 1;
}

static void check_geometry(void) {
  int accepted = 0;
  for (int i = 0; i < fa_cuda_num_sm90_tiles; i++) {
    const int bn = fa_cuda_sm90_tiles[i].block_n;
    for (int ps = 1; ps <= 1024; ps++) {
      const char *why = NULL;
      const int ok = fa_sm90_paged_geometry_ok(ps, bn, &why);
      CHECK(ok == boxes_tile_blocks(ps, bn),
            "block_n %d page %d: sm90_paged.h says %d", bn, ps, ok);
      CHECK(ok || (why && *why), "block_n %d page %d: declined, no reason", bn,
            ps);
      accepted += ok;
    }
    const char *why = NULL;
    CHECK(fa_sm90_paged_geometry_ok(16, bn, &why) &&
              fa_sm90_paged_geometry_ok(64, bn, &why),
          "block_n %d: pages 16 and 64 declined", bn);
  }
  printf("geometry: %d (page size, tile) pairs accepted, each box by box\n",
         accepted);
}

/* A random paged problem: its table (some entries outside the pool) and
   the boxes of every block against fa_seq_k_offset, row by row. */
static void check_boxes(ts_rng *r, int bn) {
  static const int sizes[] = {8, 16, 32, 64, 128, 256, 384, 512};
  const int ps = sizes[ts_rng_int(r, 0, 7)];
  const char *why = NULL;
  if (!fa_sm90_paged_geometry_ok(ps, bn, &why)) return;
  const int batch = ts_rng_int(r, 1, 4), heads = ts_rng_int(r, 1, 4);
  const int seqlen_k = ts_rng_int(r, 1, 3000);
  const int mbps = (seqlen_k + ps - 1) / ps + ts_rng_int(r, 0, 2);
  const int num_pages = batch * mbps + ts_rng_int(r, 0, 5);
  int32_t *table = malloc(sizeof(int32_t) * batch * mbps);
  if (!table) {
    CHECK(0, "out of memory");
    return;
  }
  static const int32_t bad[] = {-1, INT32_MIN, INT32_MAX, -100000};
  for (int i = 0; i < batch * mbps; i++) {
    const int kind = ts_rng_int(r, 0, 9);
    table[i] = kind == 0   ? bad[ts_rng_int(r, 0, 3)]
               : kind == 1 ? num_pages + ts_rng_int(r, 0, 3)
                           : ts_rng_int(r, 0, num_pages - 1);
  }
  fa_gpu_params p;
  memset(&p, 0, sizeof p);
  p.prob.paged = 1;
  p.prob.page_size = ps;
  p.prob.num_pages = num_pages;
  p.prob.block_table = table;
  p.prob.max_blocks_per_seq = mbps;
  fa_tensor_view k = {NULL, (int64_t)ps * heads * 128 + 64, heads * 128 + 8,
                      128};
  const int rows = fa_sm90_paged_box_rows(ps, bn);
  for (int b = 0; b < batch; b++) {
    const int sk = ts_rng_int(r, 0, seqlen_k);
    for (int key0 = 0; key0 < (sk + bn - 1) / bn * bn; key0 += rows) {
      const fa_sm90_paged_box x = fa_sm90_paged_box_of(&p, b, sk, key0);
      const int h = ts_rng_int(r, 0, heads - 1);
      if (key0 >= sk) {
        CHECK(x.page == num_pages, "page %d b %d key %d past sk %d: page %d",
              ps, b, key0, sk, x.page);
        continue;
      }
      const int64_t off = fa_seq_k_offset(&p.prob, &k, b, key0, h);
      if (off < 0) {
        CHECK(x.page == num_pages, "page %d b %d key %d: entry %d, page %d", ps,
              b, key0, table[b * mbps + key0 / ps], x.page);
        continue;
      }
      CHECK(x.page >= 0 && x.page < num_pages && x.slot >= 0 &&
                x.slot + rows <= ps,
            "page %d b %d key %d: box page %d slot %d outside", ps, b, key0,
            x.page, x.slot);
      for (int i = 0; i < rows && key0 + i < mbps * ps; i++) {
        const int64_t want = fa_seq_k_offset(&p.prob, &k, b, key0 + i, h);
        const int64_t got =
            x.page * k.sb + (int64_t)(x.slot + i) * k.ss + (int64_t)h * k.sh;
        CHECK(want == got, "page %d b %d key %d row %d: offset %lld, box %lld",
              ps, b, key0, i, (long long)want, (long long)got);
      }
    }
  }
  free(table);
}

int main(void) {
  uint64_t seed = ts_seed_base();
  ts_rng r;
  ts_rng_seed(&r, seed);
  printf("test_sm90_paged: seed 0x%llx\n", (unsigned long long)seed);
  check_geometry();
  for (int c = 0; c < 300; c++)
    for (int i = 0; i < fa_cuda_num_sm90_tiles; i++)
      check_boxes(&r, fa_cuda_sm90_tiles[i].block_n);
  printf("sm90_paged.h: boxes against fa_seq_k_offset on 300 random tables "
         "per tile (FA_TEST_SEED=0x%llx reproduces)\n",
         (unsigned long long)seed);
  return ut_finish("gpu.sm90-paged");
}
