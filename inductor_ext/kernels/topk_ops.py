"""``torch.ops.inductor_ext.topk_indices``: the indices of ``torch.topk`` as one op with one output,
so Inductor can autotune template families for top-k (its ``aten.topk`` lowering is a fallback
with two outputs, which ``autotune_select_algorithm`` cannot take).

What the ``topk_op`` pass (``lowering/passes/topk_op.py``) turns ``torch.topk`` / ``Tensor.topk``
into: ``indices = topk_indices(x, k, dim, largest, sorted)`` and ``values = x.gather(dim, indices)``.
Gathering the values is exact (they are elements of x) and costs k reads per row. Its eager
kernel is ATen's ``topk``: that is the ATen choice the families are timed against.
"""

from __future__ import annotations

import torch
from torch import Tensor


@torch.library.custom_op("inductor_ext::topk_indices", mutates_args=())
def topk_indices(input: Tensor, k: int, dim: int, largest: bool, sorted: bool) -> Tensor:
    """``torch.topk(input, k, dim, largest, sorted).indices``, contiguous."""
    return torch.topk(input, k, dim, largest, sorted).indices.contiguous()


@topk_indices.register_fake
def _(input: Tensor, k: int, dim: int, largest: bool, sorted: bool) -> Tensor:
    shape = list(input.shape)
    shape[dim] = k
    return input.new_empty(shape, dtype=torch.int64)


OP = torch.ops.inductor_ext.topk_indices.default
