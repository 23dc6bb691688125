"""``scaled_mm``: the glue of Inductor's ``aten._scaled_mm`` lowering (which asks ext's choices
itself), and ``aten._scaled_mm_v2`` (``F.scaled_mm``) lowered through ext's choices when a family
serving ``scaled_mm`` is enabled and the recipe is one the glue describes: one fp32 scale per
operand, tensorwise or rowwise, unswizzled. Inductor 2.15's v2 lowering returns its eager
fallback on ``mps`` without asking the choices handler (``aten._scaled_mm``, v1, does ask), so
Metal's FP8 templates would never be offered for ``F.scaled_mm`` there. The choices are ATen's
v2 kernel and those families, autotuned; every other compile (another backend, no such family,
a block-scaled or swizzled recipe) goes to Inductor's lowering unchanged.

OpSpec.inputs: (a, b, scale_a, scale_b, bias|None, scale_result|None); scalar ``out_dtype``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor.kernel.mm import aten__fp8_mm_v2
from torch._inductor.kernel.mm_common import mm_args
from torch._inductor.lowering import lowerings
from torch._inductor.select_algorithm import realize_inputs
from torch.nn.functional import ScalingType

from inductor_ext.lowering.ops._select import select, serves
from inductor_ext.lowering.ops._spec import OpInputs, dtype_name, whole

OP = torch.ops.aten._scaled_mm_v2.default
_inductors = lowerings[OP]
_PLAIN = (int(ScalingType.TensorWise.value), int(ScalingType.RowWise.value))


def scaled_mm(kernel_inputs: Any) -> OpInputs | str:
    """Inductor's ``scaled_mm`` lowering (and ``lower_scaled_mm_v2``): a, b, scale_a, scale_b[, bias]
    (no scale_result). A Triton template names every input in its ``def_kernel`` (no prefix/suffix
    epilogue inputs): the scales and the bias apply to the fp32 accumulator, before any fused epilogue."""
    layout = kernel_inputs.output_layout(flexible=False)  # a Triton template stores through a fixed layout
    optional = (None, None) if len(kernel_inputs.nodes()) == 4 else (None,)  # bias, scale_result
    return whole("scaled_mm", kernel_inputs, layout, {"out_dtype": dtype_name(layout.dtype)}, optional)


SPECS = {"scaled_mm": scaled_mm}


def _plain_recipe(scale_a: list[Any], recipe_a: list[int], swizzle_a: list[int], scale_b: list[Any],
                  recipe_b: list[int], swizzle_b: list[int], contraction_dim: list[int] | None) -> bool:
    """One fp32 scale per operand, both tensorwise or both rowwise, no swizzle, K contracted."""
    return (len(scale_a) == 1 and len(scale_b) == 1 and len(recipe_a) == 1 and len(recipe_b) == 1
            and recipe_a[0] == recipe_b[0] and recipe_a[0] in _PLAIN
            and not any(swizzle_a) and not any(swizzle_b)
            and scale_a[0].get_dtype() == torch.float32 and scale_b[0].get_dtype() == torch.float32
            and list(contraction_dim or []) in ([], [1, 0], [-1, 0], [1, -2], [-1, -2]))


def lower_scaled_mm_v2(mat_a: Any, mat_b: Any, scale_a: list[Any], recipe_a: list[int], swizzle_a: list[int],
                       scale_b: list[Any], recipe_b: list[int], swizzle_b: list[int], bias: Any = None,
                       out_dtype: torch.dtype | None = None, contraction_dim: list[int] | None = None,
                       use_fast_accum: bool = False, layout: Any = None) -> Any:
    args = (mat_a, mat_b, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, bias, out_dtype,
            contraction_dim, use_fast_accum)
    if (not serves("scaled_mm")
            or not _plain_recipe(scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, contraction_dim)):
        return _inductors(*args, layout=layout)
    _, _, _, layout, mat_a, mat_b = mm_args(mat_a, mat_b, layout=layout, out_dtype=out_dtype)
    nodes = [mat_a, mat_b, *realize_inputs(scale_a[0], scale_b[0])]
    if bias is not None:
        nodes.append(realize_inputs(bias))
    aten = aten__fp8_mm_v2.bind(nodes, layout, recipe_a=recipe_a[0], recipe_b=recipe_b[0], out_dtype=out_dtype,
                                use_fast_accum=use_fast_accum)
    node, _ = select("scaled_mm", aten, nodes, layout, {"out_dtype": out_dtype})
    return node


lowerings[OP] = lower_scaled_mm_v2
