"""SYCL device codegen: Inductor's loop IR as SYCL free-function kernels
(``SYCL_EXT_ONEAPI_FUNCTION_PROPERTY((syclexp::nd_range_kernel<1>))``), compiled at run time by
Intel's SYCL kernel compiler (``runtime/sycl``) and run on an Intel GPU (``xpu``) or, in interpret
mode, on Intel's OpenCL CPU device with CPU tensors.

Modules: ``printer`` (index expressions), ``overrides`` (pointwise ops), ``kernel`` (one kernel:
work mapping, reductions, assembly), ``scheduling`` (Inductor's scheduler hook), ``wrapper`` (the
graph's Python module), ``loader`` (what that module calls at load), ``install`` (registration,
kernel listing for dumps). Importing this package does not import ``torch._inductor``.
"""

from inductor_ext.codegen.base import DeviceCodegen
from inductor_ext.codegen.sycl.install import describe_kernels, install, missing

CODEGEN = DeviceCodegen(name="sycl", device_types=("xpu",), language="sycl", install=install,
                        describe_kernels=describe_kernels, missing=missing)
