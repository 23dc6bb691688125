"""A generated kernel as the runtime takes it: source text plus what launching it needs.

Templates render it (``render() -> KernelSource``); runtime compiles, caches and launches it.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from typing import Any

# File suffix of a kernel's source by its language (dumps, ``inductor-ext asm --out``).
SUFFIXES = {"triton": ".py", "cutedsl": ".py", "flydsl": ".py", "python": ".py", "msl": ".metal",
            "sycl": ".sycl.cpp", "cpp": ".cpp"}


@dataclass(frozen=True)
class KernelSource:
    """A generated kernel: its source text (a whole module for Triton) plus how to launch it."""

    name: str  # the kernel function's name inside ``source``
    source: str  # kernel text; Triton needs a whole module (kernels live in a .py file)
    template: str  # template family, e.g. "triton.gemm"
    config: dict[str, Any]  # the tunable parameters this source was rendered with
    constexprs: dict[str, Any] = field(default_factory=dict)  # values for tl.constexpr params
    signature: dict[str, str] = field(default_factory=dict)  # Triton signature for AOT compiles
    launch: dict[str, Any] = field(default_factory=dict)  # num_warps, num_stages, grid, threadgroup, ...
    language: str = "triton"  # what ``source`` is written in: triton, msl, sycl, flydsl, cutedsl

    @property
    def suffix(self) -> str:
        return SUFFIXES.get(self.language, ".txt")

    @functools.cached_property
    def source_hash(self) -> str:
        """Hash of ``source``, taken once per kernel (a launcher asks it on every call)."""
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]
