# SPDX-License-Identifier: MIT
"""The functions of the package: problems built from arrays, run through the
C API (fa_forward, fa_backward, fa_merge_states, fa_explain).

What the binding checks itself is only what the C API cannot see: array
ranks and shapes (the library takes sizes and strides, not shapes), the
dtype of a foreign array, a contiguous last axis, and where the arrays
live. Everything else (sizes, masks, GQA ratios, index arrays, dtype
groups) is the library's to judge, and its refusal surfaces unchanged as a
FlashAttnError carrying fa_last_error()'s text.
"""
import ctypes
import threading

from . import _lib
from . import _tensors as T
from ._tensors import fail

_CAUSAL_ALIGN = {"bottom_right": _lib.CAUSAL_BOTTOM_RIGHT,
                 "top_left": _lib.CAUSAL_TOP_LEFT}

# ---- contexts: one per (thread, memory space, backend) -----------------------
# A context must be used by one thread at a time (flashattn.h), so each
# Python thread keeps its own; they live as long as the thread.
_local = threading.local()


class _Context:
    __slots__ = ("ptr", "backend", "gpu")

    def __init__(self, kind, device, name):
        self.ptr = None  # __del__ runs even when creation fails
        ptr = ctypes.c_void_p()
        if name is None:
            _lib.check(_lib.context_create(ctypes.byref(ptr), kind, device))
        else:
            _lib.check(_lib.context_create_by_name(ctypes.byref(ptr),
                                                   name.encode()))
        self.ptr = ptr.value
        self.backend = _lib.context_backend(self.ptr).decode()
        self.gpu = not self.backend.startswith("cpu")
        threads = getattr(_local, "threads", 0)
        if threads and not self.gpu:
            _lib.check(_lib.context_set_threads(self.ptr, threads))

    def __del__(self):
        if _lib is not None and self.ptr:
            _lib.context_destroy(self.ptr)


def _kind_of(dev):
    t, i = dev
    if t in T.HOST_DEVICES:
        return _lib.BACKEND_CPU, 0
    if t in (T.DL_CUDA, T.DL_CUDA_MANAGED):
        return _lib.BACKEND_CUDA, i
    if t == T.DL_ROCM:
        return _lib.BACKEND_HIP, i
    fail("q is on %s: flashattn runs on host memory, CUDA and ROCm devices" %
         T.device_name(dev), _lib.ERR_NO_DEVICE)


def _context(dev, backend):
    cache = getattr(_local, "contexts", None)
    if cache is None:
        cache = _local.contexts = {}
    key = (dev, backend)
    ctx = cache.get(key)
    if ctx is not None:
        return ctx
    kind, device = _kind_of(dev)
    kinds = {"cpu": _lib.BACKEND_CPU, "cuda": _lib.BACKEND_CUDA,
             "hip": _lib.BACKEND_HIP}
    if backend is None or backend == "auto":
        ctx = _Context(kind, device, None)
    elif backend in kinds:
        ctx = _Context(kinds[backend], device, None)
    else:
        name = backend
        if kind != _lib.BACKEND_CPU and ":" not in name and device:
            name = "%s:%d" % (name, device)
        ctx = _Context(None, None, name)
    # The arrays must be in the memory space the backend computes in.
    if ctx.gpu == (kind == _lib.BACKEND_CPU):
        fail("backend %r (%s) computes in %s memory, but q is on %s" % (
            backend, ctx.backend, "device" if ctx.gpu else "host",
            T.device_name(dev)), _lib.ERR_NO_DEVICE)
    cache[key] = ctx
    return ctx


def set_threads(n):
    """CPU threads for this Python thread's later calls (0 = OpenMP's
    default). GPU contexts are unaffected."""
    _local.threads = int(n)
    for ctx in getattr(_local, "contexts", {}).values():
        if not ctx.gpu:
            _lib.check(_lib.context_set_threads(ctx.ptr, int(n)))


