#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The sm90 forward run back to back for a few seconds per shape, with the
SM clock, power and temperature sampled by nvidia-smi meanwhile: does a
shape's rate fall as the run goes on (power or clock limit), or is it
steady (then the rate is the kernel's)?

  python3 bench/gpu/sustained.py --lib build-dev/libflashattn.so [--seconds 3]

Prints, per shape, the TFLOPS of each half-second window and the clock /
power samples of that window.
"""
import argparse
import ctypes
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_sdpa as B  # noqa: E402

SHAPES = [  # (b, s, h, d): 16k tokens, hidden 2048 (the bench's grid)
    (2, 8192, 16, 128),
    (1, 16384, 16, 128),
    (2, 8192, 16, 128),  # again: the order's own drift
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build-dev/libflashattn.so")
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    fa = B.Flashattn(os.path.abspath(args.lib), "cuda")
    fa.stream = torch.cuda.current_stream().cuda_stream
    fa.set_stream(fa.stream)
    for b, s, h, d in SHAPES:
        q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
        k, v = torch.randn_like(q), torch.randn_like(q)
        o = torch.empty_like(q)
        lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
        a = B.FaAttention()
        fa.lib.fa_attention_init(ctypes.byref(a))
        a.batch, a.seqlen_q, a.seqlen_k = b, s, s
        a.heads_q = a.heads_kv = h
        a.head_dim = d
        T = [B.bshd(x, B.FA_BF16) for x in (q, k, v, o)]
        plan, _ = fa.plan(a, B.FA_BF16, T)
        flops = 4.0 * b * h * s * s * d
        smi = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
             "--format=csv,noheader,nounits", "-lms", "100"],
            stdout=subprocess.PIPE, text=True)
        windows = []
        t_end = time.time() + args.seconds
        while time.time() < t_end:
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record()
            n = 0
            t_w = time.time() + 0.5
            while time.time() < t_w:
                fa.lib.fa_plan_forward(plan, *T, lse.data_ptr())
                n += 1
                if n % 8 == 0:
                    torch.cuda.synchronize()
            e1.record()
            e1.synchronize()
            windows.append(flops * n / e0.elapsed_time(e1) / 1e9)
        smi.terminate()
        samples = smi.communicate()[0].split("\n")
        samples = [x for x in samples if x.strip()]
        print("b%d s%d h%d d%d: TFLOPS per 0.5 s window: %s" % (
            b, s, h, d, " ".join("%.0f" % w for w in windows)))
        print("  nvidia-smi (MHz, W, C) every 0.1 s: %s" % " | ".join(
            samples[i] for i in range(0, len(samples), 3)))
        fa.lib.fa_plan_destroy(plan)
        del q, k, v, o, lse


if __name__ == "__main__":
    main()
