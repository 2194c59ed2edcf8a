// SPDX-License-Identifier: MIT
// The rules of API.md that hold for every successful call, on every usable
// backend: outputs are written exactly where the views say (padding and
// guard bands untouched), K/V rows past a sequence's real length and pages
// the block table does not name are never read (they hold NaN here), a row
// with no visible key gives O = 0 and LSE = -inf (or the sink), and forward
// is deterministic run to run.
#include <pthread.h>
#include <stdint.h>

#include "api_util.h"

enum { B = 2, SQ = 9, SK = 11, HQ = 4, HKV = 2, D = 8, GUARD = 64 };

static fa_context *ctx;
static const char *backend;

// Rows of q/o padded: stride_seq = HQ*D + 5, stride_head = D + 1.
static fa_tensor padded(float *p, int seq, int heads) {
  fa_tensor t = {0};
  t.data = p;
  t.dtype = FA_F32;
  t.stride_head = D + 1;
  t.stride_seq = (int64_t)heads * (D + 1) + 5;
  t.stride_batch = (int64_t)seq * t.stride_seq + 3;
  return t;
}
static size_t padded_len(int seq, int heads) {
  fa_tensor t = padded(NULL, seq, heads);
  return (size_t)(B * t.stride_batch);
}

static fa_attention problem(void) { return ts_problem(B, SQ, SK, HQ, HKV, D); }

// Inside the view of t (extents B x seq x heads x D)?
static int in_view(const fa_tensor *t, int seq, int heads, size_t idx) {
  for (int b = 0; b < B; b++)
    for (int i = 0; i < seq; i++)
      for (int h = 0; h < heads; h++) {
        size_t o = (size_t)(b * t->stride_batch + i * t->stride_seq +
                            h * t->stride_head);
        if (idx >= o && idx < o + D) return 1;
      }
  return 0;
}

static void test_writes_confined(void) {
  size_t nq = padded_len(SQ, HQ), nk = padded_len(SK, HKV);
  float *q = malloc(nq * sizeof(float)), *k = malloc(nk * sizeof(float));
  float *v = malloc(nk * sizeof(float));
  float *obuf = malloc((nq + 2 * GUARD) * sizeof(float));
  float *lbuf = malloc((B * HQ * SQ + 2 * GUARD) * sizeof(float));
  au_fill_uniform(q, nq, -1, 1);
  au_fill_uniform(k, nk, -1, 1);
  au_fill_uniform(v, nk, -1, 1);
  const uint32_t pattern = 0x7fa5a5a5u; // a NaN nobody computes
  for (size_t i = 0; i < nq + 2 * GUARD; i++) memcpy(&obuf[i], &pattern, 4);
  for (size_t i = 0; i < B * HQ * SQ + 2 * GUARD; i++)
    memcpy(&lbuf[i], &pattern, 4);
  fa_tensor to = padded(obuf + GUARD, SQ, HQ);
  fa_attention a = problem();
  a.causal = FA_CAUSAL_BOTTOM_RIGHT;
  fa_status s = fa_forward(ctx, &a, padded(q, SQ, HQ), padded(k, SK, HKV),
                           padded(v, SK, HKV), to, lbuf + GUARD);
  EXPECT_OK("padded forward", s);
  long outside = 0, unwritten = 0;
  for (size_t i = 0; i < nq + 2 * GUARD; i++) {
    uint32_t u;
    memcpy(&u, &obuf[i], 4);
    int inside =
        i >= GUARD && i < GUARD + nq && in_view(&to, SQ, HQ, i - GUARD);
    if (inside)
      unwritten += u == pattern || !isfinite(obuf[i]);
    else
      outside += u != pattern;
  }
  CHECK(outside == 0, "%s: %ld floats written outside o's view", backend,
        outside);
  CHECK(unwritten == 0, "%s: %ld elements of o not written (or not finite)",
        backend, unwritten);
  outside = unwritten = 0;
  for (size_t i = 0; i < B * HQ * SQ + 2 * GUARD; i++) {
    uint32_t u;
    memcpy(&u, &lbuf[i], 4);
    int inside = i >= GUARD && i < GUARD + B * HQ * SQ;
    if (inside)
      unwritten += u == pattern || !isfinite(lbuf[i]);
    else
      outside += u != pattern;
  }
  CHECK(outside == 0, "%s: %ld floats written outside lse", backend, outside);
  CHECK(unwritten == 0, "%s: %ld lse values not written", backend, unwritten);

  // Deterministic: the same call again gives the same bits.
  float *again = malloc((nq + 2 * GUARD) * sizeof(float));
  memcpy(again, obuf, (nq + 2 * GUARD) * sizeof(float));
  float lagain[B * HQ * SQ];
  memcpy(lagain, lbuf + GUARD, sizeof lagain);
  s = fa_forward(ctx, &a, padded(q, SQ, HQ), padded(k, SK, HKV),
                 padded(v, SK, HKV), to, lbuf + GUARD);
  EXPECT_OK("second forward", s);
  CHECK(memcmp(again, obuf, (nq + 2 * GUARD) * sizeof(float)) == 0 &&
            memcmp(lagain, lbuf + GUARD, sizeof lagain) == 0,
        "%s: forward is not deterministic", backend);
  free(again);
  free(q);
  free(k);
  free(v);
  free(obuf);
  free(lbuf);
}

