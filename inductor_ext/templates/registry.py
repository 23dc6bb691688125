"""Finds the template families: every module ``templates/<dsl>/<name>.py`` whose ``FAMILY`` is
a ``templates/family.py: Family`` record.

A new family is one new file; nothing here lists them. Each module builds its own record as its
last statement, and building it checks it (a family that misses part of the protocol fails
when its module is imported, naming what is missing), so the registry checks one shape and
hands out the records. A family whose toolchain is not installed (an extra of
``pip install inductor-ext[...]`` left out) is listed by :func:`unavailable` with the reason,
and the rest load as usual. Modules without ``FAMILY`` (shared pieces such as
``triton/launch.py``) are skipped; a ``FAMILY`` that is not a record is an error.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import json
import pkgutil
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import inductor_ext.templates as _package
from inductor_ext.runtime import extras
from inductor_ext.templates import allowed
from inductor_ext.templates.family import Family, FamilyError

__all__ = ["Family", "FamilyError", "families", "names", "unavailable", "missing", "check", "get", "for_op", "slug",
           "config_name", "extern_name", "extern_choices", "config_to_dict", "from_dict", "config_from_dict",
           "problem_from_dict", "problem_json"]


def families() -> dict[str, Family]:
    """Family name -> record, for every family module under ``inductor_ext/templates`` that
    imports here. Families import their toolchain where they use it, so all of them do; one
    whose toolchain is not installed is also in :func:`unavailable`."""
    return _scan()[0]


def names() -> set[str]:
    """Every family name, available here or not (what options and presets may name)."""
    return set(families()) | set(_scan()[1])


def unavailable() -> dict[str, str]:
    """Family name -> why it cannot be used here: a toolchain it needs is not installed (Triton
    on macOS, FlyDSL on aarch64, an extra of ``pip install inductor-ext[...]`` left out), with
    what to install. Its name stays valid in options and presets; lowering offers ATen instead."""
    out = dict(_scan()[1])
    for name, family in families().items():
        reason = missing(family)
        if reason:
            out[name] = reason
    return dict(sorted(out.items()))


def missing(family: Family) -> str | None:
    """None when ``family``'s kernels can be built here, else why not: a module its DSL
    package ``REQUIRES`` is not installed, or the family's own ``refuse_here()`` says what is absent."""
    for name in _required(family.module.__name__.rpartition(".")[0]):
        if not _installed(name):
            return f"needs {name}, which is not installed here: {extras.hint(name)}"
    return family.refuse_here() if family.refuse_here is not None else None


@functools.lru_cache(maxsize=None)
def _installed(name: str) -> bool:
    """Whether top-level module ``name`` can be imported, found without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a finder that refuses it (tests/_hidden_toolchain_script.py)
        return False


@functools.lru_cache(maxsize=None)
def _required(package: str) -> tuple[str, ...]:
    """The top-level modules a DSL package (``templates/<dsl>/__init__.py``) declares in ``REQUIRES``."""
    # a family module outside a DSL package (a test's own family) declares nothing
    return tuple(getattr(importlib.import_module(package), "REQUIRES", ())) if package else ()


@functools.lru_cache(maxsize=None)
def _scan() -> tuple[dict[str, Family], dict[str, str]]:
    found: dict[str, Family] = {}
    failed: dict[str, str] = {}  # a family module importing a toolchain at load, where it is absent
    for dsl in pkgutil.iter_modules(_package.__path__):
        if not dsl.ispkg:
            continue
        package = importlib.import_module(f"{_package.__name__}.{dsl.name}")
        for info in pkgutil.iter_modules(package.__path__):
            try:
                module = importlib.import_module(f"{package.__name__}.{info.name}")
            except ImportError as e:
                reason = extras.missing(e)
                family = _declared_family(f"{package.__name__}.{info.name}")
                if reason is None:  # not a missing toolchain: a bug to see, not a family to hide
                    raise
                if family is not None:  # a shared helper module is reported through its families
                    failed[family] = reason
                continue
            if "FAMILY" not in vars(module):  # a shared piece (triton/launch.py), not a family
                continue
            family = check(module)
            if family.name in found:
                raise FamilyError(f"two modules define family {family.name!r}: "
                                  f"{found[family.name].module.__name__} and {module.__name__}")
            found[family.name] = family
    return found, failed


def _declared_family(module_name: str) -> str | None:
    """The family a module that could not be imported declares, read from its source: its
    ``NAME = "..."`` where it ends with ``FAMILY = Family(...)``."""
    spec = importlib.util.find_spec(module_name)
    if spec is None or not spec.origin:
        return None
    source = Path(spec.origin).read_text()
    match = re.search(r'^NAME\s*=\s*["\']([^"\']+)["\']', source, re.MULTILINE)
    return match.group(1) if match and re.search(r"^FAMILY\s*=\s*Family\(", source, re.MULTILINE) else None


def check(module: ModuleType) -> Family:
    """``module``'s record, its ``FAMILY`` (checked when it was built); a :class:`FamilyError`
    when ``FAMILY`` is something else (the name string family modules once defined)."""
    record = vars(module).get("FAMILY")
    if not isinstance(record, Family):
        raise FamilyError(f"{module.__name__}: FAMILY = {record!r} is not a template family record; end the module "
                          "with FAMILY = Family(name=..., ...) (templates/family.py)")
    return record


def get(name: str) -> Family:
    known = families()
    not_loaded = _scan()[1]
    if name in not_loaded:
        raise KeyError(f"template family {name!r} is not available here: {not_loaded[name]}")
    if name not in known:
        raise KeyError(f"unknown template family {name!r}; available: {', '.join(sorted(known))}")
    return known[name]


def for_op(op: str, target: str) -> list[Family]:
    """Families serving ``op`` that claim ``target``, by name."""
    return [f for _, f in sorted(families().items()) if op in f.ops and target in f.targets]


def slug(family: str) -> str:
    """``"triton.nvfp4_gemm"`` -> ``"nvfp4_gemm"``: the family's op part, used in kernel names."""
    return family.split(".", 1)[1]


