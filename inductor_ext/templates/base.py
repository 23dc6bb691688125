"""What every template family shares: the rendered kernel and the problem it was rendered for.

The family protocol itself is described in ``templates/family.py``; the targets a family may
claim are those of ``inductor_ext/targets``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import inspect
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

from inductor_ext.runtime.kernel_source import KernelSource  # noqa: F401  (what render() returns)


def module_source_hash(module: ModuleType) -> str:
    """Hash of a template module's own source and of every resource file it read
    (``resource_text``): part of every autotune cache key."""
    source = inspect.getsource(module)
    read = _resources.get(module.__name__, {})
    if read:  # a module that reads none keeps the hash of its source alone
        source += "".join(f"\0{name}\0{text}" for name, text in sorted(read.items()))
    return hashlib.sha256(source.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=1024)
def rendered(render: Callable[..., KernelSource], problem: Any, config: Any, target: str) -> KernelSource:
    """``render(problem, config, target)``, once per (family's render, problem, config, target) in a
    process: an extern family's ``call()`` runs on every call of the compiled graph, and rendering
    its kernel (and hashing the source to find it loaded) each time cost ~33 us. Problems and
    configs are frozen dataclasses, so they key the cache."""
    return render(problem, config, target)


# Resource files (the text of each, by name) read by each template module (by its name); what
# module_source_hash adds to the module's source.
_resources: dict[str, dict[str, str]] = {}


def resource_text(module_name: str, name: str) -> str:
    """The text of the package file ``name`` beside module ``module_name`` (e.g. a kernel's C++ in
    ``flash_attention.cpp``), through ``importlib.resources`` so an installed wheel finds it too
    (``[tool.setuptools.package-data]``). The text is hashed with the module's source into every
    cache key that names the module (``module_source_hash``), so an edit to the file misses the
    cache as an edit to the module does: call it when the module is imported (a module-level
    constant), before any key is made."""
    package = module_name.rpartition(".")[0]
    text = importlib.resources.files(package).joinpath(name).read_text(encoding="utf-8")
    _resources.setdefault(module_name, {})[name] = text
    return text


@dataclass(frozen=True)
class Tile:
    """A GEMM tiling as candidate policies speak it; each family maps it to its own config
    with ``config_from_tile(tile)``, or returns None when it cannot express it."""

    block_m: int
    block_n: int
    block_k: int
    num_stages: int = 3
    num_warps: int = 4
    split_k: int = 1
    swap_ab: bool = False  # compute C^T = B^T A^T: puts a tiny M on the wide MMA dimension
