"""The graph-pass registry, and where each pass runs: one CustomGraphPass slot per stage.

Passes are found through the ``inductor_ext.passes`` entry-point group (``pyproject.toml``:
``name = "module:PassClass"``), so a pass in any package, ours or a user's, is one file plus
one line of metadata; :func:`register_pass` adds one at run time. Each pass module owns its
settings: one that takes any registers its option with ``config.register_option`` at import.
"""

from __future__ import annotations

import hashlib
from importlib.metadata import entry_points
from typing import Any

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

from inductor_ext.config import ExtConfig
from inductor_ext.lowering.passes.base import STAGES, ExtGraphPass

ENTRY_POINT_GROUP = "inductor_ext.passes"

_registry: dict[str, type[ExtGraphPass]] = {}
_loaded = False


def register_pass(cls: type[ExtGraphPass]) -> type[ExtGraphPass]:
    """Class decorator: makes a pass selectable by name in presets and ``options={"passes": ...}``."""
    if cls.name in _registry and _registry[cls.name] is not cls:
        raise ValueError(f"two passes are named {cls.name!r}: {_registry[cls.name]} and {cls}")
    _registry[cls.name] = cls
    return cls


def available_passes() -> dict[str, type[ExtGraphPass]]:
    """Every pass by name: the entry points (loaded once), then run-time registrations."""
    global _loaded
    if not _loaded:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            cls = ep.load()
            if getattr(cls, "name", None) != ep.name:
                raise ValueError(f"entry point {ep.name!r} = {ep.value!r} names a pass called {getattr(cls, 'name', None)!r}")
            register_pass(cls)
        _loaded = True
    return dict(_registry)


# Inductor's config slot for each stage.
STAGE_SLOTS = {
    "pre_grad": "pre_grad_custom_pass",
    "joint_pre": "joint_custom_pre_pass",
    "joint_post": "joint_custom_post_pass",
    "post_grad_pre": "post_grad_custom_pre_pass",
    "post_grad_post": "post_grad_custom_post_pass",
}


class StagePasses(CustomGraphPass):
    """The passes of one stage, run in order; its uuid combines theirs."""

    def __init__(self, stage: str, passes: list[ExtGraphPass]) -> None:
        self.stage = stage
        self.passes = passes

    def __call__(self, graph: torch.fx.Graph) -> None:
        for p in self.passes:
            p(graph)

    def uuid(self) -> str:
        return hashlib.sha256("|".join([self.stage, *(p.uuid() for p in self.passes)]).encode()).hexdigest()


def build_stages(config: ExtConfig) -> dict[str, StagePasses]:
    known = available_passes()
    by_stage: dict[str, list[ExtGraphPass]] = {}
    for name in config.passes:
        p = known[name](config)
        by_stage.setdefault(p.stage, []).append(p)
    for name, cls in known.items():  # after the named ones of their stage
        if cls.default_on and name not in config.passes and cls.enabled(config):
            by_stage.setdefault(cls.stage, []).append(cls(config))
    return {s: StagePasses(s, by_stage[s]) for s in STAGES if s in by_stage}


def pass_patches(config: ExtConfig) -> dict[str, Any]:
    """The stage slots, and the Inductor config the installed passes ask for."""
    stages = build_stages(config)
    patches: dict[str, Any] = {}
    for group in stages.values():
        for p in group.passes:
            patches.update(p.inductor_patches())
    patches.update({STAGE_SLOTS[stage]: group for stage, group in stages.items()})
    return patches
