"""``torch.ops.inductor_ext.panel_mm`` and ``panel_addmm``: ATen's GEMM called once per panel of
``PANEL`` output columns, each call writing its own columns of one result.

A wide output (a vocabulary projection: N of 32000-50257) is where MKL's single sgemm call runs
slowest on the 2-core AVX2 EPYC: 41-107 GFLOP/s at 16-128 rows and 768 deep, and at 512 rows of
50257, where the same GEMM on 1024-column panels ran at 60-139 (1.19-1.48x, ``bench/wide_gemm.py``
side by side); at 512 rows of 8192 and 32000 the two were within noise, at N of 2304-3072 too.
Each panel's weight columns and output columns stay in the last-level cache while it is computed.
ext offers it as one more ATen-side choice for wide GEMMs (``lowering/aten_choices.py``): timed
like the others, chosen only where it wins.

Every output element is the same dot product ATen's mm computes (the panels split N, never K),
up to fp32 rounding: MKL may sum it in another order for a narrower call (bitwise equal on the
wide shapes above, within 2e-6 on small ones). The calls run under the user's settings
as ATen's mm does (threads, fp32 precision), and any input ATen's mm takes is taken here. The
result is written over the memory of the op's previous result once nothing holds that
(``reused_outputs``): a vocabulary's logits are too large for the allocator to keep, and faulting
their pages in anew cost ~10% of the GEMM.
"""

from __future__ import annotations

import torch
from torch import Tensor

from inductor_ext.kernels import reused_outputs

PANEL = 1024  # output columns per call: 512 and 1024 ran alike, 2048 and 4096 slower (the module doc)
WIDE = 8 * PANEL  # narrower outputs gained nothing measurable: ext does not offer the panels there


def _columns(t: Tensor, start: int, end: int, n: int) -> Tensor:
    """``t``'s part for output columns ``start:end`` where ``t`` spans the ``n`` columns; a
    tensor broadcast over the columns (a size-1 last dim, or no dims) is the same for every panel."""
    return t[..., start:end] if t.dim() and t.shape[-1] == n else t


def panel_mm(x: Tensor, w_t: Tensor) -> Tensor:
    """``x @ w_t`` (x: M x K, w_t: K x N), one ``torch.mm`` per ``PANEL`` columns of the result."""
    n = w_t.shape[1]
    out = reused_outputs.empty(x, (x.shape[0], n))
    for start in range(0, n, PANEL):
        end = min(start + PANEL, n)
        torch.mm(x, w_t[:, start:end], out=out[:, start:end])
    return out


def panel_addmm(bias: Tensor, x: Tensor, w_t: Tensor) -> Tensor:
    """``bias + x @ w_t`` (bias broadcast to M x N as addmm broadcasts it), one ``torch.addmm``
    per ``PANEL`` columns of the result."""
    n = w_t.shape[1]
    out = reused_outputs.empty(x, (x.shape[0], n))
    for start in range(0, n, PANEL):
        end = min(start + PANEL, n)
        torch.addmm(_columns(bias, start, end, n), x, w_t[:, start:end], out=out[:, start:end])
    return out


@torch.library.custom_op("inductor_ext::panel_mm", mutates_args=())
def panel_mm_op(x: Tensor, w_t: Tensor) -> Tensor:
    return panel_mm(x, w_t)


@panel_mm_op.register_fake
def _(x: Tensor, w_t: Tensor) -> Tensor:
    return x.new_empty((x.shape[0], w_t.shape[1]))


@torch.library.custom_op("inductor_ext::panel_addmm", mutates_args=())
def panel_addmm_op(bias: Tensor, x: Tensor, w_t: Tensor) -> Tensor:
    return panel_addmm(bias, x, w_t)


@panel_addmm_op.register_fake
def _(bias: Tensor, x: Tensor, w_t: Tensor) -> Tensor:
    return x.new_empty((x.shape[0], w_t.shape[1]))
