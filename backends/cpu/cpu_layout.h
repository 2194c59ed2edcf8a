// SPDX-License-Identifier: MIT
// Where each tile lives in a thread's share of the workspace (forward and
// backward). After the tile-product step: its keys are rounded up to whole
// tiles of FA_TILE_KEYS. Part of cpu_kernels.h.
static cpu_tiles tiles_layout(const fa_plan_data *plan, int bwd) {
  cpu_tiles t;
  const size_t kvt = (size_t)plan->kv_heads_per_tile; // K/V tiles per head
  t.bq = plan->block_q;
  t.bk = plan->block_k;
  t.ld = plan->head_dim_pad;
  t.ldv = plan->head_dim_v_pad;
  t.ldqt = t.bq + 16;
  // K, V, S and P tiles hold the block's keys rounded up to whole tiles.
  const size_t bka =
      ((size_t)t.bk + FA_TILE_KEYS - 1) / FA_TILE_KEYS * FA_TILE_KEYS;
  size_t at = 0;
  // 16-float granules keep every tile 64-byte aligned.
#define FA_TAKE(field, n)                                                      \
  do {                                                                         \
    t.field = at;                                                              \
    at += ((size_t)(n) + 15) / 16 * 16;                                        \
  } while (0)
  FA_TAKE(qt, (size_t)t.ld * t.ldqt);
  FA_TAKE(k, kvt * bka * t.ld);
  FA_TAKE(v, kvt * bka * t.ldv);
  FA_TAKE(s, bka * t.bq);
  FA_TAKE(m, t.bq);
  FA_TAKE(l, t.bq);
  FA_TAKE(mu, t.bq);
  FA_TAKE(vis, 2 * (size_t)t.bq);
  if (bwd) {
    size_t rows = t.bk > t.bq ? (size_t)t.bk : (size_t)t.bq;
    FA_TAKE(q, (size_t)t.bq * t.ld);
    FA_TAKE(dot, (size_t)t.ldv * t.ldqt);
    FA_TAKE(d_o, (size_t)t.bq * t.ldv);
    FA_TAKE(g, (size_t)t.bk * t.bq);
    FA_TAKE(dp, (size_t)t.bk * t.bq);
    FA_TAKE(acc, rows * t.ld);
    FA_TAKE(accv, (size_t)t.bk * t.ldv);
    FA_TAKE(kt, (size_t)t.ld * t.bk); // pass 2: scale * K^T, V^T
    FA_TAKE(vt, (size_t)t.ldv * t.bk);
  } else {
    FA_TAKE(acc, (size_t)t.bq * t.ldv); // the O accumulator
    // Small tiles: Q rows, plus 3 zero rows (dot products go 4 lanes at a
    // time from any lane).
    FA_TAKE(qr, (size_t)(t.bq + 3) * t.ld);
    FA_TAKE(row, (size_t)(t.ld > t.ldv ? t.ld : t.ldv)); // one widened row
    FA_TAKE(p2, (bka + 1) / 2 * t.bq); // bf16 path: P in pairs
    FA_TAKE(fo, (size_t)t.bq * t.ldv); // folded O
    FA_TAKE(fc, (size_t)t.bq * t.ldv); // its compensation
    FA_TAKE(fml, 3 * (size_t)t.bq);    // folded m, l, l's compensation
    t.kt = t.vt = 0;
    t.q = t.dot = t.d_o = t.g = t.dp = t.accv = 0;
  }
#undef FA_TAKE
  if (bwd) t.fo = t.fc = t.fml = 0;
  t.total = at;
  return t;
}
