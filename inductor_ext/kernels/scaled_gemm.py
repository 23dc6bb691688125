"""Reference block-scaled GEMMs (NVFP4 / MXFP4 / MXFP8), in plain torch.

The model is the cuBLAS/CUTLASS one: ``D = act(alpha * (A_bs @ B_bs.T) + bias)`` where
``A_bs`` and ``B_bs`` are the operands dequantized with their block scales only
(no NVFP4 global scale), accumulated in fp32, and ``alpha`` carries the per-tensor scales.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from .mx import MXTensor, dequantize_mx
from .nvfp4 import NVFP4Tensor, dequantize_nvfp4, quantize_nvfp4

Operand = NVFP4Tensor | MXTensor | Tensor

ACTIVATIONS: dict[str | None, Callable[[Tensor], Tensor]] = {
    None: lambda y: y,
    "relu": F.relu,
    "gelu": F.gelu,  # exact (erf) GELU
    "silu": F.silu,
}


def block_dequantize(t: Operand) -> Tensor:
    """fp32 values of ``t`` with block scales applied but not the NVFP4 global scale.

    A plain tensor is taken as already dequantized.
    """
    if isinstance(t, NVFP4Tensor):
        return dequantize_nvfp4(t, apply_global_scale=False)
    if isinstance(t, MXTensor):
        return dequantize_mx(t, torch.float32)
    return t.float()


def global_scale_of(t: Operand) -> Tensor:
    """The per-tensor scale a GEMM folds into alpha: NVFP4's global scale, else 1."""
    if isinstance(t, NVFP4Tensor):
        return t.global_scale
    return torch.ones((), dtype=torch.float32)


def scaled_mm_reference(
    a_q: Operand,
    b_q: Operand,
    *,
    alpha: Tensor | float | None = None,
    bias: Tensor | None = None,
    activation: str | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> Tensor:
    """``act(alpha * (A @ B.T) + bias)`` for ``a_q [..., K]`` and ``b_q [N, K]``, rounded once.

    ``alpha`` defaults to the product of the operands' global scales. Everything is done in
    fp32 (bias is upcast) and cast to ``out_dtype`` at the end, as a fused epilogue would.
    ``activation`` is one of ``None``, ``"relu"``, ``"gelu"`` (erf form), ``"silu"``.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; expected one of {list(ACTIVATIONS)}")
    a, b = block_dequantize(a_q), block_dequantize(b_q)
    if b.dim() != 2 or a.shape[-1] != b.shape[-1]:
        raise ValueError(f"expected a [..., K] and b [N, K], got {tuple(a.shape)} and {tuple(b.shape)}")
    if alpha is None:
        alpha = global_scale_of(a_q) * global_scale_of(b_q)
    out = (a @ b.T) * torch.as_tensor(alpha, dtype=torch.float32)
    if bias is not None:
        out = out + bias.float()
    return ACTIVATIONS[activation](out).to(out_dtype)


def nvfp4_linear_reference(
    x: Tensor | NVFP4Tensor,
    w_q: NVFP4Tensor,
    bias: Tensor | None = None,
    *,
    x_global_scale: Tensor | float | None = None,
    out_dtype: torch.dtype | None = None,
) -> Tensor:
    """Mimic torchao's NVFP4 linear: ``x @ w.T + bias`` with both operands in NVFP4.

    ``x`` is quantized with :func:`quantize_nvfp4` (global scale ``x_global_scale``, default
    dynamic ``amax / 2688``) unless already quantized; ``out_dtype`` defaults to x's dtype.
    Steps, as torchao does them around ``torch._scaled_mm``:

    1. block-scaled product accumulated in fp32, rounded to ``out_dtype``;
    2. ``* (x_global * w_global).to(out_dtype)``, rounded again;
    3. ``+ bias.to(out_dtype)``, rounded again.

    So unlike :func:`scaled_mm_reference`, which applies alpha in fp32 and rounds once,
    this rounds up to three times and also rounds alpha itself to ``out_dtype`` (for
    bf16 that alone is a relative error up to 2**-9); results differ by a few bf16 ulps.
    """
    x_q = x if isinstance(x, NVFP4Tensor) else quantize_nvfp4(x, x_global_scale)
    out_dtype = out_dtype or x_q.dtype
    out = (block_dequantize(x_q) @ block_dequantize(w_q).T).to(out_dtype)
    out = out * (x_q.global_scale * w_q.global_scale).to(out_dtype)
    if bias is not None:
        out = out + bias.to(out_dtype)
    return out
