"""``torch.ops.inductor_ext.widened_mm`` and ``widened_addmm``: a bf16 GEMM computed by ATen's
fp32 GEMM on the weight widened to fp32 once, its result rounded to bf16 once.

On a CPU without bf16 dot products (AVX2; AVX-512 without AVX512_BF16) ATen's bf16 GEMM widens
its operands block by block inside oneDNN and ran 6x slower than the fp32 GEMM of the same shape
on the 2-core AVX2 EPYC (512 x 768 x 3072: 139 ms against 22; ext's own ``cpp.gemm`` template 29).
Here the weight is widened once and kept while it is the same weight (``packed_weights``: keyed
by its storage, version counter and view, dropped with it), and each call widens only the
activations. Wide outputs (``panel_gemm_ops.WIDE`` columns or more) take the panels.

Every output element is the same sum: bf16 operands widen to fp32 exactly, their products and
sums are in fp32 (as ATen's bf16 GEMM accumulates), a linear's bias is added in fp32, and the
result is rounded to bf16 once, to nearest even. It matches ``torch.mm(x.float(),
w.float()).bfloat16()`` bit for bit and ATen's bf16 mm to within a bf16 rounding (summation order).

The widened copy costs twice the weight's bf16 bytes while the weight lives, so ext offers the
op only for a constant weight (a frozen inference graph's), keeps copies only up to
``KEEP_SHARE`` of the machine's memory (past it a weight is widened on every call), and timing
picks the op only where it wins: at a decode step's few rows, where a GEMM reads its weight once,
the bf16 weight's half of the bytes may win instead.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

from inductor_ext.kernels import panel_gemm_ops, reused_outputs
from inductor_ext.kernels.packed_weights import PackedWeights

# Widened copies are kept up to this share of the machine's memory (a 7B bf16 model's would be
# 28 GB); past it a weight is widened on every call, which still ran 6x faster than ATen's bf16
# GEMM at 512 rows here (the widening is K x N element copies beside an M x K x N GEMM).
KEEP_SHARE = 0.25


def keep_bytes() -> int:
    """Bytes of widened weights kept in all: ``KEEP_SHARE`` of the physical memory."""
    return int(KEEP_SHARE * os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


_widened = PackedWeights(lambda w_t, batch: w_t.float(), keep_bytes)


def _weight(w_t: Tensor) -> Tensor:
    """``w_t`` in fp32, kept while it is the same weight and the kept copies fit ``keep_bytes``
    (widened each call where not, and where it cannot be kept: an inference tensor has no version
    counter to say it is unchanged)."""
    kept = _widened.get(w_t, 0)
    return w_t.float() if kept is None else kept


def _product(x: Tensor, w_t: Tensor, bias: Tensor | None) -> Tensor:
    """``(bias +) x @ w_t`` in fp32."""
    x32, w32 = x.float(), _weight(w_t)
    wide = w_t.shape[1] >= panel_gemm_ops.WIDE
    if bias is None:
        return panel_gemm_ops.panel_mm(x32, w32) if wide else torch.mm(x32, w32)
    b32 = bias.float()
    return panel_gemm_ops.panel_addmm(b32, x32, w32) if wide else torch.addmm(b32, x32, w32)


def _rounded(out32: Tensor, like: Tensor) -> Tensor:
    out = reused_outputs.empty(like, tuple(out32.shape))
    return out.copy_(out32)


def widened_mm(x: Tensor, w_t: Tensor) -> Tensor:
    """``x @ w_t`` (x: M x K, w_t: K x N, both bf16) through the fp32 GEMM, rounded to bf16 once."""
    return _rounded(_product(x, w_t, None), x)


def widened_addmm(bias: Tensor, x: Tensor, w_t: Tensor) -> Tensor:
    """``bias + x @ w_t`` (bias broadcast to M x N as addmm broadcasts it), summed in fp32 and
    rounded to bf16 once."""
    return _rounded(_product(x, w_t, bias), x)


@torch.library.custom_op("inductor_ext::widened_mm", mutates_args=())
def widened_mm_op(x: Tensor, w_t: Tensor) -> Tensor:
    return widened_mm(x, w_t)


@widened_mm_op.register_fake
def _(x: Tensor, w_t: Tensor) -> Tensor:
    return x.new_empty((x.shape[0], w_t.shape[1]))


@torch.library.custom_op("inductor_ext::widened_addmm", mutates_args=())
def widened_addmm_op(bias: Tensor, x: Tensor, w_t: Tensor) -> Tensor:
    return widened_addmm(bias, x, w_t)


@widened_addmm_op.register_fake
def _(bias: Tensor, x: Tensor, w_t: Tensor) -> Tensor:
    return x.new_empty((x.shape[0], w_t.shape[1]))
