"""Device codegens for Inductor (one package each: ``codegen/metal``, ``codegen/sycl``).

``available()`` finds every subpackage that exposes ``CODEGEN`` (a :class:`DeviceCodegen`), so a
new codegen is a new folder, not an edit here.
"""

from __future__ import annotations

import importlib
import pkgutil

from inductor_ext.codegen.base import DeviceCodegen, KernelInfo

__all__ = ["DeviceCodegen", "KernelInfo", "available", "get"]

_found: dict[str, DeviceCodegen] | None = None


def available() -> dict[str, DeviceCodegen]:
    """Codegen name -> its description, for every codegen package in this folder."""
    global _found
    if _found is None:
        found = {}
        for info in pkgutil.iter_modules(__path__):
            if not info.ispkg:
                continue
            codegen = getattr(importlib.import_module(f"{__name__}.{info.name}"), "CODEGEN", None)
            if isinstance(codegen, DeviceCodegen):
                found[codegen.name] = codegen
        _found = found
    return dict(_found)


def get(name: str) -> DeviceCodegen:
    codegens = available()
    if name not in codegens:
        raise KeyError(f"no device codegen {name!r}; available: {', '.join(sorted(codegens)) or 'none'}")
    return codegens[name]
