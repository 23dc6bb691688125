"""Loads a rendered Triton module from a file: Triton reads kernel source with inspect.

The module runs the source text ext rendered, compiled here: never bytecode from a
``__pycache__`` beside the file (the import system would trust a ``.pyc`` whose header matches
the file's size and time, and write one too). The file is there for ``inspect`` alone.
"""

from __future__ import annotations

import linecache
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from inductor_ext.runtime.kernel_source import KernelSource
from inductor_ext.runtime.private_files import write_if_different
from inductor_ext.runtime.toolchain import user_cache_dir

_loaded: dict[str, ModuleType] = {}


def kernel_dir() -> Path:
    """Where rendered kernel modules are written to be imported: ``$INDUCTOR_EXT_KERNEL_DIR``, else
    ``<user cache>/inductor_ext/kernels``; private to this user (never one world-writable path
    in the temp folder, where another user could plant a module under the name ext imports)."""
    return user_cache_dir("kernels", "INDUCTOR_EXT_KERNEL_DIR")


def load_module(ks: KernelSource) -> ModuleType:
    """Import ``ks.source`` as a module. The file is named by the source's hash and holds exactly
    that source before it is imported (whatever was there under that name is replaced)."""
    key = f"{ks.name}_{ks.source_hash}"
    if key in _loaded:
        return _loaded[key]
    path = write_if_different(kernel_dir() / f"{key}.py", ks.source)
    _loaded[key] = module_from_source(f"inductor_ext_kernels.{key}", path, ks.source)
    return _loaded[key]


def module_from_source(name: str, path: Path, source: str) -> ModuleType:
    """A module ``name`` made by running ``source`` (what ext wrote to ``path``), registered in
    ``sys.modules``. No bytecode is read or written; ``inspect.getsource`` of its functions reads
    ``source`` itself (linecache, under ``path``), not whatever the file holds by then."""
    linecache.cache[str(path)] = (len(source), None, source.splitlines(keepends=True), str(path))
    module = ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    try:
        exec(compile(source, str(path), "exec", dont_inherit=True), module.__dict__)  # noqa: S102 - ext's own source
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_kernel(ks: KernelSource) -> Any:
    """The ``@triton.jit`` function named by ``ks``."""
    return getattr(load_module(ks), ks.name)