// K/V rows past seqused_k hold NaN: the result must equal the clean run
// bit for bit (same kernel, same arithmetic, nothing read past the end).
static void test_no_read_past_length(void) {
  enum { NQ = B * SQ * HQ * D, NK = B * SK * HKV * D, NL = B * HQ * SQ };
  static float q[NQ], k[NK], v[NK], o1[NQ], o2[NQ], l1[NL], l2[NL];
  au_fill_uniform(q, NQ, -1, 1);
  au_fill_uniform(k, NK, -1, 1);
  au_fill_uniform(v, NK, -1, 1);
  int32_t used[B] = {6, 0};
  fa_attention a = problem();
  a.seqused_k = used;
  int causal_modes[3] = {0, FA_CAUSAL_BOTTOM_RIGHT, FA_CAUSAL_TOP_LEFT};
  for (int cm = 0; cm < 3; cm++) {
    a.causal = causal_modes[cm];
    a.window_left = cm == 2 ? 2 : -1;
    fa_tensor tq = au_bshd(q, SQ, HQ, D), tk = au_bshd(k, SK, HKV, D),
              tv = au_bshd(v, SK, HKV, D);
    EXPECT_OK("clean",
              fa_forward(ctx, &a, tq, tk, tv, au_bshd(o1, SQ, HQ, D), l1));
    float ks[NK], vs[NK];
    memcpy(ks, k, sizeof ks);
    memcpy(vs, v, sizeof vs);
    for (int b = 0; b < B; b++)
      for (int j = used[b]; j < SK; j++)
        for (int x = 0; x < HKV * D; x++) {
          k[(b * SK + j) * HKV * D + x] = NAN;
          v[(b * SK + j) * HKV * D + x] = NAN;
        }
    EXPECT_OK("poisoned tail",
              fa_forward(ctx, &a, tq, tk, tv, au_bshd(o2, SQ, HQ, D), l2));
    CHECK(memcmp(o1, o2, sizeof o1) == 0 && memcmp(l1, l2, sizeof l1) == 0,
          "%s causal=%d: keys past seqused_k changed the result", backend,
          causal_modes[cm]);
    // Sequence 1 has no key: O = 0, LSE = -inf.
    int bad = 0;
    for (int i = 0; i < SQ; i++)
      for (int h = 0; h < HQ; h++) {
        bad += l2[(1 * HQ + h) * SQ + i] != -INFINITY;
        for (int d = 0; d < D; d++)
          bad += o2[((1 * SQ + i) * HQ + h) * D + d] != 0.0f;
      }
    CHECK(bad == 0, "%s: %d values of key-less rows not 0 / -inf", backend,
          bad);
    memcpy(k, ks, sizeof ks);
    memcpy(v, vs, sizeof vs);
  }

  // Sinks: key-less rows get LSE = sink, O = 0.
  float sinks[HQ] = {0.5f, -1.0f, 2.0f, 0.0f};
  a.causal = 0;
  a.window_left = -1;
  a.sinks = sinks;
  EXPECT_OK("sinks",
            fa_forward(ctx, &a, au_bshd(q, SQ, HQ, D), au_bshd(k, SK, HKV, D),
                       au_bshd(v, SK, HKV, D), au_bshd(o1, SQ, HQ, D), l1));
  int bad = 0;
  for (int i = 0; i < SQ; i++)
    for (int h = 0; h < HQ; h++) {
      bad += l1[(1 * HQ + h) * SQ + i] != sinks[h];
      for (int d = 0; d < D; d++)
        bad += o1[((1 * SQ + i) * HQ + h) * D + d] != 0.0f;
    }
  CHECK(bad == 0, "%s: %d values of key-less rows with sinks wrong", backend,
        bad);
}

