"""The target registry: every hardware target, datasheet and preset, from one module per vendor.

Vendor modules in this folder each expose ``VENDOR`` (a :class:`Vendor`); they are found by
listing the folder, so a new vendor is one new file. Callers ask capabilities
(``get("sm_90a").has(PDL)``), never name prefixes.
"""

from __future__ import annotations

import functools
import importlib
import logging
import pkgutil
from typing import Any

from inductor_ext.targets.base import (
    INTERPRETER, MX_MMA, NVFP4_MMA, NVMMH, PDL, TDM, TF32, Datasheet, Target, Vendor,
)

__all__ = [
    "Datasheet", "Target", "Vendor", "PDL", "TF32", "NVFP4_MMA", "MX_MMA", "TDM", "NVMMH", "INTERPRETER",
    "vendors", "all_targets", "get", "datasheets", "datasheet", "presets", "detect", "device_name",
    "triton_targets",
]

log = logging.getLogger("inductor_ext")


@functools.lru_cache(maxsize=None)
def vendors() -> tuple[Vendor, ...]:
    """Every vendor module's ``VENDOR``, in listing order (cpu first)."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        vendor = getattr(importlib.import_module(f"{__name__}.{info.name}"), "VENDOR", None)
        if isinstance(vendor, Vendor):
            found.append(vendor)
    return tuple(sorted(found, key=lambda v: (v.order, v.name)))


@functools.lru_cache(maxsize=None)
def all_targets() -> dict[str, Target]:
    out: dict[str, Target] = {}
    for vendor in vendors():
        for target in vendor.targets:
            if target.name in out:
                raise ValueError(f"target {target.name!r} is defined twice ({out[target.name].vendor}, {vendor.name})")
            out[target.name] = target
    return out


def get(name: str) -> Target:
    """The target called ``name``; a ValueError listing the known ones otherwise."""
    targets = all_targets()
    if name not in targets:
        raise ValueError(f"unknown target {name!r}; known: {', '.join(targets)}")
    return targets[name]


def has(name: str, capability: str) -> bool:
    """Whether target ``name`` (known or not) has ``capability``."""
    target = all_targets().get(name)
    return target is not None and target.has(capability)


def vendor(name: str) -> str | None:
    """The vendor of target ``name`` (None for an unknown name)."""
    target = all_targets().get(name)
    return target.vendor if target is not None else None


def triton_targets() -> dict[str, Target]:
    """Targets Triton compiles for without the device (the ISA gates' targets)."""
    return {name: t for name, t in all_targets().items() if t.triton is not None}


@functools.lru_cache(maxsize=None)
def datasheets() -> dict[str, Datasheet]:
    out: dict[str, Datasheet] = {}
    for vendor in vendors():
        out.update(vendor.datasheets)
    return out


def datasheet(target: str) -> Datasheet | None:
    """The reference part's datasheet for ``target`` (None when it has none)."""
    t = all_targets().get(target)
    return datasheets().get(t.datasheet) if t is not None and t.datasheet else None


@functools.lru_cache(maxsize=None)
def presets() -> dict[str, dict[str, Any]]:
    """Preset name -> its data, with ``device_type`` filled in from its target; "aten" last."""
    out: dict[str, dict[str, Any]] = {}
    for vendor in vendors():
        for name, data in vendor.presets.items():
            if name in out:
                raise ValueError(f"preset {name!r} is defined twice")
            out[name] = {**data, "device_type": get(data["target"]).device_type}
    if "aten" in out:
        out["aten"] = out.pop("aten")
    return out


def detect(device: Any) -> str:
    """The preset for a torch device; 'aten' (with one log line saying why) when ext has none."""
    for vendor in vendors():
        found = vendor.detect(device)
        if found is not None:
            preset, why = found
            if preset == "aten":
                log.info("ext: no preset for %s: %s; using 'aten'", device, why)
            return preset
    log.info("ext: no preset for device type %r; using 'aten'", device.type)
    return "aten"


def device_name(device: Any) -> str:
    """The name a decision is keyed by for ``device``: the GPU's model, or the CPU's model, ISA and
    threads, so one machine's decisions do not serve another's."""
    import torch  # on use, as the vendor modules import it: importing targets stays light

    from inductor_ext.targets import apple as apple_target
    from inductor_ext.targets import cpu as cpu_target
    from inductor_ext.targets import intel as intel_target

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        return cpu_target.host_name()  # model, ISA and threads: every CPU is not the same "cpu"
    if device.type == "xpu":
        return intel_target.device_name(device)
    if device.type == "mps":
        return apple_target.chip_name()
    return device.type
