"""Turning the SYCL codegen on for one compile, and finding its kernels in output code."""

from __future__ import annotations

import ast
import contextlib
import hashlib
import logging
import re
from pathlib import Path
from typing import Any, Iterator

from inductor_ext.codegen.base import KernelInfo
from inductor_ext.codegen.sycl.loader import PROGRAM_VARIABLE
from inductor_ext.runtime import sycl as sycl_runtime
from inductor_ext.runtime.toolchain import ToolchainMissing

log = logging.getLogger(__name__)  # TORCH_LOGS=inductor_ext shows it

# Inductor settings a SYCL compile needs, on xpu and in interpret mode alike (interpret mode
# must generate the kernels the device would get):
INDUCTOR_PATCHES = {
    # the online-softmax and mix-order/nested reductions are Triton-only kernel shapes that
    # Inductor enables for xpu because it assumes Triton there
    "online_softmax": False,
    "triton.mix_order_reduction": False,
    "triton.nested_reduction": False,
    # random numbers come from ATen (exactly eager's), not from a device RNG we would have to match
    "fallback_random": True,
}


def device_for(config: Any) -> str:
    """The device type the codegen registers for: "xpu", or "cpu" in interpret mode."""
    return "cpu" if getattr(config, "interpret", False) else "xpu"


def _codegen_fingerprint() -> str:
    """Hash of the sources that decide generated code: part of Inductor's FX-graph cache key, so
    a graph compiled with this codegen is never served to a compile without it (or vice versa)."""
    from inductor_ext.templates.lang import sycl as lang_sycl

    files = sorted(Path(__file__).parent.glob("*.py")) + [Path(lang_sycl.__file__)]
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


def _cache_key_pass(device: str) -> Any:
    from torch._inductor.custom_graph_pass import CustomGraphModulePass

    class SyclCodegenCacheKey(CustomGraphModulePass):
        """Changes nothing in the graph; its uuid marks graphs compiled with the SYCL codegen."""

        def __call__(self, gm: Any) -> None:
            return None

        def uuid(self) -> str:
            return f"inductor_ext.codegen.sycl:{device}:{_codegen_fingerprint()}"

    return SyclCodegenCacheKey()


@contextlib.contextmanager
def install(config: Any) -> Iterator[None]:
    """Register the SYCL scheduling and wrapper for "xpu" (or "cpu" when ``config.interpret``)
    for the duration of the block; what was registered before comes back afterwards."""
    reason = sycl_runtime.missing()
    if reason is not None:
        raise ToolchainMissing(f"the SYCL codegen cannot run here: {reason}")
    from torch._inductor import config as inductor_config
    from torch._inductor.codegen import common

    from inductor_ext.codegen.sycl.scheduling import SyclScheduling
    from inductor_ext.codegen.sycl.wrapper import SyclPythonWrapperCodegen

    device = device_for(config)
    common.init_backend_registration()
    saved = (common.device_codegens.get(device), common.custom_backend_passes.get(device),
             common.custom_backend_codegen_configs.get(device))
    common.register_backend_for_device(device, SyclScheduling, SyclPythonWrapperCodegen,
                                       device_custom_pass=_cache_key_pass(device))
    patches = dict(INDUCTOR_PATCHES)
    if inductor_config.cpp_wrapper:
        # the SYCL codegen generates a Python wrapper only (SyclPythonWrapperCodegen); with the C++
        # wrapper asked for, Inductor stopped at "Device xpu not supported"
        log.info("ext: the SYCL codegen has no C++ wrapper: this compile uses Inductor's Python wrapper "
                 "although cpp_wrapper=True")
        patches["cpp_wrapper"] = False
    try:
        with inductor_config.patch(patches):
            yield
    finally:
        codegen, custom_pass, custom_config = saved
        for table, value in ((common.device_codegens, codegen), (common.custom_backend_passes, custom_pass),
                             (common.custom_backend_codegen_configs, custom_config)):
            if value is None:
                table.pop(device, None)
            else:
                table[device] = value


_KERNEL = re.compile(
    r"(?P<header>(?:^#[^\n]*\n)*)^(?P<name>\w+) = " + PROGRAM_VARIABLE +
    r"\.add_kernel\('(?P=name)', r'''\n(?P<source>.*?)''', params=(?P<params>\([^)]*\)), "
    r"nd_range_kernel=(?P<ndim>\d+), mode='(?P<mode>\w+)', work_group=(?P<work_group>\d+)\)",
    re.MULTILINE | re.DOTALL)


def describe_kernels(output_code: str) -> list[KernelInfo]:
    """Every SYCL kernel defined in a compiled graph's output code, with its own source."""
    return [
        KernelInfo(name=m["name"], language="sycl", source=m["source"], suffix=".sycl.cpp",
                   properties={"nd_range_kernel": int(m["ndim"]), "mode": m["mode"],
                               "work_group": int(m["work_group"]), "params": list(ast.literal_eval(m["params"]))},
                   header=m["header"].strip())
        for m in _KERNEL.finditer(output_code)
    ]


def missing() -> str | None:
    return sycl_runtime.missing()
