"""Reference softmax in plain torch: fp32 math, rounded once."""

from __future__ import annotations

import torch
from torch import Tensor


def softmax_reference(x: Tensor, dim: int = -1, out_dtype: torch.dtype | None = None) -> Tensor:
    """``softmax(x, dim)`` computed in fp32 and rounded once to ``out_dtype`` (default x's)."""
    return torch.softmax(x.float(), dim).to(out_dtype or x.dtype)
