#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Benchmark JSON to PNG charts (matplotlib, Agg: no display needed).

Throughput against sequence length, one panel per head dim (and per mask),
with the ceiling measured in the same run and the peers on the same axes.
Reads, recognised by their contents:

  bench/gpu/bench_sdpa.py --json   {"info", "forward", "backward", "decode"}:
                                   ours against FA2 and cuDNN (torch SDPA),
                                   the ceiling is info.matmul_tflops (decode:
                                   K/V bytes per second against read_tbs)
  fa-bench --sweep (or --json)     one JSON object per line, or a JSON list;
                                   several files or backends become series
  fa-peak --json (with --peak)     the CPU ceiling: the best fp32 (or bf16)
                                   probe over all threads

  python3 bench/plot.py bench/gpu/runs/final-bf16.json -o h200.png
  python3 bench/plot.py sweep.jsonl --peak peak.json -o cpu.png
  python3 bench/plot.py run.json --pass backward -o bwd.png
"""
import argparse
import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, NullLocator  # noqa: E402

# Series styles: ours solid and first; peers dashed; alternatives dotted.
GPU_SERIES = [
    ("ours_tflops", "flashattn", dict(color="C0", lw=2.2, marker="o")),
    ("sm80_tflops", "flashattn, sm80 kernel", dict(color="C0", lw=1.2,
                                                   ls=":", marker=".")),
    ("fa2_tflops", "FlashAttention-2 (torch SDPA)", dict(color="C1", ls="--",
                                                         marker="s")),
    ("cudnn_tflops", "cuDNN (torch SDPA)", dict(color="C2", ls="--",
                                                marker="^")),
]


def finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def load(path):
    """A JSON document, or JSON Lines (fa-bench --sweep). NaN is allowed:
    bench_sdpa.py writes Python's json, which spells missing rates NaN."""
    with open(path) as f:
        text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines()
                if line.strip().startswith("{")]


def seq_label(s):
    return "%dk" % (s // 1024) if s >= 1024 and s % 1024 == 0 else str(s)


def setup_axis(ax, xs, unit):
    xs = sorted(set(xs))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(xs))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([seq_label(x) for x in xs])
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.set_ylabel(unit)


def panels(keys):
    """Rows: masks (full, causal); columns: head dims."""
    dims = sorted({d for d, _ in keys})
    masks = sorted({c for _, c in keys})
    return dims, masks


def figure(dims, masks):
    fig, axes = plt.subplots(len(masks), len(dims), squeeze=False,
                             figsize=(3.6 * len(dims) + 0.6,
                                      2.9 * len(masks) + 0.9))
    return fig, axes


def ceiling_line(ax, value, label, unit=""):
    if finite(value) and value > 0:
        ax.axhline(value, color="0.35", lw=1, ls="-.",
                   label="%s: %.3g %s" % (label, value, unit) if unit
                   else label)


def plot_gpu(doc, which, out, title):
    info = doc.get("info", {})
    rows = doc.get(which)
    if not rows:
        sys.exit("plot.py: no %r rows in this file (it has %s)" % (
            which, ", ".join(k for k in doc if k != "info")))
    if which == "decode":
        return plot_decode(info, rows, out, title)
    keys = {(r["d"], bool(r["causal"])) for r in rows}
    dims, masks = panels(keys)
    tokens = {r["b"] * r["s"] for r in rows}
    xlabel = "sequence length" + (" (batch x length = %s tokens)" % seq_label(
        tokens.pop()) if len(tokens) == 1 else "")
    fig, axes = figure(dims, masks)
    ceiling = info.get("matmul_tflops")
    for i, causal in enumerate(masks):
        for j, d in enumerate(dims):
            ax = axes[i][j]
            sel = sorted((r for r in rows if r["d"] == d and
                          bool(r["causal"]) == causal), key=lambda r: r["s"])
            for key, label, style in GPU_SERIES:
                pts = [(r["s"], r[key]) for r in sel if finite(r.get(key))]
                if pts:
                    ax.plot(*zip(*pts), label=label, **style)
            ceiling_line(ax, ceiling, "ceiling: dense matmul, measured",
                         "TFLOPS")
            setup_axis(ax, [r["s"] for r in sel], "TFLOPS")
            ax.set_title("head dim %d, %s" % (d, "causal" if causal
                                              else "no mask"), fontsize=10)
            if i == len(masks) - 1:
                ax.set_xlabel(xlabel)
    where = "%s, torch %s" % (info.get("device", "GPU"), info.get("torch",
                                                                  "?"))
    heading = title or "flashattn %s %s, %s: %s" % (
        info.get("flashattn", ""), which, info.get("dtype", ""), where)
    finish(fig, axes, heading, out)


