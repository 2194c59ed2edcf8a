# SPDX-License-Identifier: MIT
"""flashattn on numpy arrays against the float64 oracle (reference.py).

Inputs are fresh random draws per case; outputs handed to the library
(out=...) are poisoned with NaN first, so an element left unwritten fails;
errors are compared with NaN-propagating norms, so NaN never passes."""
import ctypes
import subprocess
import sys

import pytest

np = pytest.importorskip("numpy")
import flashattn as fa  # noqa: E402
import reference as ref  # noqa: E402

F32_BOUND = 1e-5   # DESIGN.md: fp32 relative Frobenius error
F16_BOUND = 2e-3   # fp16 storage of inputs and output: ~2^-11 per element
_seed = [1234]


def rng():
    _seed[0] += 1
    return np.random.default_rng(_seed[0])


def rand(shape, dtype=np.float32, r=None):
    r = r or rng()
    return r.standard_normal(shape).astype(dtype)


def qkv(b=2, sq=9, sk=13, hq=4, hkv=2, d=16, dv=None, dtype=np.float32):
    r = rng()
    return (rand((b, sq, hq, d), dtype, r), rand((b, sk, hkv, d), dtype, r),
            rand((b, sk, hkv, dv or d), dtype, r))


def poisoned(shape, dtype=np.float32):
    return np.full(shape, np.nan, dtype=dtype)


def check(o, want, bound=F32_BOUND):
    e = ref.rel_err(o, want)
    assert e < bound, "relative error %g >= %g" % (e, bound)


def check_lse(lse, want):
    lse = np.asarray(lse, np.float64)
    assert np.array_equal(np.isneginf(lse), np.isneginf(want))
    fin = np.isfinite(want)
    assert np.all(np.isfinite(lse[fin]))
    assert np.max(np.abs(lse[fin] - want[fin]), initial=0) < 1e-4


# ---- forward ------------------------------------------------------------------
@pytest.mark.parametrize("shape", [
    (1, 1, 1, 1, 1, 8, 8),       # one row, one key
    (2, 9, 13, 4, 2, 16, 16),    # GQA, sq != sk
    (1, 17, 17, 3, 3, 33, 33),   # odd head_dim
    (2, 5, 31, 8, 1, 64, 24),    # MQA, head_dim_v != head_dim
    (1, 130, 129, 2, 2, 128, 128),
])
def test_forward_shapes(shape):
    b, sq, sk, hq, hkv, d, dv = shape
    q, k, v = qkv(b, sq, sk, hq, hkv, d, dv)
    out = poisoned((b, sq, hq, dv))
    o, lse = fa.attention(q, k, v, return_lse=True, out=out)
    assert o is out
    want, wlse = ref.attention(q, k, v)
    check(o, want)
    check_lse(lse, wlse)


@pytest.mark.parametrize("align,code", [("bottom_right", 1), ("top_left", 2)])
@pytest.mark.parametrize("sq,sk", [(7, 7), (5, 12), (12, 5)])
def test_causal(align, code, sq, sk):
    q, k, v = qkv(2, sq, sk, 4, 2, 16)
    o, lse = fa.attention(q, k, v, causal=True, causal_align=align,
                          return_lse=True, out=poisoned(q.shape))
    want, wlse = ref.attention(q, k, v, causal=code)
    check(o, want)
    check_lse(lse, wlse)  # sq > sk bottom-right: rows with no key, -inf


@pytest.mark.parametrize("window", [(3, 0), (2, 2), (0, 4), (-1, 1)])
def test_window(window):
    q, k, v = qkv(1, 11, 11, 2, 2, 16)
    o = fa.attention(q, k, v, window=window)
    check(o, ref.attention(q, k, v, window=window)[0])


def test_softcap_alibi_scale():
    q, k, v = qkv(2, 8, 10, 4, 2, 16)
    slopes = np.array([0.5, 0.25, 0.125, 0.0625], np.float32)
    o = fa.attention(q, k, v, softcap=1.5, alibi_slopes=slopes, scale=0.3,
                     causal=True)
    want = ref.attention(q, k, v, softcap=1.5, alibi=slopes, scale=0.3,
                         causal=1)[0]
    check(o, want)


