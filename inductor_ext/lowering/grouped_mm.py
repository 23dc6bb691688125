"""Lowers ``aten._grouped_mm`` through ext's choices when a family serving ``grouped_mm`` is
enabled (MoE decode on mps, ragged grouped GEMM on gfx950): ATen's kernel and those families,
autotuned. Inductor 2.15's own lowering builds its choices without asking the choices handler,
so ext wraps it; every other compile (another backend, or no such family enabled, or a bias,
which no family serves) goes to Inductor's lowering unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor.kernel.mm_grouped import aten__grouped_mm, grouped_mm_args
from torch._inductor.lowering import lowerings
from torch._inductor.select_algorithm import autotune_select_algorithm, realize_inputs
from torch._inductor.virtualized import V

from inductor_ext.lowering.kernel_inputs import FixedKernelInputs

OP = torch.ops.aten._grouped_mm.default
_inductors = lowerings[OP]


def lower_grouped_mm(mat_a: Any, mat_b: Any, offs: Any = None, bias: Any = None, out_dtype: torch.dtype | None = None,
                     layout: Any = None) -> Any:
    serves = getattr(V.choices, "serves", None)
    if bias is not None or serves is None or not serves("grouped_mm"):
        return _inductors(mat_a, mat_b, offs, bias, out_dtype, layout)
    _, _, layout, mat_a, mat_b, offs = grouped_mm_args(mat_a, mat_b, offs, layout=layout, out_dtype=out_dtype)
    nodes = [mat_a, mat_b] + ([realize_inputs(offs)] if offs is not None else [])
    choices = [aten__grouped_mm.bind(nodes, layout, out_dtype=out_dtype)]
    choices = V.choices.offer("grouped_mm", FixedKernelInputs(nodes, layout, {"out_dtype": out_dtype}), choices)
    node, _ = autotune_select_algorithm("grouped_mm", choices, nodes, layout)
    return node


lowerings[OP] = lower_grouped_mm
