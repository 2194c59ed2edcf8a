# SPDX-License-Identifier: MIT
"""libflashattn through ctypes: finding it, its structs, its prototypes.

No compiled extension: every call goes through prototypes declared once here
(argtypes/restype set at import, so a call costs one ctypes dispatch), and
ctypes.CDLL releases the GIL around each foreign call, so the library
computes while other Python threads run.

The struct layouts below mirror include/flashattn.h (0.2). A layout that
drifts from the library's is caught at import: fa_attention_init() writes the
library's sizeof(fa_attention) into struct_size, and it must equal
ctypes.sizeof(Attention); the library would otherwise refuse every problem
with FA_ERR_INVALID_ARGUMENT naming struct_size.
"""
import ctypes
import os

#: The API version this binding is written against (MAJOR, MINOR). While the
#: major is 0 every minor may break the ABI, so the library must match both.
API_VERSION = (0, 2)

# fa_status (stable numbers).
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_UNSUPPORTED = 2
ERR_NO_DEVICE = 3
ERR_OUT_OF_MEMORY = 4
ERR_BACKEND = 5

# fa_backend_kind.
BACKEND_AUTO, BACKEND_CPU, BACKEND_CUDA, BACKEND_HIP = 0, 1, 2, 3

CAUSAL_BOTTOM_RIGHT = 1
CAUSAL_TOP_LEFT = 2
POSITIONS_ALIGNED = 0
POSITIONS_EXPLICIT = 1
BACKWARD_OVERWRITE = 0
BACKWARD_ACCUMULATE = 1

_c_int, _c_float, _c_i64, _vp = (ctypes.c_int, ctypes.c_float,
                                 ctypes.c_int64, ctypes.c_void_p)


class Tensor(ctypes.Structure):
    """fa_tensor: a strided [batch, seq, heads, dim] view (strides in
    elements, unit dim stride)."""
    _fields_ = [
        ("data", _vp),
        ("dtype", _c_int),
        ("stride_batch", _c_i64),
        ("stride_seq", _c_i64),
        ("stride_head", _c_i64),
        ("descale", _vp),
        ("descale_per_head", _c_int),
    ]


class Attention(ctypes.Structure):
    """fa_attention, field for field."""
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("batch", _c_int),
        ("seqlen_q", _c_int),
        ("seqlen_k", _c_int),
        ("heads_q", _c_int),
        ("heads_kv", _c_int),
        ("head_dim", _c_int),
        ("head_dim_v", _c_int),
        ("scale", _c_float),
        ("causal", _c_int),
        ("window_left", _c_int),
        ("window_right", _c_int),
        ("softcap", _c_float),
        ("alibi_slopes", _vp),
        ("sinks", _vp),
        ("cu_seqlens_q", _vp),
        ("cu_seqlens_k", _vp),
        ("seqused_k", _vp),
        ("block_table", _vp),
        ("max_blocks_per_seq", _c_int),
        ("page_size", _c_int),
        ("num_pages", _c_int),
        ("rows_q", _c_i64),
        ("rows_k", _c_i64),
        ("positions", _c_int),
        ("q_position", _c_i64),
        ("k_position", _c_i64),
        ("q_positions", _vp),
        ("k_positions", _vp),
        ("backward_mode", _c_int),
        ("dsinks", _vp),
    ]