def test_sinks_and_lse():
    q, k, v = qkv(2, 6, 9, 4, 4, 8)
    sinks = np.array([0.0, 1.0, -2.0, 3.0], np.float32)
    o, lse = fa.attention(q, k, v, sinks=sinks, window=(2, 0),
                          return_lse=True)
    want, wlse = ref.attention(q, k, v, sinks=sinks, window=(2, 0))
    check(o, want)
    check_lse(lse, wlse)


def test_strided_views():
    # BHSD storage seen as BSHD, and a packed QKV buffer: no copies.
    r = rng()
    b, s, h, d = 2, 10, 3, 16
    bhsd = r.standard_normal((3, b, h, s, d)).astype(np.float32)
    q, k, v = (bhsd[i].transpose(0, 2, 1, 3) for i in range(3))
    assert not q.flags.c_contiguous
    check(fa.attention(q, k, v, causal=True),
          ref.attention(q, k, v, causal=1)[0])
    packed = r.standard_normal((b, s, 3, h, d)).astype(np.float32)
    q, k, v = packed[:, :, 0], packed[:, :, 1], packed[:, :, 2]
    out = poisoned((b, s, h, 2 * d))[..., :d]  # a strided output too
    o = fa.attention(q, k, v, out=out)
    check(o, ref.attention(q, k, v)[0])


def test_f16_and_mixed_output():
    q, k, v = qkv(2, 12, 12, 4, 2, 32, dtype=np.float16)
    want = ref.attention(q, k, v, causal=1)[0]
    o = fa.attention(q, k, v, causal=True)
    assert o.dtype == np.float16
    check(o, want, F16_BOUND)
    o32 = fa.attention(q, k, v, causal=True, out_dtype="f32")
    assert o32.dtype == np.float32
    check(o32, want, 1e-5)  # f16 inputs are exact in f32; only fp32 rounding


def test_bf16_numpy():
    # numpy holds bf16 only through ml_dtypes: with it, bf16 runs; without
    # it, asking for a bf16 output is a clear error (no silent fallback).
    from flashattn import _tensors
    q, k, v = qkv(1, 8, 8, 2, 2, 16)
    bf16 = _tensors.numpy_dtype(_tensors.BY_NAME["bf16"])
    if bf16 is None:
        with pytest.raises(fa.FlashAttnError, match="ml_dtypes") as e:
            fa.attention(q, k, v, out_dtype="bf16")
        assert e.value.status == fa.ERR_UNSUPPORTED
        return
    qb, kb, vb = (x.astype(bf16) for x in (q, k, v))
    o = fa.attention(qb, kb, vb)
    assert o.dtype == bf16
    check(o.astype(np.float32), ref.attention(qb, kb, vb)[0], 1e-2)


def test_explicit_positions_shard_matches_whole():
    # The second half of the queries against the first half of the keys, as
    # ring attention computes it, masks exactly as the whole problem does.
    q, k, v = qkv(1, 16, 16, 2, 2, 16)
    full_o, full_lse = ref.attention(q, k, v, causal=1)
    o1, l1 = fa.attention(q[:, 8:], k[:, :8], v[:, :8], causal=True,
                          return_lse=True, q_position=8, k_position=0)
    o2, l2 = fa.attention(q[:, 8:], k[:, 8:], v[:, 8:], causal=True,
                          return_lse=True, q_position=8, k_position=8)
    o, lse = fa.merge_states(o1, l1, o2, l2)
    check(o, full_o[:, 8:])
    check_lse(lse, full_lse[:, :, 8:])
    qp = np.array([8], np.int64)
    o3 = fa.attention(q[:, 8:], k[:, :8], v[:, :8], causal=True,
                      q_positions=qp, k_position=0)
    np.testing.assert_array_equal(o3, o1)


def test_descales():
    q, k, v = qkv(2, 7, 9, 4, 2, 16)
    dq = np.array([0.5], np.float32)
    dk = np.array([[2.0, 0.25], [1.0, 4.0]], np.float32)  # per (b, kv head)
    dv = np.array([3.0], np.float32)
    o = fa.attention(q, k, v, descale_q=dq, descale_k=dk, descale_v=dv)
    want = ref.attention(q * 0.5, k * dk[:, None, :, None], v * 3.0)[0]
    check(o, want)


