"""Reference dense and grouped GEMMs in plain torch: fp32 accumulation, one rounding at the end
(what a kernel with fp32 accumulators and a fused epilogue computes)."""

from __future__ import annotations

import torch
from torch import Tensor


def mm_reference(a: Tensor, b: Tensor, bias: Tensor | None = None, *, alpha: float = 1.0, beta: float = 1.0,
                 out_dtype: torch.dtype | None = None) -> Tensor:
    """``a @ b`` (or addmm's ``beta * bias + alpha * a @ b``) in fp32, rounded once to ``out_dtype``
    (default a's dtype). The one dense GEMM reference: every GEMM template (Triton, FlyDSL, SYCL, Metal)
    is compared with it. ``alpha``/``beta`` apply with a bias only, as in addmm (mm has neither)."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"mm_reference needs a [M, K] and b [K, N]; got {tuple(a.shape)} and {tuple(b.shape)}")
    out = a.float() @ b.float()
    if bias is not None:
        out = alpha * out + beta * bias.float()
    return out.to(out_dtype or a.dtype)


def grouped_mm_reference(a: Tensor, b: Tensor, offs: Tensor, bias: Tensor | None = None, *,
                         out_dtype: torch.dtype | None = None) -> Tensor:
    """``F.grouped_mm`` for a ragged 2-D ``a [T, K]`` and 3-D ``b [G, K, N]``: rows
    ``offs[g-1]:offs[g]`` of the result are ``a[those rows] @ b[g]`` (+ ``bias[g]``, shape [N]).

    Rows from ``offs[-1]`` on belong to no group: ATen leaves them unwritten; here they are 0.
    """
    if a.dim() != 2 or b.dim() != 3 or offs.dim() != 1 or offs.numel() != b.shape[0]:
        raise ValueError(f"expected a [T, K], b [G, K, N], offs [G]; got {tuple(a.shape)}, {tuple(b.shape)}, "
                         f"{tuple(offs.shape)}")
    out = torch.zeros(a.shape[0], b.shape[2], dtype=torch.float32)
    start = 0
    for g, end in enumerate(offs.tolist()):
        if end < start or end > a.shape[0]:
            raise ValueError(f"offs must be non-decreasing and at most {a.shape[0]}; got {offs.tolist()}")
        out[start:end] = a[start:end].float() @ b[g].float()
        if bias is not None:
            out[start:end] += bias[g].float()
        start = end
    return out.to(out_dtype or a.dtype)
