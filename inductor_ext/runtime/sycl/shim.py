"""The C++ host shim (``shim.cpp``): built once with the system g++, loaded with ctypes.

The shim is compiled against the wheel's SYCL headers and linked to its ``libsycl.so`` (rpath to
the wheel's lib folder), and cached under ``toolchain.tool_cache_dir()/sycl_shim/<key>/`` where the
key hashes the shim source, the wheel version and the compiler, so a new wheel or an edited shim
rebuilds it and nothing else does. ~10 s the first time, a dlopen afterwards.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
from pathlib import Path

from inductor_ext.runtime import toolchain
from inductor_ext.runtime.sycl import wheels as wheels_mod

SOURCE = Path(__file__).with_name("shim.cpp")
ABI_VERSION = 2

_P, _INT, _SIZE = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
_PP, _STRS = ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_char_p)

# name -> (argtypes, restype) of every shim entry point
SIGNATURES = {
    "ext_sycl_abi_version": ([], _INT),
    "ext_sycl_free": ([_P], None),
    "ext_sycl_open_device": ([ctypes.c_char_p, ctypes.c_char_p, _PP, _PP], _INT),
    "ext_sycl_borrow_queue": ([_P, _PP, _PP], _INT),
    "ext_sycl_release_queue": ([_P], None),
    "ext_sycl_device_info": ([_P, _PP, _PP], _INT),
    "ext_sycl_build": ([_P, ctypes.c_char_p, _INT, _STRS, _STRS, _INT, _STRS, _INT, _STRS, _PP, _PP, _PP], _INT),
    "ext_sycl_release_bundle": ([_P], None),
    "ext_sycl_get_kernel": ([_P, ctypes.c_char_p, _PP, _PP], _INT),
    "ext_sycl_release_kernel": ([_P], None),
    "ext_sycl_bundle_image": ([_P, _INT, ctypes.POINTER(_INT), _PP, ctypes.POINTER(_SIZE), _PP], _INT),
    "ext_sycl_kernel_max_work_group": ([_P, _P, ctypes.POINTER(_SIZE), _PP], _INT),
    "ext_sycl_launch": ([_P, _P, _INT, ctypes.POINTER(_SIZE), ctypes.POINTER(_SIZE), _INT, ctypes.POINTER(_INT),
                         _PP, ctypes.POINTER(_SIZE), _INT, _PP], _INT),
    "ext_sycl_wait": ([_P, _PP], _INT),
}


class ShimBuildError(RuntimeError):
    """g++ could not build the SYCL host shim; the message holds its output."""


def compile_command(gxx: str, wheels: wheels_mod.SyclWheels, output: str) -> list[str]:
    return [gxx, "-std=c++17", "-O2", "-fPIC", "-shared", "-w", "-DSYCL_DISABLE_FSYCL_SYCLHPP_WARNING",
            str(SOURCE), f"-I{wheels.include_dir}", f"-L{wheels.lib_dir}", "-lsycl",
            f"-Wl,-rpath,{wheels.lib_dir}", "-o", output]


def shim_path(wheels: wheels_mod.SyclWheels) -> Path:
    """Where the shim for these wheels lives (built or not)."""
    gxx = toolchain.require(toolchain.gxx(), "a C++ compiler (g++)", "install g++ (apt-get install g++)")
    key = hashlib.sha256("\0".join([SOURCE.read_text(), wheels.version, str(wheels.lib_dir),
                                    toolchain.compiler_identity(gxx)]).encode()).hexdigest()[:16]
    return toolchain.tool_cache_dir() / "sycl_shim" / key / "libinductor_ext_sycl_shim.so"


def build(wheels: wheels_mod.SyclWheels) -> Path:
    """The shim library for these wheels, built now if it is not cached yet."""
    gxx = toolchain.require(toolchain.gxx(), "a C++ compiler (g++)", "install g++ (apt-get install g++)")
    return toolchain.build_once(shim_path(wheels), lambda out: compile_command(gxx, wheels, out),
                                "the SYCL host shim", ShimBuildError)


@functools.cache
def load() -> ctypes.CDLL:
    """The shim, loaded (built first if needed) with the SYCL environment configured."""
    wheels = wheels_mod.find()
    if wheels is None:
        raise toolchain.ToolchainMissing(wheels_mod.missing() or "Intel's SYCL runtime is not installed")
    wheels_mod.configure_environment(wheels)
    lib = ctypes.CDLL(str(build(wheels)))
    for name, (argtypes, restype) in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, restype
    if lib.ext_sycl_abi_version() != ABI_VERSION:
        raise ShimBuildError(f"the cached SYCL shim speaks ABI {lib.ext_sycl_abi_version()}, expected {ABI_VERSION}")
    return lib


def take_string(lib: ctypes.CDLL, pointer: ctypes.c_void_p) -> str:
    """A string the shim malloc'd, freed here."""
    if not pointer.value:
        return ""
    text = ctypes.string_at(pointer.value).decode(errors="replace")
    lib.ext_sycl_free(pointer)
    return text
