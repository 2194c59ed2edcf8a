# SPDX-License-Identifier: MIT
"""Arrays in, arrays out: DLPack import without copies, and outputs made by
the framework (and on the device) of the caller's q.

DLPack (dmlc/dlpack's dlpack.h; the array API standard's __dlpack__): an
array's __dlpack__() returns a PyCapsule named "dltensor" holding a
DLManagedTensor*. We only borrow it: the capsule is read through the
PyCapsule C API (ctypes.pythonapi) and kept referenced until the library
call returns. It is never renamed to "used_dltensor", so when the last
reference goes the producer's own capsule destructor calls the deleter,
exactly as if a consumer had taken it and released it (the spec's
ownership rule, with the release done by the producer's code path).
The unversioned capsule is asked for (no max_version) because numpy 1.24's
__dlpack__ takes no max_version; a "dltensor_versioned" capsule is read too.

Strides in DLPack are in elements, which is what fa_tensor wants; a NULL
strides pointer (numpy 1.24 for C-contiguous arrays) means row-major.
"""
import ctypes
import sys

from . import _lib

# ---- dtypes: one row per fa_dtype -------------------------------------------
# (fa_dtype, name, DLPack (type code, bits), numpy dtype name, torch dtype
# name). numpy has no bf16: its row resolves through ml_dtypes when that is
# installed. The FP8 rows are one line each (DLPack kDLFloat8_e4m3fn = 10,
# kDLFloat8_e5m2 = 12; ml_dtypes and torch name them alike), e.g.
#   (3, "e4m3", (10, 8), "float8_e4m3fn", "float8_e4m3fn"),
_DTYPE_ROWS = [
    (0, "f32", (2, 32), "float32", "float32"),
    (1, "f16", (2, 16), "float16", "float16"),
    (2, "bf16", (4, 16), "bfloat16", "bfloat16"),
]


class DType:
    __slots__ = ("code", "name", "dlpack", "numpy_name", "torch_name")

    def __init__(self, code, name, dlpack, numpy_name, torch_name):
        self.code, self.name, self.dlpack = code, name, dlpack
        self.numpy_name, self.torch_name = numpy_name, torch_name

    def __repr__(self):
        return self.name


DTYPES = [DType(*r) for r in _DTYPE_ROWS]
BY_DLPACK = {d.dlpack: d for d in DTYPES}
# The element types of side arrays (index arrays, positions), which are no
# fa_dtype (code -1) but are borrowed the same way.
SIDE_DTYPES = {(0, 32): DType(-1, "int32", (0, 32), "int32", "int32"),
               (0, 64): DType(-1, "int64", (0, 64), "int64", "int64")}
SIDE_BY_DLPACK = dict(BY_DLPACK)
SIDE_BY_DLPACK.update(SIDE_DTYPES)
BY_NAME = {d.name: d for d in DTYPES}
for _d in DTYPES:  # numpy/torch spellings as aliases ("float16", "bfloat16")
    BY_NAME.setdefault(_d.numpy_name, _d)
F32 = BY_NAME["f32"]

# DLPack type codes and devices used in messages and checks.
_DL_CODE_NAMES = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 5: "complex",
                  6: "bool"}
DL_CPU, DL_CUDA, DL_CUDA_HOST, DL_ROCM, DL_ROCM_HOST, DL_CUDA_MANAGED = (
    1, 2, 3, 10, 11, 13)
# Memory a CPU backend may read: host memory, pinned host memory included.
HOST_DEVICES = (DL_CPU, DL_CUDA_HOST, DL_ROCM_HOST)
_DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 10: "rocm",
                 11: "rocm_host", 13: "cuda_managed"}


def device_name(dev):
    t, i = dev
    return "%s:%d" % (_DEVICE_NAMES.get(t, "dlpack_device_%d" % t), i)


def dl_dtype_name(code, bits, lanes=1):
    base = "%s%d" % (_DL_CODE_NAMES.get(code, "code%d_" % code), bits)
    return base if lanes == 1 else "%sx%d" % (base, lanes)


_NUMPY_DTYPES = {}