// Paged K/V: pages the table does not name, and table entries past a
// sequence's length, hold garbage; the result equals the dense one.
static void test_paged_reads(void) {
  enum { PS = 3, PAGES = 12, MAXB = 4 };
  enum { NQ = B * SQ * HQ * D, NK = B * SK * HKV * D, NL = B * HQ * SQ };
  enum { NP = PAGES * PS * HKV * D };
  static float q[NQ], k[NK], v[NK], kp[NP], vp[NP], o1[NQ], o2[NQ];
  static float l1[NL], l2[NL];
  au_fill_uniform(q, NQ, -1, 1);
  au_fill_uniform(k, NK, -1, 1);
  au_fill_uniform(v, NK, -1, 1);
  for (int i = 0; i < NP; i++) kp[i] = vp[i] = NAN;
  int32_t used[B] = {SK, 7};
  int32_t table[B][MAXB] = {{5, 0, 9, 2}, {7, 11, 3, -99}};
  for (int b = 0; b < B; b++)
    for (int j = 0; j < used[b]; j++)
      for (int x = 0; x < HKV * D; x++) {
        size_t dst = ((size_t)table[b][j / PS] * PS + j % PS) * HKV * D + x;
        kp[dst] = k[(b * SK + j) * HKV * D + x];
        vp[dst] = v[(b * SK + j) * HKV * D + x];
      }
  fa_attention a = problem();
  a.seqused_k = used;
  a.causal = FA_CAUSAL_BOTTOM_RIGHT;
  EXPECT_OK("dense reference",
            fa_forward(ctx, &a, au_bshd(q, SQ, HQ, D), au_bshd(k, SK, HKV, D),
                       au_bshd(v, SK, HKV, D), au_bshd(o1, SQ, HQ, D), l1));
  a.block_table = &table[0][0];
  a.max_blocks_per_seq = MAXB;
  a.page_size = PS;
  a.num_pages = PAGES;
  EXPECT_OK("paged",
            fa_forward(ctx, &a, au_bshd(q, SQ, HQ, D), au_bshd(kp, PS, HKV, D),
                       au_bshd(vp, PS, HKV, D), au_bshd(o2, SQ, HQ, D), l2));
  double worst = 0.0;
  for (int i = 0; i < NQ; i++)
    if (!(fabs((double)o1[i] - o2[i]) <= worst))
      worst = fabs((double)o1[i] - o2[i]);
  for (int i = 0; i < NL; i++)
    if (!(fabs((double)l1[i] - l2[i]) <= worst) && l1[i] != l2[i])
      worst = fabs((double)l1[i] - l2[i]);
  CHECK(worst <= 1e-6, "%s: paged differs from dense by %.3g", backend, worst);
}

// ---- threads ---------------------------------------------------------------

enum { NT = 4, REPS = 10 };

typedef struct worker {
  const char *name; // backend, or NULL for AUTO
  int count;        // fa_backend_count() as this thread saw it
  fa_status status;
  float o[B * SQ * HQ * D], lse[B * HQ * SQ];
  int stable; // every repetition gave the same bits
} worker;

static float tq_data[B * SQ * HQ * D], tk_data[B * SK * HKV * D],
    tv_data[B * SK * HKV * D];

