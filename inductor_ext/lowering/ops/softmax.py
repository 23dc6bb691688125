"""``softmax``: lowers ``inductor_ext::softmax`` (made by the ``vocab_softmax`` pass) to an
autotuned choice: ATen's softmax (the op's own implementation) or the template families serving
``softmax`` (e.g. Metal's one-row softmax over a large vocabulary). x is made contiguous first:
every family and ATen then read rows of contiguous elements.

OpSpec.inputs: (x,); scalars ``dim``, ``out_dtype``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor import ir
from torch._inductor.lowering import register_lowering

from inductor_ext.kernels import softmax_ops  # noqa: F401  (defines the op lowered here)
from inductor_ext.lowering.ops._select import OpChoice, select
from inductor_ext.lowering.ops._spec import OpInputs, dtype_name, whole

OP = torch.ops.inductor_ext.softmax.default
ATEN_CHOICE = OpChoice(OP, "softmax_aten")


def softmax(kernel_inputs: Any) -> OpInputs | str:
    layout = kernel_inputs.output_layout()
    return whole("softmax", kernel_inputs, layout,
                 {"dim": kernel_inputs.get_scalar("dim"), "out_dtype": dtype_name(layout.dtype)})


SPECS = {"softmax": softmax}


@register_lowering(OP, type_promotion_kind=None)
def lower_softmax(x: Any, dim: int, out_dtype: torch.dtype | None = None) -> Any:
    x = ir.ExternKernel.require_contiguous(ir.ExternKernel.realize_input(x))
    layout = ir.FixedLayout(x.get_device(), out_dtype or x.get_dtype(), x.get_size())
    aten = ATEN_CHOICE.bind((x,), layout, dim=dim, out_dtype=out_dtype)
    node, _ = select("softmax", aten, [x], layout, {"dim": dim, "out_dtype": out_dtype})
    return node
