"""``torch.ops.inductor_ext.rms_norm``: RMSNorm as one op, so Inductor can offer template families
for it (Inductor decomposes ``aten.rms_norm`` before lowering and has no op to autotune).

What the ``rms_norm_op`` pass (``lowering/passes/rms_norm_op.py``) turns ``torch.rms_norm`` /
``F.rms_norm`` / ``nn.RMSNorm`` into. The tensors come first (``input``, ``weight``) so an extern
choice passes them positionally; ``eps`` is always a number (the pass resolves PyTorch's default).
Its eager kernel is ATen's ``rms_norm``: that is the ATen choice the families are timed against.
"""

from __future__ import annotations

import torch
from torch import Tensor


def default_eps(dtype: torch.dtype) -> float:
    """``torch.rms_norm``'s eps when none is given: the machine epsilon of the dtype it computes in
    (fp32 for bf16/fp16/fp32 inputs, fp64 for fp64), not of the input dtype."""
    return torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps


@torch.library.custom_op("inductor_ext::rms_norm", mutates_args=())
def rms_norm(input: Tensor, weight: Tensor | None, normalized_shape: list[int], eps: float) -> Tensor:
    """``torch.rms_norm(input, normalized_shape, weight, eps)``, contiguous."""
    return torch.rms_norm(input, normalized_shape, weight, eps).contiguous()


@rms_norm.register_fake
def _(input: Tensor, weight: Tensor | None, normalized_shape: list[int], eps: float) -> Tensor:
    return input.new_empty(input.shape)


OP = torch.ops.inductor_ext.rms_norm.default
