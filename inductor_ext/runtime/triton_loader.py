"""Loads a rendered Triton module from a file: Triton reads kernel source with inspect."""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from inductor_ext.runtime.kernel_source import KernelSource

_loaded: dict[str, ModuleType] = {}


def kernel_dir() -> Path:
    root = os.environ.get("INDUCTOR_EXT_KERNEL_DIR") or os.path.join(tempfile.gettempdir(), "inductor_ext_kernels")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def load_module(ks: KernelSource) -> ModuleType:
    """Import ``ks.source`` as a module (written once per source hash, atomically)."""
    key = f"{ks.name}_{ks.source_hash}"
    if key in _loaded:
        return _loaded[key]
    path = kernel_dir() / f"{key}.py"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(ks.source)
        os.replace(tmp, path)  # atomic: concurrent loaders never see half a file
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
