// SPDX-License-Identifier: MIT
// The MFMA fragment index mapping (backends/hip/cdna/cdna_mfma_layout.h),
// checked on the CPU:
//  1. against AMD's documented layouts, written here in the documented
//     direction (element -> lane, item), independently of the header;
//  2. each operand map is a bijection onto the matrix (every element held
//     by exactly one (lane, item));
//  3. an emulated MFMA built only from the header's maps (A, B scattered to
//     lanes, D gathered from lanes) equals the plain matrix product;
//  4. the kernel's "accumulator as B operand" identity (fa_mfma32_c_as_b),
//     and the full S^T = K Q^T, O^T = V^T P^T chain of the CDNA forward
//     kernel on one 32 x 32 tile, emulated lane by lane.
// No GPU is needed; label hip + unit.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cdna_mfma_layout.h"
#include "check.h"

/* ---- 1. the documented direction ------------------------------------------
   AMD Matrix Instruction Calculator / CDNA3 ISA, single-block shapes. */
static void doc32_a(int i, int k, int *lane, int *item) {
  *lane = i + 32 * (k / 4);
  *item = k % 4;
}
static void doc32_b(int k, int j, int *lane, int *item) {
  *lane = j + 32 * (k / 4);
  *item = k % 4;
}
static void doc32_d(int i, int j, int *lane, int *reg) {
  *lane = j + 32 * ((i / 4) % 2);
  *reg = 4 * (i / 8) + i % 4;
}
static void doc16_a(int i, int k, int *lane, int *item) {
  *lane = i + 16 * (k / 4);
  *item = k % 4;
}
static void doc16_b(int k, int j, int *lane, int *item) {
  *lane = j + 16 * (k / 4);
  *item = k % 4;
}
static void doc16_d(int i, int j, int *lane, int *reg) {
  *lane = j + 16 * (i / 4);
  *reg = i % 4;
}

typedef void (*map_fn)(int lane, int item, int *r, int *c);
typedef void (*doc_fn)(int r, int c, int *lane, int *item);

/* Every (lane, item) maps into rows x cols, the documented inverse gives
   it back, and every element is hit exactly once. */
static void check_map(const char *name, map_fn f, doc_fn doc, int items,
                      int rows, int cols) {
  static int hits[64][64];
  memset(hits, 0, sizeof hits);
  for (int lane = 0; lane < FA_MFMA_LANES; lane++)
    for (int it = 0; it < items; it++) {
      int r, c, l2, it2;
      f(lane, it, &r, &c);
      CHECK(r >= 0 && r < rows && c >= 0 && c < cols,
            "%s: lane %d item %d -> (%d, %d) outside %dx%d", name, lane, it, r,
            c, rows, cols);
      if (r < 0 || r >= rows || c < 0 || c >= cols) continue;
      hits[r][c]++;
      doc(r, c, &l2, &it2);
      CHECK(l2 == lane && it2 == it,
            "%s: (%d, %d) is documented in lane %d item %d, the header "
            "says lane %d item %d",
            name, r, c, l2, it2, lane, it);
    }
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++)
      CHECK(hits[r][c] == 1, "%s: element (%d, %d) held %d times", name, r, c,
            hits[r][c]);
}

/* ---- 3. an emulated MFMA from the maps ------------------------------------
 */
typedef struct shape {
  int m, n, k, out;
  map_fn a, b, c;
} shape;

/* D = A B + C computed the way the hardware sees it: lanes' fragments in,
   lanes' accumulators out. A lane's A/B items are gathered by the maps;
   the product is formed from the fragments alone. */
