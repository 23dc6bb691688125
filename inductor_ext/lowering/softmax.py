"""Lowers ``inductor_ext::softmax`` (made by the ``vocab_softmax`` pass) to an autotuned choice:
ATen's softmax (the op's own implementation) or the template families serving ``softmax``
(e.g. Metal's one-row softmax over a large vocabulary). Outside ext's choices handler only the
ATen choice exists. x is made contiguous first: every family and ATen then read rows of
contiguous elements.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor import ir
from torch._inductor.lowering import register_lowering
from torch._inductor.select_algorithm import ExternKernelChoice, autotune_select_algorithm
from torch._inductor.virtualized import V

from inductor_ext.kernels import softmax_ops  # noqa: F401  (defines the op lowered here)
from inductor_ext.lowering.kernel_inputs import FixedKernelInputs

OP = torch.ops.inductor_ext.softmax.default
ATEN_CHOICE = ExternKernelChoice(OP, name="softmax_aten", has_out_variant=False)


@register_lowering(OP, type_promotion_kind=None)
def lower_softmax(x: Any, dim: int, out_dtype: torch.dtype | None = None) -> Any:
    x = ir.ExternKernel.require_contiguous(ir.ExternKernel.realize_input(x))
    layout = ir.FixedLayout(x.get_device(), out_dtype or x.get_dtype(), x.get_size())
    nodes = [x]
    choices = [ATEN_CHOICE.bind((x,), layout, dim=dim, out_dtype=out_dtype)]
    offer = getattr(V.choices, "offer", None)
    if offer is not None:
        choices = offer("softmax", FixedKernelInputs(nodes, layout, {"dim": dim, "out_dtype": out_dtype}), choices)
    node, _ = autotune_select_algorithm("softmax", choices, nodes, layout)
    return node