def _stream_for(q, dev):
    """The stream the library runs on, and the value DLPack's __dlpack__
    takes for it. torch tensors: torch's current stream on their device
    (an integer handle; DLPack spells torch's legacy default stream, handle
    0, as 1 on CUDA and 0 on ROCm). Other GPU arrays: the default stream.
    No host synchronisation is added: the producer orders its own stream
    before ours when they differ (a stream wait, per the DLPack protocol),
    and the library's calls are asynchronous on its stream."""
    if dev[0] in T.HOST_DEVICES:
        return None, None
    if T.is_torch(q):
        torch = T._torch()
        handle = torch.cuda.current_stream(dev[1]).cuda_stream
    else:
        handle = 0
    if handle == 0:
        return 0, (1 if dev[0] != T.DL_ROCM else 0)
    return handle, handle


class _Call:
    """One call's arrays, borrowed in q's memory space, and its problem."""

    def __init__(self, q, backend):
        dev = T.device_of(q)
        if dev is None:
            T.view(q, "q")  # the standard message for a non-array
        self.q_obj = q
        self.dev = dev
        self.ctx = _context(dev, backend)
        self.stream, self.dl_stream = _stream_for(q, dev)
        if self.ctx.gpu:
            _lib.check(_lib.context_set_stream(self.ctx.ptr, self.stream))
        self.views = []  # keeps every borrowed capsule alive until the call
        self.a = _lib.Attention.from_buffer_copy(_lib.DEFAULT_ATTENTION)

    def tensor(self, obj, name, ndim, writable=False):
        v = T.view(obj, name, self.dl_stream, writable)
        self._same_place(v)
        self.views.append(v)
        return T.strided(v, ndim)

    def array(self, obj, name, code, bits, shape, writable=False):
        """A side array (index arrays, slopes, sinks, descales, lse):
        exact dtype, dense, in q's memory space. Returns its pointer."""
        if obj is None:
            return None
        v = T.view(obj, name, self.dl_stream, writable, side=True)
        self._same_place(v)
        self.views.append(v)
        T.contiguous(v, code, bits, shape)
        return v.data

    def _same_place(self, v):
        host = T.HOST_DEVICES
        if v.device != self.dev and not (v.device[0] in host and
                                         self.dev[0] in host):
            fail("%s is on %s but q is on %s: every array of a call lives in "
                 "one memory space" % (v.name, T.device_name(v.device),
                                       T.device_name(self.dev)),
                 _lib.ERR_INVALID_ARGUMENT)

    def new(self, shape, dt, name):
        obj = T.empty(self.q_obj, shape, dt, name)
        return obj


def _dtype_arg(x, name):
    if x is None:
        return None
    key = x if isinstance(x, str) else getattr(x, "name", None) or str(x)
    key = key.replace("torch.", "")
    dt = T.BY_NAME.get(key)
    if dt is None:
        fail("%s=%r: expected one of %s" % (name, x,
                                            ", ".join(d.name for d in T.DTYPES)),
             _lib.ERR_UNSUPPORTED)
    return dt


def _options(c, a, heads_q, batch, *, causal=False,
             causal_align="bottom_right", scale=None, window=(-1, -1),
             softcap=0.0, alibi_slopes=None, sinks=None, q_position=None,
             k_position=None, q_positions=None, k_positions=None):
    """The mask, score and position options every entry point shares."""
    if causal:
        al = _CAUSAL_ALIGN.get(causal_align)
        if al is None:
            fail("causal_align=%r: expected 'bottom_right' or 'top_left'" %
                 (causal_align,))
        a.causal = al
    try:
        a.window_left, a.window_right = (int(window[0]), int(window[1]))
    except (TypeError, ValueError, IndexError):
        fail("window=%r: expected (left, right), -1 for an unbounded side" %
             (window,))
    a.scale = 0.0 if scale is None else float(scale)
    a.softcap = float(softcap)
    a.alibi_slopes = c.array(alibi_slopes, "alibi_slopes", 2, 32, (heads_q,))
    a.sinks = c.array(sinks, "sinks", 2, 32, (heads_q,))
    if (q_position is not None or k_position is not None or
            q_positions is not None or k_positions is not None):
        a.positions = _lib.POSITIONS_EXPLICIT
        a.q_position = int(q_position or 0)
        a.k_position = int(k_position or 0)
        a.q_positions = c.array(q_positions, "q_positions", 0, 64, (batch,))
        a.k_positions = c.array(k_positions, "k_positions", 0, 64, (batch,))


