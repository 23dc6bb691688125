"""Reference math for NVFP4 (ModelOpt convention), in plain torch.

Layout of a quantized ``[..., K]`` tensor (leading dims are flattened into ``rows``):

* ``qdata``: uint8 ``[rows, K // 2]``, two e2m1 codes per byte; the low nibble holds
  the even element along K, the high nibble the odd one. ``qdata.view(torch.float4_e2m1fn_x2)``
  is what ``torch._scaled_mm`` takes.
* ``scales``: ``torch.float8_e4m3fn`` ``[rows, ceil(K / 16)]``, one per 16 consecutive
  elements along K.
* ``global_scale``: fp32 0-d tensor.

``x ~= e2m1(code) * float(scale) * global_scale``.

K must be even (two codes per byte). K need not be a multiple of 16: the last block of
each row is then partial (``K % 16`` elements) and its scale comes from those elements
only. Hardware block-scaled GEMMs need K to be a multiple of the block size (plus
alignment), so partial blocks are for reference math only.

Rounding: block scales round-to-nearest-even to e4m3 (saturating at 448, and a block
that is not all zero never gets a zero scale: the smallest one is the e4m3 subnormal
2**-9), elements round-to-nearest-even to the e2m1 grid and saturate at +-6. Elements
are divided by the combined scale; kernels that multiply by a reciprocal (torchao, MSLK)
can differ on exact ties. torchao also clamps block scales to >= 2**-6 (the smallest
normal e4m3), so tiny blocks (below ~3.5e-5 of the tensor amax) get different scales.
An all-zero block gets scale 0 (torchao: 2**-6); its codes are 0 either way.
NaN/Inf inputs are not supported (e2m1 has no encoding for them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

BLOCK_SIZE = 16
E2M1_MAX = 6.0
E4M3_MAX = 448.0
E4M3_MIN_SUBNORMAL = 2.0**-9

# The 16 e2m1 code points: bit 3 is the sign, bits 0-2 index the magnitude.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Midpoints between neighbouring magnitudes; a tie at _E2M1_MIDPOINTS[i] goes to the
# even code of (i, i + 1), i.e. down for even i and up for odd i.
_E2M1_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


def float_to_e2m1(y: Tensor) -> Tensor:
    """Round ``y`` to e2m1 codes (uint8 in 0..15, same shape), nearest-even, saturating.

    Negative values that round to zero are encoded as -0 (code 8); NaN is not handled.
    """
    mag = y.float().abs()
    code = torch.zeros(y.shape, dtype=torch.uint8, device=y.device)
    for i, mid in enumerate(_E2M1_MIDPOINTS):
        code += (mag >= mid) if i % 2 else (mag > mid)
    return code | ((y < 0).to(torch.uint8) << 3)


def e2m1_to_float(codes: Tensor) -> Tensor:
    """Decode e2m1 codes (uint8, 0..15) to fp32."""
    magnitudes = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=codes.device)
    values = magnitudes[(codes & 0x7).long()]
    return torch.where((codes & 0x8) != 0, -values, values)


def pack_e2m1(codes: Tensor) -> Tensor:
    """Pack uint8 codes ``[..., K]`` (K even) into ``[..., K // 2]``; low nibble = even element."""
    if codes.shape[-1] % 2:
        raise ValueError(f"last dim must be even to pack e2m1 pairs, got {codes.shape[-1]}")
    codes = codes.to(torch.uint8)
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_e2m1(packed: Tensor) -> Tensor:
    """Inverse of :func:`pack_e2m1`: uint8 ``[..., K // 2]`` -> codes ``[..., K]``."""
    packed = packed.view(torch.uint8)
    pairs = torch.stack([packed & 0xF, packed >> 4], dim=-1)
    return pairs.flatten(-2)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def split_blocks(x: Tensor, block_size: int) -> Tensor:
    """fp32 ``[rows, K]`` -> ``[rows, ceil(K / block_size), block_size]``, zero padded."""
    rows, k = x.shape
    n_blocks = _ceil_div(k, block_size)
    return F.pad(x.float(), (0, n_blocks * block_size - k)).view(rows, n_blocks, block_size)


@dataclass
class NVFP4Tensor:
    """An NVFP4-quantized tensor (see module docstring for the layout)."""

    qdata: Tensor  # uint8 [rows, K // 2]
    scales: Tensor  # float8_e4m3fn [rows, ceil(K / 16)]
    global_scale: Tensor  # fp32, 0-d
    shape: torch.Size  # original shape, [..., K]
    dtype: torch.dtype  # original dtype

    @property
    def block_size(self) -> int:
        return BLOCK_SIZE


def default_global_scale(x: Tensor) -> Tensor:
    """ModelOpt's per-tensor scale ``amax / (6 * 448)``; 1.0 for an all-zero tensor."""
    amax = x.detach().abs().amax().float()
    return torch.where(amax > 0, amax / (E2M1_MAX * E4M3_MAX), torch.ones_like(amax))


def quantize_nvfp4(x: Tensor, global_scale: Tensor | float | None = None, *, check: bool = True) -> NVFP4Tensor:
    """Quantize ``x [..., K]`` (K even) to NVFP4.

    ``global_scale`` defaults to :func:`default_global_scale`; it must be positive.
    Block scale = ``block_amax / 6 / global_scale`` rounded to e4m3. ``check=False`` skips the
    data-dependent positivity check, so the function traces into a graph without a break.
    """
    k = x.shape[-1]
    if x.dim() == 0 or k % 2:
        raise ValueError(f"NVFP4 needs a last dim of even size, got shape {tuple(x.shape)}")
    x2 = x.detach().reshape(-1, k)
    if global_scale is None:
        global_scale = default_global_scale(x2)
    global_scale = torch.as_tensor(global_scale, dtype=torch.float32, device=x.device).reshape(())
    if check and not bool(global_scale > 0):
        raise ValueError(f"global_scale must be positive, got {global_scale.item()}")

    blocks = split_blocks(x2, BLOCK_SIZE)
    block_amax = blocks.abs().amax(dim=-1)
    scale = (block_amax / E2M1_MAX / global_scale).clamp(E4M3_MIN_SUBNORMAL, E4M3_MAX)
    scale = torch.where(block_amax > 0, scale, torch.zeros_like(scale))
    scales = scale.to(torch.float8_e4m3fn)

    step = (scales.float() * global_scale).unsqueeze(-1)
    y = torch.where(step > 0, blocks / step, torch.zeros_like(blocks))
    codes = float_to_e2m1(y).flatten(1)[:, :k]
    return NVFP4Tensor(pack_e2m1(codes), scales, global_scale, x.shape, x.dtype)


def dequantize_nvfp4(t: NVFP4Tensor, apply_global_scale: bool = True) -> Tensor:
    """Dequantize to ``t.shape`` / ``t.dtype`` (math in fp32).

    With ``apply_global_scale=False`` returns the block-scaled values in fp32, i.e. what a
    block-scaled GEMM consumes before its ``alpha``.
    """
    values = e2m1_to_float(unpack_e2m1(t.qdata))
    k = values.shape[-1]
    blocks = split_blocks(values, BLOCK_SIZE) * t.scales.float().unsqueeze(-1)
    out = blocks.flatten(1)[:, :k]
    if not apply_global_scale:
        return out.reshape(t.shape)
    return (out * t.global_scale).reshape(t.shape).to(t.dtype)


def to_blocked(scales: Tensor) -> Tensor:
    """Swizzle ``[rows, cols]`` block scales into the cuBLAS/CUTLASS 128x4 tiled layout.

    Rows are zero padded to a multiple of 128 and cols to a multiple of 4. Tiles of 128x4
    are laid out row-major (tile (i, j) starts at ``512 * (i * n_col_tiles + j)``) and inside
    a tile, entry ``(r, c)`` sits at ``(r % 32) * 16 + (r // 32) * 4 + c``: the (32, 4, 4)
    layout of cuBLAS's "1D block scaling factors layout". Returns a flat 1-D tensor of
    ``padded_rows * padded_cols`` entries (padding is zero bytes), same dtype.
    """
    rows, cols = scales.shape
    n_row_tiles, n_col_tiles = _ceil_div(rows, 128), _ceil_div(cols, 4)
    # Zero padding by copy: F.pad does not support the float8 dtypes.
    padded = scales.new_zeros((n_row_tiles * 128, n_col_tiles * 4))
    padded[:rows, :cols] = scales
    # row = 32 * a + b within a tile -> order (row_tile, col_tile, b, a, c)
    tiles = padded.view(n_row_tiles, 4, 32, n_col_tiles, 4).permute(0, 3, 2, 1, 4)
    return tiles.reshape(-1)


def from_blocked(blocked: Tensor, rows: int, cols: int) -> Tensor:
    """Inverse of :func:`to_blocked`: flat swizzled scales -> ``[rows, cols]``."""
    n_row_tiles, n_col_tiles = _ceil_div(rows, 128), _ceil_div(cols, 4)
    tiles = blocked.reshape(n_row_tiles, n_col_tiles, 32, 4, 4).permute(0, 3, 2, 1, 4)
    return tiles.reshape(n_row_tiles * 128, n_col_tiles * 4)[:rows, :cols].contiguous()
