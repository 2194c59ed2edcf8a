# SPDX-License-Identifier: MIT
"""The tests' oracle: attention in float64 numpy, written from flashattn.h's
semantics (positions, masks, softcap, ALiBi, sinks) and nothing of the
library's: a naive two-pass softmax (max, then sum) over the full score
matrix, a different algorithm from the online softmax under test."""
import numpy as np


def attention(q, k, v, *, causal=0, window=(-1, -1), scale=None, softcap=0.0,
              alibi=None, sinks=None, qpos=None, kpos=None, seqused_k=None):
    """q [b, sq, hq, d], k [b, sk, hkv, d], v [b, sk, hkv, dv] (any float
    dtype; computed in float64). causal: 0, 1 (bottom-right), 2 (top-left).
    qpos/kpos: per-sequence positions of row 0 (None: aligned). seqused_k:
    real key counts per sequence (None: sk). Returns (o [b, sq, hq, dv],
    lse [b, hq, sq]) in float64."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    b, sq, hq, d = q.shape
    sk, hkv, dv = k.shape[1], k.shape[2], v.shape[3]
    scale = 1.0 / np.sqrt(d) if not scale else scale
    o = np.zeros((b, sq, hq, dv))
    lse = np.full((b, hq, sq), -np.inf)
    wl, wr = window
    if causal:
        wr = 0
    for bi in range(b):
        n = sk if seqused_k is None else int(seqused_k[bi])
        if qpos is None:
            qp = 0 if causal == 2 else n - sq
        else:
            qp = qpos[bi]
        kp = 0 if kpos is None else kpos[bi]
        pq = qp + np.arange(sq)[:, None]
        pk = kp + np.arange(n)[None, :]
        vis = np.ones((sq, n), bool)
        if wl >= 0:
            vis &= pk >= pq - wl
        if wr >= 0:
            vis &= pk <= pq + wr
        for h in range(hq):
            g = h // (hq // hkv)
            s = scale * (q[bi, :, h] @ k[bi, :n, g].T)
            if softcap > 0:
                s = softcap * np.tanh(s / softcap)
            if alibi is not None:
                s = s - alibi[h] * np.abs(pq - pk)
            s = np.where(vis, s, -np.inf)
            sink = -np.inf if sinks is None else float(sinks[h])
            m = np.maximum(s.max(axis=1, initial=-np.inf), sink)
            safe = np.where(np.isfinite(m), m, 0.0)
            p = np.exp(s - safe[:, None])
            tot = p.sum(axis=1) + np.exp(sink - safe)
            with np.errstate(divide="ignore", invalid="ignore"):
                lse[bi, h] = np.where(tot > 0, safe + np.log(tot), -np.inf)
                w = np.where(tot[:, None] > 0, p / tot[:, None], 0.0)
            o[bi, :, h] = w @ v[bi, :n, g]
    return o, lse


def rel_err(x, ref):
    """Relative Frobenius error; NaN anywhere makes it NaN (never passes)."""
    x = np.asarray(x, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if x.shape != ref.shape:
        raise AssertionError("shape %s != reference %s" % (x.shape, ref.shape))
    den = np.linalg.norm(ref)
    return np.linalg.norm(x - ref) / (den if den > 0 else 1.0)


def numeric_grads(f, arrays, do, eps=1e-6):
    """Central finite differences of L = sum(f(*arrays) * do) with respect
    to each array (float64)."""
    arrays = [np.array(a, dtype=np.float64) for a in arrays]
    grads = []
    for a in arrays:
        g = np.zeros_like(a)
        it = np.nditer(a, flags=["multi_index"])
        for _ in it:
            i = it.multi_index
            old = a[i]
            a[i] = old + eps
            hi = np.sum(f(*arrays) * do)
            a[i] = old - eps
            lo = np.sum(f(*arrays) * do)
            a[i] = old
            g[i] = (hi - lo) / (2 * eps)
        grads.append(g)
    return grads
