"""ext's Metal device codegen: Inductor's own MPS (Metal) codegen, and in interpret mode the same
codegen for CPU tensors with every kernel run by the Metal-on-CPU executor.

- ``install(config)``: nothing on a Mac (Inductor registers its Metal codegen for ``mps``).
  With ``config.interpret`` it registers ``MetalCpuScheduling`` for ``cpu`` (Python wrapper; FX
  graph and AOTAutograd caches off, so a CPU compile never reuses a Metal one or the reverse)
  and restores Inductor's CPU codegen afterwards.
- ``describe_kernels(output_code)``: the Metal kernels of an output module, with their sources
  and the FX-node comments before them, for dumps.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any, Iterator

from inductor_ext.codegen.base import DeviceCodegen, KernelInfo
from inductor_ext.runtime import toolchain

# `name = loader('name', '''source''', [headers])`: ours (metal_cpu_kernel) or Inductor's (async_compile.metal).
_KERNEL_DEF = re.compile(r"^(?P<var>\w+) = (?:metal_cpu_kernel|async_compile\.metal)\('(?P<name>\w+)', '''\n"
                         r"(?P<source>.*?)''', (?P<headers>\[[^\]]*\])\)", re.M | re.S)


def _missing() -> str | None:
    """None when Metal kernels can run here: on a Mac with MPS, or anywhere with g++ for the
    CPU executor."""
    import torch

    if torch.backends.mps.is_available() or toolchain.gxx() is not None:
        return None
    return "no MPS device and no C++ compiler for the Metal-on-CPU executor (install g++, or set $CXX)"


@contextlib.contextmanager
def _install(config: Any) -> Iterator[None]:
    if not getattr(config, "interpret", False):
        yield
        return
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch._inductor.codegen import common
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    from inductor_ext.codegen.metal.scheduling import MetalCpuScheduling, metal_backend_for_cpu

    common.init_backend_registration()
    previous = common.device_codegens.get("cpu")
    previous_backend = common.get_current_backend
    common.register_backend_for_device("cpu", MetalCpuScheduling, PythonWrapperCodegen)
    # Inductor's kernel helpers ask which backend generates a kernel by its device: for CPU tensors
    # they would answer "cpp" and look for the C++ codegen's dtype notes (a masked load: a crash).
    common.get_current_backend = metal_backend_for_cpu(previous_backend)
    try:
        with inductor_config.patch(cpp_wrapper=False, fx_graph_cache=False), \
                functorch_config.patch(enable_autograd_cache=False):
            yield
    finally:
        common.get_current_backend = previous_backend
        if previous is None:
            common.device_codegens.pop("cpu", None)
        else:
            common.device_codegens["cpu"] = previous


def _comment_block(code: str, start: int) -> str:
    lines = code[:start].rstrip("\n").split("\n")
    block = []
    while lines and lines[-1].startswith("#"):
        block.insert(0, lines.pop())
    return "\n".join(block)


def describe_kernels(output_code: str) -> list[KernelInfo]:
    """Every Metal kernel an output module defines, with its own source."""
    kernels = []
    for m in _KERNEL_DEF.finditer(output_code):
        headers = re.findall(r"'(\w+)'", m.group("headers"))
        includes = "".join(f"#include <c10/metal/{h}.h>\n" for h in headers)
        kernels.append(KernelInfo(m.group("var"), "msl", includes + m.group("source"), ".metal",
                                  {"headers": headers}, _comment_block(output_code, m.start())))
    return kernels


CODEGEN = DeviceCodegen("metal", ("mps",), "msl", install=_install, describe_kernels=describe_kernels, missing=_missing)
