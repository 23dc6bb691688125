"""Reference RMSNorm in plain torch: fp32 math, one rounding to the input dtype (softmax's reference is
``kernels/softmax.py``)."""

from __future__ import annotations

import torch
from torch import Tensor


def rms_norm_reference(x: Tensor, weight: Tensor | None = None, eps: float = 1e-6) -> Tensor:
    """``x / sqrt(mean(x**2, -1) + eps) * weight`` over the last dimension."""
    xf = x.float()
    out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        out = out * weight.float()
    return out.to(x.dtype)

