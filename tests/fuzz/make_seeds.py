#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write the seed corpus of fuzz_api (tests/fuzz/corpus/seed-*).

Each seed spells out one problem in fz_decode()'s byte format (fuzz_api.c),
field by field, so a seed is readable here and the fuzzer starts from every
feature at once instead of discovering the format. Regression inputs
(regress-*) are the fuzzer's own finds and are not generated here.

    python3 tests/fuzz/make_seeds.py [corpus-dir]
"""
import os
import struct
import sys

ALL = 0xFF  # every operation (explain, forward, backward, merge, plan) on
            # every context


def case(name, *, ops=ALL, threads=1, dtype=0, seed=1, mode=0, b=2, sq=5,
         sk=7, hkv=2, group=2, d=8, dv=0, scale=0, causal=0, wl=-1, wr=-1,
         cap=0, alibi=0, sinks=0, varlen=0, seqused=0, paged=0, lse_null=0,
         cuq=None, cuk=None, used=None, page=None, layout_q=0, layout_k=0,
         mutations=(), merge_n=2, merge_flags=0, tail=b"\x40\x00"):
    def small(v, lo, hi):
        assert lo <= v <= hi, (name, v)
        return v - lo
    out = bytearray([ops, threads, dtype])
    out += struct.pack("<I", seed)
    out += bytes([mode, small(b, 1, 3), small(sq, 1, 12), small(sk, 1, 24),
                  small(hkv, 1, 2)])
    out.append(0xF7 if group == 64 else small(group, 1, 3))
    big = {64: 0xF8, 128: 0xF9, 256: 0xFA, 512: 0xFB, 513: 0xFC, 600: 0xFD}
    out.append(big[d] if d in big else small(d, 1, 20))
    out.append(0 if dv == 0 else small(dv, 1, 20))
    out.append(scale)
    out.append(causal)
    out.append(0 if wl < 0 else 0x80 + wl)
    out.append(0 if wr < 0 else 0x80 + wr)
    out.append(0 if cap == 0 else 0xC0 + int(2 * cap - 1))
    feat = (alibi | sinks << 1 | varlen << 2 | seqused << 4 | paged << 5 |
            lse_null << 6 | (0x80 if mutations else 0))
    out.append(feat)
    if varlen in (1, 2):
        out += bytes([0] + cuq)
    if varlen in (1, 3):
        out += bytes([0] + cuk)
    if seqused:
        out += bytes(used)
    if paged:
        ps, extra_block, pages, table = page
        out += bytes([ps - 1, extra_block, pages - 1] + table)
    out += bytes([layout_q, layout_k])
    if mutations:
        out.append(len(mutations) - 1)
        for m in mutations:
            out += bytes(m)
    out += bytes([merge_n - 1, merge_flags])
    out += tail  # explain's buffer length / 8, merge's in-place part
    return name, bytes(out)


T = {"q": 0, "k": 1, "v": 2, "o": 3, "do": 4, "dq": 5, "dk": 6, "dv": 7,
     "lse": 8}
# mutation kinds: 0/1/2 stride_batch/seq/head := edge value, 3 data NULL,
# 4 dtype, 5 alias another tensor's buffer; target 8 (lse): kind odd NULL,
# even: alias the buffer of tensor `val`.
SEEDS = [
    case("basic-f32"),
    case("mha-3-heads", hkv=2, group=3, d=20),
    case("basic-f16", dtype=1),
    case("basic-bf16", dtype=2, seed=7),
    case("causal-br", causal=1, sq=5, sk=9),
    case("causal-tl", causal=2, sq=9, sk=5),
    case("window", wl=3, wr=1, sq=12, sk=12),
    case("softcap-alibi-sinks", cap=5, alibi=1, sinks=1, scale=40),
    case("varlen", varlen=1, b=3, sq=6, sk=9, cuq=[6, 0, 3], cuk=[9, 4, 0]),
    case("varlen-q-seqused", varlen=2, seqused=1, b=3, sq=6, sk=9,
         cuq=[2, 6, 1], used=[9, 0, 4]),
    case("paged", paged=1, b=2, sk=9, seqused=1, used=[9, 5],
         page=(4, 1, 7, [3, 0, 5, 6, 1, 2, 4, 6])),
    case("paged-shared-pages", paged=1, b=2, sk=6,
         page=(3, 0, 3, [2, 0, 2, 1])),
    case("gqa-64", hkv=1, group=64, b=1, sq=3, sk=17, d=16),
    case("decode", b=3, sq=1, sk=24, hkv=1, group=3, d=20),
    case("head-dim-512", b=1, sq=2, sk=3, hkv=1, group=1, d=512),
    case("head-dim-600-unsupported", b=1, sq=2, sk=3, hkv=1, group=1, d=600),
    case("head-dim-1", d=1, sq=11, sk=16, b=3, hkv=1, group=1),
    case("dv-differs", d=12, dv=19, layout_q=1, layout_k=2),
    case("layouts-padded", layout_q=0x0D, layout_k=0x16),
    case("large-logits", mode=2, d=20, scale=32),
    case("f16-near-max", dtype=1, mode=3),
    case("all-equal", mode=4, causal=1),
    case("nan-in-q", mode=0x08),
    case("nan-in-k", mode=0x10, causal=1),
    case("nan-in-v", mode=0x18, causal=1),
    case("no-lse", lse_null=1),
    case("mut-negative-stride", mutations=[(T["k"], 1, 0)]),
    case("mut-null-o", mutations=[(T["o"], 3, 0)]),
    case("mut-dtype", mutations=[(T["v"], 4, 1)]),
    case("mut-overflow-stride", mutations=[(T["q"], 0, 3)]),
    case("mut-o-aliases-q", mutations=[(T["o"], 5, T["q"])]),
    case("mut-o-overlaps-self", mutations=[(T["o"], 1, 10)]),
    case("mut-lse-in-dq", mutations=[(T["lse"], 0, T["dq"])]),
    case("mut-lse-in-q", mutations=[(T["lse"], 0, T["q"])]),
    case("mut-dq-aliases-do", mutations=[(T["dq"], 5, T["do"])]),
    case("merge-inplace", merge_n=3, merge_flags=0x03),
    case("merge-mixed-dtypes", merge_n=4, merge_flags=0x15),
    case("merge-overlap-o", merge_n=2, merge_flags=0x04),
    case("merge-overlap-lse", merge_n=2, merge_flags=0x08),
    case("threads-3-splits", threads=3, b=1, hkv=1, group=1, sq=1, sk=24),
]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "corpus")
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS:
        with open(os.path.join(out, "seed-" + name), "wb") as f:
            f.write(data)
    print(f"{len(SEEDS)} seeds in {out}")


if __name__ == "__main__":
    main()
