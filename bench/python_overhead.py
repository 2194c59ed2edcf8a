#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What a small call costs through the Python package, against the same
fa_forward called directly through the package's ctypes prototype.

One tiny CPU problem (b=1, s=1, one head, d=8, one thread, so the kernel
itself is negligible); per-call times are the best of 5 runs of N calls,
in CPU time of this process (a shared machine inflates wall time, not the
cost). Usage: python3 bench/python_overhead.py [-n 20000]
(with FLASHATTN_LIBRARY or PYTHONPATH pointing at a build, as for import).
"""
import argparse
import ctypes
import os
import sys
import time
import timeit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))
import numpy as np  # noqa: E402

import flashattn as fa  # noqa: E402
from flashattn import _api, _lib  # noqa: E402


def per_call(f, n):
    best = min(timeit.repeat(f, timer=time.process_time, number=n, repeat=5))
    return best / n * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=20000)
    n = ap.parse_args().n
    fa.set_threads(1)
    q = np.ones((1, 1, 1, 8), np.float32)
    o = fa.attention(q, q, q)
    # The same problem, built once, for the direct ctypes call.
    c = _api._Call(q, None)
    t = c.tensor(q, "q", 4).tensor()
    to = c.tensor(o, "o", 4).tensor()
    a = c.a
    a.batch = a.seqlen_q = a.seqlen_k = a.heads_q = a.heads_kv = 1
    a.head_dim = 8
    rows = [
        ("fa_forward through ctypes (no Python work)",
         lambda: _lib.forward(c.ctx.ptr, ctypes.byref(a), t, t, t, to, None)),
        ("fa.attention(q, k, v) on numpy", lambda: fa.attention(q, q, q)),
        ("fa.attention(..., return_lse=True)",
         lambda: fa.attention(q, q, q, return_lse=True)),
        ("fa.attention(..., out=o) (general path)",
         lambda: fa.attention(q, q, q, out=o)),
    ]
    torch = None
    try:
        import torch
    except ImportError:
        pass
    if torch is not None:
        tq = torch.ones(1, 1, 1, 8)
        rows.append(("fa.attention on torch CPU tensors",
                     lambda: fa.attention(tq, tq, tq)))
    print("flashattn %s, %s, %d calls per run" % (fa.library_version,
                                                   fa.backends()[0], n))
    for name, f in rows:
        print("%-46s %7.2f us" % (name, per_call(f, n)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