def _descale(c, x, name, batch, heads_kv):
    """A descale array: one float32, or [batch, heads_kv] per head."""
    if x is None:
        return None, 0
    v = T.view(x, name, c.dl_stream, side=True)
    c._same_place(v)
    c.views.append(v)
    n = 1
    for s in v.shape:
        n *= s
    if n == 1:
        T.contiguous(v, 2, 32, v.shape)
        return v.data, 0
    T.contiguous(v, 2, 32, (batch, heads_kv))
    return v.data, 1


_SAME = ("causal", "causal_align", "scale", "window", "softcap",
         "alibi_slopes", "sinks", "q_position", "k_position", "q_positions",
         "k_positions")


def _problem(c, q, k, v, *, layout, cu_seqlens_q=None, cu_seqlens_k=None,
             max_seqlen_q=None, max_seqlen_k=None, seqused_k=None,
             block_table=None, descale_q=None, descale_k=None,
             descale_v=None, **opts):
    """Fill c.a from q, k, v (views) for layout "dense", "varlen" or
    "paged"/"cache"; returns the fa_tensors of q, k and v."""
    a = c.a
    if layout == "varlen":
        tq, hq, d = q.shape
        tk, hkv, dk = k.shape
        if max_seqlen_q is None or max_seqlen_k is None:
            fail("max_seqlen_q and max_seqlen_k are required with cu_seqlens")
        b = _len1(cu_seqlens_q, "cu_seqlens_q") - 1
        a.batch, a.seqlen_q, a.seqlen_k = b, int(max_seqlen_q), int(max_seqlen_k)
        a.cu_seqlens_q = c.array(cu_seqlens_q, "cu_seqlens_q", 0, 32, (b + 1,))
        a.cu_seqlens_k = c.array(cu_seqlens_k, "cu_seqlens_k", 0, 32, (b + 1,))
        a.rows_q, a.rows_k = tq, tk
        _expect(v, (tk, hkv, None), "[total_k, heads_kv, head_dim_v]", k)
    else:
        b, sq, hq, d = q.shape
        if layout == "paged":
            npages, page, hkv, dk = k.shape
            _expect(v, (npages, page, hkv, None),
                    "[num_pages, page_size, heads_kv, head_dim_v]", k)
            rows = _len1(block_table, "block_table", 2)
            mb = rows[1]
            a.block_table = c.array(block_table, "block_table", 0, 32, (b, mb))
            a.page_size, a.max_blocks_per_seq, a.num_pages = page, mb, npages
            a.seqlen_k = mb * page
        else:
            _, sk, hkv, dk = k.shape
            _expect(k, (b, None, None, None), "[batch, seqlen_k, heads_kv, "
                    "head_dim] with q's batch", q)
            _expect(v, (b, sk, hkv, None), "[batch, seqlen_k, heads_kv, "
                    "head_dim_v]", k)
            a.seqlen_k = sk
        a.batch, a.seqlen_q = b, sq
    if dk != d:
        fail("k.shape[-1] = %d but q.shape[-1] = %d: q and k share head_dim" %
             (dk, d))
    a.seqused_k = c.array(seqused_k, "cache_seqlens" if layout in ("paged",
                          "cache") else "seqused_k", 0, 32, (a.batch,))
    a.heads_q, a.heads_kv, a.head_dim = hq, hkv, d
    a.head_dim_v = v.shape[-1]
    _options(c, a, hq, a.batch, **opts)
    dq_, pq = _descale(c, descale_q, "descale_q", a.batch, hkv)
    dk_, pk = _descale(c, descale_k, "descale_k", a.batch, hkv)
    dv_, pv = _descale(c, descale_v, "descale_v", a.batch, hkv)
    return q.tensor(dq_, pq), k.tensor(dk_, pk), v.tensor(dv_, pv)


