"""``torch.ops.inductor_ext.layer_norm``: LayerNorm as one op, so Inductor can offer template
families for it (Inductor decomposes ``aten.native_layer_norm`` before lowering and has no norm op
to autotune), and its reference in plain torch.

What the ``layer_norm_op`` pass (``lowering/passes/layer_norm_op.py``) turns ``F.layer_norm`` /
``nn.LayerNorm`` into. The tensors come first (``input``, ``weight``, ``bias``, the last two
optional) so an extern choice passes them positionally; ``eps`` is always a number. Its eager
kernel is ATen's ``layer_norm``: the ATen choice the families are timed against.
"""

from __future__ import annotations

import torch
from torch import Tensor


def layer_norm_reference(x: Tensor, weight: Tensor | None, bias: Tensor | None, normalized_shape: list[int],
                         eps: float = 1e-5) -> Tensor:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the trailing ``normalized_shape``
    dims (biased variance), in fp32 (fp64 for fp64), one rounding to the input dtype."""
    dims = tuple(range(x.dim() - len(normalized_shape), x.dim()))
    xf = x.double() if x.dtype == torch.float64 else x.float()
    mean = xf.mean(dims, keepdim=True)
    var = (xf - mean).pow(2).mean(dims, keepdim=True)
    out = (xf - mean) * torch.rsqrt(var + eps)
    if weight is not None:
        out = out * weight.to(xf.dtype)
    if bias is not None:
        out = out + bias.to(xf.dtype)
    return out.to(x.dtype)


@torch.library.custom_op("inductor_ext::layer_norm", mutates_args=())
def layer_norm(input: Tensor, weight: Tensor | None, bias: Tensor | None, normalized_shape: list[int],
               eps: float) -> Tensor:
    """``F.layer_norm(input, normalized_shape, weight, bias, eps)``, contiguous."""
    return torch.nn.functional.layer_norm(input, normalized_shape, weight, bias, eps).contiguous()


@layer_norm.register_fake
def _(input: Tensor, weight: Tensor | None, bias: Tensor | None, normalized_shape: list[int], eps: float) -> Tensor:
    return input.new_empty(input.shape)


OP = torch.ops.inductor_ext.layer_norm.default
