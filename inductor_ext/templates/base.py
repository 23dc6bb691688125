"""What every template family shares: the rendered kernel and the problem it was rendered for.

The family protocol itself is described in ``templates/family.py``; the targets a family may
claim are those of ``inductor_ext/targets``.
"""

from __future__ import annotations

import hashlib
import inspect
from dataclasses import dataclass
from types import ModuleType

from inductor_ext.runtime.kernel_source import KernelSource  # noqa: F401  (what render() returns)


def module_source_hash(module: ModuleType) -> str:
    """Hash of a template module's own source: part of every autotune cache key."""
    return hashlib.sha256(inspect.getsource(module).encode()).hexdigest()[:16]


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
