"""Places ext passes at their Inductor stage: one CustomGraphPass slot per stage, passes in order."""

from __future__ import annotations

import hashlib
import importlib
from typing import Any

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

from inductor_ext.config import ExtConfig
from inductor_ext.lowering.pass_base import STAGES, ExtGraphPass

# Modules holding one pass each, imported on first use; each registers its pass class.
PASS_MODULES: tuple[str, ...] = ("inductor_ext.lowering.nvfp4_alpha_fold", "inductor_ext.comms_passes.fsdp_overlap")

_registry: dict[str, type[ExtGraphPass]] = {}


def register_pass(cls: type[ExtGraphPass]) -> type[ExtGraphPass]:
    """Class decorator: makes a pass selectable by name in presets and ``options={"passes": ...}``."""
    if cls.name in _registry and _registry[cls.name] is not cls:
        raise ValueError(f"two passes are named {cls.name!r}: {_registry[cls.name]} and {cls}")
    _registry[cls.name] = cls
    return cls

# Inductor's config slot for each stage.
STAGE_SLOTS = {
    "pre_grad": "pre_grad_custom_pass",
    "joint_pre": "joint_custom_pre_pass",
    "joint_post": "joint_custom_post_pass",
    "post_grad_pre": "post_grad_custom_pre_pass",
    "post_grad_post": "post_grad_custom_post_pass",
}


def available_passes() -> dict[str, type[ExtGraphPass]]:
    for module_name in PASS_MODULES:
        importlib.import_module(module_name)
    return dict(_registry)


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
    return {s: StagePasses(s, by_stage[s]) for s in STAGES if s in by_stage}


def pass_patches(config: ExtConfig) -> dict[str, Any]:
    return {STAGE_SLOTS[stage]: group for stage, group in build_stages(config).items()}
