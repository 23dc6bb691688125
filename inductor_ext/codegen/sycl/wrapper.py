"""The Python wrapper of a graph whose kernels are SYCL: it creates one program for them at the
top of the module, builds it once after every kernel is defined (one compiler run, cached on
disk by SYCL), and calls kernels as ``name(*args, global_size=..., local_size=...)``."""

from __future__ import annotations

from typing import Any

from torch._inductor.codegen.wrapper import PythonWrapperCodegen
from torch._inductor.virtualized import V

from inductor_ext.codegen.sycl.loader import PROGRAM_VARIABLE


class SyclPythonWrapperCodegen(PythonWrapperCodegen):
    @staticmethod
    def create(is_subgraph: bool, subgraph_name: str | None, parent_wrapper: PythonWrapperCodegen | None,
               partition_signatures: Any = None) -> PythonWrapperCodegen:
        if is_subgraph:
            return PythonWrapperCodegen.create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures)
        return SyclPythonWrapperCodegen()

    def write_header(self) -> None:
        super().write_header()
        device_type = getattr(V.graph, "device_type", None) or "cpu"
        self.imports.writeline("from inductor_ext.codegen.sycl import loader as ext_sycl_loader")
        self.header.writeline(f"{PROGRAM_VARIABLE} = ext_sycl_loader.program({device_type!r})")

    def write_async_compile_wait(self) -> None:
        super().write_async_compile_wait()
        self.prefix.writeline(f"{PROGRAM_VARIABLE}.build()  # this graph's SYCL kernels, one compiler run")

    def _generate_kernel_call_helper(self, kernel_name: str, call_args: Any, *, triton: bool = True,
                                     **kwargs: Any) -> None:
        if triton:
            super()._generate_kernel_call_helper(kernel_name, call_args, triton=triton, **kwargs)
            return
        # SYCL kernels, on any device: a plain call (the runtime picks the queue).
        self.writeline(self.wrap_kernel_call(kernel_name, call_args))