def plot_decode(info, rows, out, title):
    fig, axes = plt.subplots(1, 1, squeeze=False, figsize=(7, 4.6))
    ax = axes[0][0]
    rows = sorted(rows, key=lambda r: r["sk"])
    ax.plot([r["sk"] for r in rows], [r["tbs"] for r in rows], color="C0",
            lw=2.2, marker="o", label="flashattn decode (K/V read)")
    reads = [r["read_tbs"] for r in rows if finite(r.get("read_tbs"))]
    if reads:
        ceiling_line(ax, max(reads), "ceiling: memory read, measured",
                     "TB/s")
    copies = [r["copy_tbs"] for r in rows if finite(r.get("copy_tbs"))]
    if copies:
        ax.axhline(max(copies), color="C1", lw=1, ls="--",
                   label="device copy (read + write)")
    setup_axis(ax, [r["sk"] for r in rows], "TB/s")
    ax.set_xlabel("keys per sequence")
    heading = title or "decode, %s: %s" % (info.get("dtype", ""),
                                           info.get("device", "GPU"))
    finish(fig, axes, heading, out, ncol=2)


def cpu_ceiling(peak, dtype):
    if not peak:
        return None, None
    probes = peak.get("probes", [])
    if dtype == "bf16":
        best = [p["gflops_all"] for p in probes if "bf16" in p["name"]]
        if best:
            return max(best), "bf16 dot-product peak, measured"
    best = [p["gflops_all"] for p in probes if "fp32" in p["name"]]
    return (max(best), "fp32 FMA peak, measured") if best else (None, None)


def plot_fa_bench(rows, out, title, which, peak):
    key = "bwd_tflops" if which == "backward" else "fwd_tflops"
    rows = [r for r in rows if finite(r.get(key))]
    if not rows:
        sys.exit("plot.py: no fa-bench rows with %s" % key)
    dims, masks = panels({(r["head_dim"], bool(r["causal"])) for r in rows})
    # GFLOP/s reads better than 0.0x TFLOPS on a CPU.
    giga = max(r[key] for r in rows) < 1.0
    scale, unit = (1e3, "GFLOP/s") if giga else (1.0, "TFLOPS")
    series = sorted({(r["kernel"], r["dtype"]) for r in rows})
    fig, axes = figure(dims, masks)
    for i, causal in enumerate(masks):
        for j, d in enumerate(dims):
            ax = axes[i][j]
            xs = []
            for n, (kernel, dtype) in enumerate(series):
                sel = sorted((r for r in rows if r["head_dim"] == d and
                              bool(r["causal"]) == causal and
                              r["kernel"] == kernel and r["dtype"] == dtype),
                             key=lambda r: r["seqlen_k"])
                if not sel:
                    continue
                xs += [r["seqlen_k"] for r in sel]
                ax.plot([r["seqlen_k"] for r in sel],
                        [r[key] * scale for r in sel], marker="o",
                        lw=2.2 if n == 0 else 1.4, color="C%d" % n,
                        label="%s %s" % (kernel, dtype))
            value, label = cpu_ceiling(peak, series[0][1])
            if value is not None:
                ceiling_line(ax, value * scale / 1e3, "ceiling: " + label,
                             unit)
            setup_axis(ax, xs, unit)
            ax.set_title("head dim %d, %s" % (d, "causal" if causal
                                              else "no mask"), fontsize=10)
            if i == len(masks) - 1:
                ax.set_xlabel("sequence length")
    r0 = rows[0]
    heading = title or "flashattn %s %s on %s (batch %d, %d heads)" % (
        r0.get("version", ""), "backward" if which == "backward" else
        "forward", ", ".join(sorted({r.get("backend", "?") for r in rows})),
        r0["batch"], r0["heads_q"])
    finish(fig, axes, heading, out)


def finish(fig, axes, heading, out, ncol=3):
    handles, labels = {}, []
    for row in axes:
        for ax in row:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                if lab not in handles:
                    handles[lab] = h
                    labels.append(lab)
    fig.suptitle(heading, fontsize=11)
    fig.legend([handles[lab] for lab in labels], labels, loc="lower center",
               ncol=min(len(labels), ncol), fontsize=9, frameon=False)
    # Room at the bottom for the legend's rows.
    legend_rows = -(-len(labels) // ncol)
    height = fig.get_size_inches()[1]
    fig.tight_layout(rect=(0, min(0.3, 0.3 * legend_rows / height + 0.02), 1,
                           0.95))
    fig.savefig(out, dpi=90)
    plt.close(fig)
    print("plot.py: wrote %s" % out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="bench JSON (see --help text)")
    ap.add_argument("-o", "--out", required=True, help="PNG to write")
    ap.add_argument("--pass", dest="which", default="forward",
                    choices=["forward", "backward", "decode"])
    ap.add_argument("--peak", help="fa-peak --json output (CPU ceiling)")
    ap.add_argument("--title", help="replace the generated heading")
    a = ap.parse_args(argv)
    docs = [load(p) for p in a.files]
    peak = load(a.peak) if a.peak else None
    if isinstance(docs[0], dict) and "info" in docs[0]:
        if len(docs) > 1:
            sys.exit("plot.py: one GPU bench file per chart")
        return plot_gpu(docs[0], a.which, a.out, a.title)
    rows = []
    for d in docs:
        rows += d if isinstance(d, list) else [d]
    return plot_fa_bench(rows, a.out, a.title, a.which, peak)


if __name__ == "__main__":
    sys.exit(main())
