"""A compiled MSL library on the CPU, called like ``torch.mps.compile_shader``'s result."""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from inductor_ext.runtime.metal_cpu import build, launch, msl

_loaded: dict[str, "CpuShaderLibrary"] = {}
_load_lock = threading.Lock()


class CpuKernel:
    """One kernel of a library: ``kernel(*args, threads=..., group_size=...)`` as on MPS."""

    def __init__(self, library: "CpuShaderLibrary", kernel: msl.Kernel):
        self._library, self.kernel = library, kernel

    @property
    def max_threads_per_threadgroup(self) -> int:
        return min(launch.MAX_THREADS_PER_THREADGROUP, self.kernel.max_total_threads or launch.MAX_THREADS_PER_THREADGROUP)

    @property
    def thread_execution_width(self) -> int:
        return launch.SIMD_WIDTH

    def __call__(self, *args: Any, threads: Any = None, group_size: Any = None, arg_casts: Any = None,
                 error_buf_idx: int | None = None) -> None:
        """Dispatch ``threads`` threads (default: the first tensor's numel) in threadgroups of
        ``group_size`` (default: as many as allowed along x); the last threadgroup of each
        dimension may be partial, as with dispatchThreads."""
        import torch

        if threads is None:
            first = next((a for a in args if isinstance(a, torch.Tensor)), None)
            if first is None:
                raise ValueError(f"kernel {self.kernel.name}: pass threads= (no tensor argument to take it from)")
            threads = first.numel()
        ndim = 1 if isinstance(threads, int) else len(threads)
        t = launch.as_dims(threads, "threads")
        if group_size is None:
            g = (min(t[0], self.max_threads_per_threadgroup), 1, 1)
        else:
            gdims = 1 if isinstance(group_size, int) else len(group_size)
            if gdims != ndim:
                raise ValueError(f"threads {threads!r} and group_size {group_size!r} have different dimensions")
            g = launch.as_dims(group_size, "group_size")
        self._library.dispatch(self.kernel, args, t, g, arg_casts=arg_casts, error_buf_idx=error_buf_idx)


class CpuShaderLibrary:
    """Kernels of one MSL source, compiled for the CPU; ``lib.<kernel>`` is a :class:`CpuKernel`."""

    def __init__(self, source: str, *, checked: bool = True, defines: tuple[str, ...] = ()):
        analysis = msl.analyze(source)
        self.source, self.kernels, self.checked = source, analysis.kernels, checked
        self.path = build.build(analysis.source, defines=defines, original=source)
        self._dll = ctypes.CDLL(str(self.path))
        self._dll.mcpu_dispatch.restype = ctypes.c_int
        self._dll.mcpu_dispatch.argtypes = [ctypes.c_void_p, ctypes.c_void_p]

    def __getattr__(self, name: str) -> CpuKernel:
        kernels = self.__dict__.get("kernels", {})
        if name not in kernels:
            raise AttributeError(f"the library has no kernel {name!r}; it defines {', '.join(sorted(kernels)) or 'none'}")
        return CpuKernel(self, kernels[name])

    def __dir__(self) -> list[str]:
        return sorted(self.kernels)

    def dispatch(self, kernel: msl.Kernel, args: Any, threads: tuple[int, int, int], group: tuple[int, int, int],
                 **options: Any) -> None:
        launch.dispatch(self._dll, kernel, args, threads, group, checked=self.checked, **options)


def compile_shader(source: str, *, checked: bool = True, defines: tuple[str, ...] = ()) -> CpuShaderLibrary:
    """``torch.mps.compile_shader`` for the CPU: compiled once per process and source (and
    once per machine on disk). ``checked`` guards every buffer (see ``launch.py``); ``defines``
    are extra -D flags for the executor itself (tests only)."""
    key = f"{checked}|{defines}|{source}"
    with _load_lock:
        lib = _loaded.get(key)
        if lib is None:
            lib = _loaded[key] = CpuShaderLibrary(source, checked=checked, defines=defines)
    return lib


def kernel_from_source(name: str, source: str, headers: list[str] | tuple[str, ...] = ()) -> CpuKernel:
    """Kernel ``name`` of ``source`` with ``#include <c10/metal/<h>.h>`` for each of ``headers``
    prepended: how Inductor's Metal kernels (registered with their header names) load on the CPU."""
    includes = "".join(f"#include <c10/metal/{h}.h>\n" for h in sorted(headers))
    return getattr(compile_shader(includes + source), name)


def run(msl_source: str, kernel_name: str, grid: Any, threadgroup: Any, *args: Any, checked: bool = True) -> None:
    """Run ``kernel_name`` of ``msl_source`` over ``grid`` threadgroups (an int or 1-3 tuple,
    as dispatchThreadgroups) of ``threadgroup`` threads each, with ``args`` (CPU tensors and
    Python scalars) bound in order to its buffers as ``torch.mps.compile_shader`` binds them.
    Tensors are updated in place."""
    g = launch.as_dims(grid, "grid")
    tg = launch.as_dims(threadgroup, "threadgroup")
    lib = compile_shader(msl_source, checked=checked)
    kernel = getattr(lib, kernel_name).kernel
    lib.dispatch(kernel, args, (g[0] * tg[0], g[1] * tg[1], g[2] * tg[2]), tg)


def build_report(source: str) -> str:
    """What the executor made of ``source``, for ``inductor-ext asm``: the compiler and flags,
    the cached library, and each kernel's buffer bindings and position attributes. No Metal
    compiler exists on Linux, so this is the proof that the MSL parses, binds and compiles as
    the executor runs it; Apple's compiler may still reject what the shim accepts."""
    lib = compile_shader(source)
    cxx, version = build.compiler()
    lines = ["// Metal-on-CPU executor build: MSL compiled as C++ with the shim headers; this is host code for",
             "// testing, not Apple GPU code (no Metal compiler exists on Linux).",
             f"compiler  {cxx} ({version})",
             f"flags     {' '.join(build.FLAGS)}",
             f"library   {lib.path}"]
    for kernel in lib.kernels.values():
        lines.append(f"kernel    {kernel.name} (line {kernel.line})")
        for p in kernel.params:
            where = f"buffer({p.index})" if p.kind == "buffer" else f"[[{p.attribute}]]"
            lines.append(f"  {where:36s} {p.type} {p.name}")
    return "\n".join(lines) + "\n"