def test_nan_reaches_exactly_the_rows_that_see_it():
    q, k, v = qkv(1, 8, 8, 2, 2, 8)
    v[0, 5, 1, 3] = np.nan  # key 5, kv head 1: rows 5.. of head 1 (causal)
    o = fa.attention(q, k, v, causal=True)
    bad = np.isnan(o).any(axis=-1)[0]  # [sq, hq]
    want = np.zeros((8, 2), bool)
    want[5:, 1] = True
    np.testing.assert_array_equal(bad, want)


def test_inputs_unchanged_and_readonly():
    q, k, v = qkv()
    copies = [x.copy() for x in (q, k, v)]
    for x in (q, k, v):
        x.flags.writeable = False
    o = fa.attention(q, k, v, causal=True)
    for x, c in zip((q, k, v), copies):
        np.testing.assert_array_equal(x, c)
    check(o, ref.attention(q, k, v, causal=1)[0])


def test_small_call_path_matches_general_path():
    # The per-thread fast path (cached problem) and the general one agree
    # bit for bit, across shapes that share and that change the cache key.
    for shape in [(1, 3, 5, 2, 1, 8), (1, 3, 5, 2, 1, 8), (2, 4, 4, 2, 2, 8)]:
        q, k, v = qkv(*shape)
        a = fa.attention(q, k, v, causal=True)
        b = fa.attention(q, k, v, causal=True)   # cached
        c = fa.attention(q, k, v, causal=True, out=poisoned(a.shape))
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
        check(a, ref.attention(q, k, v, causal=1)[0])


@pytest.mark.parametrize("name", ["cpu", "cpu-scalar", "cpu.scalar.f32"])
def test_backend_choice(name):
    # The backend, the backend capped at an ISA, one kernel: all exist here.
    q, k, v = qkv()
    o = fa.attention(q, k, v, backend=name)
    check(o, ref.attention(q, k, v)[0])
    plan = fa.describe(q, k, v, backend=name)
    assert "backend=cpu " in plan
    if name != "cpu":
        assert "kernel=cpu.scalar.f32 " in plan


def test_backend_unknown_lists_names():
    q, k, v = qkv()
    with pytest.raises(fa.FlashAttnError) as e:
        fa.attention(q, k, v, backend="cpu.avx2")   # the 0.2 kernel spelling
    assert "cpu.scalar.f32" in str(e.value) and "cpu-scalar" in str(e.value)


def test_threads():
    q, k, v = qkv(2, 40, 40, 4, 4, 32)
    want = fa.attention(q, k, v)
    fa.set_threads(1)
    try:
        np.testing.assert_array_equal(fa.attention(q, k, v), want)
    finally:
        fa.set_threads(0)


# ---- varlen and KV caches -----------------------------------------------------
def test_varlen():
    r = rng()
    lq, lk = [3, 1, 7], [5, 9, 2]
    cq = np.array([0] + list(np.cumsum(lq)), np.int32)
    ck = np.array([0] + list(np.cumsum(lk)), np.int32)
    hq, hkv, d = 4, 2, 16
    q = rand((cq[-1], hq, d), r=r)
    k = rand((ck[-1], hkv, d), r=r)
    v = rand((ck[-1], hkv, d), r=r)
    o, lse = fa.attention_varlen(q, k, v, cq, ck, max(lq), max(lk),
                                 causal=True, return_lse=True,
                                 out=poisoned(q.shape))
    for b in range(3):
        qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        want, wlse = ref.attention(q[None, qs], k[None, ks], v[None, ks],
                                   causal=1)
        check(o[qs], want[0])
        check_lse(lse[b, :, :lq[b]], wlse[0])


def test_kvcache_contiguous():
    q = rand((3, 1, 4, 16))
    kc, vc = rand((3, 20, 2, 16)), rand((3, 20, 2, 16))
    lens = np.array([20, 7, 1], np.int32)
    o = fa.attention_kvcache(q, kc, vc, lens, causal=True)
    want = ref.attention(q, kc, vc, causal=1, seqused_k=lens)[0]
    check(o, want)