def _len1(x, name, ndim=1):
    shape = getattr(x, "shape", None)
    if shape is None:
        if x is None:
            fail("%s is required" % name)
        T.view(x, name)  # the standard message for a non-array
    shape = tuple(shape)
    if len(shape) != ndim:
        fail("%s.shape = %s: expected %d dimension%s" % (
            name, shape, ndim, "s" if ndim > 1 else ""))
    return shape[0] if ndim == 1 else shape


def _expect(v, shape, what, ref):
    for want, have in zip(shape, v.shape):
        if want is not None and want != have:
            fail("%s.shape = %s: expected %s to match %s.shape = %s" % (
                v.name, tuple(v.shape), what, ref.name, tuple(ref.shape)))


def _lse_shape(a):
    return (a.batch, a.heads_q, a.seqlen_q)


def _forward(q, k, v, layout, *, return_lse=False, backend=None, out=None,
             out_lse=None, out_dtype=None, _record=None, **kw):
    c = _Call(q, backend)
    nd = 3 if layout == "varlen" else 4
    qv = c.tensor(q, "q", nd)
    kv = c.tensor(k, "k", nd)
    vv = c.tensor(v, "v", nd)
    tq, tk, tv = _problem(c, qv, kv, vv, layout=layout, **kw)
    a = c.a
    oshape = qv.shape[:-1] + (a.head_dim_v,)
    if out is None:
        dt = _dtype_arg(out_dtype, "out_dtype") or qv.dtype
        out = c.new(oshape, dt, "o")
    ov = c.tensor(out, "out", nd, writable=True)
    if tuple(ov.shape) != oshape:
        fail("out.shape = %s: expected %s" % (tuple(ov.shape), oshape))
    lse = out_lse
    if lse is None and return_lse:
        lse = c.new(_lse_shape(a), T.F32, "lse")
    lp = c.array(lse, "out_lse", 2, 32, _lse_shape(a), writable=True)
    to = ov.tensor()
    _lib.check(_lib.forward(c.ctx.ptr, ctypes.byref(a), tq, tk, tv, to, lp))
    if _record is not None:
        _fast_cache()[_record] = (c.ctx, a, tq, tk, tv, to, oshape,
                                  out.dtype, _lse_shape(a))
    return (out, lse) if return_lse else out


# ---- the small-call fast path ---------------------------------------------------
# A dense forward on numpy arrays with only scalar options is the call whose
# overhead matters (decoding loops, small heads): after one checked call,
# the problem and the fa_tensor templates are kept per thread, keyed by
# everything that shaped them (shapes, byte strides and dtypes of q, k, v
# and the scalar options). A hit only fetches the four data pointers
# (through DLPack) and calls fa_forward, which validates the problem and
# the tensors again as on every call. Anything else takes the general road.
_FAST_LIMIT = 256  # entries per thread; a new shape beyond it clears them


def _fast_cache():
    f = getattr(_local, "fast", None)
    if f is None or len(f) >= _FAST_LIMIT:
        f = _local.fast = {}
    return f


_get_pointer = T._get_pointer
_vp_at = T._vp_at


def _numpy_types():
    np = T.sys.modules.get("numpy")
    return (np.ndarray, np.empty) if np is not None else (None, None)


_NDARRAY, _NP_EMPTY = None, None


