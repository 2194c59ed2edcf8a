// SPDX-License-Identifier: MIT
// cpu.amxbf16's score, by measured rate: TDPBF16PS against fp32 FMAs on
// this core. The forward's tiles run at a fraction of the AMX rate (the
// softmax between the products is vector work) and the backward's at less
// (five products and two recomputed ones around vector work and packing),
// so each direction takes AMX only where the measured ratio pays for it.
// Compiled with the amxbf16 flags; called only where the row is usable
// (the OS has granted the tile state).
#define _POSIX_C_SOURCE 199309L // clock_gettime
#include <immintrin.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "cpu_detect.h"
#include "cpu_rules.h"
#include "registry.h" // fa_log: the measured rates behind a score

#define FA_AMX_RATE_STEPS 2000 // 4 x 16384 FLOPs each: ~0.1 ms

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* FLOP/s of one run: four accumulator tiles fed by two A and two B tiles,
   no loads in the loop (the ceiling fa-peak reports). */
static double amx_rate_once(float *out) {
  struct {
    unsigned char palette, start, reserved[14];
    unsigned short colsb[16];
    unsigned char rows[16];
  } cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int i = 0; i < 8; i++) {
    cfg.colsb[i] = 64;
    cfg.rows[i] = 16;
  }
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  const double t0 = seconds();
  for (int it = 0; it < FA_AMX_RATE_STEPS; it++) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  float c[256];
  _tile_stored(0, c, 64);
  const double dt = seconds() - t0;
  _tile_release();
  *out += c[0];
  return (double)FA_AMX_RATE_STEPS * 4 * 16 * 16 * 32 * 2 / dt;
}

static _Atomic int measured;
static double rate_amx;
static volatile float rate_sink;

/* Best of five runs, measured once per process. */
static double amx_rate(void) {
  if (!measured) {
    float sink = 0.0f;
    double best = 0.0;
    for (int rep = 0; rep < 5; rep++) {
      const double r = amx_rate_once(&sink);
      if (r > best) best = r;
    }
    rate_sink = sink;
    rate_amx = best;
    measured = 1; // (racing first calls measure twice: the same answer)
  }
  return rate_amx;
}

/* The least AMX / fp32 FMA rate ratio at which the AMX kernel beats
   cpu.avx512 (widening to fp32): its tile products reach about 17% of the
   AMX rate in the forward and 9% in the backward, the fp32 kernels about
   56% and 41% of the FMA rate (bench/NOTES.md, the Intel AMX machine). */
#define FA_AMX_FWD_RATIO 3.3
#define FA_AMX_BWD_RATIO 4.6

int fa_cpu_amx_score(const fa_kernel_query *q) {
  const int bwd = q->layout && q->layout->op == FA_OP_BACKWARD;
  const double need = bwd ? FA_AMX_BWD_RATIO : FA_AMX_FWD_RATIO;
  double amx = amx_rate(), fma = 0.0, dp = 0.0;
  if (fa_cpu_has_avx512bf16()) fa_cpu_bf16_rates(&dp, &fma);
  const int sc = fma <= 0.0 || amx > need * fma ? 2 : -1;
  if (fa_log_dispatch())
    fa_log("  cpu.amxbf16: TDPBF16PS measured %.0f GFLOP/s, fp32 FMA %.0f on "
           "this core (%s needs %.1fx): score %d (%s)",
           amx * 1e-9, fma * 1e-9, bwd ? "the backward" : "the forward", need,
           sc, sc > 0 ? "AMX tiles are faster" : "widening to fp32 is faster");
  return sc;
}
