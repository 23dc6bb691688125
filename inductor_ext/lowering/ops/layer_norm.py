"""``layer_norm``: lowers ``inductor_ext::layer_norm`` (made by the ``layer_norm_op`` pass) to an
autotuned choice: ATen's ``layer_norm`` kernel, or the template families that serve the
``layer_norm`` op. Inductor has no lowering that asks the choices handler for a norm, so this is one.

Every choice sees the op as rows x columns: the input viewed as [rows, prod(normalized_shape)]
(a copy where it cannot be viewed so), weight and bias as [columns], ``normalized_shape`` as
[columns]; the result is viewed back to the input's shape. A row-wise Triton template then has
one launch grid and one ``store_output`` for every input rank.

OpSpec.inputs: (input, weight|None, bias|None), bound by name (``ARGS``, ``_spec.TensorArgs``);
scalars ``normalized_shape``, ``eps``.
"""

from __future__ import annotations

import math
from typing import Any

from torch._inductor import ir
from torch._inductor.lowering import register_lowering, view

from inductor_ext.kernels.layer_norm_ops import OP
from inductor_ext.lowering.ops._select import OpChoice, select
from inductor_ext.lowering.ops._spec import OpInputs, TensorArgs, named

ATEN_CHOICE = OpChoice(OP, "layer_norm_aten")
ARGS = TensorArgs(("input", "weight", "bias"), optional=("weight", "bias"))  # the op's tensors, bound by name


def layer_norm(kernel_inputs: Any) -> OpInputs | str:
    scalars = {"normalized_shape": list(kernel_inputs.get_scalar("normalized_shape")),
               "eps": kernel_inputs.get_scalar("eps")}
    return named("layer_norm", kernel_inputs, ARGS, kernel_inputs.output_layout(), scalars)


SPECS = {"layer_norm": layer_norm}


@register_lowering(OP, type_promotion_kind=None)
def lower_layer_norm(x: Any, weight: Any, bias: Any, normalized_shape: list[int], eps: float) -> Any:
    size = list(x.get_size())
    cols = math.prod(int(s) for s in normalized_shape)
    rows = math.prod(size[:len(size) - len(normalized_shape)]) if len(size) > len(normalized_shape) else 1
    flat = {"input": view(x, [rows, cols])}
    flat.update({n: view(t, [cols]) if t is not None else None for n, t in (("weight", weight), ("bias", bias))})
    names, tensors = ARGS.present(**flat)
    nodes = [ir.ExternKernel.realize_input(t) for t in tensors]
    layout = ir.FixedLayout(x.get_device(), x.get_dtype(), [rows, cols])  # contiguous, like the op
    scalars = {"normalized_shape": [cols], "eps": float(eps)}
    aten = ATEN_CHOICE.bind(tuple(nodes), layout, **ARGS.aten_kwargs(names), **scalars)  # absent ones: None
    node, _ = select("layer_norm", aten, nodes, layout, scalars, names)
    return view(node, size)