def _fast_forward(q, k, v, key, return_lse):
    global _NDARRAY, _NP_EMPTY
    if _NDARRAY is None:
        _NDARRAY, _NP_EMPTY = _numpy_types()
        if _NDARRAY is None:
            return None
    nd = _NDARRAY
    if type(q) is not nd or type(k) is not nd or type(v) is not nd:
        return None
    key = (q.shape, q.strides, q.dtype, k.shape, k.strides, k.dtype,
           v.shape, v.strides, v.dtype) + key
    try:
        hit = getattr(_local, "fast", {}).get(key)
    except TypeError:  # an unhashable option (a list window): general road
        return None
    if hit is None:
        return key
    ctx, a, tq, tk, tv, to, oshape, odt, lshape = hit
    try:
        # Each capsule stays referenced until its pointer has been read.
        cq, ck, cv = q.__dlpack__(), k.__dlpack__(), v.__dlpack__()
    except BufferError:  # read-only inputs: the general road handles them
        return None
    o = _NP_EMPTY(oshape, odt)
    co = o.__dlpack__()
    tq.data = _vp_at(_get_pointer(cq, b"dltensor")).value
    tk.data = _vp_at(_get_pointer(ck, b"dltensor")).value
    tv.data = _vp_at(_get_pointer(cv, b"dltensor")).value
    to.data = _vp_at(_get_pointer(co, b"dltensor")).value
    if return_lse:
        lse = _NP_EMPTY(lshape, "float32")
        cl = lse.__dlpack__()
        lp = _vp_at(_get_pointer(cl, b"dltensor")).value
    else:
        lp = None
    st = _lib.forward(ctx.ptr, a, tq, tk, tv, to, lp)
    if st:
        _lib.check(st)
    return ((o, lse) if return_lse else o),


def _backward(do, q, k, v, o, lse, layout, *, backend=None, dq=None, dk=None,
              dv=None, accumulate=False, return_dsinks=False, **kw):
    c = _Call(q, backend)
    nd = 3 if layout == "varlen" else 4
    qv, kv, vv = (c.tensor(q, "q", nd), c.tensor(k, "k", nd),
                  c.tensor(v, "v", nd))
    tq, tk, tv = _problem(c, qv, kv, vv, layout=layout, **kw)
    a = c.a
    ov = c.tensor(o, "o", nd)
    dov = c.tensor(do, "do", nd)
    oshape = qv.shape[:-1] + (a.head_dim_v,)
    for t in (ov, dov):
        if tuple(t.shape) != oshape:
            fail("%s.shape = %s: expected %s (q's rows and heads, v's "
                 "head_dim)" % (t.name, tuple(t.shape), oshape))
    lp = c.array(lse, "lse", 2, 32, _lse_shape(a))
    if lp is None:
        fail("lse is required: pass the lse that attention(..., "
             "return_lse=True) returned")
    if accumulate:
        a.backward_mode = _lib.BACKWARD_ACCUMULATE
        if dq is None or dk is None or dv is None:
            fail("accumulate=True adds to dq, dk and dv: pass all three")
    grads = []
    for g, ref, name in ((dq, qv, "dq"), (dk, kv, "dk"), (dv, vv, "dv")):
        if g is None:  # gradients have the output dtype group (o's)
            g = c.new(ref.shape, ov.dtype, name)
        gv = c.tensor(g, name, nd, writable=True)
        if tuple(gv.shape) != tuple(ref.shape):
            fail("%s.shape = %s: expected %s.shape = %s" % (
                name, tuple(gv.shape), ref.name, tuple(ref.shape)))
        grads.append((g, gv))
    dsinks = None
    if return_dsinks:
        if kw.get("sinks") is None:
            fail("return_dsinks=True needs sinks")
        dsinks = c.new((a.heads_q,), T.F32, "dsinks")
        a.dsinks = c.array(dsinks, "dsinks", 2, 32, (a.heads_q,),
                           writable=True)
    _lib.check(_lib.backward(c.ctx.ptr, ctypes.byref(a), tq, tk, tv,
                             ov.tensor(), dov.tensor(), lp,
                             grads[0][1].tensor(), grads[1][1].tensor(),
                             grads[2][1].tensor()))
    out = tuple(g for g, _ in grads)
    return out + (dsinks,) if return_dsinks else out


def _wants_grad(*xs):
    torch = T._torch()
    if torch is None or not torch.is_grad_enabled():
        return False
    return any(T.is_torch(x) and x.requires_grad for x in xs)


