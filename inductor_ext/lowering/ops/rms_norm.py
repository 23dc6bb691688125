"""``rms_norm``: lowers ``inductor_ext::rms_norm`` (made by the ``rms_norm_op`` pass) to an
autotuned choice: ATen's ``rms_norm`` kernel, or the template families that serve the
``rms_norm`` op (Helion's RMSNorm on gfx950). Inductor has no lowering that asks the choices
handler for a norm, so this is one.

OpSpec.inputs: (input, weight|None), bound by name (``ARGS``, ``_spec.TensorArgs``); scalars
``normalized_shape``, ``eps``.
"""

from __future__ import annotations

from typing import Any

from torch._inductor import ir
from torch._inductor.lowering import register_lowering

from inductor_ext.kernels.norm_ops import OP
from inductor_ext.lowering.ops._select import OpChoice, select
from inductor_ext.lowering.ops._spec import OpInputs, TensorArgs, named

ATEN_CHOICE = OpChoice(OP, "rms_norm_aten")
ARGS = TensorArgs(("input", "weight"), optional=("weight",))  # the op's tensors, bound by name


def rms_norm(kernel_inputs: Any) -> OpInputs | str:
    scalars = {"normalized_shape": list(kernel_inputs.get_scalar("normalized_shape")),
               "eps": kernel_inputs.get_scalar("eps")}
    return named("rms_norm", kernel_inputs, ARGS, kernel_inputs.output_layout(), scalars)


SPECS = {"rms_norm": rms_norm}


@register_lowering(OP, type_promotion_kind=None)
def lower_rms_norm(x: Any, weight: Any, normalized_shape: list[int], eps: float) -> Any:
    names, tensors = ARGS.present(input=x, weight=weight)
    nodes = [ir.ExternKernel.realize_input(t) for t in tensors]
    layout = ir.FixedLayout(x.get_device(), x.get_dtype(), list(x.get_size()))  # contiguous, like the op
    scalars = {"normalized_shape": list(normalized_shape), "eps": float(eps)}
    aten = ATEN_CHOICE.bind(tuple(nodes), layout, **ARGS.aten_kwargs(names), **scalars)  # absent ones: None
    node, _ = select("rms_norm", aten, nodes, layout, scalars, names)
    return node
