"""Lowers ``inductor_ext::topk_indices`` (made by the ``topk_op`` pass) to an autotuned choice:
ATen's ``topk`` (the op's own kernel) or the template families serving the ``topk`` op (Triton's
top-k on gfx950). Inductor has no lowering that asks the choices handler for a top-k, so this is
one: the input as ``KernelInputs`` with ``k``, ``dim``, ``largest`` and ``sorted`` as scalars,
offered through ``ExtChoices.offer`` like any GEMM. The output: int64 indices, contiguous.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor import ir
from torch._inductor.lowering import register_lowering
from torch._inductor.select_algorithm import ExternKernelChoice, autotune_select_algorithm
from torch._inductor.virtualized import V

from inductor_ext.kernels.topk_ops import OP
from inductor_ext.lowering.kernel_inputs import FixedKernelInputs

ATEN_CHOICE = ExternKernelChoice(OP, name="topk_indices_aten", has_out_variant=False, op_overload=OP)


@register_lowering(OP, type_promotion_kind=None)
def lower_topk_indices(x: Any, k: int, dim: int, largest: bool, sorted: bool) -> Any:
    x = ir.ExternKernel.realize_input(x)
    size = list(x.get_size())
    size[dim] = k
    layout = ir.FixedLayout(x.get_device(), torch.int64, size)  # contiguous, like the op
    scalars = {"k": int(k), "dim": int(dim), "largest": bool(largest), "sorted": bool(sorted)}
    choices = [ATEN_CHOICE.bind((x,), layout, **scalars)]
    offer = getattr(V.choices, "offer", None)
    if offer is not None:
        choices = offer("topk", FixedKernelInputs([x], layout, scalars), choices)
    node, _ = autotune_select_algorithm("topk", choices, [x], layout)
    return node