static void emulate(const shape *s, const float *A, const float *B,
                    const float *C, float *D) {
  float fa[64][4], fb[64][4], acc[64][16];
  for (int lane = 0; lane < 64; lane++) {
    for (int v = 0; v < 4; v++) {
      int i, k, j;
      s->a(lane, v, &i, &k);
      fa[lane][v] = A[i * s->k + k];
      s->b(lane, v, &k, &j);
      fb[lane][v] = B[k * s->n + j];
    }
    for (int r = 0; r < s->out; r++) {
      int i, j;
      s->c(lane, r, &i, &j);
      acc[lane][r] = C[i * s->n + j];
    }
  }
  // The instruction: for each output element, the reduction over k pairs
  // the A item holding (i, k) with the B item holding (k, j), wherever they
  // live.
  for (int lane = 0; lane < 64; lane++)
    for (int r = 0; r < s->out; r++) {
      int i, j;
      s->c(lane, r, &i, &j);
      for (int la = 0; la < 64; la++)
        for (int va = 0; va < 4; va++) {
          int ia, ka;
          s->a(la, va, &ia, &ka);
          if (ia != i) continue;
          for (int lb = 0; lb < 64; lb++)
            for (int vb = 0; vb < 4; vb++) {
              int kb, jb;
              s->b(lb, vb, &kb, &jb);
              if (jb == j && kb == ka) acc[lane][r] += fa[la][va] * fb[lb][vb];
            }
        }
    }
  for (int lane = 0; lane < 64; lane++)
    for (int r = 0; r < s->out; r++) {
      int i, j;
      s->c(lane, r, &i, &j);
      D[i * s->n + j] = acc[lane][r];
    }
}

static unsigned rng = 12345u;
static float frand(void) {
  rng = rng * 1664525u + 1013904223u;
  return (float)((rng >> 8) & 0xffff) / 65536.0f - 0.5f;
}

static void check_emulation(const char *name, const shape *s) {
  static float A[32 * 16], B[16 * 32], C[32 * 32], D[32 * 32];
  for (int x = 0; x < s->m * s->k; x++) A[x] = frand();
  for (int x = 0; x < s->k * s->n; x++) B[x] = frand();
  for (int x = 0; x < s->m * s->n; x++) C[x] = frand();
  emulate(s, A, B, C, D);
  for (int i = 0; i < s->m; i++)
    for (int j = 0; j < s->n; j++) {
      double ref = C[i * s->n + j];
      for (int k = 0; k < s->k; k++)
        ref += (double)A[i * s->k + k] * B[k * s->n + j];
      CHECK(fabs(ref - D[i * s->n + j]) < 1e-5, "%s: D[%d][%d] = %g, want %g",
            name, i, j, D[i * s->n + j], ref);
    }
}

/* ---- 4. the forward kernel's data flow on one tile --------------------------
   Keys kk (32), queries q (32), head dim d (16, two 8-deep steps).
   S^T[key][query] = sum_d K[key][d] Q[query][d]: A = K (rows = keys,
   reduction = d), B = Q^T (reduction = d, columns = queries). Then P^T = S^T
   (any elementwise map keeps the layout) is reused in place as the B
   operand of O^T[dv][query] = sum_key V^T[dv][key] P^T[key][query], A = V^T
   gathered per the A map. */
