"""The user's ``options=``: their schema, validation and the frozen result, ``ExtConfig``.

Validation errors name the bad key or value and list what is allowed, like Inductor's own
``torch.compile(options=...)`` but with a suggestion for near misses.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable

AUTOTUNE_EFFORTS = ("off", "cache-only", "quick", "full")
PDL_MODES = ("off", "auto", "force")


class ExtOptionError(ValueError):
    """A bad ``options=`` key or value for ``backend="ext"``."""


@dataclass(frozen=True)
class OptionSpec:
    help: str
    check: Callable[[str, Any], Any]  # returns the normalised value or raises ExtOptionError


def _choice(allowed: tuple[str, ...]) -> Callable[[str, Any], Any]:
    def check(key: str, value: Any) -> str:
        if value not in allowed:
            raise ExtOptionError(f"options[{key!r}] = {value!r} is not allowed; use one of {', '.join(map(repr, allowed))}")
        return value

    return check


def _names(key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ExtOptionError(f"options[{key!r}] = {value!r}: expected a list of names, e.g. [\"triton.gemm\"]")
    return tuple(value)


def _optional_path(key: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise ExtOptionError(f"options[{key!r}] = {value!r}: expected a file system path (str or os.PathLike) or None")
    return os.fspath(value)


def _non_negative_float(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ExtOptionError(f"options[{key!r}] = {value!r}: expected a number >= 0 (0.05 means 5% faster than ATen)")
    return float(value)


def _bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ExtOptionError(f"options[{key!r}] = {value!r}: expected True or False")
    return value


def _optional_name(key: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ExtOptionError(f"options[{key!r}] = {value!r}: expected a template family name or None")
    return value


def _inductor_patches(key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ExtOptionError(f"options[{key!r}] = {value!r}: expected a dict of torch._inductor.config keys")
    from torch._inductor import config as inductor_config

    valid = inductor_config.get_config_copy().keys()
    for name in value:
        if not isinstance(name, str):
            raise ExtOptionError(f"options[{key!r}] has key {name!r}: Inductor config keys are strings")
        if name not in valid:
            close = difflib.get_close_matches(name, valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ExtOptionError(f"options[{key!r}] has unknown Inductor config key {name!r}{hint}")
    return dict(value)


def _fsdp_overlap_settings(key: str, value: Any) -> dict[str, Any]:
    from inductor_ext.comms_passes.fsdp_overlap import OverlapSettings

    try:
        return OverlapSettings.check(value)
    except ValueError as e:
        raise ExtOptionError(f"options[{key!r}]: {e}") from None


def _preset_name(key: str, value: Any) -> str:
    from inductor_ext.presets import PRESETS

    return _choice(("auto", *PRESETS))(key, value)


OPTIONS: dict[str, OptionSpec] = {
    "preset": OptionSpec("hardware preset; 'auto' detects it from the example inputs' device", _preset_name),
    "autotune": OptionSpec("autotuning effort: off | cache-only | quick | full", _choice(AUTOTUNE_EFFORTS)),
    "templates": OptionSpec("template families offered beside ATen, e.g. ['triton.gemm']", _names),
    "passes": OptionSpec("graph passes to install, by name", _names),
    "pdl": OptionSpec("programmatic dependent launch: off | auto | force", _choice(PDL_MODES)),
    "template_margin": OptionSpec("a template wins only when this much faster than ATen (0.05 = 5%)", _non_negative_float),
    "autotune_cache": OptionSpec("path of the SQLite autotune cache", _optional_path),
    "dump_dir": OptionSpec("write every generated kernel and index.json here", _optional_path),
    "interpret": OptionSpec("test mode: run Triton templates on CPU tensors in the Triton interpreter", _bool),
    "force_template": OptionSpec("debugging: pick this template family whenever it compiles, whatever the timings", _optional_name),
    "inductor": OptionSpec("extra torch._inductor.config patches (win over the preset's)", _inductor_patches),
    "fsdp_overlap": OptionSpec("settings of the fsdp_overlap pass, e.g. {'bucket_cap_bytes': 64 << 20, "
                               "'max_prefetch': 2, 'memory_budget_ratio': 0.1}", _fsdp_overlap_settings),
}


def validate_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """Checked, normalised copy of ``options``; raises ExtOptionError naming what is wrong."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise ExtOptionError(f"options must be a dict, got {type(options).__name__}")
    checked = {}
    for key, value in options.items():
        spec = OPTIONS.get(key)
        if spec is None:
            close = difflib.get_close_matches(str(key), OPTIONS, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ExtOptionError(f"unknown option {key!r} for backend='ext'.{hint} Valid options: {', '.join(sorted(OPTIONS))}")
        checked[key] = spec.check(key, value)
    return checked


@dataclass(frozen=True)
class ExtConfig:
    """Everything one ``backend="ext"`` compile was asked for: the preset, then explicit options."""

    preset: str
    device_type: str
    target: str  # e.g. "sm_90a", "gfx950", "cpu"
    passes: tuple[str, ...] = ()
    templates: tuple[str, ...] = ()
    autotune: str = "off"
    pdl: str = "off"
    template_margin: float = 0.0
    autotune_cache: str | None = None
    dump_dir: str | None = None
    interpret: bool = False
    force_template: str | None = None
    inductor: dict[str, Any] = field(default_factory=dict)
    fsdp_overlap: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """Stable text of the whole config: part of pass uuids and cache keys."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True, default=str)

    def inductor_patches(self) -> dict[str, Any]:
        """The torch._inductor.config patches for compile_fx (forward and backward alike)."""
        from inductor_ext.lowering.pass_manager import pass_patches
        from inductor_ext.lowering.ext_choices import choices_factory

        patches: dict[str, Any] = {}
        if self.autotune != "off" and self.templates:
            # ExtChoices offers our templates from Inductor's GEMM lowerings whether or not
            # max-autotune is on (turning it on costs compile time for nothing). Inductor's own
            # Triton GEMM templates stay out so ext's policy decides the candidates, and winners
            # go through ExtChoices.override_best_choice (ATen margin), not fusion benchmarks.
            patches.update(max_autotune_gemm_backends="ATEN", benchmark_template_fusion=False)
        if self.pdl == "force" and self.device_type == "cuda" and self.target.startswith("sm_"):
            # Inductor's Triton kernels then wait (gdc_wait) right before their first load of
            # the previous kernel's output; ext's templates release them early (USE_PDL).
            patches["triton.enable_pdl"] = True
        if self.interpret:
            from inductor_ext.testing.cpu_triton import interpret_patches

            patches.update(interpret_patches())
        patches["inductor_choices_class"] = choices_factory(self)
        patches.update(pass_patches(self))
        patches.update(self.inductor)  # explicit Inductor patches win
        return patches
