# SPDX-License-Identifier: MIT
"""bench/plot.py on the committed H200 JSON and on a real fa-bench --sweep
(FA_BENCH names the binary; ctest sets it), with a fa-peak-shaped ceiling.
Skips without matplotlib."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("matplotlib")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PLOT = os.path.join(ROOT, "bench", "plot.py")


def plot(*args):
    r = subprocess.run([sys.executable, PLOT] + list(args),
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == b"\x89PNG\r\n\x1a\n" and os.path.getsize(path) > 5000


@pytest.mark.parametrize("name,which", [("final-bf16.json", "forward"),
                                        ("run27-final-bwd-decode.json",
                                         "backward"),
                                        ("run27-final-bwd-decode.json",
                                         "decode")])
def test_gpu_bench_json(tmp_path, name, which):
    out = str(tmp_path / "chart.png")
    plot(os.path.join(ROOT, "bench", "gpu", "runs", name), "--pass", which,
         "-o", out)
    assert is_png(out)


def test_fa_bench_sweep(tmp_path):
    exe = os.environ.get("FA_BENCH")
    if not exe or not os.path.exists(exe):
        pytest.skip("FA_BENCH does not name a fa-bench binary")
    r = subprocess.run([exe, "--sweep", "--sweep-s", "16,32", "--sweep-d",
                        "8,16", "-h", "2", "--iters", "1", "--warmup", "0",
                        "--threads", "1"], capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert [(x["head_dim"], x["seqlen_k"]) for x in rows] == [
        (8, 16), (8, 32), (16, 16), (16, 32)]
    assert all(x["check"]["pass"] for x in rows)
    assert r.stderr.count("fa-bench: sweep ") == 4  # progress on stderr
    sweep = tmp_path / "sweep.jsonl"
    sweep.write_text(r.stdout)
    peak = tmp_path / "peak.json"
    peak.write_text(json.dumps({"threads": 1, "probes": [
        {"name": "avx2 fp32 fma", "gflops_1": 50.0, "gflops_all": 50.0}]}))
    out = str(tmp_path / "cpu.png")
    plot(str(sweep), "--peak", str(peak), "-o", out)
    assert is_png(out)
