"""C++ kernels for the CPU (``KernelSource`` with ``language == "cpp"``), built into a shared library
with the system g++ and called through ctypes.

A kernel is plain C++ (no torch headers: a build takes about a second) with one ``extern "C"``
function. Each library is built once per machine and cached under
``toolchain.tool_cache_dir()/cpu_kernels/<key>/``, the key hashing the source, the flags and the
compiler. Built with ``-fopenmp``, its ``libgomp.so.1`` is resolved by the dynamic loader to the one
torch already loaded (the same soname), so its threads are torch's pool, not a second one.
"""

from __future__ import annotations

import ctypes
import hashlib
from pathlib import Path
from typing import Any

from inductor_ext.runtime import toolchain
from inductor_ext.runtime.kernel_source import KernelSource
from inductor_ext.runtime.private_files import write_if_different


class CppBuildError(RuntimeError):
    """g++ could not build a kernel: the message has the compiler's output."""


def library_path(kernel: KernelSource, flags: tuple[str, ...], gxx: str) -> Path:
    """Where the library of ``kernel`` built with ``flags`` by ``gxx`` lives (built or not)."""
    parts = [kernel.source, " ".join(flags), toolchain.compiler_identity(gxx)]
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    return toolchain.tool_cache_dir() / "cpu_kernels" / key / f"{kernel.name}.so"


def build(kernel: KernelSource, flags: tuple[str, ...]) -> Path:
    """The library of ``kernel``, built now if it is not cached yet; ToolchainMissing without g++."""
    gxx = toolchain.require(toolchain.gxx(), "a C++ compiler (g++)", "install g++ (apt-get install g++)")
    path = library_path(kernel, flags, gxx)
    source = path.with_suffix(".cpp")  # kept beside the library: what was built, to read

    def command(output: str) -> list[str]:  # run only when the library is not built yet
        write_if_different(source, kernel.source)  # the user's alone, whatever the umask
        return [gxx, "-std=c++17", "-O3", "-fPIC", "-shared", "-fopenmp", *flags, str(source), "-o", output]

    return toolchain.build_once(path, command, f"the C++ kernel {kernel.name} ({kernel.template})", CppBuildError)


_functions: dict[tuple[str, str, tuple[str, ...]], Any] = {}


def function(kernel: KernelSource, flags: tuple[str, ...]) -> Any:
    """``kernel``'s C function (a ctypes function), from its library, built on first use."""
    key = (kernel.source_hash, kernel.name, flags)
    if key not in _functions:
        _functions[key] = getattr(ctypes.CDLL(str(build(kernel, flags))), kernel.name)
    return _functions[key]