def _differentiable(layout, q, k, v, kw, return_lse, backend, out, out_lse,
                    out_dtype, record=None):
    """A forward through autograd when torch inputs require grad (the
    dense and varlen forms), else the plain one."""
    if _wants_grad(q, k, v, kw.get("sinks")):
        from . import _torch
        return _torch.apply(layout, (q, k, v), kw, return_lse=return_lse,
                            backend=backend, out_dtype=out_dtype,
                            has_out=out is not None or out_lse is not None)
    return _forward(q, k, v, layout, return_lse=return_lse, backend=backend,
                    out=out, out_lse=out_lse, out_dtype=out_dtype,
                    _record=record, **kw)


# ---- the public functions ------------------------------------------------------
def attention(q, k, v, *, causal=False, causal_align="bottom_right",
              scale=None, window=(-1, -1), softcap=0.0, alibi_slopes=None,
              sinks=None, return_lse=False, backend=None, out=None,
              out_lse=None, out_dtype=None, descale_q=None, descale_k=None,
              descale_v=None, q_position=None, k_position=None,
              q_positions=None, k_positions=None):
    """Exact attention O = softmax(scale * Q K^T + masks) V (fa_forward).

    q [batch, seqlen_q, heads_q, head_dim]; k [batch, seqlen_k, heads_kv,
    head_dim]; v [batch, seqlen_k, heads_kv, head_dim_v]: any strides with a
    contiguous last axis, f32/f16/bf16, numpy arrays, torch tensors (CPU or
    CUDA) or any DLPack array, never copied. Returns o [batch, seqlen_q,
    heads_q, head_dim_v] in q's framework and device (into @p out if given),
    and with return_lse the fp32 log-sum-exp [batch, heads_q, seqlen_q].
    torch tensors that require grad get a differentiable result.
    """
    record = None
    if (alibi_slopes is None and sinks is None and out is None and
            out_lse is None and descale_q is None and descale_k is None and
            descale_v is None and q_position is None and k_position is None
            and q_positions is None and k_positions is None):
        r = _fast_forward(q, k, v, (causal, causal_align, scale, window,
                                    softcap, return_lse, backend, out_dtype),
                          return_lse)
        if type(r) is tuple and len(r) == 1:
            return r[0]
        record = r
    kw = dict(causal=causal, causal_align=causal_align, scale=scale,
              window=window, softcap=softcap, alibi_slopes=alibi_slopes,
              sinks=sinks, descale_q=descale_q, descale_k=descale_k,
              descale_v=descale_v, q_position=q_position,
              k_position=k_position, q_positions=q_positions,
              k_positions=k_positions)
    return _differentiable("dense", q, k, v, kw, return_lse, backend, out,
                           out_lse, out_dtype, record)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                     max_seqlen_k, *, seqused_k=None, causal=False,
                     causal_align="bottom_right", scale=None,
                     window=(-1, -1), softcap=0.0, alibi_slopes=None,
                     sinks=None, return_lse=False, backend=None, out=None,
                     out_lse=None, out_dtype=None, descale_q=None,
                     descale_k=None, descale_v=None, q_position=None,
                     k_position=None, q_positions=None, k_positions=None):
    """Variable-length batches, packed: q [total_q, heads_q, head_dim], k and
    v [total_k, heads_kv, head_dim(_v)]; sequence b is rows
    cu_seqlens_q[b]:cu_seqlens_q[b+1] (int32 [batch+1]). o is [total_q,
    heads_q, head_dim_v]; lse [batch, heads_q, max_seqlen_q] (row i of
    sequence b at lse[b, :, i]; rows past a sequence's length unspecified).
    """
    kw = dict(cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
              max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
              seqused_k=seqused_k, causal=causal, causal_align=causal_align,
              scale=scale, window=window, softcap=softcap,
              alibi_slopes=alibi_slopes, sinks=sinks, descale_q=descale_q,
              descale_k=descale_k, descale_v=descale_v,
              q_position=q_position, k_position=k_position,
              q_positions=q_positions, k_positions=k_positions)
    return _differentiable("varlen", q, k, v, kw, return_lse, backend, out,
                           out_lse, out_dtype)


