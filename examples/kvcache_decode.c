// SPDX-License-Identifier: MIT
// Decoding over a paged KV cache: each sequence of a batch holds its keys
// and values in fixed-size pages of one shared pool, reached through a
// block table, and has its own length (seqused_k). Each step runs one new
// query per sequence against everything cached (GQA: 8 query heads share 2
// kv heads), then appends that step's key and value. Checked against a
// naive loop that reads the same pages.
#include <flashattn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  BATCH = 3,
  HQ = 8,
  HKV = 2,
  D = 64,
  PAGE = 16,              // key slots per page
  BLOCKS = 8,             // pages per sequence: room for 128 keys
  PAGES = BATCH * BLOCKS, // the pool
  ROW = HKV * D,          // floats per cached key (all kv heads)
  STEPS = 2
};

static float frand(void) { return (float)(2.0 * rand() / RAND_MAX - 1); }

// Pool offset (in floats) of key j of sequence b, through the block table.
static size_t slot(const int32_t *table, int b, int j) {
  return ((size_t)table[b * BLOCKS + j / PAGE] * PAGE + j % PAGE) * ROW;
}

// The naive definition: one query row per sequence and head against keys
// [0, len[b]) of its kv head; max |o - naive| over the batch.
static double check(const float *q, const float *kp, const float *vp,
                    const int32_t *table, const int32_t *len, const float *o) {
  double err = 0, p[BLOCKS * PAGE];
  for (int b = 0; b < BATCH; b++)
    for (int h = 0; h < HQ; h++) {
      const int kvh = h / (HQ / HKV);
      const float *qh = q + ((size_t)b * HQ + h) * D;
      double max = -INFINITY, sum = 0;
      for (int j = 0; j < len[b]; j++) {
        const float *kj = kp + slot(table, b, j) + kvh * D;
        double s = 0;
        for (int c = 0; c < D; c++) s += (double)qh[c] * kj[c];
        p[j] = s / sqrt(D);
        max = fmax(max, p[j]);
      }
      for (int j = 0; j < len[b]; j++) sum += p[j] = exp(p[j] - max);
      for (int c = 0; c < D; c++) {
        double acc = 0;
        for (int j = 0; j < len[b]; j++)
          acc += p[j] * vp[slot(table, b, j) + kvh * D + c];
        err = fmax(err, fabs(o[((size_t)b * HQ + h) * D + c] - acc / sum));
      }
    }
  return err;
}

int main(void) {
  fa_context *ctx;
  if (fa_context_create(&ctx, FA_BACKEND_AUTO, 0) != FA_OK) {
    fprintf(stderr, "%s\n", fa_last_error());
    return 1;
  }
  // Host copies of the cache. Pages are handed out shuffled, as an
  // allocator serving many sequences would: no sequence is contiguous.
  const size_t pool_n = (size_t)PAGES * PAGE * ROW, q_n = BATCH * HQ * D;
  float *kp = malloc(pool_n * sizeof(float));
  float *vp = malloc(pool_n * sizeof(float));
  float *q = malloc(q_n * sizeof(float)), *o = malloc(q_n * sizeof(float));
  if (!kp || !vp || !q || !o) return 1;
  int32_t table[BATCH * BLOCKS], len[BATCH] = {37, 100, 5};
  srand(7);
  for (int i = 0; i < PAGES; i++) table[i] = i;
  for (int i = PAGES - 1; i > 0; i--) {
    int j = rand() % (i + 1), t = table[i];
    table[i] = table[j];
    table[j] = t;
  }
  for (size_t i = 0; i < pool_n; i++) {
    kp[i] = frand();
    vp[i] = frand();
  }

  // Everything the problem points to lives in the context's memory space.
  void *dk = NULL, *dv = NULL, *dq = NULL, *dout = NULL, *dtable = NULL,
       *dlen = NULL;
  fa_status s = FA_OK;
  if (!s) s = fa_malloc(ctx, pool_n * sizeof(float), &dk);
  if (!s) s = fa_malloc(ctx, pool_n * sizeof(float), &dv);
  if (!s) s = fa_malloc(ctx, q_n * sizeof(float), &dq);
  if (!s) s = fa_malloc(ctx, q_n * sizeof(float), &dout);
  if (!s) s = fa_malloc(ctx, sizeof table, &dtable);
  if (!s) s = fa_malloc(ctx, sizeof len, &dlen);
  if (!s) s = fa_copy_to_device(ctx, dtable, table, sizeof table);
  if (!s) s = fa_copy_to_device(ctx, dk, kp, pool_n * sizeof(float));
  if (!s) s = fa_copy_to_device(ctx, dv, vp, pool_n * sizeof(float));

  fa_attention a;
  fa_attention_init(&a);
  a.batch = BATCH;
  a.seqlen_q = 1;             // one new token per sequence
  a.seqlen_k = BLOCKS * PAGE; // the longest a sequence may grow
  a.heads_q = HQ;
  a.heads_kv = HKV;
  a.head_dim = D;
  a.seqused_k = dlen;     // keys actually cached, per sequence
  a.block_table = dtable; // [BATCH][BLOCKS] page numbers
  a.max_blocks_per_seq = BLOCKS;
  a.page_size = PAGE;
  a.num_pages = PAGES;
  // Paged K/V: stride_batch steps from page to page, stride_seq from slot
  // to slot within a page.
  fa_tensor tk = {.data = dk,
                  .dtype = FA_F32,
                  .stride_batch = PAGE * ROW,
                  .stride_seq = ROW,
                  .stride_head = D};
  fa_tensor tv = tk;
  tv.data = dv;
  fa_tensor tq = {.data = dq,
                  .dtype = FA_F32,
                  .stride_batch = HQ * D,
                  .stride_seq = HQ * D,
                  .stride_head = D};
  fa_tensor to = tq;
  to.data = dout;

  double worst = 0;
  for (int step = 0; step < STEPS && !s; step++) {
    for (size_t i = 0; i < q_n; i++) q[i] = frand();
    s = fa_copy_to_device(ctx, dq, q, q_n * sizeof(float));
    if (!s) s = fa_copy_to_device(ctx, dlen, len, sizeof len);
    if (!s) s = fa_forward(ctx, &a, tq, tk, tv, to, NULL);
    if (!s) s = fa_copy_to_host(ctx, o, dout, q_n * sizeof(float));
    if (s) break;
    double err = check(q, kp, vp, table, len, o);
    printf("step %d on %s: lengths %d %d %d, max |o - naive| = %.2e\n", step,
           fa_context_backend(ctx), len[0], len[1], len[2], err);
    worst = fmax(worst, err);
    // Append this step's key and value (new random rows) to each
    // sequence: only the new slot is copied to the cache.
    for (int b = 0; b < BATCH && !s; b++) {
      const size_t at = slot(table, b, len[b]);
      for (int c = 0; c < ROW; c++) {
        kp[at + c] = frand();
        vp[at + c] = frand();
      }
      s = fa_copy_to_device(ctx, (float *)dk + at, kp + at,
                            ROW * sizeof(float));
      if (!s)
        s = fa_copy_to_device(ctx, (float *)dv + at, vp + at,
                              ROW * sizeof(float));
      len[b]++;
    }
  }
  if (s) fprintf(stderr, "%s: %s\n", fa_status_string(s), fa_last_error());

  void *bufs[] = {dk, dv, dq, dout, dtable, dlen};
  for (int i = 0; i < 6; i++) fa_free(ctx, bufs[i]);
  fa_context_destroy(ctx);
  free(kp);
  free(vp);
  free(q);
  free(o);
  return s != FA_OK || !(worst < 1e-4);
}