class FlashAttnError(ValueError):
    """A call was refused or failed. str(e) is the library's own message
    (fa_last_error(): the field and its value); e.status is the fa_status
    number and e.status_name its name ("invalid argument", ...)."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = int(status)
        self.status_name = status_string(status)
        self.message = message


def _candidates():
    """Where the library may be, in the order the package README states."""
    env = os.environ.get("FLASHATTN_LIBRARY")
    if env:
        # An explicit choice is the only one tried: a wrong path must fail
        # loudly, not quietly load another build.
        return [env], True
    here = os.path.dirname(os.path.abspath(__file__))
    names = ["libflashattn.so.%d.%d" % API_VERSION, "libflashattn.so",
             "libflashattn.%d.%d.dylib" % API_VERSION, "libflashattn.dylib",
             "flashattn.dll"]
    paths = [os.path.join(here, n) for n in names]
    # The library this copy was built or installed with (CMake writes
    # _build_config.py into the build tree's and the installed copy).
    try:
        from . import _build_config
        paths.append(_build_config.LIBRARY)
    except ImportError:
        pass
    # A source checkout: python/flashattn next to the default build/ tree.
    root = os.path.dirname(os.path.dirname(here))
    paths += [os.path.join(root, "build", n) for n in names]
    # Finally the system loader (LD_LIBRARY_PATH, ldconfig, rpath).
    return [p for p in paths if os.path.exists(p)] + names, False


def _load():
    paths, explicit = _candidates()
    errors = []
    for p in paths:
        try:
            return ctypes.CDLL(p), p
        except OSError as e:
            errors.append("%s: %s" % (p, e))
    hint = ("FLASHATTN_LIBRARY=%s could not be loaded" % paths[0] if explicit
            else "libflashattn %d.%d not found beside the package, where it "
            "was built or installed, in a build/ tree or by the system "
            "loader; set FLASHATTN_LIBRARY=/path/to/libflashattn.so" %
            API_VERSION)
    raise ImportError(hint + "\n  " + "\n  ".join(errors))


lib, path = _load()


def _proto(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_P = ctypes.POINTER
_TensorP = _P(Tensor)
_AttentionP = _P(Attention)
_vpp = _P(_vp)

version = _proto("fa_version", ctypes.c_char_p)
version_number = _proto("fa_version_number", _c_int)
status_string_c = _proto("fa_status_string", ctypes.c_char_p, _c_int)
last_error = _proto("fa_last_error", ctypes.c_char_p)
attention_init = _proto("fa_attention_init", None, _AttentionP)
context_create = _proto("fa_context_create", _c_int, _vpp, _c_int, _c_int)
context_create_by_name = _proto("fa_context_create_by_name", _c_int, _vpp,
                                ctypes.c_char_p)
context_destroy = _proto("fa_context_destroy", None, _vp)
context_backend = _proto("fa_context_backend", ctypes.c_char_p, _vp)
context_set_stream = _proto("fa_context_set_stream", _c_int, _vp, _vp)
context_set_threads = _proto("fa_context_set_threads", _c_int, _vp, _c_int)
backend_count = _proto("fa_backend_count", _c_int)
backend_name = _proto("fa_backend_name", ctypes.c_char_p, _c_int)
explain_c = _proto("fa_explain", ctypes.c_size_t, _AttentionP, _c_int,
                   ctypes.c_char_p, ctypes.c_size_t)
forward = _proto("fa_forward", _c_int, _vp, _AttentionP, Tensor, Tensor,
                 Tensor, Tensor, _vp)
backward = _proto("fa_backward", _c_int, _vp, _AttentionP, Tensor, Tensor,
                  Tensor, Tensor, Tensor, _vp, Tensor, Tensor, Tensor)
merge_states_c = _proto("fa_merge_states", _c_int, _vp, _c_int, _TensorP,
                        _vpp, _c_int, _c_int, _c_int, _c_int, Tensor, _vp)
plan_create = _proto("fa_plan_create", _c_int, _vp, _AttentionP, Tensor,
                     Tensor, Tensor, Tensor, _vpp)
plan_describe = _proto("fa_plan_describe", ctypes.c_size_t, _vp,
                       ctypes.c_char_p, ctypes.c_size_t)
plan_destroy = _proto("fa_plan_destroy", None, _vp)


def status_string(s):
    return status_string_c(int(s)).decode()


def check(status):
    """Raise FlashAttnError with fa_last_error()'s text for a failed call."""
    if status:
        raise FlashAttnError(status, last_error().decode(errors="replace"))


def _check_abi():
    want = API_VERSION[0] * 10000 + API_VERSION[1] * 100
    have = version_number()
    if have // 100 != want // 100:
        raise ImportError(
            "%s is flashattn %s, but this package binds the %d.%d API (a 0.x "
            "minor version changes the ABI): point FLASHATTN_LIBRARY at a "
            "%d.%d library" % (path, version().decode(), API_VERSION[0],
                               API_VERSION[1], API_VERSION[0],
                               API_VERSION[1]))
    # fa_attention_init writes the library's sizeof(fa_attention); give it
    # room for a struct larger than ours so a mismatch is reported, not
    # written past the end.
    probe = ctypes.create_string_buffer(ctypes.sizeof(Attention) + 4096)
    attention_init(ctypes.cast(probe, _AttentionP))
    lib_size = ctypes.c_size_t.from_buffer(probe).value
    if lib_size != ctypes.sizeof(Attention):
        raise ImportError(
            "%s has a %d-byte fa_attention, but this package's ctypes layout "
            "is %d bytes: the binding and the library come from different "
            "versions" % (path, lib_size, ctypes.sizeof(Attention)))


_check_abi()

# The defaults (struct_size, windows -1): every problem starts as a copy.
DEFAULT_ATTENTION = Attention()
attention_init(ctypes.byref(DEFAULT_ATTENTION))