def numpy_dtype(dt):
    """The numpy dtype of a row, or None when numpy cannot hold it here
    (looked up once: a failed ml_dtypes import is not retried per call)."""
    try:
        return _NUMPY_DTYPES[dt.name]
    except KeyError:
        r = _NUMPY_DTYPES[dt.name] = _numpy_dtype(dt)
        return r


def _numpy_dtype(dt):
    import numpy as np
    try:
        return np.dtype(dt.numpy_name)
    except TypeError:
        pass
    ml = sys.modules.get("ml_dtypes")
    if ml is None:
        try:
            import ml_dtypes as ml
        except ImportError:
            return None
    t = getattr(ml, dt.numpy_name, None)
    return np.dtype(t) if t is not None else None


# ---- the DLPack structs -------------------------------------------------------
class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


# DLManagedTensor starts with its DLTensor. DLManagedTensorVersioned puts
# {version (2 x u32), manager_ctx, deleter, flags (u64)} first: the DLTensor
# sits 32 bytes in on every platform with 8-byte pointers (and 20 on 32-bit
# ones), computed here rather than assumed.
_VERSIONED_PREFIX = (8 + 2 * ctypes.sizeof(ctypes.c_void_p) + 8)
_DLPACK_READ_ONLY = 1

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.restype = ctypes.c_int
_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def fail(message, status=_lib.ERR_INVALID_ARGUMENT):
    raise _lib.FlashAttnError(status, message)


class View:
    """A borrowed array: data pointer, device, dtype row, shape and element
    strides, and what keeps it alive (the capsule and the array)."""
    __slots__ = ("name", "obj", "keep", "data", "device", "dtype", "shape",
                 "strides", "readonly")

    def tensor(self, descale=None, per_head=0):
        """This view as fa_tensor ([B, S, H, D], or [T, H, D] varlen with
        stride_batch 0)."""
        s = self.strides
        if len(s) == 4:
            sb, ss, sh = s[0], s[1], s[2]
        else:
            sb, ss, sh = 0, s[0], s[1]
        return _lib.Tensor(self.data, self.dtype.code, sb, ss, sh, descale,
                           per_head)


def _torch():
    return sys.modules.get("torch")


def is_torch(obj):
    t = _torch()
    return t is not None and isinstance(obj, t.Tensor)


def device_of(obj):
    """(DLPack device type, id) of an array, without importing it."""
    if is_torch(obj):
        d = obj.device
        if d.type == "cpu":
            return (DL_CPU, 0)
        if d.type == "cuda":
            # torch reports ROCm devices as "cuda" too; torch.version.hip
            # tells them apart.
            hip = getattr(_torch().version, "hip", None)
            return (DL_ROCM if hip else DL_CUDA,
                    d.index if d.index is not None else
                    _torch().cuda.current_device())
        return (-1, 0)
    f = getattr(obj, "__dlpack_device__", None)
    if f is None:
        return (DL_CPU, 0) if hasattr(obj, "__array_interface__") else None
    t, i = f()
    return (int(t), int(i))