static void check_forward_flow(void) {
  enum { NK = 32, NQ = 32, ND = 16, NDV = 32 };
  static float K[NK][ND], Q[NQ][ND], V[NK][NDV];
  for (int a = 0; a < NK; a++)
    for (int d = 0; d < ND; d++) K[a][d] = frand();
  for (int a = 0; a < NQ; a++)
    for (int d = 0; d < ND; d++) Q[a][d] = frand();
  for (int a = 0; a < NK; a++)
    for (int d = 0; d < NDV; d++) V[a][d] = frand();
  float st[64][16], ot[64][16];
  memset(st, 0, sizeof st);
  memset(ot, 0, sizeof ot);
  // S^T, two steps over d, each instruction emulated from lane fragments.
  for (int t = 0; t < ND / FA_MFMA32_K; t++)
    for (int lane = 0; lane < 64; lane++)
      for (int r = 0; r < 16; r++) {
        int key, q;
        fa_mfma32_c(lane, r, &key, &q);
        for (int la = 0; la < 64; la++)
          for (int v = 0; v < 4; v++) {
            int i, k, kb, jb;
            fa_mfma32_a(la, v, &i, &k);
            if (i != key) continue;
            // B item holding (k, q): lane q + 32*(k/4), item k%4
            int lb = q + 32 * (k / 4), vb = k % 4;
            fa_mfma32_b(lb, vb, &kb, &jb);
            CHECK(kb == k && jb == q, "B map inverse");
            st[lane][r] += K[i][8 * t + k] * Q[jb][8 * t + kb];
          }
      }
  // O^T: 4 steps over the 32 keys; B items are st[lane][4t + v].
  for (int t = 0; t < NK / FA_MFMA32_K; t++)
    for (int lane = 0; lane < 64; lane++)
      for (int r = 0; r < 16; r++) {
        int dv, q;
        fa_mfma32_c(lane, r, &dv, &q);
        for (int k = 0; k < 8; k++) {
          int la = dv + 32 * (k / 4), va = k % 4; // A item (dv, k)
          int i, ka;
          fa_mfma32_a(la, va, &i, &ka);
          CHECK(i == dv && ka == k, "A map inverse");
          int lb = q + 32 * (k / 4), vb = k % 4; // B item (k, q)
          int key, qq;
          fa_mfma32_c(lb, fa_mfma32_c_as_b(t, vb), &key, &qq);
          CHECK(key == 8 * t + k && qq == q,
                "accumulator register %d of lane %d holds (%d, %d), the B "
                "operand needs (%d, %d)",
                fa_mfma32_c_as_b(t, vb), lb, key, qq, 8 * t + k, q);
          // A = V^T[dv][key]: the kernel reads V[key][dv] from LDS
          ot[lane][r] += V[8 * t + ka][i] * st[lb][fa_mfma32_c_as_b(t, vb)];
        }
      }
  for (int lane = 0; lane < 64; lane++)
    for (int r = 0; r < 16; r++) {
      int dv, q;
      fa_mfma32_c(lane, r, &dv, &q);
      double ref = 0;
      for (int key = 0; key < NK; key++) {
        double s = 0;
        for (int d = 0; d < ND; d++) s += (double)K[key][d] * Q[q][d];
        ref += s * V[key][dv];
      }
      CHECK(fabs(ref - ot[lane][r]) < 1e-4, "O^T[%d][%d] = %g, want %g", dv, q,
            ot[lane][r], ref);
    }
  // Each lane's accumulator column is one query: a row's softmax needs only
  // the lane's own registers and lane ^ 32 (the other half of the keys).
  for (int lane = 0; lane < 64; lane++)
    for (int r = 0; r < 16; r++) {
      int key, q, key2, q2;
      fa_mfma32_c(lane, r, &key, &q);
      fa_mfma32_c(lane ^ 32, r, &key2, &q2);
      CHECK(q == lane % 32 && q2 == q && key2 != key,
            "lane %d reg %d: query %d, partner query %d", lane, r, q, q2);
    }
}

int main(void) {
  check_map("32x32x8 A", fa_mfma32_a, doc32_a, 4, 32, 8);
  check_map("32x32x8 D", fa_mfma32_c, doc32_d, 16, 32, 32);
  check_map("16x16x16 A", fa_mfma16_a, doc16_a, 4, 16, 16);
  check_map("16x16x16 D", fa_mfma16_c, doc16_d, 4, 16, 16);
  // B is indexed (k, j): the map returns (k, j) too.
  check_map("32x32x8 B", fa_mfma32_b, doc32_b, 4, 8, 32);
  check_map("16x16x16 B", fa_mfma16_b, doc16_b, 4, 16, 16);
  shape s32 = {32, 32, 8, 16, fa_mfma32_a, fa_mfma32_b, fa_mfma32_c};
  shape s16 = {16, 16, 16, 4, fa_mfma16_a, fa_mfma16_b, fa_mfma16_c};
  check_emulation("32x32x8", &s32);
  check_emulation("16x16x16", &s16);
  for (int t = 0; t < 4; t++)
    for (int v = 0; v < 4; v++)
      for (int lane = 0; lane < 64; lane++) {
        int i, j, k, jb;
        fa_mfma32_c(lane, fa_mfma32_c_as_b(t, v), &i, &j);
        fa_mfma32_b(lane, v, &k, &jb);
        CHECK(i == 8 * t + k && j == jb, "C as B: lane %d step %d item %d",
              lane, t, v);
      }
  check_forward_flow();
  if (ut_finish("hip.mfma_layout")) return 1;
  printf("MFMA fragment layouts (32x32x8, 16x16x16) match AMD's documented "
         "layouts; emulated products and the forward kernel's data flow "
         "agree with plain matrix products\n");
  return 0;
}
