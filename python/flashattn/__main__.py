# SPDX-License-Identifier: MIT
"""python3 -m flashattn: the version, the backends found, and a self-check
(a small causal GQA problem against a float64 numpy computation)."""
import sys

import flashattn as fa


def self_check():
    import numpy as np
    rng = np.random.default_rng(0)
    b, sq, sk, hq, hkv, d = 2, 13, 17, 4, 2, 32
    q = rng.standard_normal((b, sq, hq, d), dtype=np.float32)
    k = rng.standard_normal((b, sk, hkv, d), dtype=np.float32)
    v = rng.standard_normal((b, sk, hkv, d), dtype=np.float32)
    o = fa.attention(q, k, v, causal=True)
    kk = np.repeat(k.astype(np.float64), hq // hkv, axis=2)
    vv = np.repeat(v.astype(np.float64), hq // hkv, axis=2)
    s = np.einsum("bqhd,bkhd->bhqk", q.astype(np.float64), kk) / np.sqrt(d)
    s = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq,
                 s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = np.einsum("bhqk,bkhd->bqhd", p / p.sum(-1, keepdims=True), vv)
    err = np.linalg.norm(o - ref) / np.linalg.norm(ref)
    return err < 1e-5, err


def main():
    print("flashattn %s (%s)" % (fa.library_version, fa.library_path))
    print("backends: %s" % ", ".join(fa.backends()))
    try:
        ok, err = self_check()
    except ImportError:
        print("self-check: skipped (numpy is not installed)")
        return 0
    print("self-check: %s (causal GQA f32, relative error %.2g vs float64)" %
          ("ok" if ok else "FAILED", err))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
