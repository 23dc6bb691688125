"""``torch.ops.inductor_ext.mkldnn_packed_mm``: bf16 ``x @ w_t`` through oneDNN's linear with the
weight packed on first use and kept while it is unchanged.

For a frozen bf16 linear, Inductor's weight-prepack pass (``cpp.weight_prepack``) rewrites it to
``mkldnn._linear_pointwise`` on a weight reordered into oneDNN's blocked layout; inside
max-autotune's decoder graph that ran 17-26% faster than its AMX micro-kernel on the prefill
projections (ext's flushed timings on this machine have not picked it so far). ext
keeps that pass off (its templates must see the mm) and offers oneDNN's packed linear as one
more ATen-side choice for a frozen bf16 weight, timed as this op's body; where it wins, the graph
calls oneDNN on a weight reordered at compile time (``lowering/aten_choices``).

The weight's packed copy is kept while it is the same weight (``packed_weights``); a weight
that cannot be cached honestly (an inference tensor) is computed with ATen's mm, as is any call
oneDNN cannot serve (another dtype or device, a CPU without bf16 support in oneDNN).
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from inductor_ext.kernels.packed_weights import PackedWeights, bias_row


@functools.cache  # asked on every call of the op (~1.5 us through the dispatcher); fixed per process
def available() -> bool:
    """Whether oneDNN serves bf16 GEMMs here (an x86 build of PyTorch on a CPU with AVX-512 or
    AMX bf16 support)."""
    return torch.backends.mkldnn.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


# oneDNN picks the blocked layout for the batch it is told; the packed weight serves any batch.
_packed = PackedWeights(lambda w_t, batch: torch.ops.mkldnn._reorder_linear_weight(w_t.t().contiguous(), batch))


def _linear(x: Tensor, w_t: Tensor, row: Tensor | None) -> Tensor | None:
    """``x @ w_t`` (+ ``row`` on every row) through oneDNN's linear on the reordered weight, or
    None where oneDNN cannot serve it (another dtype or device, no bf16 GEMM here, a weight that
    cannot be cached)."""
    bf16 = x.dtype == w_t.dtype == torch.bfloat16 and (row is None or row.dtype == torch.bfloat16)
    if not bf16 or x.device.type != "cpu" or not available():
        return None
    packed = _packed.get(w_t, x.shape[0])
    if packed is None:
        return None
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, row, "none", [], "")


def packed_mm(x: Tensor, w_t: Tensor) -> Tensor:
    """The op's body, callable without the dispatcher: what ext's autotuning times (the graph
    calls ``mkldnn::_linear_pointwise`` on a weight reordered at compile time instead)."""
    out = _linear(x, w_t, None)
    return torch.mm(x, w_t) if out is None else out


def packed_addmm(bias: Tensor, x: Tensor, w_t: Tensor) -> Tensor:
    """``bias + x @ w_t`` for a bias broadcast over the rows (a linear's), through oneDNN's
    linear with the bias fused; ATen's addmm where oneDNN cannot serve it."""
    row = bias_row(bias, w_t.shape[1])
    out = None if row is None else _linear(x, w_t, row)
    return torch.addmm(bias, x, w_t) if out is None else out


@torch.library.custom_op("inductor_ext::mkldnn_packed_mm", mutates_args=())
def mkldnn_packed_mm(x: Tensor, w_t: Tensor) -> Tensor:
    return packed_mm(x, w_t)


@mkldnn_packed_mm.register_fake
def _(x: Tensor, w_t: Tensor) -> Tensor:
    return x.new_empty((x.shape[0], w_t.shape[1]))


@torch.library.custom_op("inductor_ext::mkldnn_packed_addmm", mutates_args=())
def mkldnn_packed_addmm(bias: Tensor, x: Tensor, w_t: Tensor) -> Tensor:
    return packed_addmm(bias, x, w_t)


@mkldnn_packed_addmm.register_fake
def _(bias: Tensor, x: Tensor, w_t: Tensor) -> Tensor:
    return x.new_empty((x.shape[0], w_t.shape[1]))
