"""Reference dense GEMM in plain torch: what every GEMM template is compared with."""

from __future__ import annotations

import torch
from torch import Tensor


def gemm_reference(a: Tensor, b: Tensor, bias: Tensor | None = None, alpha: float = 1.0, beta: float = 1.0,
                   out_dtype: torch.dtype | None = None) -> Tensor:
    """``alpha * (a @ b) + beta * bias`` (addmm; bias broadcast to [M, N]) for 2-D ``a [M, K]`` and
    ``b [K, N]``, accumulated in fp64 and rounded once to ``out_dtype`` (default: ``a``'s dtype),
    so a kernel that accumulates in fp32 differs from it by its own rounding only."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"gemm_reference needs a [M, K] and b [K, N]; got {tuple(a.shape)} and {tuple(b.shape)}")
    out = alpha * (a.double() @ b.double())
    if bias is not None:
        out = out + beta * bias.double()
    return out.to(out_dtype or a.dtype)
