// SPDX-License-Identifier: MIT
// cpu.amxbf16.bf16's score, by measured rate: TDPBF16PS against fp32 FMAs on
// this core. The forward's tiles run at a fraction of the AMX rate (the
// softmax between the products is vector work) and the backward's at less
// (five products and two recomputed ones around vector work and packing),
// so each direction takes AMX only where the measured ratio pays for it.
// Baseline flags; called only where the row is usable (the OS has
// granted the tile state). The probe is in isa_amxbf16.c.
#include "backend.h"
#include "cpu_detect.h"
#include "cpu_rules.h"
#include "registry.h" // fa_log: the measured rates behind a score

static _Atomic int measured;
static double rate_amx;
static volatile float rate_sink;

/* Best of five runs, measured once per process. */
static double amx_rate(void) {
  if (!measured) {
    float sink = 0.0f;
    double best = 0.0;
    for (int rep = 0; rep < 5; rep++) {
      const double r = fa_cpu_amx_probe(&sink);
      if (r > best) best = r;
    }
    rate_sink = sink;
    rate_amx = best;
    measured = 1; // (racing first calls measure twice: the same answer)
  }
  return rate_amx;
}

/* The least AMX / fp32 FMA rate ratio at which cpu.amxbf16.bf16 beats
   cpu.avx512.f32 (widening to fp32), from their shares of those rates on the
   Intel AMX machine (bench/NOTES.md, d128 s2048, 1 core): forward 17.7%
   of the AMX rate against 59.7% of the FMA rate, backward 13.1% against
   40.6%. */
#define FA_AMX_FWD_RATIO 3.4
#define FA_AMX_BWD_RATIO 3.1

int fa_cpu_amx_score(const fa_kernel_query *q) {
  const int bwd = q->layout && q->layout->op == FA_OP_BACKWARD;
  const double need = bwd ? FA_AMX_BWD_RATIO : FA_AMX_FWD_RATIO;
  double amx = amx_rate(), fma = 0.0, dp = 0.0;
  if (fa_cpu_has_avx512bf16()) fa_cpu_bf16_rates(&dp, &fma);
  const int sc = fma <= 0.0 || amx > need * fma ? 2 : -1;
  if (fa_log_dispatch())
    fa_log(
        "  cpu.amxbf16.bf16: TDPBF16PS measured %.0f GFLOP/s, fp32 FMA %.0f on "
        "this core (%s needs %.1fx): score %d (%s)",
        amx * 1e-9, fma * 1e-9, bwd ? "the backward" : "the forward", need, sc,
        sc > 0 ? "AMX tiles are faster" : "widening to fp32 is faster");
  return sc;
}
