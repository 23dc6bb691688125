"""MSL -> shared library, with g++ and the shim headers in ``include/``.

Each library is cached on disk under ``tool_cache_dir()/metal_cpu/`` by a hash of everything
that decides its machine code (the translation unit, the shim headers, the PyTorch version whose
``c10/metal`` headers it includes, the compiler and its flags), so a kernel compiles once per
machine. Writes are atomic; a half-written file is never loaded.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from inductor_ext.runtime import toolchain
from inductor_ext.targets.apple import THREADGROUP_MEMORY_BYTES

SHIM_DIR = Path(__file__).with_name("include")

# C++20: Metal 4's tensor ops take a descriptor as a template argument; -fsingle-precision-constant:
# MSL floating literals are float; -fsigned-char: MSL char is signed; no exceptions (fibers never
# unwind); -w: MSL idioms warn in C++ (ignored attributes).
FLAGS = ("-std=c++20", "-O2", "-fPIC", "-shared", "-w", "-fsingle-precision-constant", "-fsigned-char",
         "-fno-exceptions", "-fno-rtti", "-fno-strict-aliasing", "-D__METAL__=1", "-D__METAL_VERSION__=310", "-D__HAVE_TENSOR__=1",
         f"-DMCPU_THREADGROUP_MEMORY_BYTES={THREADGROUP_MEMORY_BYTES}")


class MetalCompileError(RuntimeError):
    """g++ rejected the MSL (as C++ through the shim); the message carries g++'s text and the
    numbered source."""


def _swizzles(n: int) -> str:
    """Union members ``mcpu::swz<T, n, i...> xy;`` for every swizzle of an n-vector."""
    lines = []
    for names in ("xyzw"[:n], "rgba"[:n]):
        for length in (2, 3, 4):
            for combo in itertools.product(range(n), repeat=length):
                member = "".join(names[i] for i in combo)
                lines.append(f"mcpu::swz<T, {n}, {', '.join(map(str, combo))}> {member};")
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=None)
def _shim_text() -> dict[str, str]:
    files = {str(p.relative_to(SHIM_DIR)): p.read_text() for p in sorted(SHIM_DIR.rglob("*")) if p.is_file()}
    for n in (2, 3, 4):
        files[f"mcpu_swizzles_{n}.inc"] = _swizzles(n)
    return files


@functools.lru_cache(maxsize=None)
def shim_hash() -> str:
    h = hashlib.sha256()
    for name, text in sorted(_shim_text().items()):
        h.update(name.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()[:16]


def cache_root() -> Path:
    root = toolchain.tool_cache_dir() / "metal_cpu"
    root.mkdir(parents=True, exist_ok=True)
    return root


@functools.lru_cache(maxsize=None)
def include_dir() -> Path:
    """The shim headers (with generated swizzles) in a folder of their own, written once."""
    target = cache_root() / f"include-{shim_hash()}"
    if not target.is_dir():
        tmp = Path(tempfile.mkdtemp(prefix="include-", dir=cache_root()))
        for name, text in _shim_text().items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(text)
        try:
            os.rename(tmp, target)
        except OSError:  # another process won the race
            shutil.rmtree(tmp)
    return target


@functools.lru_cache(maxsize=None)
def torch_include_dir() -> Path:
    """The wheel's headers, holding ``c10/metal/*.h``, found without importing torch."""
    for d in toolchain.package_dirs("torch"):
        if (d / "include" / "c10" / "metal").is_dir():
            return d / "include"
    raise toolchain.ToolchainMissing("PyTorch's Metal headers (torch/include/c10/metal) were not found; "
                                     "install the torch wheel")


@functools.lru_cache(maxsize=None)
def compiler() -> tuple[str, str]:
    """(path, version) of the C++ compiler."""
    cxx = toolchain.require(toolchain.gxx(), "a C++ compiler (g++)",
                            "install g++ (Debian/Ubuntu: apt-get install g++) or set $CXX")
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return cxx, version


def _torch_version() -> str:
    import torch

    return torch.__version__


def library_key(unit: str, defines: tuple[str, ...] = ()) -> str:
    h = hashlib.sha256()
    for part in (unit, shim_hash(), _torch_version(), compiler()[1], " ".join(FLAGS + defines)):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:24]


def _numbered(source: str) -> str:
    return "\n".join(f"{i:5d} | {line}" for i, line in enumerate(source.splitlines(), 1))


def _compile_errors(stderr: str, unit_path: str) -> str:
    """g++'s errors with the temporary file name shortened; notes about the shim trimmed."""
    lines = [ln.replace(unit_path, "kernel.metal") for ln in stderr.splitlines()]
    keep = [ln for ln in lines if "error" in ln or ln.startswith("kernel.metal") or ln.startswith(" ")]
    return "\n".join((keep or lines)[:60])


def build(unit: str, *, defines: tuple[str, ...] = (), original: str | None = None) -> Path:
    """The shared library for translation unit ``unit``, compiled now or found in the cache.

    ``defines`` are extra ``-D`` flags (tests use them to build deliberately broken executors);
    ``original`` is the user's source, shown in compile errors.
    """
    out = cache_root() / f"{library_key(unit, defines)}.so"
    if out.exists():
        return out
    cxx, _ = compiler()
    with tempfile.TemporaryDirectory(prefix="mcpu_build_", dir=cache_root()) as d:
        src = Path(d) / "kernel.metal"
        src.write_text(unit)
        tmp_out = Path(d) / "kernel.so"
        cmd = [cxx, *FLAGS, *(f"-D{x}" for x in defines), f"-I{include_dir()}", f"-I{torch_include_dir()}",
               "-include", "mcpu_prelude.h", "-x", "c++", str(src), "-o", str(tmp_out)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise MetalCompileError(
                "g++ could not compile this MSL for the Metal-on-CPU executor (MSL outside the subset the "
                f"executor models, or an error in the kernel):\n{_compile_errors(proc.stderr, str(src))}\n"
                f"---- source ----\n{_numbered(original if original is not None else unit)}")
        os.replace(tmp_out, out)
    return out
