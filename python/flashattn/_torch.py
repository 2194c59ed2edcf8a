# SPDX-License-Identifier: MIT
"""Autograd for torch tensors: a torch.autograd.Function whose forward is
fa_forward (keeping o and the LSE) and whose backward is fa_backward.

Imported only when a torch tensor that requires grad reaches attention()
or attention_varlen(), so `import flashattn` never imports torch.
The LSE output is not differentiable (marked so): a loss that uses it gets
no gradient through it.
"""
import torch

from . import _api
from ._tensors import fail


def _unit_last(t):
    # Autograd hands backward a dO of its own making (often an expanded,
    # stride-0 tensor from .sum()): make it dense when its last axis is not.
    # This is the one copy the package makes, and only of a gradient.
    if t.dim() and t.stride(-1) != 1 and t.shape[-1] != 1:
        return t.contiguous()
    return t


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, layout, kw, backend, out_dtype, q, k, v, sinks):
        kw = dict(kw, sinks=sinks)
        o, lse = _api._forward(q, k, v, layout, return_lse=True,
                               backend=backend, out_dtype=out_dtype, **kw)
        ctx.layout, ctx.kw, ctx.backend = layout, kw, backend
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        kw = dict(ctx.kw)
        want_dsinks = kw.get("sinks") is not None and ctx.needs_input_grad[7]
        res = _api._backward(_unit_last(do), q, k, v, o, lse, ctx.layout,
                             backend=ctx.backend, return_dsinks=want_dsinks,
                             **kw)
        dq, dk, dv = (g.to(x.dtype) for g, x in zip(res[:3], (q, k, v)))
        dsinks = res[3] if want_dsinks else None
        return None, None, None, None, dq, dk, dv, dsinks


def apply(layout, qkv, kw, return_lse, backend, out_dtype, has_out):
    if has_out:
        fail("out= and out_lse= are not differentiable: leave them out when "
             "the inputs require grad (or call under torch.no_grad())")
    kw = dict(kw)
    sinks = kw.pop("sinks", None)
    q, k, v = qkv
    o, lse = _Attention.apply(layout, kw, backend, out_dtype, q, k, v, sinks)
    return (o, lse) if return_lse else o
