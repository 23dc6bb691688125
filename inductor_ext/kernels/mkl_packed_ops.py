"""``torch.ops.inductor_ext.mkl_packed_mm``: ``x @ w_t`` through MKL's packed sgemm, the weight
packed on first use and kept while it is unchanged.

Inductor reaches MKL's packed GEMM only through its weight-prepack pass (``cpp.weight_prepack``
under freezing), which rewrites fp32 linears to ``mkl._mkl_linear`` before any lowering could
offer ext's templates. ext keeps that pass off and offers MKL's packed GEMM as one more ATen-side
choice for a frozen fp32 weight, timed as this op's body; where it wins, the graph calls MKL on a
weight packed at compile time (``lowering/aten_choices``).

The weight's packed copy is kept while it is the same weight (``packed_weights``); a weight
that cannot be cached honestly (an inference tensor) is computed with ATen's mm. The result is
``torch.mm(x, w_t)`` up to fp32 rounding.
"""

from __future__ import annotations

import torch
from torch import Tensor

from inductor_ext.kernels.packed_weights import PackedWeights, bias_row


def available() -> bool:
    """Whether this torch build has MKL's packed GEMM (x86 builds of PyTorch do)."""
    return bool(torch._C.has_mkl)


_packed = PackedWeights(lambda w_t, batch: torch.ops.mkl._mkl_reorder_linear_weight(w_t.t().contiguous(), batch))


def _linear(x: Tensor, w_t: Tensor, row: Tensor | None) -> Tensor | None:
    """``x @ w_t`` (+ ``row`` on every row) through MKL's packed GEMM, or None where MKL cannot
    serve it (another dtype or device, no MKL, a weight that cannot be cached)."""
    fp32 = x.dtype == w_t.dtype == torch.float32 and (row is None or row.dtype == torch.float32)
    if not fp32 or x.device.type != "cpu" or not available():
        return None
    batch = x.shape[0]
    packed = _packed.get(w_t, batch)
    if packed is None:
        return None
    # MKL reads x with a leading dimension of K: it must be row-major contiguous.
    return torch.ops.mkl._mkl_linear(x.contiguous(), packed, w_t.t(), row, batch)


def packed_mm(x: Tensor, w_t: Tensor) -> Tensor:
    """The op's body, callable without the dispatcher: what ext's autotuning times (the op's own
    dispatch costs 15-30 us a call, more than the graph pays for ``mkl::_mkl_linear``)."""
    out = _linear(x, w_t, None)
    return torch.mm(x, w_t) if out is None else out


def packed_addmm(bias: Tensor, x: Tensor, w_t: Tensor) -> Tensor:
    """``bias + x @ w_t`` for a bias broadcast over the rows (a linear's), through MKL's packed
    GEMM with the bias added by ``mkl::_mkl_linear``; ATen's addmm where MKL cannot serve it."""
    row = bias_row(bias, w_t.shape[1])
    out = None if row is None else _linear(x, w_t, row)
    return torch.addmm(bias, x, w_t) if out is None else out


@torch.library.custom_op("inductor_ext::mkl_packed_mm", mutates_args=())
def mkl_packed_mm(x: Tensor, w_t: Tensor) -> Tensor:
    return packed_mm(x, w_t)


@mkl_packed_mm.register_fake
def _(x: Tensor, w_t: Tensor) -> Tensor:
    return x.new_empty((x.shape[0], w_t.shape[1]))


@torch.library.custom_op("inductor_ext::mkl_packed_addmm", mutates_args=())
def mkl_packed_addmm(bias: Tensor, x: Tensor, w_t: Tensor) -> Tensor:
    return packed_addmm(bias, x, w_t)


@mkl_packed_addmm.register_fake
def _(bias: Tensor, x: Tensor, w_t: Tensor) -> Tensor:
    return x.new_empty((x.shape[0], w_t.shape[1]))
