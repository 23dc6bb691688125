"""Metal kernels on CPU tensors, for tests: the executor's public entry and two ways to feed it
the MSL that real generators produce on Linux.

- :func:`run` / :func:`compile_shader`: the Metal-on-CPU executor (``inductor_ext.runtime.metal_cpu``).
- :func:`cpu_compile_shader`: while active, ``torch.mps.compile_shader`` compiles for the CPU
  executor, so Inductor's and Helion's Metal launch code runs unchanged on CPU tensors.
- :func:`inductor_mps_wrapper` / :func:`run_inductor_mps`: Inductor's MPS codegen for a function,
  generated here (fake tensors on ``mps``, ``make_fx`` with Inductor's decompositions,
  ``GraphLowering``) and run with the executor on CPU tensors. With ``choices=`` (a choices
  handler such as ext's) its GEMM and softmax lowerings ask that handler, as a compile for an
  ``mps`` device does; extern choices then run on the CPU tensors too.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Sequence
from unittest import mock

import torch

from inductor_ext.runtime.metal_cpu import (CpuShaderLibrary, MetalCompileError, MetalLaunchError, MslSignatureError,
                                            MslUnsupported, compile_shader, run)

__all__ = ["CpuShaderLibrary", "MetalCompileError", "MetalLaunchError", "MslSignatureError", "MslUnsupported",
           "compile_shader", "cpu_compile_shader", "inductor_mps_wrapper", "mps_device_stubs", "run",
           "run_inductor_mps"]


@contextlib.contextmanager
def mps_device_stubs(name: str = "Apple M4 Max", cores: int = 40) -> Iterator[None]:
    """The device queries Inductor's and Helion's Metal codegen make, answered without a Mac."""
    with mock.patch.object(torch._C, "_mps_get_core_count", lambda: cores, create=True), \
            mock.patch.object(torch._C, "_mps_get_name", lambda: name, create=True):
        yield


@contextlib.contextmanager
def cpu_compile_shader(*, checked: bool = True, sources: list[str] | None = None) -> Iterator[None]:
    """Route ``torch.mps.compile_shader`` to the CPU executor (appending each source to
    ``sources`` when given), with the MPS device queries stubbed."""
    def compile_for_cpu(source: str) -> CpuShaderLibrary:
        if sources is not None:
            sources.append(source)
        return compile_shader(source, checked=checked)

    with mock.patch.object(torch.mps, "compile_shader", compile_for_cpu), mps_device_stubs():
        yield


def inductor_mps_wrapper(fn: Callable[..., Any], *example_inputs: torch.Tensor, choices: Any = None) -> str:
    """The Python wrapper module Inductor's MPS codegen writes for ``fn`` (its Metal kernels
    inside), generated on this machine from fake ``mps`` tensors shaped like the inputs, with
    ``choices`` as Inductor's choices handler when given. Autotuning cannot run here (no mps
    device): a lowering must end with one choice, or fail."""
    from torch._inductor.codegen.mps import MetalKernel
    from torch._inductor.debug import DebugContext
    from torch._inductor.decomposition import select_decomp_table
    from torch._inductor.graph import GraphLowering
    from torch._inductor.virtualized import V
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    from torch.utils._ordered_set import OrderedSet

    # torch 2.15's MetalKernel keeps headers in a class-level set every kernel adds to: start clean.
    with mps_device_stubs(), mock.patch.object(MetalKernel, "headers", OrderedSet(["utils"])):
        mode = FakeTensorMode()
        with mode:
            fake = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="mps") for t in example_inputs]
            gm = make_fx(fn, decomposition_table=select_decomp_table())(*fake)
        handler = V.set_choices_handler(choices) if choices is not None else contextlib.nullcontext()
        with V.set_fake_mode(mode), V.set_debug_handler(DebugContext()), handler:
            graph = GraphLowering(gm, example_inputs=fake)
            with V.set_graph_handler(graph):
                graph.run(*fake)
                code = graph.codegen()
    return code[0].value if isinstance(code, tuple) else getattr(code, "value", code)


def run_inductor_mps(fn: Callable[..., Any], *inputs: torch.Tensor, checked: bool = True,
                     sources: list[str] | None = None, choices: Any = None) -> Sequence[torch.Tensor]:
    """``fn(*inputs)`` computed by the Metal kernels Inductor's MPS codegen generates for it,
    each run by the CPU executor on the CPU inputs. Returns the wrapper's outputs."""
    from torch._inductor.codecache import PyCodeCache

    code = inductor_mps_wrapper(fn, *inputs, choices=choices).replace("device='mps'", "device='cpu'")
    with cpu_compile_shader(checked=checked, sources=sources):
        module = PyCodeCache.load(code)
        return module.call(list(inputs))
