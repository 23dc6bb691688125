"""What the two attention ops' lowerings share (``decode_attention``, ``prefill_attention``): both
take (q, k, v, mask|None, scale) as ATen's SDPA does, return a contiguous (B, Hq, Lq, Dv) output in
q's dtype, and autotune ATen's SDPA (the op's own implementation) against the families serving
the op; a winning subgraph choice is inlined (it fuses with its neighbours). Where ATen's choice
wins, the graph gets what Inductor makes of the user's SDPA call (the choice's ``inline``, the op's
own torch code, inlined: ATen's attention kernel called from the wrapper as an ATen op), not the ext op
it was timed as: that op runs Python around the same kernel, ~25 us a call, and a decode graph
calls it once per layer and token.

OpSpec.inputs: (q, k, v, mask|None); scalar ``scale``.
"""

from __future__ import annotations

import functools
from typing import Any

from torch._inductor import ir

from inductor_ext.lowering import subgraph
from inductor_ext.lowering.ops._select import OpChoice, select
from inductor_ext.lowering.ops._spec import OpInputs, whole


def spec(op: str, kernel_inputs: Any) -> OpInputs | str:
    """The op instance as families read it: its inputs, output layout and ``scale`` (a flag such as
    prefill's ``is_causal`` is in ``op``'s name, and so in its autotune key)."""
    optional = (None,) if len(kernel_inputs.nodes()) == 3 else ()  # no mask
    return whole(op, kernel_inputs, kernel_inputs.output_layout(), {"scale": kernel_inputs.get_scalar("scale")},
                 optional)


def lower(op: str, aten: OpChoice, q: Any, k: Any, v: Any, mask: Any, scale: float, **flags: Any) -> Any:
    """The graph node for one call of ``op``: the autotuned winner among ATen's choice ``aten``
    (called with ``flags`` too; inlined as ``aten.inline(q, k, v[, mask], scale=, **flags)`` when
    it wins) and the families'."""
    nodes = [ir.ExternKernel.realize_input(x) for x in (q, k, v, mask) if x is not None]
    size = [*nodes[0].get_size()[:3], nodes[2].get_size()[3]]
    layout = ir.FixedLayout(nodes[0].get_device(), nodes[0].get_dtype(), size)  # contiguous, like the op
    scalars = {"scale": float(scale)}
    aten_kwargs = ({"mask": None} if mask is None else {}) | scalars | flags  # the tensors go positionally
    node, choice = select(op, aten.bind(tuple(nodes), layout, **aten_kwargs), nodes, layout, scalars)
    if getattr(choice, "choice", None) is aten and aten.inline is not None:
        return subgraph.inlined(functools.partial(aten.inline, **scalars, **flags), nodes, op)
    return subgraph.winner_node(node, choice, nodes, op)
