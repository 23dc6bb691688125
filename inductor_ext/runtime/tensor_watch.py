"""Whether tensors still have the version counter and data pointer they had, checked in one C++
loop (``tensor_watch.cpp``), for the per-call weight check of a frozen graph.

At decode, that check runs every step on every frozen weight, and the weights' metadata is cold
(a step streams the weights themselves through the caches): read from Python, each tensor is a
chain of dependent cache misses (its object, TensorImpl, version counter, storage) taken one
tensor after another. The C++ loop issues those of all tensors together.

The module is a CPython extension built once per machine with the system g++ against the torch
wheel's c10 headers (~1.3-3 s) and cached under ``toolchain.tool_cache_dir()/tensor_watch/<key>/``,
the key hashing the source, the torch build, the Python build and the compiler. Without a
compiler, :func:`watch` returns None and the caller checks in Python, as before; one debug line
says why. A frozen graph does not wait for that build (``wait=False``): on a machine's first
compile the module is built in a background thread, beside the compile, and the graph checks its
weights in Python until it is there.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import logging
import sysconfig
from pathlib import Path
from types import ModuleType
from typing import Any, Sequence

import torch

from inductor_ext.runtime import background_builds, toolchain
from inductor_ext.runtime.private_files import holds_what_was_built

log = logging.getLogger("inductor_ext")

SOURCE = Path(__file__).with_name("tensor_watch.cpp")
MODULE = "_ext_tensor_watch"


def _torch_dirs() -> tuple[Path, Path]:
    root = Path(torch.__file__).parent
    return root / "include", root / "lib"


def compile_command(gxx: str, output: str) -> list[str]:
    include, lib = _torch_dirs()
    return [gxx, "-std=c++20", "-O2", "-fPIC", "-shared", "-w", str(SOURCE), f"-I{include}",
            f"-I{sysconfig.get_paths()['include']}", f"-L{lib}", "-lc10", f"-Wl,-rpath,{lib}", "-o", output]


def library_path(gxx: str) -> Path:
    """Where the module built by ``gxx`` for this torch and Python lives (built or not)."""
    parts = [SOURCE.read_text(), torch.__version__, str(_torch_dirs()[1]), sysconfig.get_config_var("EXT_SUFFIX") or "",
             sysconfig.get_paths()["include"], toolchain.compiler_identity(gxx)]
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    return toolchain.tool_cache_dir() / "tensor_watch" / key / f"{MODULE}.so"


def build() -> Path:
    """The module, built now if it is not cached yet; ToolchainMissing without a C++ compiler."""
    gxx = toolchain.require(toolchain.gxx(), "a C++ compiler (g++)", "install g++ (apt-get install g++)")
    return toolchain.build_once(library_path(gxx), lambda out: compile_command(gxx, out), "the C++ weight check")


@functools.cache
def load() -> ModuleType | None:
    """The compiled module, or None (logged once) when it cannot be built or loaded here."""
    try:
        path = build()
        loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
        spec = importlib.util.spec_from_file_location(MODULE, str(path), loader=loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        return module
    except Exception as e:  # noqa: BLE001 - any failure means: check in Python
        log.debug("ext: the C++ weight check is not available (%s); frozen graphs check their weights in Python", e)
        return None


_building: list[Any] = []  # the background build, once per process


def _at_hand() -> bool:
    """Whether ``load()`` answers now without a build: loaded (or found unavailable) already, no
    compiler to build with, or the module built on this machine before."""
    if load.cache_info().currsize:
        return True
    gxx = toolchain.gxx()
    return gxx is None or holds_what_was_built(library_path(gxx))


def building() -> bool:
    """Whether the background build started by ``watch(..., wait=False)`` is still running."""
    return bool(_building) and _building[0].is_alive()


def build_ahead() -> None:
    """Start building the module in the background unless it is at hand or being built: a
    compile that will watch frozen weights calls this first, so the build runs beside it."""
    if not _building and not _at_hand():
        # at the lowest priority: nothing waits for it, and on a machine's first compile it
        # would take a core from the compile itself and from the vector-ISA probe's builds
        _building.append(background_builds.start(load, "ext-tensor-watch-build", lowest=True))


def _module(wait: bool) -> ModuleType | None:
    # asked on each call of a frozen graph while the build runs: that case answers first, and
    # cheaply (finding the built file reads and hashes the source)
    if building():
        if not wait:
            return None
        _building[0].join()
    if wait or _at_hand():
        return load()
    build_ahead()
    return None if building() else load()


class Watch:
    """Tensors at ``indices`` of a pool (a call's arguments, or a list of attributes), watched."""

    def __init__(self, handle: Any, module: ModuleType) -> None:
        self._handle, self._unchanged = handle, module.unchanged

    def unchanged(self, pool: Sequence[Any]) -> bool:
        """True when each watched position holds the same tensor object with the same version and
        data pointer as when watched. False means: look closer (something differs, or could not
        be read)."""
        return self._unchanged(pool, self._handle)


def watch(pool: Sequence[Any], indices: Sequence[int], wait: bool = True) -> Watch | None:
    """A watch on ``pool[i]`` for ``i`` in ``indices`` (pool a tuple or list), or None when the
    C++ check is unavailable or some tensor is one it cannot read (no storage or version counter).
    Without ``wait``, also None while the module is being built (``building()``), the build
    started in the background where it is not built yet."""
    module = _module(wait)
    if module is None or not isinstance(pool, (tuple, list)):
        return None
    tensors = [pool[i] for i in indices]
    if not all(type(t) in (torch.Tensor, torch.nn.Parameter) for t in tensors):
        return None  # subclasses (DTensor, FakeTensor) keep their data elsewhere
    handle = module.watch(pool, list(indices), [t._cdata for t in tensors])
    return None if handle is None else Watch(handle, module)
