"""Lowers ``inductor_ext::rms_norm`` (made by the ``rms_norm_op`` pass) to an autotuned choice:
ATen's ``rms_norm`` kernel, or the template families that serve the ``rms_norm`` op (Helion's
RMSNorm on gfx950). Inductor has no lowering that asks the choices handler for a norm, so this
is one: the op's inputs (input, weight|None) as ``KernelInputs`` with ``normalized_shape`` and
``eps`` as scalars, offered through ``ExtChoices.offer`` like any GEMM.
"""

from __future__ import annotations

from typing import Any

from torch._inductor import ir
from torch._inductor.lowering import register_lowering
from torch._inductor.select_algorithm import ExternKernelChoice, autotune_select_algorithm
from torch._inductor.virtualized import V

from inductor_ext.kernels.norm_ops import OP
from inductor_ext.lowering.kernel_inputs import FixedKernelInputs

ATEN_CHOICE = ExternKernelChoice(OP, name="rms_norm_aten", has_out_variant=False, op_overload=OP)


@register_lowering(OP, type_promotion_kind=None)
def lower_rms_norm(x: Any, weight: Any, normalized_shape: list[int], eps: float) -> Any:
    nodes = [ir.ExternKernel.realize_input(t) for t in (x, weight) if t is not None]
    layout = ir.FixedLayout(x.get_device(), x.get_dtype(), list(x.get_size()))  # contiguous, like the op
    scalars = {"normalized_shape": list(normalized_shape), "eps": float(eps)}
    aten_kwargs = ({"weight": None} if weight is None else {}) | scalars  # the tensors go positionally
    choices = [ATEN_CHOICE.bind(tuple(nodes), layout, **aten_kwargs)]
    offer = getattr(V.choices, "offer", None)
    if offer is not None:
        choices = offer("rms_norm", FixedKernelInputs(nodes, layout, scalars), choices)
    node, _ = autotune_select_algorithm("rms_norm", choices, nodes, layout)
    return node
