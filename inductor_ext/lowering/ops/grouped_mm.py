"""``grouped_mm``: lowers ``aten._grouped_mm`` through ext's choices when a family serving
``grouped_mm`` is enabled (MoE decode on mps, ragged grouped GEMM on gfx950): ATen's kernel and
those families, autotuned. Inductor 2.15's own lowering builds its choices without asking the
choices handler, so ext wraps it; every other compile (another backend, or no such family
enabled, or a bias, which no family serves) goes to Inductor's lowering unchanged.

OpSpec.inputs: (mat_a, mat_b, offs|None, bias|None); scalar ``out_dtype``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor.kernel.mm_grouped import aten__grouped_mm, grouped_mm_args
from torch._inductor.lowering import lowerings
from torch._inductor.select_algorithm import realize_inputs

from inductor_ext.lowering.ops._select import select, serves
from inductor_ext.lowering.ops._spec import OpInputs, dtype_name, whole

OP = torch.ops.aten._grouped_mm.default
_inductors = lowerings[OP]


def grouped_mm(kernel_inputs: Any) -> OpInputs | str:
    """mat_a, mat_b[, offs] (no bias)."""
    layout = kernel_inputs.output_layout()
    optional = (None, None) if len(kernel_inputs.nodes()) == 2 else (None,)  # offs, bias
    return whole("grouped_mm", kernel_inputs, layout, {"out_dtype": dtype_name(layout.dtype)}, optional)


SPECS = {"grouped_mm": grouped_mm}


def lower_grouped_mm(mat_a: Any, mat_b: Any, offs: Any = None, bias: Any = None, out_dtype: torch.dtype | None = None,
                     layout: Any = None) -> Any:
    if bias is not None or not serves("grouped_mm"):
        return _inductors(mat_a, mat_b, offs, bias, out_dtype, layout)
    _, _, layout, mat_a, mat_b, offs = grouped_mm_args(mat_a, mat_b, offs, layout=layout, out_dtype=out_dtype)
    nodes = [mat_a, mat_b] + ([realize_inputs(offs)] if offs is not None else [])
    aten = aten__grouped_mm.bind(nodes, layout, out_dtype=out_dtype)
    node, _ = select("grouped_mm", aten, nodes, layout, {"out_dtype": out_dtype})
    return node


lowerings[OP] = lower_grouped_mm
