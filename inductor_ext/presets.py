"""Per-hardware presets: declarative data (from ``targets/``, one module per vendor), resolved
into an ExtConfig.

A preset says which passes and template families a target gets, how hard to autotune and
whether to use PDL. Explicit ``options=`` always win over the preset. Only families and passes
that exist and are verified for the target are listed (design.md: a template claims a target
only after tier I passes for it).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from inductor_ext import codegen as codegens
from inductor_ext import targets
from inductor_ext.config import CORE_OPTIONS, OPTIONS, ExtConfig, ExtOptionError, validate_options
from inductor_ext.lowering.passes import available_passes, unknown_pass
from inductor_ext.templates import registry

PRESETS: dict[str, dict[str, Any]] = targets.presets()

_PRESET_KEYS = ("passes", "templates", "autotune", "pdl", "template_margin")
# ExtConfig's default where a preset does not say. A preset's "inductor" holds torch._inductor.config
# patches its target needs (gfx1250: Inductor's TDM codegen); the user's own "inductor" keys win one by one.
_OPTIONAL_PRESET_KEYS = ("freezing", "inductor")


def detect_preset(example_inputs: Sequence[Any]) -> str:
    """The preset for the device of the first tensor among ``example_inputs``."""
    device = next((x.device for x in example_inputs if isinstance(x, torch.Tensor)), torch.device("cpu"))
    return preset_for_device(device)


def preset_for_device(device: torch.device) -> str:
    """The preset for a torch device ('aten', with one log line saying why, when ext has none)."""
    return targets.detect(device)


def machine_device() -> torch.device:
    """The device ``auto`` resolves for on this machine: torch's current accelerator (CUDA or ROCm,
    MPS, XPU, or any other torch knows) where one is available, else the CPU."""
    if torch.accelerator.is_available():
        accelerator = torch.accelerator.current_accelerator()
        return torch.device(accelerator.type, torch.accelerator.current_device_index())
    return torch.device("cpu")


def machine_preset() -> tuple[str, torch.device]:
    """What ``auto`` picks for tensors on this machine's device (``inductor-ext presets show
    auto``), with that device: every device type the target registry knows gets its preset,
    one it does not know gets 'aten' (with a log line saying why)."""
    device = machine_device()
    return preset_for_device(device), device


def resolve(options: dict[str, Any] | None = None, example_inputs: Sequence[Any] = (),
            preset: str | None = None) -> ExtConfig:
    """Preset data overlaid with explicit options (validated): the config for one compile."""
    passes = available_passes()  # pass and codegen modules register their own options on import
    codegens.available()
    opts = validate_options(options)
    if opts.get("preset", "auto") not in ("auto", *PRESETS):
        raise ExtOptionError(f"options['preset'] = {opts['preset']!r} is not allowed; use one of "
                             f"{', '.join(map(repr, ('auto', *PRESETS)))}")
    name = opts.pop("preset", None) or preset or "auto"
    if name == "auto":
        name = detect_preset(example_inputs)
    if name not in PRESETS:
        raise ExtOptionError(f"unknown preset {name!r}; valid presets: auto, {', '.join(PRESETS)}")
    data = PRESETS[name]
    fields = {k: data[k] for k in _PRESET_KEYS}
    fields.update({k: data[k] for k in _OPTIONAL_PRESET_KEYS if k in data})
    plugin = {k: opts.pop(k) for k in list(opts) if k not in CORE_OPTIONS}  # registered by passes, codegens
    disabled = opts.pop("disable_passes", ())
    if "inductor" in fields and "inductor" in opts:
        opts["inductor"] = {**fields["inductor"], **opts["inductor"]}
    fields.update(opts)  # explicit options always win
    if "inductor" in fields:
        fields["inductor"] = OPTIONS["inductor"].check("inductor", fields["inductor"])  # a preset's keys too
    fields["passes"] = _without(tuple(fields["passes"]), disabled, name)
    fields["templates"] = tuple(fields["templates"])
    _check_known(fields, name, data["target"], passes)
    return ExtConfig(preset=name, device_type=data["device_type"], target=data["target"], plugin_options=plugin,
                     **fields)


def _without(passes: tuple[str, ...], disabled: tuple[str, ...], preset: str) -> tuple[str, ...]:
    """``passes`` less the ``disable_passes`` names, each of which must be one of them (a typo
    would otherwise leave the pass on without a word)."""
    for name in disabled:
        if name not in passes:
            raise ExtOptionError(f"disable_passes: {name!r} is not among the passes of this compile "
                                 f"(preset {preset!r}): {', '.join(passes) or 'none'}")
    return tuple(p for p in passes if p not in disabled)


def _check_known(fields: dict[str, Any], preset: str, target: str, passes: dict[str, Any]) -> None:
    for n in fields["passes"]:
        if n not in passes:  # says which exist, where passes are found, and any broken entry point
            raise ExtOptionError(unknown_pass(n))
    valid = registry.names()
    for n in fields["templates"]:
        if n not in valid:
            raise ExtOptionError(f"unknown template family {n!r}; available: {', '.join(sorted(valid)) or 'none'}")
    if fields["pdl"] == "force" and not targets.has(target, targets.PDL):
        with_pdl = [n for n, t in targets.all_targets().items() if t.has(targets.PDL)]
        raise ExtOptionError(f"pdl='force' needs an NVIDIA target with programmatic dependent launch "
                             f"({', '.join(with_pdl)}); "
                             f"preset {preset!r} targets {target!r}. Use pdl='off' or 'auto' there.")
    force = fields.get("force_template")
    for name in (force,) if isinstance(force, str) else force or ():
        if name not in fields["templates"]:
            raise ExtOptionError(f"force_template={name!r} is not among the enabled templates {list(fields['templates'])}")


def describe(name: str) -> dict[str, Any]:
    """One preset, resolved (what ``inductor-ext presets show NAME`` prints)."""
    from inductor_ext.lowering.install import inductor_patches

    cfg = resolve({"preset": name})
    return {"description": PRESETS[name]["description"], **{f: getattr(cfg, f) for f in
            ("preset", "device_type", "target", "passes", "templates", "autotune", "pdl", "template_margin",
             "freezing")},
            "inductor_patches": {k: _show(v) for k, v in sorted(inductor_patches(cfg).items())},
            # families of this preset whose toolchain is not installed here (lowering offers ATen)
            "unavailable_templates": {f: why for f, why in registry.unavailable().items() if f in cfg.templates}}


def _show(value: Any) -> Any:
    if callable(value) or hasattr(value, "uuid"):
        return f"<{type(value).__name__}>"
    return value
