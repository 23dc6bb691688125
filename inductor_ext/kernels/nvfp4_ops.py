"""``torch.ops.inductor_ext.nvfp4_gemm``: an NVFP4 GEMM with alpha, bias and activation fused.

What ``lowering/nvfp4_alpha_fold.py`` rewrites ``mul(_scaled_mm(a, b, sa, sb), alpha) [+ bias]
[-> act]`` into. Its arguments are exactly ``_scaled_mm``'s (fp4 operands, swizzled e4m3
block scales), so the ATen fallback can call ``_scaled_mm`` unchanged. Its eager
implementation is that fallback on CUDA and the plain-torch reference elsewhere (``_scaled_mm``
with fp4 operands does not run on CPU).

alpha is applied in fp32 to the fp32 accumulator. When the original graph rounded alpha to
the output dtype first (torchao does: ``r * alpha.to(bf16)``), ``alpha_dtype`` records it and
alpha is rounded the same way, so only the (now single) rounding of the product differs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from inductor_ext.kernels.nvfp4 import BLOCK_SIZE, e2m1_to_float, from_blocked, unpack_e2m1

ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")


def apply_activation(x: Tensor, activation: str) -> Tensor:
    if activation == "none":
        return x
    if activation == "relu":
        return torch.relu(x)
    if activation == "gelu":
        return F.gelu(x)
    if activation == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    if activation == "silu":
        return F.silu(x)
    raise ValueError(f"unknown activation {activation!r}; expected one of {ACTIVATIONS}")


def _dequant_rows(packed: Tensor, blocked_scales: Tensor) -> Tensor:
    """fp4 [rows, K/2] with swizzled scales -> block-scaled fp32 [rows, K]."""
    values = e2m1_to_float(unpack_e2m1(packed.contiguous().view(torch.uint8)))
    rows, k = values.shape
    scales = from_blocked(blocked_scales, rows, -(-k // BLOCK_SIZE)).float()
    return (values.view(rows, -1, BLOCK_SIZE) * scales.unsqueeze(-1)).view(rows, k)


def reference(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, alpha: Tensor,
              bias: Tensor | None, activation: str, out_dtype: torch.dtype, alpha_dtype: torch.dtype) -> Tensor:
    """Plain-torch NVFP4 GEMM: a [M, K/2] fp4, b [K/2, N] fp4 (the transposed weight, as for _scaled_mm)."""
    acc = _dequant_rows(a, scale_a) @ _dequant_rows(b.t(), scale_b).t()
    out = acc * alpha.to(alpha_dtype).float()
    if bias is not None:
        out = out + bias.float()
    return apply_activation(out, activation).to(out_dtype)


def aten_fallback(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, alpha: Tensor,
                  bias: Tensor | None, activation: str, out_dtype: torch.dtype, alpha_dtype: torch.dtype) -> Tensor:
    """The unfused original: _scaled_mm in out_dtype, then the pointwise epilogue."""
    out = torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=out_dtype) * alpha.to(alpha_dtype)
    if bias is not None:
        out = out + bias
    return apply_activation(out, activation).to(out_dtype)


@torch.library.custom_op("inductor_ext::nvfp4_gemm", mutates_args=())
def nvfp4_gemm(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, alpha: Tensor,
               bias: Tensor | None, activation: str, out_dtype: torch.dtype,
               alpha_dtype: torch.dtype) -> Tensor:
    impl = aten_fallback if a.is_cuda else reference
    return impl(a, b, scale_a, scale_b, alpha, bias, activation, out_dtype, alpha_dtype)


@nvfp4_gemm.register_fake
def _(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, alpha: Tensor, bias: Tensor | None,
      activation: str, out_dtype: torch.dtype, alpha_dtype: torch.dtype) -> Tensor:
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype)