def attention_kvcache(q, k_cache, v_cache, cache_seqlens=None,
                      block_table=None, *, causal=False,
                      causal_align="bottom_right", scale=None,
                      window=(-1, -1), softcap=0.0, alibi_slopes=None,
                      sinks=None, return_lse=False, backend=None, out=None,
                      out_lse=None, out_dtype=None, descale_q=None,
                      descale_k=None, descale_v=None, q_position=None,
                      k_position=None, q_positions=None, k_positions=None):
    """Attention over a KV cache: q [batch, seqlen_q, heads_q, head_dim];
    without block_table the caches are [batch, seqlen_cache, heads_kv, dim];
    with block_table (int32 [batch, max_blocks_per_seq]) they are page pools
    [num_pages, page_size, heads_kv, dim]. cache_seqlens (int32 [batch]) are
    the keys in use per sequence (None: all); queries align with the last
    ones, as in decoding."""
    kw = dict(seqused_k=cache_seqlens, block_table=block_table,
              causal=causal, causal_align=causal_align, scale=scale,
              window=window, softcap=softcap, alibi_slopes=alibi_slopes,
              sinks=sinks, descale_q=descale_q, descale_k=descale_k,
              descale_v=descale_v, q_position=q_position,
              k_position=k_position, q_positions=q_positions,
              k_positions=k_positions)
    layout = "cache" if block_table is None else "paged"
    return _forward(q, k_cache, v_cache, layout, return_lse=return_lse,
                    backend=backend, out=out, out_lse=out_lse,
                    out_dtype=out_dtype, **kw)


def attention_backward(do, q, k, v, o, lse, *, causal=False,
                       causal_align="bottom_right", scale=None,
                       window=(-1, -1), softcap=0.0, alibi_slopes=None,
                       sinks=None, backend=None, dq=None, dk=None, dv=None,
                       accumulate=False, return_dsinks=False,
                       cu_seqlens_q=None, cu_seqlens_k=None,
                       max_seqlen_q=None, max_seqlen_k=None, seqused_k=None,
                       descale_q=None, descale_k=None, descale_v=None,
                       q_position=None, k_position=None, q_positions=None,
                       k_positions=None):
    """Gradients of attention (fa_backward) from the forward's o and lse,
    with the forward's options. Returns (dq, dk, dv), shaped as q, k, v in
    o's dtype (into dq/dk/dv if given; accumulate=True adds to them), and
    dsinks (fp32 [heads_q]) last with return_dsinks=True. With cu_seqlens_q
    and the other varlen arguments the tensors are packed as in
    attention_varlen."""
    kw = dict(causal=causal, causal_align=causal_align, scale=scale,
              window=window, softcap=softcap, alibi_slopes=alibi_slopes,
              sinks=sinks, descale_q=descale_q, descale_k=descale_k,
              descale_v=descale_v, q_position=q_position,
              k_position=k_position, q_positions=q_positions,
              k_positions=k_positions, seqused_k=seqused_k)
    layout = "dense"
    if cu_seqlens_q is not None or cu_seqlens_k is not None:
        layout = "varlen"
        kw.update(cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                  max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)
    return _backward(do, q, k, v, o, lse, layout, backend=backend, dq=dq,
                     dk=dk, dv=dv, accumulate=accumulate,
                     return_dsinks=return_dsinks, **kw)