def test_kvcache_paged():
    r = rng()
    b, page, npages, mb, hq, hkv, d = 2, 4, 9, 3, 4, 2, 16
    kp = rand((npages, page, hkv, d), r=r)
    vp = rand((npages, page, hkv, d), r=r)
    table = r.permutation(npages)[:b * mb].reshape(b, mb).astype(np.int32)
    lens = np.array([12, 5], np.int32)
    q = rand((b, 2, hq, d), r=r)
    o = fa.attention_kvcache(q, kp, vp, lens, block_table=table,
                             causal=True, out=poisoned(q.shape))
    # The same keys gathered into a contiguous cache for the oracle.
    kc = kp[table].reshape(b, mb * page, hkv, d)
    vc = vp[table].reshape(b, mb * page, hkv, d)
    check(o, ref.attention(q, kc, vc, causal=1, seqused_k=lens)[0])


# ---- merge ----------------------------------------------------------------------
def test_merge_states_and_in_place():
    q, k, v = qkv(2, 6, 20, 4, 2, 16)
    oa, la = fa.attention(q, k[:, :7], v[:, :7], return_lse=True,
                          q_position=0, k_position=0)
    ob, lb = fa.attention(q, k[:, 7:], v[:, 7:], return_lse=True,
                          q_position=0, k_position=7)
    want, wlse = ref.attention(q, k, v, qpos=[0, 0])
    o, lse = fa.merge_states(oa, la, ob, lb)
    check(o, want)
    check_lse(lse, wlse)
    # Three parts, merged in place into the first.
    parts = [fa.attention(q, k[:, s], v[:, s], return_lse=True, q_position=0,
                          k_position=s.start)
             for s in (slice(0, 5), slice(5, 12), slice(12, 20))]
    o0, l0 = parts[0]
    r = fa.merge_states(o0, l0, *parts[1], *parts[2], out=o0, out_lse=l0)
    assert r[0] is o0
    check(o0, want)


# ---- backward --------------------------------------------------------------------
def _fd_case(causal=0, sinks=None, hq=2, hkv=1, window=(-1, -1), softcap=0.0):
    r = rng()
    q, k, v = (rand((1, 3, hq, 4), r=r), rand((1, 4, hkv, 4), r=r),
               rand((1, 4, hkv, 3), r=r))
    do = rand((1, 3, hq, 3), r=r)
    kw = dict(causal=causal, window=window, softcap=softcap, sinks=sinks)
    return q, k, v, do, kw


@pytest.mark.parametrize("causal,hq,hkv,window,softcap", [
    (0, 2, 2, (-1, -1), 0.0),
    (1, 4, 2, (-1, -1), 0.0),   # causal GQA: dk, dv summed over the group
    (0, 2, 1, (1, 1), 2.0),     # window and softcap
])
def test_backward_against_finite_differences(causal, hq, hkv, window,
                                             softcap):
    q, k, v, do, kw = _fd_case(causal, None, hq, hkv, window, softcap)
    fwd = dict(causal=bool(causal), window=window, softcap=softcap)
    o, lse = fa.attention(q, k, v, return_lse=True, **fwd)
    dq, dk, dv = fa.attention_backward(do, q, k, v, o, lse, **fwd)
    f = lambda q_, k_, v_: ref.attention(q_, k_, v_, causal=causal,  # noqa
                                         window=window, softcap=softcap)[0]
    gq, gk, gv = ref.numeric_grads(f, [q, k, v], do)
    for g, want in ((dq, gq), (dk, gk), (dv, gv)):
        check(g, want, 1e-4)  # fp32 kernel vs a float64 difference quotient


def test_backward_sinks_gradient():
    r = rng()
    sinks = r.standard_normal(2).astype(np.float32)
    q, k, v, do, _ = _fd_case(0, None, 2, 2)
    o, lse = fa.attention(q, k, v, sinks=sinks, return_lse=True)
    dq, dk, dv, dsinks = fa.attention_backward(do, q, k, v, o, lse,
                                               sinks=sinks,
                                               return_dsinks=True)
    f = lambda q_, k_, v_, s_: ref.attention(q_, k_, v_, sinks=s_)[0]  # noqa
    gq, gk, gv, gs = ref.numeric_grads(f, [q, k, v, sinks], do)
    for g, want in ((dq, gq), (dk, gk), (dv, gv), (dsinks, gs)):
        check(g, want, 1e-4)


