"""What every template family shares: the rendered kernel and the problem it was rendered for.

A template family is one module (one DSL x one op family) exposing
``render(problem, config) -> KernelSource``, ``configs(problem, target)``, ``TARGETS`` and
``supports(problem) -> str | None`` (a reason when it does not).
"""

from __future__ import annotations

import hashlib
import inspect
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

# Targets a template may claim, each only once it passes tier I (see design.md).
KNOWN_TARGETS = ("sm_90a", "sm_100a", "gfx950", "gfx1250", "mps", "xpu", "cpu")


@dataclass(frozen=True)
class KernelSource:
    """A generated kernel: a whole Python module text plus how to launch it."""

    name: str  # the kernel function's name inside ``source``
    source: str  # module text; Triton needs kernels to live in a .py file
    template: str  # template family, e.g. "triton.gemm"
    config: dict[str, Any]  # the tunable parameters this source was rendered with
    constexprs: dict[str, Any] = field(default_factory=dict)  # values for tl.constexpr params
    signature: dict[str, str] = field(default_factory=dict)  # Triton signature for AOT compiles
    launch: dict[str, Any] = field(default_factory=dict)  # num_warps, num_stages, grid, threadgroup, ...
    language: str = "triton"  # what ``source`` is written in: triton, msl, sycl, flydsl, cutedsl

    @property
    def source_hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]


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
