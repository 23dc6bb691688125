"""Base class of every ext graph pass: a CustomGraphPass whose uuid keeps Inductor's caches honest.

The uuid hashes the pass module's source (one pass per file), the ExtConfig, the preset and the
distributed rank, so editing a pass or changing an option invalidates the FX graph cache, and
nothing else does.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
from typing import ClassVar

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

from inductor_ext import tracing
from inductor_ext.config import ExtConfig
from inductor_ext.logs import passes_log as log

STAGES = ("pre_grad", "joint_pre", "joint_post", "post_grad_pre", "post_grad_post")

# What ran in this process: (pass name, stage, rewrites). The demo and tests read it.
applied: list[tuple[str, str, int]] = []


def current_rank() -> int:
    dist = torch.distributed
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class ExtGraphPass(CustomGraphPass):
    """Subclasses set ``name`` and ``stage`` and implement ``run(graph) -> rewrites``."""

    name: ClassVar[str]
    stage: ClassVar[str]
    # Installed whether or not ``options["passes"]`` names it, wherever ``enabled`` agrees (after the
    # named passes of its stage); a safety check such as collective_check, which its own option
    # turns off.
    default_on: ClassVar[bool] = False

    @classmethod
    def enabled(cls, config: ExtConfig) -> bool:
        """Whether a ``default_on`` pass installs itself for ``config``."""
        return True

    def __init__(self, config: ExtConfig) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"{type(self).__name__}.stage={self.stage!r} is not one of {STAGES}")
        self.config = config

    def run(self, graph: torch.fx.Graph) -> int:
        raise NotImplementedError

    def inductor_patches(self) -> dict[str, object]:
        """Inductor config this pass's result depends on (e.g. a scheduler pass that would undo an
        order it planned); merged into the compile's patches, below the user's explicit ones."""
        return {}

    def __call__(self, graph: torch.fx.Graph) -> None:
        rewrites = self.run(graph)
        applied.append((self.name, self.stage, rewrites))
        log.debug("ext pass %s (%s): %d rewrites", self.name, self.stage, rewrites)
        tracing.graph_pass(self.name, self.stage, rewrites)  # TORCH_TRACE / tlparse

    def uuid(self) -> str:
        # the source of every module its class and the classes it inherits from live in: a pass
        # that reuses another's checks (prefill_attention_op) changes when they do
        modules = dict.fromkeys(sys.modules[c.__module__] for c in type(self).__mro__ if issubclass(c, ExtGraphPass))
        source = "\0".join(inspect.getsource(m) for m in modules)
        parts = (self.name, source, self.config.to_json(), self.config.preset, str(current_rank()))
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()