def test_backward_accumulate():
    q, k, v, do, _ = _fd_case(1, None, 2, 2)
    o, lse = fa.attention(q, k, v, causal=True, return_lse=True)
    g1 = fa.attention_backward(do, q, k, v, o, lse, causal=True)
    acc = [np.ones_like(x) for x in (q, k, v)]
    r = fa.attention_backward(do, q, k, v, o, lse, causal=True, dq=acc[0],
                              dk=acc[1], dv=acc[2], accumulate=True)
    assert all(a is b for a, b in zip(r, acc))
    for a, g in zip(acc, g1):
        np.testing.assert_allclose(a, g + 1.0, rtol=1e-6, atol=1e-6)


def test_backward_varlen():
    r = rng()
    cq = np.array([0, 2, 5], np.int32)
    ck = np.array([0, 3, 7], np.int32)
    q, k, v = rand((5, 2, 4), r=r), rand((7, 1, 4), r=r), rand((7, 1, 4), r=r)
    do = rand((5, 2, 4), r=r)
    o, lse = fa.attention_varlen(q, k, v, cq, ck, 3, 4, causal=True,
                                 return_lse=True)
    dq, dk, dv = fa.attention_backward(do, q, k, v, o, lse, causal=True,
                                       cu_seqlens_q=cq, cu_seqlens_k=ck,
                                       max_seqlen_q=3, max_seqlen_k=4)
    for b in range(2):
        qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        f = lambda q_, k_, v_: ref.attention(q_, k_, v_, causal=1)[0]  # noqa
        gq, gk, gv = ref.numeric_grads(
            f, [q[None, qs], k[None, ks], v[None, ks]], do[None, qs])
        check(dq[qs], gq[0], 1e-4)
        check(dk[ks], gk[0], 1e-4)
        check(dv[ks], gv[0], 1e-4)


# ---- errors: the library's own words ----------------------------------------------
def test_library_errors_are_exact():
    q, k, v = qkv()
    with pytest.raises(fa.FlashAttnError) as e:
        fa.attention(q, k, v, window=(-3, 0))
    assert isinstance(e.value, ValueError)
    assert e.value.status == fa.ERR_INVALID_ARGUMENT
    assert e.value.status_name == "invalid argument"
    # str(e) is fa_last_error()'s text, unchanged.
    from flashattn import _lib
    assert str(e.value) == _lib.last_error().decode()
    assert str(e.value) == "window_left=-3 must be >= -1 (-1 = unbounded)"
    with pytest.raises(fa.FlashAttnError, match=r"^heads_q=4 is not a "
                       r"multiple of heads_kv=3"):
        fa.attention(q, rand((2, 13, 3, 16)), rand((2, 13, 3, 16)))
    with pytest.raises(fa.FlashAttnError, match=r"v.dtype=f16"):
        fa.attention(q, k, v.astype(np.float16))


@pytest.mark.parametrize("bad,pattern", [
    (lambda q, k, v: (q.astype(np.float64), k, v), r"q has dtype float64"),
    (lambda q, k, v: (q[..., ::2], k[..., ::2], v), r"q.stride\(3\) = 2"),
    (lambda q, k, v: (q[:, ::-1], k, v), r"q.stride\(1\) = -64"),
    (lambda q, k, v: (q, k[:, :5], v), r"v.shape = \(2, 13, 2, 16\)"),
    (lambda q, k, v: (q[0], k, v), r"q has 3 dimensions"),
    (lambda q, k, v: (q.tolist(), k, v), r"q is a list"),
])
def test_binding_errors_name_the_array(bad, pattern):
    q, k, v = qkv()
    with pytest.raises(fa.FlashAttnError, match=pattern):
        fa.attention(*bad(q, k, v))


def test_index_array_errors():
    q, k, v = qkv()
    with pytest.raises(fa.FlashAttnError, match=r"alibi_slopes has dtype "
                       r"float16: expected float32"):
        fa.attention(q, k, v, alibi_slopes=np.ones(4, np.float16))
    with pytest.raises(fa.FlashAttnError, match=r"sinks.shape = \(3,\)"):
        fa.attention(q, k, v, sinks=np.ones(3, np.float32))
    with pytest.raises(fa.FlashAttnError, match=r"out is read-only"):
        out = np.zeros((2, 9, 4, 16), np.float32)
        out.flags.writeable = False
        fa.attention(q, k, v, out=out)
    cq = np.array([0, 3, 9], np.int32)
    with pytest.raises(fa.FlashAttnError, match="cu_seqlens"):
        qq = rand((9, 4, 16))
        fa.attention_varlen(qq, qq[:, :2], qq[:, :2], cq,
                            np.array([0, 3, 8], np.int32), 6, 6)


