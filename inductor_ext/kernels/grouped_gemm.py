"""Reference grouped GEMM (``torch._grouped_mm`` with ``offs``, the MoE layout), in plain torch."""

from __future__ import annotations

import torch
from torch import Tensor


def grouped_mm_reference(a: Tensor, b: Tensor, offs: Tensor, out_dtype: torch.dtype | None = None) -> Tensor:
    """``a [rows, K]`` x ``b [G, K, N]``: rows ``offs[g-1]:offs[g]`` of ``a`` (offs are cumulative
    row ends, offs[-1] <= rows) multiply group ``g`` of ``b``; fp32 accumulation, rounded once to
    ``out_dtype`` (default a's dtype). Rows past ``offs[-1]`` are zero (torch leaves them
    undefined)."""
    if a.dim() != 2 or b.dim() != 3 or a.shape[1] != b.shape[1] or offs.shape != (b.shape[0],):
        raise ValueError(f"expected a [rows, K], b [G, K, N], offs [G]; got {tuple(a.shape)}, "
                         f"{tuple(b.shape)}, {tuple(offs.shape)}")
    out = torch.zeros(a.shape[0], b.shape[2], dtype=torch.float32)
    start = 0
    for g, end in enumerate(offs.tolist()):
        if end < start or end > a.shape[0]:
            raise ValueError(f"offs must be non-decreasing and at most {a.shape[0]}; got {offs.tolist()}")
        out[start:end] = a[start:end].float() @ b[g].float()
        start = end
    return out.to(out_dtype or a.dtype)
