#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Run a few flashattn forward shapes once each, for a profiler to catch.

  ncu --clock-control none -k regex:fwd_kernel python3 bench/gpu/profile_one.py \
      --lib build-cuda/libflashattn.so [shape ...]

Shapes (default: all forward ones): d64, d128, d128c (causal), decode (b8,
32/8 heads, d128, kv 32k), d64s4k / d128s4k (16k tokens at s 4k),
d128s1k / d128s1kc (16k tokens at s 1k, full and causal); bwd64,
bwd128 run one fa_backward (16k tokens, s 4k) after their forward. Uses
bench_sdpa.py's ctypes binding. --cudnn runs the same shapes (forward, and
backward for bwd*) through torch SDPA's cuDNN backend instead, so one ncu
session profiles both kernels on the same tensors' shapes.
"""
import argparse
import ctypes
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_sdpa as B  # noqa: E402

SHAPES = {
    # name: (b, sq, sk, hq, hkv, d, causal)
    "d64": (1, 16384, 16384, 32, 32, 64, False),
    "d128": (1, 16384, 16384, 16, 16, 128, False),
    "d128s8k": (2, 8192, 8192, 16, 16, 128, False),  # the same FLOPs/token

    "d64s4k": (4, 4096, 4096, 32, 32, 64, False),
    "d128s4k": (4, 4096, 4096, 16, 16, 128, False),
    "d128s1k": (16, 1024, 1024, 16, 16, 128, False),  # items of 8 blocks
    "d128s1kc": (16, 1024, 1024, 16, 16, 128, True),
    "d128c": (1, 16384, 16384, 16, 16, 128, True),
    "decode": (8, 1, 32768, 32, 8, 128, False),
}
BACKWARD = {
    "bwd64": (4, 4096, 4096, 32, 32, 64, False),
    "bwd128": (4, 4096, 4096, 16, 16, 128, False),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build-cuda/libflashattn.so")
    ap.add_argument("shapes", nargs="*", default=list(SHAPES),
                    choices=list(SHAPES) + list(BACKWARD))
    ap.add_argument("--cudnn", action="store_true",
                    help="the shapes through torch SDPA's cuDNN backend")
    args = ap.parse_args()
    if args.cudnn:
        return cudnn(args.shapes)
    fa = B.Flashattn(os.path.abspath(args.lib), "cuda")
    fa.set_stream(torch.cuda.current_stream().cuda_stream)
    for name in args.shapes:
        b, sq, sk, hq, hkv, d, causal = {**SHAPES, **BACKWARD}[name]
        q = torch.randn(b, sq, hq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        o = torch.empty_like(q)
        lse = torch.empty(b, hq, sq, device="cuda", dtype=torch.float32)
        a = B.FaAttention()
        fa.lib.fa_attention_init(ctypes.byref(a))
        a.batch, a.seqlen_q, a.seqlen_k = b, sq, sk
        a.heads_q, a.heads_kv, a.head_dim = hq, hkv, d
        a.causal = B.FA_CAUSAL_BOTTOM_RIGHT if causal else 0
        T = [B.bshd(x, B.FA_BF16) for x in (q, k, v, o)]
        plan, desc = fa.plan(a, B.FA_BF16, T)
        print(name, desc, flush=True)
        st = fa.lib.fa_plan_forward(plan, *T, lse.data_ptr())
        fa.check(st, "fa_plan_forward")
        if name in BACKWARD:
            do = torch.randn_like(q)
            grads = [torch.empty_like(x) for x in (q, k, v)]
            T = [B.bshd(x, B.FA_BF16) for x in [q, k, v, o, do] + grads]
            st = fa.lib.fa_backward(fa.ctx, ctypes.byref(a), *T[:5],
                                    lse.data_ptr(), *T[5:])
            fa.check(st, "fa_backward")
        torch.cuda.synchronize()
        fa.lib.fa_plan_destroy(plan)


def cudnn(names):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for name in names:
        b, sq, sk, hq, hkv, d, causal = {**SHAPES, **BACKWARD}[name]
        bwd = name in BACKWARD
        # SDPA takes (b, h, s, d) views of the same bshd storage.
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16,
                               requires_grad=bwd)
                   for s, h in ((sq, hq), (sk, hkv), (sk, hkv)))
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        print(name, "cudnn", flush=True)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            o = torch.nn.functional.scaled_dot_product_attention(
                qt, kt, vt, is_causal=causal, enable_gqa=hq != hkv)
            if bwd:
                o.backward(torch.randn_like(o))
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
