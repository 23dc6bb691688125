"""Inductor scheduling for SYCL: fused node groups become ``SyclKernel``s, defined in the wrapper
as kernels of the graph's SYCL program."""

from __future__ import annotations

from typing import Any

import sympy
from torch._inductor.codegen.common import DataTypePropagation
from torch._inductor.codegen.simd import SIMDScheduling
from torch._inductor.scheduler import SchedulerNode
from torch._inductor.utils import get_kernel_metadata
from torch._inductor.virtualized import V
from torch.utils._ordered_set import OrderedSet

from inductor_ext.codegen.sycl.kernel import PLACEHOLDER_NAME, SyclKernel
from inductor_ext.codegen.sycl.loader import PROGRAM_VARIABLE


class SyclScheduling(SIMDScheduling):
    kernel_type = SyclKernel  # type: ignore[assignment]

    def get_backend_features(self, device: Any) -> OrderedSet[Any]:
        # No scan, sort or bucketize kernels: Inductor runs those ops with ATen.
        return OrderedSet()

    @classmethod
    def get_tiling_and_scores(cls, node_schedule: Any, numel: sympy.Expr, reduction_numel: sympy.Expr = sympy.S.One,
                              coalesce_analysis: Any = None) -> tuple[dict[str, sympy.Expr], None]:
        # One flat range of rows (+ one reduction range): the kernel maps rows to work-items.
        return cls.create_tiling([numel], [reduction_numel]), None

    def codegen_node_schedule_with_kernel(self, node_schedule: Any, kernel: SyclKernel) -> None:
        # On "cpu" (interpret mode) Inductor's op handlers take the C++ backend's path, which reads
        # the dtypes the C++ scheduling annotates (e.g. for masked loads): annotate them the same way.
        for node in node_schedule:
            if isinstance(node, SchedulerNode):
                DataTypePropagation.propagate_scheduler_node(node)
        super().codegen_node_schedule_with_kernel(node_schedule, kernel)

    def define_kernel(self, src_code: str, node_schedule: Any, kernel: SyclKernel) -> str:
        wrapper = V.graph.wrapper_code
        if src_code in wrapper.src_to_kernel:
            return wrapper.src_to_kernel[src_code]
        name = f"sycl_kernel_{wrapper.next_kernel_suffix()}"
        wrapper.src_to_kernel[src_code] = name
        source = src_code.replace(PLACEHOLDER_NAME, name)
        origins, detailed_origins = get_kernel_metadata(node_schedule, wrapper)
        body = (f"{PROGRAM_VARIABLE}.add_kernel({name!r}, r'''\n{source}''', params={tuple(kernel.param_kinds())!r}, "
                f"nd_range_kernel={kernel.ndim}, mode={kernel.layout.mode!r}, work_group={kernel.layout.work_group})")
        wrapper.define_kernel(name, body, f"{origins}\n{detailed_origins}", gpu=False)
        return name