def _from_array_interface(v, obj, name, side):
    """numpy arrays DLPack cannot export here (read-only arrays, ml_dtypes'
    bf16 under numpy 1.24): the array interface is just as zero-copy."""
    import numpy as np
    if not isinstance(obj, np.ndarray):
        return False
    code = None
    for d in DTYPES + list(SIDE_DTYPES.values()):
        nd = numpy_dtype(d)
        if nd is not None and obj.dtype == nd:
            code = d
    if code is None or (code.code < 0 and not side):
        fail("%s has dtype %s: flashattn takes %s" % (
            name, obj.dtype, ", ".join(d.name for d in DTYPES)),
            _lib.ERR_UNSUPPORTED)
    item = obj.dtype.itemsize
    if any(s % item for s in obj.strides):
        fail("%s.strides (bytes) = %s are not multiples of the element size "
             "%d" % (name, obj.strides, item))
    v.data = obj.__array_interface__["data"][0]
    v.device = (DL_CPU, 0)
    v.dtype = code
    v.shape = obj.shape
    v.strides = tuple(s // item for s in obj.strides)
    v.readonly = not obj.flags.writeable
    v.keep = obj
    return True


# numpy arrays, the common small-call case, take a shorter road: the data
# pointer still comes from numpy's DLPack export (the capsule is dropped once
# the pointer is read: the array itself, referenced by the call, keeps the
# memory), the
# dtype and the strides (bytes, divided by the element size) from the array.
_NP = {"ndarray": None, "dtypes": None}


def _numpy_fast(obj, side):
    nd = _NP["ndarray"]
    if nd is None:
        np = sys.modules.get("numpy")
        if np is None:
            return None
        _NP["ndarray"] = nd = np.ndarray
        rows = {numpy_dtype(d): d for d in DTYPES
                if numpy_dtype(d) is not None}
        _NP["dtypes"] = rows
        _NP["side"] = dict(rows)
        _NP["side"].update({np.dtype(d.numpy_name): d
                            for d in SIDE_DTYPES.values()})
    if type(obj) is not nd:
        return None
    return _NP["side" if side else "dtypes"].get(obj.dtype)


_vp_at = ctypes.c_void_p.from_address


def view(obj, name, stream=None, writable=False, side=False):
    """Borrow @p obj (anything with __dlpack__) without copying it.

    @p stream: the consumer's stream for GPU arrays (DLPack: 1 = the legacy
    default CUDA stream, 0 the default ROCm one); None on the host.
    @p side: a side array, which may also hold int32/int64 (the caller
    checks the exact dtype it needs).
    """
    v = View()
    v.name, v.obj, v.readonly = name, obj, False
    dt = _numpy_fast(obj, side)
    if dt is not None and obj.flags.writeable:
        try:
            capsule = obj.__dlpack__()  # alive until its pointer is read
        except BufferError:
            # A dtype numpy's DLPack export lacks (ml_dtypes' bfloat16 on
            # numpy 2.x): the array interface gives the same pointer.
            if _from_array_interface(v, obj, name, side):
                return v
            raise
        v.data = _vp_at(_get_pointer(capsule, b"dltensor")).value
        del capsule
        v.device, v.dtype, v.shape, v.keep = (DL_CPU, 0), dt, obj.shape, obj
        item = obj.itemsize
        st = obj.strides
        v.strides = tuple([x // item for x in st])
        if any([x % item for x in st]):
            fail("%s.strides (bytes) = %s are not multiples of the element "
                 "size %d" % (name, st, item))
        return v
    src = obj
    if is_torch(obj) and obj.requires_grad:
        # torch refuses to export a tensor that requires grad; detach() is a
        # view of the same storage (no copy), and autograd is handled by
        # flashattn's own Function (_torch.py).
        src = obj.detach()
    exporter = getattr(src, "__dlpack__", None)
    if exporter is None:
        fail("%s is a %s: flashattn takes arrays that export DLPack (numpy, "
             "torch, ...), never copying a sequence into one" % (
                 name, type(obj).__name__))
    # The stream is only for arrays on a GPU: torch refuses one for a CPU
    # tensor, and the caller's device check below then names the mismatch.
    where = getattr(src, "__dlpack_device__", None)
    if stream is not None and where is not None and where()[0] in (
            DL_CPU, DL_CUDA_HOST, DL_ROCM_HOST):
        stream = None
    try:
        capsule = exporter() if stream is None else exporter(stream=stream)
    except (BufferError, TypeError, RuntimeError) as e:
        if _from_array_interface(v, obj, name, side):
            if writable and v.readonly:
                fail("%s is read-only: flashattn writes its results there" %
                     name)
            return v
        fail("%s cannot be exported through DLPack: %s" % (name, e))
    if _is_valid(capsule, b"dltensor"):
        p = _get_pointer(capsule, b"dltensor")
    elif _is_valid(capsule, b"dltensor_versioned"):
        base = _get_pointer(capsule, b"dltensor_versioned")
        major = ctypes.c_uint32.from_address(base).value
        if major != 1:
            fail("%s: DLPack major version %d is not understood (1 is)" % (
                name, major))
        flags = ctypes.c_uint64.from_address(
            base + _VERSIONED_PREFIX - 8).value
        v.readonly = bool(flags & _DLPACK_READ_ONLY)
        p = base + _VERSIONED_PREFIX
    else:
        fail("%s.__dlpack__() did not return a DLPack capsule" % name)
    t = _DLTensor.from_address(p)
    n = t.ndim
    shape = tuple(t.shape[:n])
    if t.strides:
        strides = tuple(t.strides[:n])
    else:  # NULL: compact row-major
        strides, acc = [0] * n, 1
        for i in range(n - 1, -1, -1):
            strides[i] = acc
            acc *= shape[i]
        strides = tuple(strides)
    table = SIDE_BY_DLPACK if side else BY_DLPACK
    dt = table.get((t.code, t.bits)) if t.lanes == 1 else None
    if dt is None and side:
        fail("%s has dtype %s" % (name, dl_dtype_name(t.code, t.bits,
                                                      t.lanes)))
    if dt is None:
        fail("%s has dtype %s: flashattn takes %s (a float64 array is never "
             "converted silently: cast it first)" % (
                 name, dl_dtype_name(t.code, t.bits, t.lanes),
                 ", ".join(d.name for d in DTYPES)), _lib.ERR_UNSUPPORTED)
    v.data = (t.data or 0) + t.byte_offset
    v.device = (t.device_type, t.device_id)
    v.dtype = dt
    v.shape = shape
    v.strides = strides
    v.keep = capsule
    if writable and v.readonly:
        fail("%s is read-only: flashattn writes its results there" % name)
    return v


def strided(v, ndim):
    """Check a tensor operand: @p ndim dimensions, unit stride on the last
    one, strides >= 0 (size-1 axes are free: their stride is never used)."""
    if len(v.shape) != ndim:
        fail("%s has %d dimensions %s: expected %d (%s)" % (
            v.name, len(v.shape), v.shape, ndim,
            "[batch, seqlen, heads, head_dim]" if ndim == 4 else
            "[total_rows, heads, head_dim]"))
    s = list(v.strides)
    for i, n in enumerate(v.shape):
        if n == 1:
            s[i] = 1 if i == ndim - 1 else 0
    if s[-1] != 1:
        fail("%s.stride(%d) = %d: flashattn needs a contiguous last "
             "(head_dim) axis; make it contiguous first (an explicit copy)" % (
                 v.name, ndim - 1, v.strides[-1]))
    for i in range(ndim - 1):
        if s[i] < 0:
            fail("%s.stride(%d) = %d: flashattn needs strides >= 0" % (
                v.name, i, v.strides[i]))
    v.strides = tuple(s)
    return v


def contiguous(v, dtype_code, bits, shape):
    """Check an index or side array: exact dtype, shape, C-contiguous."""
    want = dl_dtype_name(dtype_code, bits)
    if v.dtype.dlpack != (dtype_code, bits):
        fail("%s has dtype %s: expected %s (never converted silently)" % (
            v.name, dl_dtype_name(*v.dtype.dlpack), want))
    if tuple(v.shape) != tuple(shape):
        fail("%s.shape = %s: expected %s" % (v.name, tuple(v.shape),
                                             tuple(shape)))
    acc = 1
    for i in range(len(shape) - 1, -1, -1):
        if shape[i] != 1 and v.strides[i] != acc:
            fail("%s is not contiguous (strides %s): flashattn reads it as a "
                 "dense %s array" % (v.name, v.strides, want))
        acc *= shape[i]
    return v


def empty(like, shape, dt, name):
    """A new array of @p shape and dtype row @p dt, in the framework and on
    the device of @p like (a torch tensor or a numpy-compatible array)."""
    if is_torch(like):
        torch = _torch()
        return torch.empty(shape, dtype=getattr(torch, dt.torch_name),
                           device=like.device)
    dev = device_of(like)
    if dev is None or dev[0] not in HOST_DEVICES:
        fail("%s: flashattn allocates outputs with torch or numpy; for arrays "
             "on %s from another framework pass the output array (out=...)" % (
                 name, device_name(dev) if dev else "an unknown device"))
    import numpy as np
    nd = numpy_dtype(dt)
    if nd is None:
        fail("%s would be %s, which numpy holds only through ml_dtypes (not "
             "installed): use torch tensors, install ml_dtypes or ask for "
             "another output dtype" % (name, dt.name), _lib.ERR_UNSUPPORTED)
    return np.empty(shape, dtype=nd)