def merge_states(o_a, lse_a, o_b, lse_b, *more, backend=None, out=None,
                 out_lse=None):
    """The merge lemma (fa_merge_states): combine attention results over
    disjoint key sets into the result over their union. o [batch, seqlen,
    heads, head_dim], lse fp32 [batch, heads, seqlen]; more (o, lse) pairs
    may follow. Returns (o, lse); out/out_lse may be one of the parts (in
    place)."""
    if len(more) % 2:
        fail("merge_states takes (o, lse) pairs: %d arrays after lse_b" %
             len(more))
    pairs = [(o_a, lse_a), (o_b, lse_b)] + [
        (more[i], more[i + 1]) for i in range(0, len(more), 2)]
    c = _Call(o_a, backend)
    parts = []
    lses = []
    shape = None
    for i, (o, lse) in enumerate(pairs):
        ov = c.tensor(o, "o_parts[%d]" % i, 4)
        if shape is None:
            shape = tuple(ov.shape)
        elif tuple(ov.shape) != shape:
            fail("o_parts[%d].shape = %s differs from o_parts[0].shape = %s" %
                 (i, tuple(ov.shape), shape))
        parts.append(ov.tensor())
        b, s, h, d = shape
        lses.append(c.array(lse, "lse_parts[%d]" % i, 2, 32, (b, h, s)))
    b, s, h, d = shape
    if out is None:
        out = c.new(shape, c.views[0].dtype, "o")
    ov = c.tensor(out, "out", 4, writable=True)
    if tuple(ov.shape) != shape:
        fail("out.shape = %s: expected %s" % (tuple(ov.shape), shape))
    if out_lse is None:
        out_lse = c.new((b, h, s), T.F32, "lse")
    lp = c.array(out_lse, "out_lse", 2, 32, (b, h, s), writable=True)
    n = len(pairs)
    parts_c = (_lib.Tensor * n)(*parts)
    lses_c = (ctypes.c_void_p * n)(*lses)
    _lib.check(_lib.merge_states_c(c.ctx.ptr, n, parts_c, lses_c, b, s, h, d,
                                   ov.tensor(), lp))
    return out, out_lse


# Options of attention() that do not change dispatch: explain() and
# describe() accept them, so the same keyword set can be passed to all.
_OUTPUT_ONLY = ("return_lse", "out", "out_lse")


def _explain_problem(q, k, v, backend, kw):
    kw = {n: x for n, x in kw.items() if n not in _OUTPUT_ONLY}
    if "cache_seqlens" in kw:  # attention_kvcache's name for seqused_k
        kw["seqused_k"] = kw.pop("cache_seqlens")
    layout = "dense"
    if kw.get("cu_seqlens_q") is not None:
        layout = "varlen"
    elif kw.get("block_table") is not None:
        layout = "paged"
    c = _Call(q, backend)
    nd = 3 if layout == "varlen" else 4
    qv, kv, vv = (c.tensor(q, "q", nd), c.tensor(k, "k", nd),
                  c.tensor(v, "v", nd))
    ts = _problem(c, qv, kv, vv, layout=layout, **kw)
    return c, qv, ts


def explain(q, k, v, *, backend=None, **same):
    """fa_explain for this problem: one line per backend compiled in, saying
    which kernel would run and why the others were skipped (assuming dense
    BSHD tensors; describe() is the authority for these very arrays). Takes
    the options of attention(), attention_varlen() (cu_seqlens_q, ...) and
    attention_kvcache() (block_table, seqused_k)."""
    c, qv, _ = _explain_problem(q, k, v, backend, same)
    n = _lib.explain_c(ctypes.byref(c.a), qv.dtype.code, None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    _lib.explain_c(ctypes.byref(c.a), qv.dtype.code, buf, n + 1)
    return buf.value.decode()


def describe(q, k, v, *, backend=None, out_dtype=None, **same):
    """fa_plan_describe of the plan a forward on exactly these arrays would
    run: backend, kernel, tiles, splits (the authority on dispatch)."""
    c, qv, (tq, tk, tv) = _explain_problem(q, k, v, backend, same)
    nd = len(qv.shape)
    dt = _dtype_arg(out_dtype, "out_dtype") or qv.dtype
    o = c.new(qv.shape[:-1] + (c.a.head_dim_v,), dt, "o")
    ov = c.tensor(o, "o", nd)
    plan = ctypes.c_void_p()
    _lib.check(_lib.plan_create(c.ctx.ptr, ctypes.byref(c.a), tq, tk, tv,
                                ov.tensor(), ctypes.byref(plan)))
    try:
        n = _lib.plan_describe(plan, None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        _lib.plan_describe(plan, buf, n + 1)
        return buf.value.decode()
    finally:
        _lib.plan_destroy(plan)


def backends():
    """Names of the backends compiled in and usable here, best first."""
    return [_lib.backend_name(i).decode()
            for i in range(_lib.backend_count())]
