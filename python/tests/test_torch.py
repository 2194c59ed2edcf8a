# SPDX-License-Identifier: MIT
"""flashattn on torch tensors: zero copy through DLPack, autograd, and on
CUDA the current stream, against float64 references.

Skips as a whole where torch is missing. The CUDA tests also skip where no
CUDA device or no cuda backend is present (they compare with
torch.nn.functional.scaled_dot_product_attention)."""
import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
import flashattn as fa  # noqa: E402
import reference as ref  # noqa: E402


def rand(*shape, dtype=torch.float32, device="cpu", grad=False, seed=[0]):
    seed[0] += 1
    g = torch.Generator().manual_seed(seed[0])
    x = torch.randn(*shape, generator=g, dtype=torch.float32)
    x = x.to(device=device, dtype=dtype)
    return x.requires_grad_(grad)


def math_attention(q, k, v, causal=False, sinks=None, scale=None):
    """Differentiable float64 attention in torch (BSHD, GQA, bottom-right
    causal, sinks): the autograd reference."""
    q, k, v = (x.double() for x in (q, k, v))
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    k = k.repeat_interleave(hq // hkv, dim=2)
    v = v.repeat_interleave(hq // hkv, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * (scale or d ** -0.5)
    if causal:
        i = torch.arange(sq)[:, None]
        j = torch.arange(sk)[None, :]
        s = s.masked_fill(j > i + sk - sq, float("-inf"))
    if sinks is not None:
        col = sinks.double().view(1, hq, 1, 1).expand(b, hq, sq, 1)
        p = torch.softmax(torch.cat([s, col], dim=-1), dim=-1)[..., :-1]
    else:
        p = torch.softmax(s, dim=-1)
    return torch.einsum("bhqk,bkhd->bqhd", p, v)


def rel(x, y):
    x, y = x.detach().double(), y.detach().double()
    return (torch.linalg.norm(x - y) / torch.linalg.norm(y)).item()


# ---- CPU tensors --------------------------------------------------------------
@pytest.mark.parametrize("dtype,bound", [(torch.float32, 1e-5),
                                         (torch.float16, 2e-3),
                                         (torch.bfloat16, 1e-2)])
def test_cpu_forward_dtypes(dtype, bound):
    q, k, v = (rand(2, 9, 4, 32, dtype=dtype), rand(2, 13, 2, 32, dtype=dtype),
               rand(2, 13, 2, 32, dtype=dtype))
    o, lse = fa.attention(q, k, v, causal=True, return_lse=True)
    assert isinstance(o, torch.Tensor) and o.dtype == dtype
    assert lse.dtype == torch.float32 and lse.shape == (2, 4, 9)
    want, wlse = ref.attention(q.float().numpy(), k.float().numpy(),
                               v.float().numpy(), causal=1)
    assert ref.rel_err(o.float().numpy(), want) < bound
    assert np.max(np.abs(lse.numpy() - wlse)) < 1e-3


def test_cpu_zero_copy_out_and_views():
    q = rand(1, 8, 2, 16)
    kv = rand(1, 8, 2, 2, 16)          # packed K/V: strided views
    k, v = kv[:, :, 0], kv[:, :, 1]
    out = torch.full((1, 8, 2, 16), float("nan"))
    r = fa.attention(q, k, v, out=out)
    assert r is out and r.data_ptr() == out.data_ptr()
    want = ref.attention(q.numpy(), k.numpy(), v.numpy())[0]
    assert ref.rel_err(out.numpy(), want) < 1e-5


def test_cpu_autograd_against_math():
    q = rand(2, 7, 4, 16, grad=True)
    k = rand(2, 11, 2, 16, grad=True)
    v = rand(2, 11, 2, 16, grad=True)
    sinks = rand(4, grad=True)
    o = fa.attention(q, k, v, causal=True, sinks=sinks)
    do = rand(*o.shape)
    grads = torch.autograd.grad(o, (q, k, v, sinks), do)
    qd, kd, vd, sd = (x.detach().double().requires_grad_() for x in
                      (q, k, v, sinks))
    want_o = math_attention(qd, kd, vd, causal=True, sinks=sd)
    want = torch.autograd.grad(want_o, (qd, kd, vd, sd), do.double())
    assert rel(o, want_o) < 1e-5
    for g, w in zip(grads, want):
        assert g.dtype == torch.float32
        assert rel(g, w) < 1e-4


def test_cpu_autograd_sum_loss_and_no_grad():
    # .sum() hands backward an expanded (stride 0) dO: handled explicitly.
    q, k, v = (rand(1, 5, 2, 8, grad=True) for _ in range(3))
    fa.attention(q, k, v).sum().backward()
    qd, kd, vd = (x.detach().double().requires_grad_() for x in (q, k, v))
    math_attention(qd, kd, vd).sum().backward()
    for a, b in ((q, qd), (k, kd), (v, vd)):
        assert rel(a.grad, b.grad) < 1e-4
    with torch.no_grad():
        o = fa.attention(q, k, v)
    assert not o.requires_grad


def test_cpu_autograd_varlen():
    cq = torch.tensor([0, 3, 8], dtype=torch.int32)
    ck = torch.tensor([0, 4, 10], dtype=torch.int32)
    q = rand(8, 2, 16, grad=True)
    k = rand(10, 1, 16, grad=True)
    v = rand(10, 1, 16, grad=True)
    o = fa.attention_varlen(q, k, v, cq, ck, 5, 6, causal=True)
    do = rand(*o.shape)
    grads = torch.autograd.grad(o, (q, k, v), do)
    for b in range(2):
        qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        xs = [x.detach()[s].unsqueeze(0).double().requires_grad_()
              for x, s in ((q, qs), (k, ks), (v, ks))]
        w = math_attention(*xs, causal=True)
        assert rel(o[qs], w[0]) < 1e-5
        wg = torch.autograd.grad(w, xs, do[qs].unsqueeze(0).double())
        for g, s, ww in zip(grads, (qs, ks, ks), wg):
            assert rel(g[s], ww[0]) < 1e-4


def test_requires_grad_with_out_is_refused():
    q = rand(1, 4, 1, 8, grad=True)
    with pytest.raises(fa.FlashAttnError, match="not differentiable"):
        fa.attention(q, q, q, out=torch.empty(1, 4, 1, 8))


def test_cpu_tensor_errors():
    q = rand(1, 4, 2, 8)
    with pytest.raises(fa.FlashAttnError, match="q has dtype float64"):
        fa.attention(q.double(), q, q)
    with pytest.raises(fa.FlashAttnError, match=r"q.stride\(3\)"):
        fa.attention(q.transpose(2, 3), q, q)


# ---- CUDA tensors -----------------------------------------------------------------
def _cuda_or_skip():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    if not any(n.startswith("cuda") for n in fa.backends()):
        pytest.skip("this libflashattn has no usable cuda backend")


def sdpa(q, k, v, causal):
    """torch SDPA on BSHD tensors (transposed views), GQA by repetition."""
    hq, hkv = q.shape[2], k.shape[2]
    k = k.repeat_interleave(hq // hkv, dim=2)
    v = v.repeat_interleave(hq // hkv, dim=2)
    o = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
        is_causal=causal)
    return o.transpose(1, 2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_forward_against_sdpa(dtype, causal):
    _cuda_or_skip()
    dev = "cuda"
    q = rand(2, 256, 8, 128, dtype=dtype, device=dev)
    k = rand(2, 256, 2, 128, dtype=dtype, device=dev)
    v = rand(2, 256, 2, 128, dtype=dtype, device=dev)
    o = fa.attention(q, k, v, causal=causal)
    assert o.device == q.device and o.dtype == dtype
    want = math_attention(q.cpu(), k.cpu(), v.cpu(), causal=causal)
    err = rel(o.cpu(), want)
    peer = rel(sdpa(q, k, v, causal).cpu(), want)
    assert err <= 2 * peer + 1e-3, (err, peer)


def test_cuda_arrays_stay_on_their_device():
    _cuda_or_skip()
    q = rand(1, 16, 2, 64, dtype=torch.float16, device="cuda")
    with pytest.raises(fa.FlashAttnError, match="k is on cpu:0 but q is on "
                       "cuda:0"):
        fa.attention(q, q.cpu(), q)
    with pytest.raises(fa.FlashAttnError, match="cu_seqlens_q is on cpu:0"):
        cu = torch.tensor([0, 16], dtype=torch.int32)
        fa.attention_varlen(q[0], q[0], q[0], cu, cu.cuda(), 16, 16)


def test_cuda_current_stream_and_autograd():
    _cuda_or_skip()
    dev = "cuda"
    s = torch.cuda.Stream()
    q = rand(1, 128, 4, 64, dtype=torch.bfloat16, device=dev, grad=True)
    k = rand(1, 128, 4, 64, dtype=torch.bfloat16, device=dev, grad=True)
    v = rand(1, 128, 4, 64, dtype=torch.bfloat16, device=dev, grad=True)
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        # Runs on s (torch's current stream here), no host synchronisation.
        o = fa.attention(q, k, v, causal=True)
        do = torch.randn_like(o)
        dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
    torch.cuda.current_stream().wait_stream(s)
    qd, kd, vd = (x.detach().cpu().double().requires_grad_()
                  for x in (q, k, v))
    want = math_attention(qd, kd, vd, causal=True)
    wg = torch.autograd.grad(want, (qd, kd, vd), do.cpu().double())
    assert rel(o.cpu(), want) < 1e-2
    for g, w in zip((dq, dk, dv), wg):
        assert rel(g.cpu(), w) < 2e-2
