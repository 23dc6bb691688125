"""KernelInputs for ops ext lowers itself (nvfp4_gemm, grouped_mm): Inductor's KernelInputs
with a fixed output layout, so ExtChoices.offer reads them like Inductor's own."""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor import ir
from torch._inductor.kernel_inputs import KernelInputs


class FixedKernelInputs(KernelInputs):
    """An op's input nodes, scalars and output layout."""

    def __init__(self, nodes: list[Any], layout: ir.Layout, scalars: dict[str, Any]) -> None:
        super().__init__(nodes, scalars=scalars)
        self._layout = layout

    def out_dtype(self) -> torch.dtype:
        return self._layout.dtype

    def output_layout(self, flexible: bool = True) -> ir.Layout:
        return self._layout
