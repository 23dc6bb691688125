"""The ops ext offers to template families: one module per op, found by listing this folder.

An op module holds everything of its op on the Inductor side: ``SPECS``, its glue (Inductor's op
name -> a function from the op's ``KernelInputs`` to ``OpInputs``, its ``OpSpec`` for the families
and what every choice takes, or why none can be offered), and where Inductor's own lowering does
not ask the choices handler, its ATen choice and its lowering, registered when the module is
imported (``_select.select`` is the body they share). Modules whose name starts with ``_`` are
the shared helpers, not ops. An op not in any module's ``SPECS`` is offered to no family.

``load()`` imports every op module once per process; the installer (``lowering/install.py``)
calls it before a compile, and ``op_inputs`` on first use. ``sources_hash()`` is the folder's part
of the template hash (``template_keys.templates_hash``): a new op needs no list edited.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import pkgutil
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from inductor_ext.lowering.ops._select import FixedKernelInputs
from inductor_ext.lowering.ops._spec import (OpInputs, constant_name, dtype_name, fp32_matmul_precision,
                                             problem_fp32_precision)

__all__ = ["FixedKernelInputs", "OpInputs", "constant_name", "dtype_name", "fp32_matmul_precision", "load",
           "modules", "op_inputs", "problem_fp32_precision", "sources_hash", "specs"]

_FOLDER = Path(__file__).parent


def module_names() -> list[str]:
    """The op modules in this folder, by name, sorted (helpers, ``_``-prefixed, left out)."""
    return sorted(m.name for m in pkgutil.iter_modules([str(_FOLDER)]) if not m.name.startswith("_"))


@functools.cache
def modules() -> tuple[ModuleType, ...]:
    """Every op module, imported (which registers its lowering, if it has one)."""
    return tuple(importlib.import_module(f"{__name__}.{name}") for name in module_names())


def load() -> None:
    """Import every op module once: their lowerings are registered with Inductor from then on."""
    modules()


@functools.cache
def specs() -> dict[str, Callable[[Any], OpInputs | str]]:
    """Inductor's op name -> its glue, from every op module's ``SPECS``; an op claimed twice is an error."""
    found: dict[str, Callable[[Any], OpInputs | str]] = {}
    owner: dict[str, str] = {}
    for module in modules():
        for op, glue in module.SPECS.items():
            if op in found:
                raise RuntimeError(f"op {op!r} is claimed by both {owner[op]} and {module.__name__}")
            found[op], owner[op] = glue, module.__name__
    return found


def op_inputs(op: str, kernel_inputs: Any) -> OpInputs | str:
    """The op's inputs for the families, or why none can be offered."""
    glue = specs().get(op)
    if glue is None:
        return f"ext offers no templates for {op!r} (served: {', '.join(specs())})"
    return glue(kernel_inputs)


def sources_hash() -> str:
    """Hash of every source file in this folder, helpers included (each shapes what the families
    are handed), by name: the op modules' part of the autotune cache key."""
    digest = hashlib.sha256()
    for path in sorted(_FOLDER.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
