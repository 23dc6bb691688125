"""``torch.ops.inductor_ext.softmax``: softmax over one dimension into an output dtype, what the
``vocab_softmax`` pass turns a large-vocabulary softmax into so that template families can be
autotuned for it (Inductor otherwise decomposes softmax before any lowering could offer one).

Its implementation is ATen's softmax on every device (the ATen choice of that autotuning);
``out_dtype`` is torch.softmax's ``dtype`` (x is cast to it first; the pass only uses casts that
widen, which are exact). Its backward is ATen's softmax backward. The output is contiguous.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


@torch.library.custom_op("inductor_ext::softmax", mutates_args=())
def softmax(x: Tensor, dim: int, out_dtype: torch.dtype | None = None) -> Tensor:
    return torch.softmax(x, dim, dtype=out_dtype).contiguous()


@softmax.register_fake
def _(x: Tensor, dim: int, out_dtype: torch.dtype | None = None) -> Tensor:
    return torch.empty(x.shape, dtype=out_dtype or x.dtype, device=x.device)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    x, dim, _ = inputs
    ctx.save_for_backward(output)
    ctx.dim, ctx.x_dtype = dim, x.dtype


def _backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
    (out,) = ctx.saved_tensors
    # In the output's dtype, then cast like the upcast x went through (softmax(x.float())).
    return torch._softmax_backward_data(grad, out, ctx.dim, out.dtype).to(ctx.x_dtype), None, None


softmax.register_autograd(_backward, setup_context=_setup_context)
