"""The graph-pass registry, and where each pass runs: one CustomGraphPass slot per stage.

Passes are found like ops and template families, by listing where they live, so a new in-tree
pass is one new file (plus the preset line that turns it on) and needs no reinstall:

- every module of this folder that defines a pass (an :class:`ExtGraphPass` subclass with a
  ``name``) holds one pass, named as the module (``rms_norm_op.py`` -> ``"rms_norm_op"``);
  ``base.py`` and ``op_offer.py`` define none and are the shared pieces;
- the passes of ``comms_passes/``, which live beside the collectives machinery they drive, in the
  layer above this one: that package names them in its ``PASSES`` (pass name -> module), read here
  by name when the registry is first asked, as an entry point would be (a static import would
  invert the layers, and listing that folder would import its planners and tooling, which hold
  no pass);
- passes of other installed packages through the ``inductor_ext.passes`` entry-point group
  (``name = "module:PassClass"`` in their ``pyproject.toml``); an entry point naming a module of
  ``inductor_ext`` (stale metadata of an older install of ext) is not read: ext's own come from
  its files.

:func:`register_pass` adds one at run time. Modules are imported when :func:`available_passes`
is first called (``presets.resolve``, at the first compile), not when this package is. Each pass
module owns its settings: one that takes any registers its option with
``config.register_option`` at import.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import pkgutil
from dataclasses import dataclass
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

from inductor_ext.config import ExtConfig
from inductor_ext.logs import passes_log as log
from inductor_ext.lowering.passes.base import STAGES, ExtGraphPass

ENTRY_POINT_GROUP = "inductor_ext.passes"
# The in-tree package outside this folder whose ``PASSES`` names its pass modules (see above).
_DECLARING_PACKAGES = ("inductor_ext.comms_passes",)

_registry: dict[str, type[ExtGraphPass]] = {}


class PassError(RuntimeError):
    """A pass module or entry point that does not hold the pass it should: an error in the code."""


@dataclass(frozen=True)
class BrokenEntryPoint:
    """An installed distribution's entry point in the group that gives no pass, and why."""

    name: str
    value: str
    distribution: str
    reason: str

    def __str__(self) -> str:
        return (f"entry point {self.name!r} = {self.value!r} of distribution {self.distribution!r} "
                f"(group {ENTRY_POINT_GROUP!r}) {self.reason}")


def register_pass(cls: type[ExtGraphPass]) -> type[ExtGraphPass]:
    """Class decorator: makes a pass selectable by name in presets and ``options={"passes": ...}``."""
    if cls.name in _registry and _registry[cls.name] is not cls:
        raise ValueError(f"two passes are named {cls.name!r}: {_registry[cls.name]} and {cls}")
    _registry[cls.name] = cls
    return cls


def available_passes() -> dict[str, type[ExtGraphPass]]:
    """Every pass by name: ext's own (this folder, ``comms_passes``), those of installed
    packages' entry points, then run-time registrations; found once per process."""
    return {**_scan()[0], **_registry}


def broken_entry_points() -> tuple[BrokenEntryPoint, ...]:
    """The entry points of the group that gave no pass (their module raised on import, the
    object is not a pass, its name is not the entry point's, or ext has a pass of that name)."""
    return _scan()[1]


def pass_module_names() -> list[str]:
    """The modules of this folder, by dotted name, sorted (helper modules included: they define
    no pass, :func:`_module_pass` tells)."""
    return sorted(f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__) if not m.ispkg)


def _declared_modules() -> dict[str, str]:
    """Pass name -> module, from the ``PASSES`` of each package in ``_DECLARING_PACKAGES``."""
    found: dict[str, str] = {}
    for package in _DECLARING_PACKAGES:
        for name, module in importlib.import_module(package).PASSES.items():
            found[name] = f"{package}.{module}"
    return found


def _defined_passes(module: ModuleType) -> list[type[ExtGraphPass]]:
    """The passes ``module`` defines itself (not those it imports), each with a ``name``."""
    return [cls for cls in vars(module).values()
            if inspect.isclass(cls) and issubclass(cls, ExtGraphPass) and cls.__module__ == module.__name__
            and isinstance(vars(cls).get("name"), str)]


