"""The user's ``options=``: their schema, validation and the frozen result, ``ExtConfig``.

Validation errors name the bad key or value and list what is allowed, like Inductor's own
``torch.compile(options=...)`` but with a suggestion for near misses.

A leaf: it imports nothing from the package. Passes and codegens that take settings register
their own option with :func:`register_option` (its value lands in ``ExtConfig.plugin_options``);
turning a config into Inductor patches is lowering's job (``lowering/install.py``).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable

AUTOTUNE_EFFORTS = ("off", "cache-only", "model", "background", "quick", "full")
PDL_MODES = ("off", "auto", "force")


class ExtOptionError(ValueError):
    """A bad ``options=`` key or value for ``backend="ext"``."""


@dataclass(frozen=True)
class OptionSpec:
    help: str
    check: Callable[[str, Any], Any]  # returns the normalised value or raises ExtOptionError


def one_of(allowed: tuple[str, ...]) -> Callable[[str, Any], Any]:
    """An option check accepting exactly the values in ``allowed`` (for registered options too)."""
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


def _one_path(key: str, value: Any) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise ExtOptionError(f"options[{key!r}] holds {value!r}: expected a file system path (str or os.PathLike)")
    path = os.fspath(value)
    if not isinstance(path, str) or not path or "\0" in path:
        raise ExtOptionError(f"options[{key!r}] holds {value!r}: expected a non-empty path without NUL characters")
    return path


def _cache_paths(key: str, value: Any) -> str | tuple[str, ...] | None:
    """One cache path, several (read-only layers, first match wins), or None."""
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike, list, tuple)):
        raise ExtOptionError(f"options[{key!r}] = {value!r}: expected a file system path (str or os.PathLike), "
                             "a list of them, or None")
    if isinstance(value, (list, tuple)):
        if not value:
            raise ExtOptionError(f"options[{key!r}] = {value!r}: name at least one cache file, or leave it out")
        return tuple(_one_path(key, v) for v in value)
    return _one_path(key, value)


def _non_negative_float(key: str, value: Any) -> float:
    # NaN compares false with everything: a NaN margin would silently disable the margin rule.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ExtOptionError(f"options[{key!r}] = {value!r}: expected a finite number >= 0 "
                             "(0.05 means 5% faster than ATen)")
    return float(value)


def _bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ExtOptionError(f"options[{key!r}] = {value!r}: expected True or False")
    return value


def _optional_names(key: str, value: Any) -> str | tuple[str, ...] | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ExtOptionError(f"options[{key!r}] = {value!r}: expected a template family name or None, or a list of names")


def _inductor_patches(key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ExtOptionError(f"options[{key!r}] = {value!r}: expected a dict of torch._inductor.config keys")
    from torch._inductor import config as inductor_config

    current = inductor_config.get_config_copy()
    for name, setting in value.items():
        if not isinstance(name, str):
            raise ExtOptionError(f"options[{key!r}] has key {name!r}: Inductor config keys are strings")
        if name not in current:
            close = difflib.get_close_matches(name, current.keys(), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ExtOptionError(f"options[{key!r}] has unknown Inductor config key {name!r}{hint}")
        allowed_here = _allowed(inductor_config._config[name].value_type)
        if allowed_here is not None and not allowed_here[0](setting):
            raise ExtOptionError(f"options[{key!r}][{name!r}] = {setting!r}: Inductor's {name} takes {allowed_here[1]}")
    return dict(value)


# Inductor never checks a patch's type: a flag given "yes" is truthy whatever the user meant. The
# declared type of each setting (its ``value_type``) is checked where it is a plain scalar, an
# Optional one or a Literal of strings; any other declared type is left to Inductor.
_SCALARS: dict[Any, tuple[Callable[[Any], bool], str]] = {
    bool: (lambda v: type(v) is bool, "True or False"),
    int: (lambda v: type(v) is int, "an integer"),
    float: (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    str: (lambda v: isinstance(v, str), "a string"),
}


def _allowed(value_type: Any) -> tuple[Callable[[Any], bool], str] | None:
    """(test, words) for values of ``value_type``, or None where it is not checked here."""
    if value_type in _SCALARS:
        return _SCALARS[value_type]
    if typing.get_origin(value_type) is typing.Literal and all(isinstance(a, str) for a in typing.get_args(value_type)):
        choices = typing.get_args(value_type)
        return (lambda v: v in choices), f"one of {', '.join(map(repr, choices))}"
    args = typing.get_args(value_type)
    if isinstance(value_type, types.UnionType) and len(args) == 2 and type(None) in args:
        inner = _allowed(next(a for a in args if a is not type(None)))
        if inner is not None:
            return (lambda v: v is None or inner[0](v)), f"{inner[1]} or None"
    return None


def _preset_name(key: str, value: Any) -> str:
    # Which names exist is the preset registry's business (presets.resolve checks it).
    if not isinstance(value, str):
        raise ExtOptionError(f"options[{key!r}] = {value!r}: expected a preset name, e.g. 'auto'")
    return value


OPTIONS: dict[str, OptionSpec] = {
    "preset": OptionSpec("hardware preset; 'auto' detects it from the example inputs' device", _preset_name),
    "autotune": OptionSpec("autotuning effort: off | cache-only | model (caches, then decision tables, then the "
                           "cost model: nothing timed) | background (as model, and a background worker times "
                           "what was served untimed, for the next process) | quick | full", one_of(AUTOTUNE_EFFORTS)),
    "templates": OptionSpec("template families offered beside ATen, e.g. ['triton.gemm']", _names),
    "passes": OptionSpec("graph passes to install, by name (replaces the preset's list)", _names),
    "disable_passes": OptionSpec("passes of the preset's list not to install, by name (the rest stay)", _names),
    "pdl": OptionSpec("programmatic dependent launch: off | auto | force", one_of(PDL_MODES)),
    "template_margin": OptionSpec("a template wins only when this much faster than ATen (0.05 = 5%)", _non_negative_float),
    "autotune_cache": OptionSpec("an autotune cache file, or a list of them: read-only layers (a shipped cache) in "
                                 "front of your own cache, first match wins; one file of yours, in a folder only "
                                 "you can write, is also where quick/full tuning writes", _cache_paths),
    "decision_tables": OptionSpec("decision table files of yours (scripts/build_decision_tables.py), read before "
                                  "the package's own under autotune='model': data, validated like a shipped "
                                  "cache", _cache_paths),
    "dump_dir": OptionSpec("write every generated kernel and index.json here", _optional_path),
    "interpret": OptionSpec("test mode: run this preset's device kernels on CPU tensors with ext's executors "
                            "(Triton's interpreter, the Metal-on-CPU executor, Intel's OpenCL CPU device)", _bool),
    "freezing": OptionSpec("inference graphs (compiled under torch.no_grad()) take parameters and buffers as "
                           "constants (Inductor's freezing), so GEMM templates pack weights once; a weight "
                           "changed afterwards (in place or replaced, also under your own Inductor freezing) "
                           "makes ext recompile that graph without freezing; a write through .data goes unseen "
                           "(PyTorch's version counter does not count it)", _bool),
    "force_template": OptionSpec("debugging: pick this template family (or any of a list of them) whenever it "
                                 "compiles, whatever the timings", _optional_names),
    "inductor": OptionSpec("extra torch._inductor.config patches (win over the preset's)", _inductor_patches),
}
# Options that core ExtConfig fields hold; the rest were registered by plugins.
CORE_OPTIONS = frozenset(OPTIONS)


def register_option(name: str, spec: OptionSpec) -> None:
    """Add an option owned by a pass or codegen (e.g. ``fsdp_overlap``); idempotent per spec."""
    current = OPTIONS.get(name)
    if current is not None and (name in CORE_OPTIONS or current.help != spec.help):
        raise ValueError(f"option {name!r} is already defined")
    OPTIONS[name] = spec


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
    autotune_cache: str | tuple[str, ...] | None = None
    decision_tables: str | tuple[str, ...] | None = None
    dump_dir: str | None = None
    interpret: bool = False
    freezing: bool = False
    force_template: str | tuple[str, ...] | None = None
    inductor: dict[str, Any] = field(default_factory=dict)
    # Values of options registered by passes and codegens (register_option), by option name.
    plugin_options: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """Stable text of the whole config: part of pass uuids and cache keys."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True, default=str)