static void *work(void *arg) {
  worker *w = arg;
  w->count = fa_backend_count();
  fa_context *c = NULL;
  w->status = w->name ? fa_context_create_by_name(&c, w->name)
                      : fa_context_create(&c, FA_BACKEND_AUTO, 0);
  if (w->status != FA_OK) return NULL;
  fa_attention a = problem();
  a.causal = FA_CAUSAL_BOTTOM_RIGHT;
  w->stable = 1;
  for (int r = 0; r < REPS && w->status == FA_OK; r++) {
    float o[B * SQ * HQ * D], lse[B * HQ * SQ];
    w->status = fa_forward(
        c, &a, au_bshd(tq_data, SQ, HQ, D), au_bshd(tk_data, SK, HKV, D),
        au_bshd(tv_data, SK, HKV, D), au_bshd(o, SQ, HQ, D), lse);
    if (r == 0) {
      memcpy(w->o, o, sizeof o);
      memcpy(w->lse, lse, sizeof lse);
    } else if (memcmp(w->o, o, sizeof o) || memcmp(w->lse, lse, sizeof lse)) {
      w->stable = 0;
    }
  }
  fa_context_destroy(c);
  return NULL;
}

// Run NT threads, each with its own context (one per backend name, or
// AUTO when names is NULL), all at once.
static void run_threads(const char *const *names, worker *ws) {
  pthread_t t[NT];
  for (int i = 0; i < NT; i++) {
    ws[i].name = names ? names[i] : NULL;
    if (pthread_create(&t[i], NULL, work, &ws[i]) != 0) {
      CHECK(0, "pthread_create failed");
      ws[i].status = FA_ERR_BACKEND;
      t[i] = pthread_self();
    }
  }
  for (int i = 0; i < NT; i++)
    if (!pthread_equal(t[i], pthread_self())) pthread_join(t[i], NULL);
}

// The registry initialises once, thread-safely, even when the first calls
// race; distinct contexts on distinct threads agree bit for bit.
static void test_threads_first_use(void) {
  static worker ws[NT];
  run_threads(NULL, ws);
  for (int i = 0; i < NT; i++) {
    CHECK(ws[i].status == FA_OK, "thread %d: status %d", i, (int)ws[i].status);
    CHECK(ws[i].count == ws[0].count && ws[i].count >= 1,
          "thread %d saw %d backends, thread 0 saw %d", i, ws[i].count,
          ws[0].count);
    CHECK(ws[i].stable, "thread %d: results changed between runs", i);
    CHECK(memcmp(ws[i].o, ws[0].o, sizeof ws[0].o) == 0 &&
              memcmp(ws[i].lse, ws[0].lse, sizeof ws[0].lse) == 0,
          "thread %d and thread 0 differ on the same problem", i);
  }
}

static void test_threads_per_backend(void) {
  static worker ws[NT];
  const char *names[NT];
  int n = fa_backend_count();
  for (int i = 0; i < NT; i++) names[i] = fa_backend_name(i % n);
  run_threads(names, ws);
  for (int i = 0; i < NT; i++) {
    CHECK(ws[i].status == FA_OK && ws[i].stable,
          "thread %d (%s): status %d stable %d", i, names[i], (int)ws[i].status,
          ws[i].stable);
    for (int j = 0; j < i; j++)
      if (strcmp(names[i], names[j]) == 0)
        CHECK(memcmp(ws[i].o, ws[j].o, sizeof ws[0].o) == 0,
              "threads %d and %d on %s differ", i, j, names[i]);
  }
}

int main(void) {
  // Before any other library call: threads race to first use.
  au_fill_uniform(tq_data, sizeof tq_data / sizeof(float), -1, 1);
  au_fill_uniform(tk_data, sizeof tk_data / sizeof(float), -1, 1);
  au_fill_uniform(tv_data, sizeof tv_data / sizeof(float), -1, 1);
  test_threads_first_use();
  test_threads_per_backend();
  int ran = 0;
  for (int bi = 0; bi < fa_backend_count(); bi++) {
    backend = fa_backend_name(bi);
    if (fa_context_create_by_name(&ctx, backend) != FA_OK) {
      CHECK(0, "listed backend %s: %s", backend, fa_last_error());
      continue;
    }
    printf("backend %s\n", backend);
    test_writes_confined();
    test_no_read_past_length();
    test_paged_reads();
    fa_context_destroy(ctx);
    ran++;
  }
  if (!ran) return 77;
  return ut_finish("test_api_contract");
}