def config_name(config: Any) -> str:
    """``config.name()`` when the family defines one, else its fields (``threads1024_chunks1``)."""
    if hasattr(config, "name"):
        return config.name()
    return "_".join(f"{k}{str(v).lower()}" for k, v in dataclasses.asdict(config).items())


def extern_name(family: str, config: Any) -> str:
    """The name of an extern family's choice for ``config`` (``ext_metal_softmax_threads1024_chunks1``):
    how the generated wrapper calls it, so how dumps find it."""
    return f"ext_{family.replace('.', '_')}_{config_name(config)}"


def extern_choices() -> dict[str, tuple[Family, Any]]:
    """Every extern family's choice name -> (family, config), over its ALL_CONFIGS. Two configs
    of one name would call one kernel for both: an error naming them."""
    found: dict[str, tuple[Family, Any]] = {}
    for family in families().values():
        if family.choice_kind != "extern":
            continue
        for config in family.all_configs:
            name = extern_name(family.name, config)
            if name in found and found[name][1] != config:
                raise FamilyError(f"{family.name}: configs {found[name][1]} and {config} are both named {name!r}")
            found[name] = (family, config)
    return found


def config_to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def from_dict(cls: type, data: dict[str, Any], owner: str | None = None) -> Any:
    """A Problem or Config back from its dict (a cache entry, a JSON, generated wrapper code),
    every value checked against its field's declaration first: :class:`allowed.InvalidField`
    (a ValueError naming ``owner``, the field, the value and what is allowed) for one that is not
    allowed. ``owner`` defaults to the families whose Problem or Config ``cls`` is."""
    return allowed.build(cls, data, owner or _owner(cls))


def config_from_dict(family: Family, data: dict[str, Any]) -> Any:
    """``family``'s Config from a dict, checked (see :func:`from_dict`)."""
    return from_dict(family.Config, data, f"{family.name} Config")


def problem_from_dict(family: Family, data: dict[str, Any]) -> Any:
    """``family``'s Problem from a dict, checked (see :func:`from_dict`)."""
    return from_dict(family.Problem, data, f"{family.name} Problem")


@functools.lru_cache(maxsize=None)
def _owner(cls: type) -> str:
    """``"triton.gemm/triton.tdm_gemm Config"``: the families using ``cls``, for messages."""
    for part in ("Problem", "Config"):
        users = [name for name, family in sorted(families().items()) if getattr(family, part) is cls]
        if users:
            return f"{'/'.join(users)} {part}"
    return cls.__qualname__


def problem_json(problem: Any) -> str:
    return json.dumps(dataclasses.asdict(problem), sort_keys=True)
