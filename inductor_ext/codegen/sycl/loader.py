"""What a compiled graph's Python module calls at load time: one SYCL program for the graph's
kernels, with ext's helper header (``templates/lang/sycl.py``). Kept free of ``torch._inductor``
so a cached graph loads without Inductor's codegen."""

from __future__ import annotations

from inductor_ext.runtime.sycl import Program
from inductor_ext.templates.lang.sycl import HELPERS, HELPERS_NAME

PROGRAM_VARIABLE = "ext_sycl_program"  # the program's name in the generated module


def program(device_type: str) -> Program:
    """An empty program for ``device_type`` ("cpu": Intel's OpenCL CPU device, "xpu")."""
    return Program(device_type, prelude=f'#include "{HELPERS_NAME}"\n', includes={HELPERS_NAME: HELPERS})
