"""The Metal-on-CPU executor: runs MSL kernels on CPU tensors, so Metal kernels are tested on
Linux, where no Metal compiler exists.

MSL is compiled as C++ by g++ through a shim of the Metal standard library (``include/``);
each threadgroup's threads run as fibers that meet at ``threadgroup_barrier``, and SIMD-group
functions combine the values of real 32-lane SIMD groups. ``compile_shader(source)`` mirrors
``torch.mps.compile_shader``; ``run(source, kernel, grid, threadgroup, *args)`` dispatches
``grid`` threadgroups of ``threadgroup`` threads. See ``README`` in the module docstrings of
``msl.py`` (source handling), ``build.py`` (compile cache) and ``launch.py`` (binding, checks).
"""

from __future__ import annotations

from inductor_ext.runtime.metal_cpu.build import MetalCompileError
from inductor_ext.runtime.metal_cpu.launch import MetalLaunchError
from inductor_ext.runtime.metal_cpu.library import (CpuShaderLibrary, build_report, compile_shader, kernel_from_source,
                                                    run)
from inductor_ext.runtime.metal_cpu.msl import MslSignatureError, MslUnsupported

__all__ = ["CpuShaderLibrary", "MetalCompileError", "MetalLaunchError", "MslSignatureError", "MslUnsupported",
           "build_report", "compile_shader", "kernel_from_source", "run"]
