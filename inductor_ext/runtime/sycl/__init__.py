"""SYCL kernels compiled at run time by Intel's SYCL kernel compiler and launched from Python.

    from inductor_ext.runtime import sycl
    if sycl.missing() is None:
        k = sycl.compile_kernel(source, "my_kernel", params=("ptr", "ptr", "i64"))
        k(x, y, x.numel(), global_size=(1024,), local_size=(256,))

Pieces: ``wheels`` (the pip wheels and their environment), ``shim`` (the C++ host shim over
``sycl_ext_oneapi_kernel_compiler``, built once with g++), ``program`` (build, look up, launch).
Kernels run on Intel's OpenCL CPU device for CPU tensors and on torch's XPU queue for ``xpu``
tensors.
"""

from __future__ import annotations

from inductor_ext.runtime.sycl.program import (
    BUILDS,
    BuildRecord,
    DeviceInfo,
    Kernel,
    LocalMemory,
    Program,
    Queue,
    SyclCompileError,
    SyclError,
    compile_kernel,
    cpu_queue,
    queue_for,
)
from inductor_ext.runtime.sycl.wheels import INSTALL_HINT, missing

__all__ = [
    "BUILDS", "BuildRecord", "DeviceInfo", "INSTALL_HINT", "Kernel", "LocalMemory", "Program", "Queue",
    "SyclCompileError", "SyclError", "compile_kernel", "cpu_queue", "missing", "queue_for",
]
