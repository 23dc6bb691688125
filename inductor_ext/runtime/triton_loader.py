"""Loads a rendered Triton module from a file: Triton reads kernel source with inspect."""

from __future__ import annotations

import importlib.util
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
    spec = importlib.util.spec_from_file_location(f"inductor_ext_kernels.{key}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    _loaded[key] = module
    return module


def load_kernel(ks: KernelSource) -> Any:
    """The ``@triton.jit`` function named by ``ks``."""
    return getattr(load_module(ks), ks.name)
