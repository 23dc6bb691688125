"""``topk``: lowers ``inductor_ext::topk_indices`` (made by the ``topk_op`` pass) to an autotuned
choice: ATen's ``topk`` (the op's own kernel) or the template families serving the ``topk`` op
(Triton's top-k on gfx950). Inductor has no lowering that asks the choices handler for a top-k,
so this is one. The output: int64 indices, contiguous.

OpSpec.inputs: (x,); scalars ``k``, ``dim``, ``largest``, ``sorted``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor import ir
from torch._inductor.lowering import register_lowering

from inductor_ext.kernels.topk_ops import OP
from inductor_ext.lowering.ops._select import OpChoice, select
from inductor_ext.lowering.ops._spec import OpInputs, whole

ATEN_CHOICE = OpChoice(OP, "topk_indices_aten")


def topk(kernel_inputs: Any) -> OpInputs | str:
    scalars = {s: kernel_inputs.get_scalar(s) for s in ("k", "dim", "largest", "sorted")}
    return whole("topk", kernel_inputs, kernel_inputs.output_layout(), scalars)


SPECS = {"topk": topk}


@register_lowering(OP, type_promotion_kind=None)
def lower_topk_indices(x: Any, k: int, dim: int, largest: bool, sorted: bool) -> Any:
    x = ir.ExternKernel.realize_input(x)
    size = list(x.get_size())
    size[dim] = k
    layout = ir.FixedLayout(x.get_device(), torch.int64, size)  # contiguous, like the op
    scalars = {"k": int(k), "dim": int(dim), "largest": bool(largest), "sorted": bool(sorted)}
    node, _ = select("topk", ATEN_CHOICE.bind((x,), layout, **scalars), [x], layout, scalars)
    return node
