"""Lowers ``inductor_ext::decode_attention`` (made by the ``decode_attention_op`` pass) to an
autotuned choice: ATen's SDPA (the op's own implementation) or the families serving
``decode_attention`` (``cpp.decode_attention``: Inductor-compiled reductions, inlined when they
win). Outside ext's choices handler only the ATen choice exists. The output is contiguous
(B, Hq, 1, Dv) in q's dtype.
"""

from __future__ import annotations

from typing import Any

from torch._inductor import ir
from torch._inductor.lowering import register_lowering
from torch._inductor.select_algorithm import ExternKernelChoice, autotune_select_algorithm
from torch._inductor.virtualized import V

from inductor_ext.kernels.decode_attention_ops import OP
from inductor_ext.lowering import subgraph
from inductor_ext.lowering.kernel_inputs import FixedKernelInputs

ATEN_CHOICE = ExternKernelChoice(OP, name="decode_attention_aten", has_out_variant=False, op_overload=OP)


@register_lowering(OP, type_promotion_kind=None)
def lower_decode_attention(q: Any, k: Any, v: Any, scale: float) -> Any:
    nodes = [ir.ExternKernel.realize_input(x) for x in (q, k, v)]
    size = [*nodes[0].get_size()[:3], nodes[2].get_size()[3]]
    layout = ir.FixedLayout(nodes[0].get_device(), nodes[0].get_dtype(), size)  # contiguous, like the op
    scalars = {"scale": float(scale)}
    choices = [ATEN_CHOICE.bind(tuple(nodes), layout, **scalars)]
    offer = getattr(V.choices, "offer", None)
    if offer is not None:
        choices = offer("decode_attention", FixedKernelInputs(nodes, layout, scalars), choices)
    node, choice = autotune_select_algorithm("decode_attention", choices, nodes, layout)
    return subgraph.winner_node(node, choice, nodes, "decode_attention")
