// SPDX-License-Identifier: MIT
// 64-bit safety: a decode step whose K and V page pools each span more than
// 2^31 elements, while only a few pages are ever touched.
//
// The pools are [num_pages = 1.25 x 2^20][page_size 16][heads_kv 2][d 64]
// bf16: 1.25 x 2^31 elements (5 GiB each), reserved with mmap(MAP_NORESERVE) so
// that only the pages the block table names are backed by memory. The
// block table sends each sequence to pages spread over the whole pool, the
// last ones included, so every element offset past 2^31 is exercised
// (page * stride_batch alone exceeds 2^31 elements). A 32-bit offset
// anywhere in the addressing would read the wrong page (caught against the
// oracle) or outside the mapping (a crash).
//
// Run: ctest -L large (or build/tests/stress/test_large). Needs ~10 GiB of
// address space but touches ~5 MiB (about 20 ms); exit 77 (SKIP) where the
// mapping is refused (strict overcommit, a small address-space limit).
#define _DEFAULT_SOURCE 1
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "flashattn.h"
#include "oracle.h"
#include "tensor.h"
#include "ts_problem.h"

enum { PS = 16, HKV = 2, HQ = 16, D = 64, B = 2, BLOCKS = 64 };
#define NUM_PAGES ((1 << 20) + (1 << 18)) /* 1.25 x 2^20 */

int main(void) {
  const int64_t page_elems = (int64_t)PS * HKV * D;      // 2048
  const int64_t pool_elems = page_elems * NUM_PAGES;     // 2^31
  const size_t pool_bytes = (size_t)pool_elems * 2 + 64; // bf16
  printf("K and V pools: %d pages x %d slots x %d heads x %d = %lld "
         "elements each (2^31 = %lld)\n",
         NUM_PAGES, PS, HKV, D, (long long)pool_elems, 1LL << 31);
  uint16_t *k = mmap(NULL, pool_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  uint16_t *v = mmap(NULL, pool_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (k == MAP_FAILED || v == MAP_FAILED) {
    printf("SKIP: cannot reserve 2 x %zu bytes\n", pool_bytes);
    return 77;
  }
  // Block tables: sequence b's block i lives at a page spread over the
  // pool; the last block of sequence 1 is the pool's last page.
  int32_t table[B][BLOCKS];
  for (int b = 0; b < B; b++)
    for (int i = 0; i < BLOCKS; i++)
      table[b][i] = (int32_t)(((int64_t)(i * B + b) * 16411 + 7) % NUM_PAGES);
  table[1][BLOCKS - 1] = NUM_PAGES - 1;
  table[0][BLOCKS - 1] = NUM_PAGES - 2;
  int32_t used[B] = {BLOCKS * PS, BLOCKS * PS - 5};

  fa_attention a = ts_problem(B, 1, BLOCKS * PS, HQ, HKV, D);
  a.block_table = &table[0][0];
  a.max_blocks_per_seq = BLOCKS;
  a.page_size = PS;
  a.num_pages = NUM_PAGES;
  a.seqused_k = used;

  fa_tensor tk = {k, FA_BF16, page_elems, (int64_t)HKV * D, D};
  fa_tensor tv = {v, FA_BF16, page_elems, (int64_t)HKV * D, D};
  ts_rng r;
  ts_rng_seed(&r, 2024);
  // Touch only the named pages (so they are the only ones backed).
  int64_t max_off = 0;
  for (int b = 0; b < B; b++)
    for (int j = 0; j < used[b]; j++)
      for (int h = 0; h < HKV; h++) {
        int64_t ko = fa_oracle_k_index(&a, &tk, b, j, h);
        if (ko > max_off) max_off = ko;
        for (int d = 0; d < D; d++) {
          ts_store(k, FA_BF16, ko + d, ts_rng_normal(&r));
          ts_store(v, FA_BF16, ko + d, ts_rng_normal(&r));
        }
      }
  printf("largest element offset used: %lld (%.2f x 2^31)\n",
         (long long)max_off + D - 1, (double)(max_off + D) / 2147483648.0);

  size_t nq = (size_t)B * HQ * D;
  uint16_t *q = malloc(nq * 2), *o = malloc(nq * 2);
  float *lse = malloc(sizeof(float) * B * HQ);
  double *oref = malloc(sizeof(double) * nq),
         *lref = malloc(sizeof(double) * B * HQ);
  if (!q || !o || !lse || !oref || !lref) return 1;
  for (size_t i = 0; i < nq; i++)
    ts_store(q, FA_BF16, (int64_t)i, ts_rng_normal(&r));
  fa_tensor tq = {q, FA_BF16, (int64_t)HQ * D, (int64_t)HQ * D, D};
  fa_tensor to = {o, FA_BF16, (int64_t)HQ * D, (int64_t)HQ * D, D};
  if (fa_oracle_forward(&a, tq, tk, tv, oref, lref)) return 1;

  int failures = 0, ran = 0;
  for (int i = 0; i < fa_backend_count(); i++) {
    const char *name = fa_backend_name(i);
    if (strncmp(name, "cpu", 3)) continue;
    fa_context *ctx;
    if (fa_context_create_by_name(&ctx, name)) continue;
    ts_poison(o, FA_BF16, nq);
    double t0 = ts_now();
    fa_status s = fa_forward(ctx, &a, tq, tk, tv, to, lse);
    double dt = ts_now() - t0;
    if (s) {
      printf("FAIL %s: %s: %s\n", name, fa_status_string(s), fa_last_error());
      failures++;
      fa_context_destroy(ctx);
      continue;
    }
    double num = 0, den = 0, lerr = 0;
    for (size_t x = 0; x < nq; x++) {
      double g = ts_load(o, FA_BF16, (int64_t)x), e = g - oref[x];
      num += e * e;
      den += oref[x] * oref[x];
    }
    for (int x = 0; x < B * HQ; x++)
      lerr = fmax(lerr, fabs(lse[x] - lref[x]) / fmax(1.0, fabs(lref[x])));
    double err = sqrt(num / den);
    // bf16 output: a same-precision attention errs ~2^-9 (rounded P and O).
    int ok = err < 1e-2 && lerr < 1e-5;
    printf("%s %s: o rel err %.2e, lse err %.2e (%.3fs)\n",
           ok ? "PASS" : "FAIL", name, err, lerr, dt);
    failures += !ok;
    ran++;
    fa_context_destroy(ctx);
  }
  munmap(k, pool_bytes);
  munmap(v, pool_bytes);
  free(q);
  free(o);
  free(lse);
  free(oref);
  free(lref);
  if (!ran) {
    printf("SKIP: no CPU backend\n");
    return 77;
  }
  return failures ? 1 : 0;
}