def test_struct_size_guard():
    # A problem with the wrong struct_size is refused, naming the field: the
    # guard the binding relies on (checked against ctypes.sizeof at import).
    from flashattn import _lib
    a = _lib.Attention.from_buffer_copy(_lib.DEFAULT_ATTENTION)
    assert a.struct_size == ctypes.sizeof(_lib.Attention)
    a.struct_size -= 8
    buf = ctypes.create_string_buffer(4096)
    n = _lib.explain_c(ctypes.byref(a), 0, buf, 4096)
    assert n > 0
    ctx = ctypes.c_void_p()
    _lib.check(_lib.context_create(ctypes.byref(ctx), _lib.BACKEND_CPU, 0))
    try:
        t = _lib.Tensor()
        st = _lib.forward(ctx, ctypes.byref(a), t, t, t, t, None)
        assert st == fa.ERR_INVALID_ARGUMENT
        assert _lib.last_error().decode().startswith("a->struct_size=")
    finally:
        _lib.context_destroy(ctx)


# ---- introspection ------------------------------------------------------------------
def test_backends_explain_describe():
    names = fa.backends()
    assert names and "cpu" in names and not any("-" in n for n in names)
    q, k, v = qkv()
    text = fa.explain(q, k, v, causal=True)
    assert "taken" in text and "causal=1" in text
    plan = fa.describe(q, k, v, causal=True)
    assert plan.startswith("backend=") and "kernel=" in plan
    # explain takes the varlen and paged options too.
    cq = np.array([0, 4, 9], np.int32)
    qq = rand((9, 4, 16))
    assert "varlen=1" in fa.explain(qq, qq[:, :2], qq[:, :2],
                                    cu_seqlens_q=cq, cu_seqlens_k=cq,
                                    max_seqlen_q=5, max_seqlen_k=5)


def test_module_main():
    import os
    env = dict(os.environ)
    pkg_parent = os.path.dirname(os.path.dirname(fa.__file__))
    env["PYTHONPATH"] = os.pathsep.join(
        [pkg_parent] + [p for p in [env.get("PYTHONPATH")] if p])
    r = subprocess.run([sys.executable, "-m", "flashattn"],
                       capture_output=True, text=True, check=False, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "self-check: ok" in r.stdout
    assert "backends: " in r.stdout


def test_threads_share_nothing():
    # Each Python thread has its own contexts (one context per thread at a
    # time, flashattn.h) and its own small-call cache; the GIL is released
    # while the library computes.
    import threading
    cases = [qkv(1, 20, 20, 2, 2, 16) for _ in range(4)]
    want = [ref.attention(*c, causal=1)[0] for c in cases]
    got = [None] * 4
    errors = []

    def work(i):
        try:
            for _ in range(20):
                got[i] = fa.attention(*cases[i], causal=True)
        except Exception as e:  # reported below, not swallowed
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for g, w in zip(got, want):
        check(g, w)


class Foreign:
    """An array of another framework: only the DLPack protocol (delegated to
    numpy underneath), so the general DLPack road is taken."""

    def __init__(self, a, device=(1, 0)):
        self.a, self.device, self.streams = a, device, []

    @property
    def shape(self):
        return self.a.shape

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.device


def test_foreign_dlpack_arrays():
    q, k, v = qkv()
    # A transposed view: DLPack carries the strides (numpy sends NULL
    # strides only for C-contiguous arrays, which the dense ones are).
    kt = np.ascontiguousarray(k.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    fq, fk, fv = Foreign(q), Foreign(kt), Foreign(v)
    o = fa.attention(fq, fk, fv, causal=True)
    assert isinstance(o, np.ndarray)  # host arrays: outputs from numpy
    check(o, ref.attention(q, k, v, causal=1)[0])
    assert fq.streams == [None]  # host memory: no stream is passed
    # On a device no backend here serves: the library's own refusal.
    with pytest.raises(fa.FlashAttnError) as e:
        fa.attention(Foreign(q, (2, 0)), fk, fv)
    if not any(n.startswith("cuda") for n in fa.backends()):
        assert e.value.status == fa.ERR_NO_DEVICE
