"""Lowers ``aten._scaled_mm_v2`` (``F.scaled_mm``) through ext's choices when a family serving
``scaled_mm`` is enabled and the recipe is one the ``scaled_mm`` op glue describes: one fp32
scale per operand, tensorwise or rowwise, unswizzled. Inductor 2.15's v2 lowering returns its
eager fallback on ``mps`` without asking the choices handler (``aten._scaled_mm``, v1, does
ask), so Metal's FP8 templates would never be offered for ``F.scaled_mm`` there. The choices
are ATen's v2 kernel and those families, autotuned; every other compile (another backend, no
such family, a block-scaled or swizzled recipe) goes to Inductor's lowering unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor.kernel.mm import aten__fp8_mm_v2
from torch._inductor.kernel.mm_common import mm_args
from torch._inductor.lowering import lowerings
from torch._inductor.select_algorithm import autotune_select_algorithm, realize_inputs
from torch._inductor.virtualized import V
from torch.nn.functional import ScalingType

from inductor_ext.lowering.kernel_inputs import FixedKernelInputs

OP = torch.ops.aten._scaled_mm_v2.default
_inductors = lowerings[OP]
_PLAIN = (int(ScalingType.TensorWise.value), int(ScalingType.RowWise.value))


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
    serves = getattr(V.choices, "serves", None)
    if (serves is None or not serves("scaled_mm")
            or not _plain_recipe(scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, contraction_dim)):
        return _inductors(*args, layout=layout)
    _, _, _, layout, mat_a, mat_b = mm_args(mat_a, mat_b, layout=layout, out_dtype=out_dtype)
    nodes = [mat_a, mat_b, *realize_inputs(scale_a[0], scale_b[0])]
    if bias is not None:
        nodes.append(realize_inputs(bias))
    choices = [aten__fp8_mm_v2.bind(nodes, layout, recipe_a=recipe_a[0], recipe_b=recipe_b[0], out_dtype=out_dtype,
                                    use_fast_accum=use_fast_accum)]
    choices = V.choices.offer("scaled_mm", FixedKernelInputs(nodes, layout, {"out_dtype": out_dtype}), choices)
    node, _ = autotune_select_algorithm("scaled_mm", choices, nodes, layout)
    return node


lowerings[OP] = lower_scaled_mm_v2
