"""``prefill_attention``: lowers ``inductor_ext::prefill_attention`` (made by the
``prefill_attention_op`` pass) to an autotuned choice: ATen's SDPA (the op's own implementation)
or the families serving ``prefill_attention`` (``cpp.flash_attention``: a C++ kernel of ours).
The output is contiguous (B, Hq, Lq, Dv) in q's dtype.

OpSpec.inputs: (q, k, v, mask|None); scalar ``scale``.
"""

from __future__ import annotations

from typing import Any

from torch._inductor import ir
from torch._inductor.lowering import register_lowering

from inductor_ext.kernels.prefill_attention_ops import OP
from inductor_ext.lowering.ops._select import OpChoice, select
from inductor_ext.lowering.ops._spec import OpInputs, whole

ATEN_CHOICE = OpChoice(OP, "prefill_attention_aten")


def prefill_attention(kernel_inputs: Any) -> OpInputs | str:
    optional = (None,) if len(kernel_inputs.nodes()) == 3 else ()  # mask
    return whole("prefill_attention", kernel_inputs, kernel_inputs.output_layout(),
                 {"scale": kernel_inputs.get_scalar("scale")}, optional)


SPECS = {"prefill_attention": prefill_attention}


@register_lowering(OP, type_promotion_kind=None)
def lower_prefill_attention(q: Any, k: Any, v: Any, mask: Any, scale: float) -> Any:
    nodes = [ir.ExternKernel.realize_input(x) for x in (q, k, v, mask) if x is not None]
    size = [*nodes[0].get_size()[:3], nodes[2].get_size()[3]]
    layout = ir.FixedLayout(nodes[0].get_device(), nodes[0].get_dtype(), size)  # contiguous, like the op
    scalars = {"scale": float(scale)}
    aten_kwargs = ({"mask": None} if mask is None else {}) | scalars  # the tensors go positionally
    node, _ = select("prefill_attention", ATEN_CHOICE.bind(tuple(nodes), layout, **aten_kwargs), nodes, layout, scalars)
    return node
