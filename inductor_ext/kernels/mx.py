"""Reference math for the OCP Microscaling (MX v1.0) formats MXFP4 and MXFP8, in plain torch.

A quantized ``[..., K]`` tensor (leading dims flattened into ``rows``) holds

* ``qdata``: MXFP4 -> uint8 ``[rows, K // 2]`` of packed e2m1 codes (low nibble = even
  element, as in :mod:`.nvfp4`); MXFP8 -> ``torch.float8_e4m3fn`` ``[rows, K]``.
* ``scales``: ``torch.float8_e8m0fnu`` ``[rows, ceil(K / 32)]``, one power of two per 32
  consecutive elements along K (the last block is partial when K % 32 != 0).

Shared exponent (spec section 6.3): ``X = floor(log2(block_amax)) - emax_elem`` with
``emax_elem`` = 2 for e2m1 and 8 for e4m3, clamped to the e8m0 range [-127, 127]. An
all-zero block gets the smallest scale 2**-127; a block containing NaN or Inf gets the
NaN scale (0xFF). Elements are ``x / 2**X`` rounded to nearest-even and saturated to the
element format's max (6 or 448): with the floor rule the block max can land in
``[2**emax, 2**(emax + 1))``, above the max normal, so it may be clipped. (The "RCEIL"
rule used by torch's test helpers and cuBLAS-style quantizers avoids that clipping;
this module follows the spec's floor rule.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .nvfp4 import E2M1_MAX, E4M3_MAX, e2m1_to_float, float_to_e2m1, pack_e2m1, split_blocks, unpack_e2m1

BLOCK_SIZE = 32
E8M0_BIAS = 127
E8M0_NAN = 0xFF
FP4_E2M1 = "fp4_e2m1"
FP8_E4M3 = "fp8_e4m3"
# emax (exponent of the largest normal) and max magnitude of each element format
_ELEM = {FP4_E2M1: (2, E2M1_MAX), FP8_E4M3: (8, E4M3_MAX)}


@dataclass
class MXTensor:
    """An MX-quantized tensor (see module docstring for the layout)."""

    qdata: Tensor  # uint8 [rows, K // 2] (fp4) or float8_e4m3fn [rows, K] (fp8)
    scales: Tensor  # float8_e8m0fnu [rows, ceil(K / 32)]
    elem_format: str  # FP4_E2M1 or FP8_E4M3
    shape: torch.Size  # original shape, [..., K]
    dtype: torch.dtype  # original dtype

    @property
    def block_size(self) -> int:
        return BLOCK_SIZE


def shared_exponent(block_amax: Tensor, elem_emax: int) -> Tensor:
    """Unbiased shared exponent ``floor(log2(amax)) - elem_emax`` (int32), clamped to [-127, 127].

    Zero ``amax`` gives -127. Uses ``frexp`` so that floor(log2) is exact.
    """
    _, e = torch.frexp(block_amax.float())  # amax = m * 2**e with m in [0.5, 1)
    exp = (e - 1 - elem_emax).clamp(-E8M0_BIAS, E8M0_BIAS)
    return torch.where(block_amax > 0, exp, torch.full_like(exp, -E8M0_BIAS))


def e8m0_to_float(scales: Tensor) -> Tensor:
    """Decode e8m0 scales (``float8_e8m0fnu`` or raw uint8) to fp32: ``2**(code - 127)``, 0xFF -> NaN."""
    code = scales.view(torch.uint8)
    value = torch.exp2(code.float() - E8M0_BIAS)
    return torch.where(code == E8M0_NAN, torch.full_like(value, float("nan")), value)


def _quantize_mx(x: Tensor, elem_format: str) -> MXTensor:
    emax, max_value = _ELEM[elem_format]
    k = x.shape[-1]
    if x.dim() == 0 or (elem_format == FP4_E2M1 and k % 2):
        raise ValueError(f"bad shape {tuple(x.shape)} for {elem_format} (fp4 needs an even last dim)")
    blocks = split_blocks(x.detach().reshape(-1, k), BLOCK_SIZE)
    amax = blocks.abs().amax(dim=-1)
    exp = shared_exponent(amax, emax)
    code = (exp + E8M0_BIAS).to(torch.uint8)
    code = torch.where(torch.isfinite(amax), code, torch.full_like(code, E8M0_NAN))

    y = (blocks * torch.exp2(-exp.float()).unsqueeze(-1)).flatten(1)[:, :k]
    if elem_format == FP4_E2M1:
        qdata = pack_e2m1(float_to_e2m1(y))
    else:
        qdata = y.clamp(-max_value, max_value).to(torch.float8_e4m3fn)
    return MXTensor(qdata, code.view(torch.float8_e8m0fnu), elem_format, x.shape, x.dtype)


def quantize_mxfp4(x: Tensor) -> MXTensor:
    """Quantize ``x [..., K]`` (K even) to MXFP4: e2m1 elements, e8m0 scale per 32."""
    return _quantize_mx(x, FP4_E2M1)


def quantize_mxfp8(x: Tensor) -> MXTensor:
    """Quantize ``x [..., K]`` to MXFP8: e4m3 elements, e8m0 scale per 32."""
    return _quantize_mx(x, FP8_E4M3)


def dequantize_mx(t: MXTensor, out_dtype: torch.dtype | None = None) -> Tensor:
    """Dequantize to ``t.shape``, in ``out_dtype`` (default ``t.dtype``); math in fp32."""
    if t.elem_format == FP4_E2M1:
        values = e2m1_to_float(unpack_e2m1(t.qdata))
    else:
        values = t.qdata.float()
    k = values.shape[-1]
    blocks = split_blocks(values, BLOCK_SIZE) * e8m0_to_float(t.scales).unsqueeze(-1)
    out = blocks.flatten(1)[:, :k].reshape(t.shape)
    return out.to(out_dtype or t.dtype)