def _module_pass(module: ModuleType, name: str) -> type[ExtGraphPass] | None:
    """The pass named ``name`` that ``module`` defines; None when it defines none (a helper);
    a :class:`PassError` when its passes are named otherwise."""
    defined = _defined_passes(module)
    match = [cls for cls in defined if cls.name == name]
    if defined and not match:
        raise PassError(f"{module.__name__} defines pass(es) {', '.join(repr(c.name) for c in defined)}; "
                        f"it is found as the pass {name!r}: name its pass {name!r} (a pass is named as "
                        "its module in lowering/passes/, as listed in PASSES elsewhere)")
    return match[0] if match else None


def _ours(value: str) -> bool:
    return value.split(":", 1)[0].split(".", 1)[0] == "inductor_ext"


def _entry_point_passes(found: dict[str, type[ExtGraphPass]]
                        ) -> tuple[dict[str, type[ExtGraphPass]], list[BrokenEntryPoint]]:
    """The passes of other installed packages' entry points; the broken ones, with why."""
    loaded: dict[str, type[ExtGraphPass]] = {}
    broken: list[BrokenEntryPoint] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if _ours(ep.value):
            continue
        dist = ep.dist.name if getattr(ep, "dist", None) is not None else "unknown"

        def fail(reason: str) -> None:
            broken.append(BrokenEntryPoint(ep.name, ep.value, dist, reason))  # noqa: B023 (called at once)
            log.warning("ext pass registry: %s", broken[-1])

        try:
            cls = ep.load()
        except Exception as e:  # whatever the package's import raises: reported, not fatal to others
            fail(f"failed to load: {type(e).__name__}: {e}")
            continue
        if not (inspect.isclass(cls) and issubclass(cls, ExtGraphPass)):
            fail(f"names {cls!r}, which is not a pass (a subclass of inductor_ext's ExtGraphPass)")
        elif getattr(cls, "name", None) != ep.name:
            fail(f"names a pass called {getattr(cls, 'name', None)!r}; the entry point's name must be "
                 "the pass's name")
        elif ep.name in found or (ep.name in loaded and loaded[ep.name] is not cls):
            fail(f"names a second pass called {ep.name!r} (ext's or another package's keeps the name)")
        else:
            loaded[ep.name] = cls
    return loaded, broken


@functools.cache
def _scan() -> tuple[dict[str, type[ExtGraphPass]], tuple[BrokenEntryPoint, ...]]:
    found: dict[str, type[ExtGraphPass]] = {}
    modules = {m.rpartition(".")[2]: m for m in pass_module_names()}
    for name, module_name in [*modules.items(), *_declared_modules().items()]:
        cls = _module_pass(importlib.import_module(module_name), name)
        if cls is None:
            continue
        if name in found:
            raise PassError(f"two passes are named {name!r}: {found[name]} and {cls}")
        found[name] = cls
    loaded, broken = _entry_point_passes(found)
    return dict(sorted({**found, **loaded}.items())), tuple(broken)


def unknown_pass(name: str) -> str:
    """Why ``name`` names no pass here: the passes that exist, where passes are found, and any
    entry point of the group that is installed but broken (the one named ``name`` first)."""
    known = sorted(available_passes())
    broken = broken_entry_points()
    own = [b for b in broken if b.name == name]
    if own:
        return f"pass {name!r} is not available: {'; '.join(map(str, own))}. Available: {', '.join(known) or 'none'}"
    lines = [f"unknown pass {name!r}; available: {', '.join(known) or 'none'}.",
             f"ext's passes are the modules of inductor_ext/lowering/passes/ (one pass per file, named as "
             f"the file); another package's pass needs an entry point in group {ENTRY_POINT_GROUP!r} of "
             f"its installed distribution, and none declares {name!r} (is the package installed, and "
             "reinstalled since the entry point was added?)"]
    lines += [f"broken: {b}" for b in broken]
    return "\n".join(lines)


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
