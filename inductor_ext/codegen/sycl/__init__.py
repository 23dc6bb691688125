"""SYCL device codegen: Inductor's loop IR as SYCL free-function kernels
(``SYCL_EXT_ONEAPI_FUNCTION_PROPERTY((syclexp::nd_range_kernel<1>))``), compiled at run time by
Intel's SYCL kernel compiler (``runtime/sycl``) and run on an Intel GPU (``xpu``) or, in interpret
mode, on Intel's OpenCL CPU device with CPU tensors.

Which compiles use it is the ``xpu_codegen`` option (registered here): "auto" (the default) uses
it in interpret mode only, so a real XPU keeps Inductor's Triton codegen until a benchmark
(``bench/xpu_kernels.py``) says SYCL is faster; "sycl" uses it on the XPU too; "triton" never.

Modules: ``printer`` (index expressions), ``overrides`` (pointwise ops), ``kernel`` (one kernel:
work mapping, reductions, assembly), ``scheduling`` (Inductor's scheduler hook), ``wrapper`` (the
graph's Python module), ``loader`` (what that module calls at load), ``install`` (registration,
kernel listing for dumps). Importing this package does not import ``torch._inductor``.
"""

from __future__ import annotations

from typing import Any

from inductor_ext.codegen.base import DeviceCodegen
from inductor_ext.codegen.sycl.install import describe_kernels, install, missing
from inductor_ext.config import OptionSpec, one_of, register_option

OPTION = "xpu_codegen"
CHOICES = ("auto", "sycl", "triton")

register_option(OPTION, OptionSpec(
    "kernels for Intel XPUs: 'sycl' (ext's SYCL codegen), 'triton' (Inductor's), or 'auto' (default: SYCL only "
    "with interpret=True, where it runs on Intel's OpenCL CPU device)", one_of(CHOICES)))


def enabled(config: Any) -> bool:
    """Whether this compile generates SYCL: ``xpu_codegen="sycl"``, or "auto" in interpret mode."""
    choice = getattr(config, "plugin_options", {}).get(OPTION, "auto")
    return choice == "sycl" or (choice == "auto" and bool(getattr(config, "interpret", False)))


CODEGEN = DeviceCodegen(name="sycl", device_types=("xpu",), language="sycl", install=install,
                        describe_kernels=describe_kernels, missing=missing, enabled=enabled)
