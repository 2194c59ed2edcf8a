# SPDX-License-Identifier: MIT
"""flashattn: exact FlashAttention-style attention on numpy arrays, torch
tensors (CPU and CUDA) and any DLPack array, without copies.

    import flashattn as fa
    o = fa.attention(q, k, v, causal=True)   # q [batch, seqlen, heads, dim]

Layout BSHD (FlashAttention's flash_attn_func); keyword arguments after the
tensors; errors are FlashAttnError (a ValueError) carrying the C library's
status and its exact message. See python/README.md.
"""
from ._lib import FlashAttnError, API_VERSION  # noqa: F401
from . import _lib
from ._api import (attention, attention_varlen, attention_kvcache,  # noqa: F401
                   attention_backward, merge_states, explain, describe,
                   backends, set_threads)

#: The library's version ("0.2.0") and where it was loaded from.
library_version = _lib.version().decode()
library_path = _lib.path
__version__ = library_version

# fa_status numbers, for comparing with FlashAttnError.status.
OK = _lib.OK
ERR_INVALID_ARGUMENT = _lib.ERR_INVALID_ARGUMENT
ERR_UNSUPPORTED = _lib.ERR_UNSUPPORTED
ERR_NO_DEVICE = _lib.ERR_NO_DEVICE
ERR_OUT_OF_MEMORY = _lib.ERR_OUT_OF_MEMORY
ERR_BACKEND = _lib.ERR_BACKEND

#: Element types the library takes (names as out_dtype accepts them).
dtypes = tuple(d.name for d in __import__(
    "flashattn._tensors", fromlist=["DTYPES"]).DTYPES)

__all__ = ["attention", "attention_varlen", "attention_kvcache",
           "attention_backward", "merge_states", "explain", "describe",
           "backends", "set_threads", "FlashAttnError", "library_version",
           "library_path", "dtypes"]
