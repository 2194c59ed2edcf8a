#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The CPU figures of bench/NOTES.md, measured side by side in one run.

Runs fa-peak (the machine's ceilings) and then fa-bench on the shapes the
CPU issue names, and prints one markdown table: GFLOP/s (GB/s for decode)
and the fraction of the ceiling measured in the same run. Usage:

    python3 bench/cpu_suite.py [--build build] [--backend cpu.avx512.f32] [--quick]
"""
import argparse
import json
import subprocess
import sys


def run(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="smaller shapes")
    a = ap.parse_args()
    peak = run([f"{a.build}/bench/fa-peak", "--json"])
    probes = {p["name"]: p for p in peak["probes"]}
    fp32 = max(p["gflops_all"] for n, p in probes.items() if "fp32" in n)
    fp32_1 = max(p["gflops_1"] for n, p in probes.items() if "fp32" in n)
    bf16 = probes.get("avx512 bf16 dpbf16", {}).get("gflops_all")
    bw = peak["read_gbs"]
    s = 1024 if a.quick else 2048
    sk = 8192 if a.quick else 32768
    bench = [f"{a.build}/bench/fa-bench", "--json", "--no-check",
             "--backend", a.backend, "--iters", str(a.iters), "--warmup", "1"]
    rows = []

    def flops_row(name, args, ceiling, key="fwd", threads=a.threads):
        r = run(bench + ["--threads", str(threads)] + args)
        g = r[f"{key}_tflops"] * 1e3
        rows.append((name, " ".join(args), r["kernel"], f"{g:.1f} GFLOP/s",
                     f"{100 * g / ceiling:.0f}% of {ceiling:.0f}"))
        return g

    print(f"ceilings: fp32 {fp32:.1f} GFLOP/s ({fp32_1:.1f} on 1 thread), "
          f"bf16 {bf16 or 0:.1f}, memory read {bw:.1f} GB/s, "
          f"{peak['threads']} threads", flush=True)
    shape = ["-b", "1", "-h", "8", "-s", str(s)]
    for d in (128, 64):
        for causal in ([], ["--causal"]):
            flops_row(f"fwd f32 d{d}{' causal' if causal else ''}",
                      shape + ["-d", str(d)] + causal, fp32)
    if bf16:
        for causal in ([], ["--causal"]):
            flops_row(f"fwd bf16 d128{' causal' if causal else ''}",
                      shape + ["-d", "128", "--dtype", "bf16"] + causal, bf16)
    flops_row("bwd f32 d128", shape + ["-d", "128", "--bwd"], fp32, key="bwd")
    one = flops_row("fwd f32 d128, 1 thread", shape + ["-d", "128"], fp32_1,
                    threads=1)
    many = flops_row("fwd f32 d128, all threads", shape + ["-d", "128"], fp32)
    rows.append(("scaling 1 -> all threads", "", "", f"{many / one:.2f}x", ""))
    for dt, size in (("bf16", 2), ("f16", 2), ("e4m3", 1)):
        args = ["-b", "1", "-h", "32", "--hkv", "8", "--decode", "--sk",
                str(sk), "-d", "128", "--dtype", dt]
        r = run(bench + ["--threads", str(a.threads)] + args)
        kv_bytes = 2 * sk * 8 * 128 * size  # K and V
        gbs = kv_bytes / (r["fwd_ms_median"] * 1e-3) * 1e-9
        rows.append((f"decode {dt}", " ".join(args), r["kernel"],
                     f"{gbs:.1f} GB/s", f"{100 * gbs / bw:.0f}% of {bw:.1f}"))
    print("| case | fa-bench args | kernel | rate | of ceiling |")
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
