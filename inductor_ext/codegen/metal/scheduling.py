"""Inductor's Metal scheduling, registered for CPU tensors: Inductor's own MPS kernel codegen
(``torch._inductor.codegen.mps``), with each kernel defined in the output code as a kernel of the
Metal-on-CPU executor instead of a ``torch.mps.compile_shader`` library."""

from __future__ import annotations

from typing import Any, Callable

from torch._inductor.codegen.common import DeferredLine
from torch._inductor.codegen.mps import MetalKernel, MetalScheduling
from torch.utils._ordered_set import OrderedSet
from torch._inductor.utils import get_kernel_metadata
from torch._inductor.virtualized import V

LOADER = "metal_cpu_kernel"  # the name the output code calls to load a kernel
_IMPORT = f"from inductor_ext.runtime.metal_cpu import kernel_from_source as {LOADER}"


class MetalCpuKernel(MetalKernel):
    """MetalKernel with headers of its own: torch 2.15 keeps them in a class-level set that every
    kernel adds to, so one kernel's error buffer would leak into every later kernel's signature."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.headers = OrderedSet(MetalKernel.headers)
        super().__init__(*args, **kwargs)

    def store(self, name: str, index: Any, value: Any, mode: Any = None) -> None:
        """torch 2.15's MetalKernel runs a pointwise node fused after a reduction in every thread of
        the reduction group: harmless for a plain store (each writes the same value), but an
        atomic add (a scatter-add, index_put's backward) then adds the value once per thread.
        Only the group's first thread adds it, as ``store_reduction`` does for its result."""
        # a kernel whose reduction range is 1 has no reduction threads (and no r0_index)
        reduction = next((t for t in self.range_trees if t.is_reduction and t.numel != 1), None)
        if mode != "atomic_add" or self.inside_reduction or reduction is None:
            super().store(name, index, value, mode)
            return
        var = self.args.output(name)
        index = self.prepare_indexing(index)
        dtype_str = self.dtype_to_str(V.graph.get_dtype(name))
        self.headers.add("atomic")
        atomic_type = f"c10::metal::AtomicType<{dtype_str}>"
        line = (f"{atomic_type}::atomic_add(reinterpret_cast<device {atomic_type}::type *>({var}), "
                f"{self.index_to_str(index)}, static_cast<{dtype_str}>({value}));")
        self.stores.writeline(DeferredLine(name, f"if ({reduction.name} == 0) {line}"))


class MetalCpuScheduling(MetalScheduling):
    """MetalScheduling whose kernels load through ``runtime.metal_cpu.kernel_from_source``."""

    kernel_type = MetalCpuKernel

    def define_kernel(self, src_code: str, node_schedule: list[Any], kernel: Any) -> str:
        wrapper = V.graph.wrapper_code
        if src_code in wrapper.src_to_kernel:
            return wrapper.src_to_kernel[src_code]
        fn_name = f"generated_kernel_{wrapper.next_kernel_suffix()}"
        wrapper.src_to_kernel[src_code] = fn_name
        start = src_code.index("compile_mps_shader('''") + len("compile_mps_shader('''")
        body = src_code[start:src_code.rindex("''')")]
        lines = [line.replace("kernel void generated_kernel(", f"kernel void {fn_name}(")
                 for line in body.split("\n") if not line.strip().startswith("#include")]
        wrapper.add_import_once(_IMPORT)
        origins, detailed = get_kernel_metadata(node_schedule, wrapper)
        for comment in (origins, detailed):
            if comment:
                wrapper.header.splice(comment)
        wrapper.header.writeline(f"{fn_name} = {LOADER}({fn_name!r}, '''")
        for line in lines:
            wrapper.header.writeline(line)
        wrapper.header.writeline(f"''', {sorted(kernel.headers)!r})")
        return fn_name


def metal_backend_for_cpu(backend_of: Callable[..., str]) -> Callable[..., str]:
    """``get_current_backend`` that answers "mps" (as on a Mac) while a Metal kernel for CPU
    tensors is generated, and ``backend_of``'s answer otherwise."""

    def current_backend(device_type: str | None = None) -> str:
        if isinstance(V.kernel, MetalCpuKernel) and (device_type or V.graph.get_current_device_or_throw().type) == "cpu":
            return "mps"
        return backend_of(device_type)

    return current_backend
