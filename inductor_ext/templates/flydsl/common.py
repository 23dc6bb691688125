"""What the FlyDSL families share outside the kernels: reading layouts off strides, size limits,
candidate filtering, flat tensor views and stand-in arguments for compile-only builds.

No FlyDSL or torch import at load (families are imported by module scan); torch is imported
inside the functions that take tensors.
"""

from __future__ import annotations

from typing import Any, Sequence, TypeVar

from inductor_ext.templates.flydsl.tiling import MAX_TENSOR_BYTES

C = TypeVar("C")


def major(stride: Sequence[int], k_axis: int, other_axis: int, k: int, vec: int = 8) -> tuple[bool, bool]:
    """(K is the contiguous dimension, ``vec``-element loads along it are aligned) of a 2-D operand.

    A run of ``vec`` along K needs K % vec == 0 (a run never crosses a row end, so masking K is
    exact) and the other stride a multiple of ``vec`` (every run starts 16-byte aligned); a run
    along the other dimension needs the K stride a multiple of ``vec``. Strides with neither
    dimension contiguous load one element at a time."""
    if stride[k_axis] == 1:
        return True, k % vec == 0 and stride[other_axis] % vec == 0
    if stride[other_axis] == 1:
        return False, stride[k_axis] % vec == 0
    return True, False


def size_reason(*numels: int, elem_bytes: float) -> str | None:
    """Buffer offsets are 32-bit: every operand stays under 2 GiB."""
    big = [n for n in numels if n * elem_bytes >= MAX_TENSOR_BYTES]
    return f"an operand of {big[0] * elem_bytes / 2**30:.1f} GiB exceeds the 2 GiB buffer range" if big else None


def fitting(table: Sequence[C], m: int, n: int) -> list[C]:
    """Configs whose tile is not far larger than the problem (at least one)."""
    fit = [c for c in table if c.block_m <= max(16, 2 * m) and c.block_n <= max(16, 2 * n)]  # type: ignore[attr-defined]
    return fit or [min(table, key=lambda c: c.block_m * c.block_n)]  # type: ignore[attr-defined]


def placeholder(dtype: str, numel: int = 64) -> Any:
    """A CPU tensor standing in for a device one in a compile-only build (FlyDSL reads its dtype and
    layout, never its data)."""
    import torch

    return torch.zeros(numel, dtype=getattr(torch, dtype))


def span(t: Any) -> int:
    """Elements from a view's first to its last element (its flat extent)."""
    return 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) if t.numel() else 0


def span_bytes(t: Any) -> int:
    return span(t) * t.element_size()


def flat(t: Any) -> Any:
    """A 1-D view over ``t``'s extent (kernels take flat buffers and strides as numbers)."""
    return t.as_strided((max(span(t), 1),), (1,))


def aligned(nbytes: int, *tensors: Any) -> bool:
    return all(t.data_ptr() % nbytes == 0 for t in tensors)


def stream() -> Any:
    """The current PyTorch stream, as FlyDSL takes it."""
    import flydsl.expr as fx
    import torch

    return fx.Stream(torch.cuda.current_stream())
